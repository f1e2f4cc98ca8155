"""What a stack dump is made of: frames, threads, one process's dump, groups, the report.

Plain data shared by capture (which fills it), analysis (which groups it) and render (which writes
it); kept apart so the sampler and the TUI can import the shapes without py-spy's plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gkdtop.model.collectives import CollectiveReport

SCHEMA = 1


@dataclass(slots=True)
class StackFrame:
    function: str
    file: str  # py-spy's short name (package-relative): the same on every node, so it groups
    line: int
    path: str = ""  # the full file name in the target
    native: bool = False  # a C/C++ frame (only with --native)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.function, self.file, self.line)


@dataclass(slots=True)
class ThreadStack:
    name: str
    thread_id: int
    idle: bool  # py-spy's "not active": blocked in a syscall; a rank stuck in a collective is idle too
    frames: list[StackFrame] = field(default_factory=list)  # innermost first, as py-spy gives them
    owns_gil: bool = False


@dataclass(slots=True)
class StackDump:
    """One process: its threads, or `ok=False` and a one-line `error`."""

    pid: int
    role: str
    label: str  # role, actor class, rank: what a person calls the process
    ok: bool
    error: str = ""
    threads: list[ThreadStack] = field(default_factory=list)
    actor: str = ""
    rank: int | None = None
    world_size: int | None = None
    seconds: float = 0.0  # how long the dump took
    method: str = ""  # what produced the threads: "py-spy" or "faulthandler" (gkdtop.probe); "" when nothing did
    note: str = ""  # why the fallback was used (py-spy's failure), when it was


@dataclass(slots=True)
class StackGroup:
    """Processes whose significant threads have the very same Python frames."""

    frames: list[StackFrame]  # the representative thread's frames, innermost first
    pids: list[int]
    summary: str  # "broadcast <- sync_rollout_weights <- fit"
    thread: str = ""  # the representative thread's name
    collective: bool = False  # the representative thread waits in a collective


@dataclass(slots=True)
class StackReport:
    time: float
    native: bool
    dumps: list[StackDump]
    groups: list[StackGroup]
    outliers: list[int]
    py_spy: str = ""
    seconds: float = 0.0
    nccl_traces: list[NcclTrace] = field(default_factory=list)
    collectives: CollectiveReport | None = None  # Flight Recorder: which rank is in which collective


@dataclass(slots=True)
class NcclTrace:
    """One Flight Recorder dump asked for through a rank's trigger pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`)."""

    pid: int
    rank: int | None
    pipe: str
    file: str  # where torch writes the dump: TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank
    ok: bool
    error: str = ""
    bytes: int = 0


@dataclass(slots=True)
class StallStacks:
    """The stack dump taken when a stall was declared (actions/stall_stacks.py), kept in the store."""

    phase: str  # the phase that stalled
    stalled_since: float  # its last progress: identifies the stall
    taken: float
    path: str  # the saved JSON ("" when it could not be saved)
    report: StackReport
    error: str = ""  # why nothing could be saved, if so
