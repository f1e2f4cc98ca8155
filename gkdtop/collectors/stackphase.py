"""The phase from the stacks, live: a light periodic `py-spy dump --nonblocking` when the log cannot say.

The log names the phase while it prints lines some rule knows. When it goes silent, or keeps
printing lines no rule knows, the driver's stack still says where the job is. So only then, this
reads the driver's stack (every rank's once the phase engine declares a stall), maps the frames to
a phase (analysis/stackphase.py, rules in data/stack_phases.yaml) and the Phases pane shows it with
its source. Light by construction: nothing while the log is enough; then one dump every `base`
seconds, doubling up to `longest` while the answer stays the same; py-spy reads without pausing
the target (`--nonblocking`). bench/bench_stack_phase.py measures the share of a core it costs.
"""

from __future__ import annotations

import functools
import os
import resource
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.stackphase import StackRules, builtin_stack_rules, consensus, match_process
from gkdtop.capture.pyspy import dump_processes, find_py_spy, stack_targets
from gkdtop.collectors.base import one_line
from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model import UNRECOGNISED_SHOWN, PhaseStatus, ProcInfo, StackPhase
from gkdtop.model.stacks import StallStacks

if TYPE_CHECKING:
    from gkdtop.model.stacks import StackDump

QUIET = 15.0  # seconds of log silence before the stacks are read
BASE = 10.0  # seconds between two samples while the answer changes
LONGEST = 120.0  # ... and at most, while it stays the same
BUDGET = 0.005  # share of a core the samples may take: the next waits at least cost / BUDGET
MAX_RANKS = 64  # processes read in one sample during a stall
SOURCE_BYTES = 4 << 20  # a source file larger than this is not read for its lines


def sample_reason(status: PhaseStatus, last_activity: float | None, now: float, quiet: float = QUIET) -> str:
    """Why the log is not enough now ("" when it is): stalled, no phase yet, lines no rule knows, silence."""
    if status.state in ("done", "failed"):
        return ""
    if status.state == "stalled":
        return "stalled"
    if status.state == "waiting" or status.current is None:
        return "no phase line yet"
    if status.unrecognised >= UNRECOGNISED_SHOWN:
        return f"{status.unrecognised} lines no rule knows"
    if last_activity is not None and now - last_activity >= quiet:
        return f"log silent for {int(now - last_activity)}s"
    return ""


class SourceLines:
    """Source lines of the target's files, read through /proc/PID/root (the target may sit in a
    container) and cached by file identity: only frames a rule on `code` looks at are read."""

    def __init__(self, max_files: int = 64) -> None:
        self.max_files = max_files
        self._cache: dict[tuple[str, int, int], list[str]] = {}

    def line(self, pid: int, path: str, number: int) -> str:
        if not path.startswith("/") or number <= 0:
            return ""
        full = f"/proc/{pid}/root{path}"
        try:
            st = os.stat(full)
            key = (full, st.st_mtime_ns, st.st_size)
            lines = self._cache.get(key)
            if lines is None:
                if st.st_size > SOURCE_BYTES:
                    return ""
                with open(full, "rb") as fh:
                    lines = fh.read(SOURCE_BYTES).decode("utf-8", "replace").splitlines()
                if len(self._cache) >= self.max_files:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = lines
        except OSError:
            return ""
        return lines[number - 1] if number <= len(lines) else ""


