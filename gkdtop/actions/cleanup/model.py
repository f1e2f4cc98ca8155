"""What a cleanup plan is made of: the items a person previews, and what happened to each.

Plain data shared by the planner, the executor, the CLI and the TUI's cleanup modal.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = 1
FLIGHT_RECORDER_ENV = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
FLIGHT_RECORDER_DEFAULT = "/tmp/nccl_trace_rank_"
PROCESS_KINDS = ("ray-process", "ray-orphan", "engine", "gpu-holder", "child")


@dataclass(slots=True)
class CleanupItem:
    """One thing the plan would act on. target: a PID (processes) or a path (files, directories).

    kind: ray-process | ray-orphan | engine | gpu-holder | child | nccl-shm | ray-session | flight-recorder
    action: terminate (SIGTERM, grace, SIGKILL) | remove | keep (never acted on)
    """

    kind: str
    target: int | str
    reason: str
    action: str
    selected: bool = True
    name: str = ""  # what a person calls the process, for display
    create_time: float = 0.0  # the process's start time: its identity when we come back to act


@dataclass(slots=True)
class CleanupResult:
    """outcome: terminated | killed | already gone | permission denied | removed | skipped | failed."""

    target: int | str
    kind: str
    outcome: str
    detail: str = ""
