"""Which rank is in which collective: Flight Recorder dumps from every live rank, analysed per process group.

Python stacks show the odd rank out when it is elsewhere in Python; below Python every rank blocked
in NCCL or gloo looks alike. torch's Flight Recorder keeps, per process, the last collectives of every
process group with their sequence numbers and states. This module asks each rank for a dump while the
job runs (through gkdtop.probe's request FIFO, any backend; and through torch's own trigger pipe for
NCCL groups; both in capture/flight_recorder.py), keeps each dump as it lands (the next overwrites the
file), and analyses them with torch's own analyzer (`torch.distributed.flight_recorder`), as a library:
missing ranks, collective type / size / dtype / state mismatches. Own code does what the analyzer has
no answer for: which group a rank of a group made outside torch's registry is, each rank's last
completed and current collective, and the one sentence a person reads.

No Textual here; torch is imported only when there are dumps to analyse.

The package, by job: report (capture, then analysis: `collect`), analysis (per process group) and
render (the sentence, JSON, text, saved dumps); the data is gkdtop/model/collectives.py, the asking and
reading capture/flight_recorder.py.
This module re-exports the public API.
"""

from gkdtop.actions.collectives.analysis import analyze
from gkdtop.actions.collectives.render import report_json, report_lines, save_dumps, sentence
from gkdtop.actions.collectives.report import collect
from gkdtop.capture.flight_recorder import (
    MAX_DUMP_BYTES,
    is_rank,
    nccl_processes,
    parse_trace,
    read_pipe_dumps,
    request_probe_dumps,
)
from gkdtop.model.collectives import MISMATCH_KINDS, CollectiveReport, FrDump, GroupFinding, RankState, who

__all__ = [
    "MAX_DUMP_BYTES", "MISMATCH_KINDS", "CollectiveReport", "FrDump", "GroupFinding", "RankState", "analyze",
    "collect", "is_rank", "nccl_processes", "parse_trace", "read_pipe_dumps", "report_json", "report_lines",
    "request_probe_dumps", "save_dumps", "sentence", "who",
]
