"""What a stack dump is made of: frames, threads, one process's dump, groups, the report.

Plain data shared by capture (which fills it), analysis (which groups it) and render (which writes
it); kept apart so the sampler and the TUI can import the shapes without py-spy's plumbing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

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


# Python's faulthandler: each thread's `Thread 0x7f… (most recent call first):` (`Current thread …`: the one that
# dumped; gkdtop.probe adds its name in brackets), then its frames innermost first.
FH_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? \(most recent call first\):$")
# The header of a dump of the failing thread alone (`Fatal Python error: Floating point exception`, then `Stack (most
# recent call first):` where faulthandler was not asked for every thread).
FH_STACK_RE = re.compile(r"^Stack \(most recent call first\):$")
FH_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler_lines(lines: Iterable[str], main_thread: int = 0,
                             shorten: Callable[[str], str] | None = None) -> list[ThreadStack]:
    """faulthandler's all-threads text as ThreadStacks (frames innermost first, as py-spy's). The main thread is the
    one `main_thread` names (the probe's header says it), else the one whose outermost frame is a script's `<module>`;
    `shorten`: a frame's short file name from its path (py-spy's), else the path itself."""
    threads: list[ThreadStack] = []
    for line in lines:
        if m := FH_THREAD_RE.match(line.rstrip()):
            tid = int(m.group(2), 16)
            name = m.group(3) or ("MainThread" if tid == main_thread else f"Thread {m.group(2)}")
            # Whether a thread runs or waits is not in the text; the one that took the signal was running.
            threads.append(ThreadStack(name=name, thread_id=tid, idle=m.group(1) != "Current thread"))
        elif FH_STACK_RE.match(line.rstrip()):
            threads.append(ThreadStack(name="Current thread", thread_id=0, idle=False))  # the one that failed
        elif threads and (m := FH_FRAME_RE.match(line)):
            path = m.group(1)
            threads[-1].frames.append(StackFrame(function=m.group(3).strip(), file=shorten(path) if shorten else path,
                                                 line=int(m.group(2)), path=path))
    if not main_thread:
        for thread in threads:
            if thread.frames and thread.frames[-1].function == "<module>" and thread.name.startswith("Thread 0x"):
                thread.name = "MainThread"
    return threads
