"""Python stacks of every job process with py-spy, grouped, with the odd ones out singled out.

In a hang, most ranks wait in the same collective and one rank is somewhere else: that rank is
usually the culprit. So identical stacks are grouped ("6 processes: broadcast <- sync_weights <- fit")
and the processes that are not where their peers are get called out. Every dump is saved to a
timestamped file as well, because a hang is evidence worth keeping.

The package, by job: report (capture, then analysis: `dump_stacks`), remote (Ray actors on any node),
analysis (grouping, outliers), render (JSON, text, files) and cli (`gkdtop stacks`). Reading one
process is capture/'s (py-spy, the probe's faulthandler, Flight Recorder triggers); the data is
gkdtop/model/stacks.py. This module re-exports the public API.
"""

from gkdtop.actions.stacks.analysis import (
    COLLECTIVES,
    group_stacks,
    is_background,
    is_collective,
    outliers,
    significant_threads,
    stack_key,
    summarize,
)
from gkdtop.actions.stacks.render import default_directory, report_json, report_text, write_report
from gkdtop.actions.stacks.report import dump_stacks, job_targets
from gkdtop.capture.faulthandler import faulthandler_dump, parse_faulthandler, short_path
from gkdtop.capture.flight_recorder import TRACE_FILE_DEFAULT, TRACE_FILE_ENVS, TRACE_PIPE_ENVS, trigger_nccl_traces
from gkdtop.capture.proc import proc_info
from gkdtop.capture.pyspy import PYTHON_ROLES, find_py_spy, parse_py_spy_json, stack_targets
from gkdtop.model.stacks import (
    SCHEMA,
    NcclTrace,
    StackDump,
    StackFrame,
    StackGroup,
    StackReport,
    ThreadStack,
)

__all__ = [
    "COLLECTIVES", "PYTHON_ROLES", "SCHEMA", "TRACE_FILE_DEFAULT", "TRACE_FILE_ENVS", "TRACE_PIPE_ENVS",
    "NcclTrace", "StackDump", "StackFrame", "StackGroup", "StackReport", "ThreadStack",
    "default_directory", "dump_stacks", "faulthandler_dump", "find_py_spy", "group_stacks", "is_background",
    "is_collective", "job_targets", "outliers", "parse_faulthandler", "parse_py_spy_json", "proc_info",
    "report_json", "report_text", "short_path", "significant_threads", "stack_key", "stack_targets",
    "summarize", "trigger_nccl_traces", "write_report",
]