class StackPhaseSampler:
    """Decides when to read whose stacks (`due`, on the event loop) and reads them (`sample`, blocking)."""

    name = "stack_phase"

    def __init__(self, rules: StackRules | None = None, base: float = BASE, longest: float = LONGEST,
                 dump: Callable[[list[ProcInfo]], list[StackDump]] | None = None, py_spy: str | None = None) -> None:
        self.rules = rules
        self.base, self.longest = base, longest
        self.interval = base
        self.next_at = 0.0
        self.last_key: tuple[Any, ...] | None = None
        self.py_spy = py_spy
        self.dump = dump
        self.sources = SourceLines()
        self.not_python: set[tuple[int, float]] = set()  # (pid, start) py-spy found no interpreter in: never again

    def reset(self) -> None:
        """The log is enough again: the next need starts from the shortest interval."""
        self.interval, self.next_at, self.last_key = self.base, 0.0, None

    def due(self, reason: str, processes: Sequence[ProcInfo], now: float) -> list[ProcInfo]:
        """The processes to read now ([] when not yet): the drivers; every Python rank in a stall."""
        if not reason or now < self.next_at:
            return []
        python = [p for p in stack_targets(processes) if (p.pid, p.create_time) not in self.not_python]
        drivers = [p for p in python if p.role == "driver"]
        if reason == "stalled":  # every rank, the drivers first (they win a tie)
            return (drivers + [p for p in python if p.role != "driver"])[:MAX_RANKS]
        # No driver (a torchrun job): its Python processes, not Ray's idle pool workers (they say nothing).
        return drivers or [p for p in python if p.role != "ray-worker"][:8]

    def sample(self, targets: list[ProcInfo], reason: str, now: float | None = None) -> StackPhase:
        """Read the targets' stacks once and judge them; never raises for a process that cannot be read."""
        taken = time.time() if now is None else now
        began = _cpu()
        exe = self.py_spy or find_py_spy()
        if exe is None:
            result = StackPhase(None, "", "", None, "", taken, reason, processes=len(targets),
                                note="py-spy not found (pip install py-spy, next to this Python or on PATH)")
        else:
            dump = self.dump or functools.partial(_dump_nonblocking, py_spy=exe)
            try:
                dumps = dump(targets)
                started = {p.pid: p.create_time for p in targets}
                self.not_python.update((d.pid, started.get(d.pid, 0.0)) for d in dumps
                                       if d.error.startswith("not a Python process"))
                result = self.judge(dumps, reason, taken)
            except Exception as exc:  # scheduled like any answer: a failure must not be retried every second
                result = StackPhase(None, "", "", None, "", taken, reason, processes=len(targets),
                                    note=f"reading the stacks failed: {one_line(exc)}")
        self._schedule(result, taken, _cpu() - began)
        return result

    def judge(self, dumps: Sequence[StackDump], reason: str, taken: float) -> StackPhase:
        """The dumps as one StackPhase: the phase most processes are in, a note for those not read."""
        rules = self.rules or builtin_stack_rules()
        matches = []
        for dump in dumps:
            if dump.ok:
                source = functools.partial(_frame_line, self.sources, dump.pid)
                matches.append((dump.pid, match_process(dump.threads, rules, source)))
        failed = [d for d in dumps if not d.ok]
        note = f"pid {failed[0].pid} ({failed[0].label}): {failed[0].error}" if failed else ""
        if len(failed) > 1:
            note += f" (and {len(failed) - 1} more not read)"
        labels = {d.pid: d.label for d in dumps}
        best = consensus(matches, prefer=[d.pid for d in dumps if d.role == "driver"])
        if best is None:
            shown = next((d for d in dumps if d.ok), None)
            where = _innermost(shown) if shown is not None else ""
            return StackPhase(None, where, where, shown.pid if shown else None, labels.get(shown.pid, "") if shown
                              else "", taken, reason, processes=len(dumps), note=note)
        pid, match = best
        agree = sum(1 for _, m in matches if m is not None and m.phase == match.phase)
        return StackPhase(match.phase, match.where, match.frame, pid, labels.get(pid, ""), taken, reason,
                          waiting=match.waiting, processes=len(dumps), agree=agree, note=note)

    def _schedule(self, result: StackPhase, now: float, cost: float = 0.0) -> None:
        """Back off while the answer stays the same; come back soon after it changed, but never so
        soon that the samples take more than BUDGET of a core (every rank of a big job costs more)."""
        key = (result.phase, result.where, result.note)
        self.interval = min(self.longest, self.interval * 2) if key == self.last_key else self.base
        self.last_key = key
        self.next_at = now + max(self.interval, cost / BUDGET)


def _cpu() -> float:
    """CPU seconds of the py-spy runs reaped so far plus this thread's own (the rules, the source lines)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime + time.thread_time()


def _dump_nonblocking(targets: list[ProcInfo], py_spy: str) -> list[StackDump]:
    """py-spy reads without pausing the targets, four at a time, each within 5 s."""
    return dump_processes(targets, timeout=5.0, workers=4, py_spy=py_spy, nonblocking=True)[2]


def _frame_line(sources: SourceLines, pid: int, frame: Any) -> str:
    return sources.line(pid, frame.path, frame.line)


def _innermost(dump: StackDump) -> str:
    """The main thread's innermost Python frame: what to show when no rule knows the stack."""
    threads = sorted(dump.threads, key=lambda t: t.name != "MainThread")
    for thread in threads:
        for frame in thread.frames:
            if not frame.native:
                return f"{frame.function.rsplit('.', 1)[-1]} ({frame.file}:{frame.line})"
    return ""


# No collector to poll: the monitor's own watcher samples when the log cannot say (Monitor.sample_stack_phase).
SPEC: CollectorSpec[StackPhase | None] = CollectorSpec(
    result=(StackPhase, type(None)),
    write=lambda store, found: store.write_stack_phase(found),
)

# No collector either: the dump the dashboard hands the monitor (Monitor.start) when a stall is declared.
STALL_SPEC: CollectorSpec[StallStacks] = CollectorSpec(
    result=StallStacks,
    write=lambda store, taken: store.write_stall_stacks(taken),
)
