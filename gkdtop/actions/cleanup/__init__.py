"""`gkdtop cleanup`: the debris of a crashed run, found, previewed item by item, removed on confirmation.

What counts as debris (each item says why it was chosen):
- Ray processes (Ray's own programs by what they run - its binaries, its scripts as the interpreter's
  program, `ray::` titles - never by a Ray file named in the arguments of an editor, pager, test run
  or grep; plus their children) of a dead session - neither its
  gcs_server nor its raylet runs here (a worker node of a multi-node cluster has no local gcs_server,
  so the raylet counts too) - and `ray::` workers whose raylet is gone;
- vLLM / SGLang engine processes (`VLLM::EngineCore`, `VLLM::Worker_TP*`, `sglang::*`) whose parent is
  gone: `ray stop` does not match them and they keep their GPU memory;
- processes holding GPU memory that no live job owns (the GPU PIDs come from the store): selected when
  they are helper processes (multiprocessing, compile workers) whose parent is gone; listed for
  selection by hand otherwise, since a job started with nohup is an orphan too;
- `/dev/shm/nccl-*` segments no process has open or mapped (deleting a mapped one crashes that job);
- old Ray session directories (`$RAY_TMPDIR/ray/session_*`).
PyTorch Flight Recorder dumps (`/tmp/nccl_trace_rank_*`) are listed as kept evidence, never deleted:
`rm -rf /tmp/nccl*` is the playbook tip that destroys them.

Safety rules: only the current user's processes and files; never PID 1, gkdtop or its ancestors;
processes of a live job (a live Ray session, a parent that still runs) are not put in the plan at all,
except GPU holders whose job cannot be told apart from a live one: those come unselected, "select by
hand". Every target is checked again right before it is acted on (same process by start time, segment
still unmapped, session still dead).

The package, by job: model (items, results), machine (one scan of the processes and what cleanup
asks of it), plan (build_plan), execute, render (JSON, the preview text) and cli (`gkdtop cleanup`).
This module re-exports the public API.
"""

from gkdtop.actions.cleanup.execute import execute
from gkdtop.actions.cleanup.machine import protected_pids, segment_users
from gkdtop.actions.cleanup.model import (
    FLIGHT_RECORDER_DEFAULT,
    FLIGHT_RECORDER_ENV,
    PROCESS_KINDS,
    SCHEMA,
    CleanupItem,
    CleanupResult,
)
from gkdtop.actions.cleanup.plan import build_plan
from gkdtop.actions.cleanup.render import plan_json, plan_text, results_text, target_text

__all__ = [
    "FLIGHT_RECORDER_DEFAULT", "FLIGHT_RECORDER_ENV", "PROCESS_KINDS", "SCHEMA", "CleanupItem", "CleanupResult",
    "build_plan", "execute", "plan_json", "plan_text", "protected_pids", "results_text", "segment_users",
    "target_text",
]
