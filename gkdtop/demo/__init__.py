"""`gkdtop demo`: a real miniature GKD (on-policy distillation) job on Ray + torch, with faults on demand.

`job.py` is the workload's entry point, the driver (its docstring maps the modules beside it that
hold the job's parts: the TaskRunner, the Ray actors, the faults, ...); `launcher.py` starts and
stops it from gkdtop. Importing this package imports neither ray nor torch: the dashboard's first
frame must not wait on them.
"""

from __future__ import annotations

# What each fault does: the help text of `--fault`, and what the job logs when it is armed.
FAULT_HELP: dict[str, str] = {
    "hang-sync": "actor rank 1 never joins the initial weight-sync collective; rank 0 and the rollout "
    "block in it (gloo timeout 1 h)",
    "mismatch-sync": "at the initial weight sync actor rank 1 calls all_reduce where the others broadcast: "
    "a collective type mismatch, all three block",
    "stall-dataset": "dataset generation blocks on a cache lock that a writer thread never releases",
    "crash-rollout": "the rollout worker dies with SIGSEGV at step 2; the driver gets ActorDiedError",
    "infeasible": "the resource pool asks for GPUs the cluster does not have; placement never happens",
    "leak": "the rollout worker is SIGKILLed at step 2, leaving an orphaned EngineCore process and a "
    "/dev/shm/nccl-* segment behind",
}
FAULTS: tuple[str, ...] = tuple(FAULT_HELP)

__all__ = ["FAULTS", "FAULT_HELP"]
