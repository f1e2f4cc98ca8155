"""The one place state lives: the latest of everything plus bounded history.

Collectors write here (through `Monitor`); views (the TUI, `snapshot --json`, the bundle) only
read. Nothing in here grows without bound.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.engine import Analysis
from gkdtop.analysis.history import HistoryRange, newest_first
from gkdtop.collectors.registry import CollectorSpec, find
from gkdtop.model import (
    FROM_END,
    Finding,
    GpuState,
    Hint,
    LogFileState,
    LogLine,
    PhaseStatus,
    ProcInfo,
    ProcTable,
    RayLogsState,
    RayState,
    SourceHealth,
    StackPhase,
)
from gkdtop.model.tasks import RayTasksState

if TYPE_CHECKING:
    from gkdtop.analysis.matcher import Pattern
    from gkdtop.analysis.phases import PhaseEngine
    from gkdtop.analysis.profiles import Framework
    from gkdtop.analysis.taskphases import TaskPhaser
    from gkdtop.capture.proc import TiedFinder
    from gkdtop.collectors.follow import Sieve
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.collectors.ray_logs import RayLogBatch
    from gkdtop.config import Config
    from gkdtop.model import Anomaly
    from gkdtop.model.stacks import StallStacks
    from gkdtop.model.tasks import Straggler, TaskPhase

HISTORY = 120  # samples of per-GPU history (two minutes at the default 1 s refresh)
LINES = 5000  # log lines kept for scrollback and re-filtering


def read_history(analysis: Analysis, history: list[tuple[str, int, float, bool]]) -> Analysis:
    """Files' content from before they were followed, `(path, size, mtime, finished)` each, into
    `analysis`; a file gone or unreadable since is skipped (its live lines still count)."""
    analysis.read_history([HistoryRange(path, 0, size, mtime, final, final and newest_first(path, size))
                           for path, size, mtime, final in history], live=True)
    return analysis


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


class Store:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.gpus = GpuState()
        self.gpu_util: dict[int, deque[float]] = {}
        self.gpu_mem: dict[int, deque[float]] = {}
        self.processes: list[ProcInfo] = []
        self.ray = RayState()
        self.log_files: list[LogFileState] = []
        self._tied: TiedFinder | None = None  # voters() own look, for a table no collector saw
        self.ray_logs = RayLogsState()  # remote log files (collectors/ray_logs); their lines join `lines`
        self.lines: deque[LogLine] = deque(maxlen=LINES)
        self.total_lines = 0  # lines ever stored: views ask for what came after their last look
        self.skipped_lines = 0  # flood lines checked by the sieve but not stored (they matched nothing)
        self.progress: dict[str, LogLine] = {}  # unfinished tqdm bar per file
        self.analysis = Analysis(config.rules())  # phases, findings, steps, clock: analysis/engine.py
        self.history_pending = False  # files there at start-up whose earlier content is still being read
        self.log_polls = 0  # log batches since the history was read: the first live ones set the clock offset
        self.health: dict[str, SourceHealth] = {}
        self.version = 0  # bumped on every change so views can skip redraws
        self.versions: dict[str, int] = {}  # per source, so a pane redraws only when its data moved
        self.started = time.time()
        self.stall_stacks: StallStacks | None = None  # the dump taken when a stall began (handed in: monitor.py)
        self.stack_phase: StackPhase | None = None  # the phase read from the stacks while the log cannot say
        self.ray_tasks = RayTasksState()  # Ray's task table (collectors/ray_tasks.py)
        self.stragglers: list[Straggler] = []  # judged from it on each poll (analysis/stragglers.py)
        self.task_phase: TaskPhase | None = None  # the phase its running tasks name (analysis/taskphases.py)
        self._task_phaser: TaskPhaser | None = None  # built on the first poll: the rules are read then
        self._failed_seen: tuple[tuple[str, ...], int, list[str]] = ((), -1, [])  # see failed_task_causes
        self._specs: dict[str, CollectorSpec[Any]] = {}  # per source, from the registry on its first result
        self._watchers: list[Callable[[str], None]] = []  # see watch()

    # --- writes (from the monitor) ------------------------------------------------------------

    def put(self, source: str, result: object) -> None:
        """A collector's result, folded in by the writer its registry line declares (collectors/registry.py)."""
        spec = self._specs.get(source)
        if spec is None:
            spec = self._specs[source] = find(source).spec()
        if not isinstance(result, spec.result):
            raise TypeError(f"{source} returned {type(result).__name__}, not {_type_names(spec.result)}")
        health = self.health.setdefault(source, SourceHealth(source))
        recovered = not health.ok or source not in self.versions
        health.ok, health.error, health.failures = True, "", 0
        health.last_ok, health.next_try = time.time(), None
        if spec.write(self, result) or recovered:
            self._bump(source)

    def write_procs(self, processes: list[ProcInfo]) -> bool:
        """The processes collector's table; a `ProcTable` also says which rows are tied to the followed files."""
        before = self.processes
        self.processes = processes
        self._join_gpu_memory()
        self._join_actors()
        # An idle job's table is the same poll after poll: nothing to redraw.
        return processes != before or getattr(processes, "tied", None) != getattr(before, "tied", None)

    def write_ray(self, state: RayState) -> bool:
        changed = state != self.ray
        self.ray = state
        if changed:
            self._join_actors()
            self._bump("procs")
        return changed

    def write_ray_logs(self, batch: RayLogBatch) -> bool:
        """Remote lines join the local ones: same phases, findings, Logs pane."""
        changed = self.write_logs(batch, local=False) or batch.state != self.ray_logs
        self.ray_logs = batch.state
        if changed:
            self._bump("logs")
        return changed

    def write_ray_tasks(self, state: RayTasksState) -> bool:
        """The task table, judged at once: who is still in a call the others left, which phase runs.
        Judged on every poll, as a round becomes a straggler with time alone."""
        from gkdtop.analysis.stragglers import find_stragglers

        changed = state != self.ray_tasks
        self.ray_tasks = state
        phaser = self.task_phaser()
        now = state.polled or time.time()
        stragglers = find_stragglers(state.running, state.finished, now, phaser.phase_of) if state.running else []
        phase = phaser.task_phase(state.running)
        judged = stragglers != self.stragglers or phase != self.task_phase
        self.stragglers, self.task_phase = stragglers, phase
        return changed or judged

    def task_phaser(self) -> TaskPhaser:
        """The task-name rules: the user's config `task_phases:` first, then data/frameworks.yaml's."""
        if self._task_phaser is None:
            from gkdtop.analysis.taskphases import task_phaser

            self._task_phaser = task_phaser(self.config.task_phases)
        return self._task_phaser

    def failed_task_causes(self, since: float | None = None) -> list[str]:
        """Failed Ray tasks as root causes, those whose error the kept log lines do not already show;
        with `since`, only those that ended after it (this run's, not an earlier job's on the cluster)."""
        failed = [t for t in self.ray_tasks.failed if since is None or t.end is None or t.end >= since]
        if not failed:
            return []
        ids = tuple(t.task_id for t in failed)
        held_ids, held_lines, causes = self._failed_seen
        if (held_ids, held_lines) != (ids, self.total_lines):
            from gkdtop.analysis.stragglers import failed_causes

            lines = self.lines
            causes = failed_causes(failed, lambda error: any(error in line.text for line in lines))
            self._failed_seen = (ids, self.total_lines, causes)
        return causes

    def task_phase_use(self, status: PhaseStatus, now: float) -> str:
        """Why the task phase is shown: what the log cannot say (`log silent for 40s`, `stalled`, ...), or
        `evidence` beside a log that speaks (the same test that wakes the stack sampler)."""
        from gkdtop.collectors.stackphase import sample_reason

        return sample_reason(status, self.analysis.phases.last_activity, now) or "evidence"

    def write_stall_stacks(self, taken: StallStacks) -> bool:
        self.stall_stacks = taken
        return True

    def write_stack_phase(self, found: StackPhase | None) -> bool:
        """None: the log says enough again."""
        changed = found != self.stack_phase
        self.stack_phase = found
        return changed

    def fail(self, source: str, error: str, retry_in: float) -> None:
        health = self.health.setdefault(source, SourceHealth(source))
        changed = health.ok or health.error != error
        health.ok, health.error = False, error
        health.failures += 1
        health.next_try = time.time() + retry_in
        if changed:
            self._bump(source)

    def _bump(self, source: str) -> None:
        self.version += 1
        self.versions[source] = self.version
        for callback in self._watchers:
            try:
                callback(source)
            except Exception:  # a view's failure must not end the collector that wrote (serve: other views)
                logging.getLogger(__name__).exception("store watcher %r failed", callback)

    def watch(self, callback: Callable[[str], None]) -> None:
        """`callback(source)` each time a source's version moves, in the writer's thread (the monitor's
        event loop): a view redraws when something moved instead of polling the versions."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[str], None]) -> None:
        with contextlib.suppress(ValueError):
            self._watchers.remove(callback)

    def write_gpus(self, state: GpuState) -> bool:
        self.gpus = state
        for dev in state.devices:
            if dev.error:
                continue
            util = self.gpu_util.setdefault(dev.index, deque(maxlen=HISTORY))
            util.append(dev.utilization or 0.0)
            if dev.memory_total:
                mem = self.gpu_mem.setdefault(dev.index, deque(maxlen=HISTORY))
                mem.append(100.0 * (dev.memory_used or 0) / dev.memory_total)
        if self._join_gpu_memory():
            self._bump("procs")  # the Processes pane's GPU MEM column: a scan of the same table moves nothing
        return True

    def _join_gpu_memory(self) -> bool:
        """Each process row's GPU memory from the latest sample; True when a row's value changed."""
        used: dict[int, int] = {}
        for dev in self.gpus.devices:
            for proc in dev.processes:
                if proc.used_memory is not None:
                    used[proc.pid] = used.get(proc.pid, 0) + proc.used_memory
        changed = False
        for row in self.processes:
            memory = used.get(row.pid)
            changed = changed or memory != row.gpu_memory
            row.gpu_memory = memory
        return changed

    def _join_actors(self) -> None:
        """Ray knows which actor a PID runs: label process rows the title alone could not."""
        from gkdtop.prockind import role_of

        by_pid = {a.pid: a for a in self.ray.actors if a.pid and a.state != "DEAD"}
        if not by_pid:
            return
        for row in self.processes:
            actor = by_pid.get(row.pid)
            if actor is None:
                continue
            if not row.actor:
                row.actor = actor.class_name
            if row.role in ("ray-worker", "worker"):
                row.role = role_of(actor.class_name, default=row.role)

    def write_logs(self, batch: LogBatch, local: bool = True) -> bool:
        """Feed new lines to the analysis; False when nothing at all changed (the usual idle poll)."""
        if local:
            self.log_polls += 1
        if not batch.lines and not batch.progress and not batch.skipped and (
                not local or batch.files == self.log_files):
            return False
        if getattr(batch, "history", None):  # what the files held before: analysed first, as a whole
            read_history(self.analysis, batch.history)
            batch.history = []
        analysis = self.analysis
        if batch.skipped:
            self.skipped_lines += batch.skipped
            analysis.note_skipped(batch.skipped_time, batch.skipped)
        if local:
            self.log_files = batch.files
        # A local file's lines from before gkdtop opened it were analysed as history (adopt_history):
        # they are kept for the Logs pane only.
        new = [line for line in batch.lines if not (local and line.backlog)]
        if new and self.analysis.lines_in:
            self._count_from_start(new)
        self.lines.extend(batch.lines)
        analysis.feed(new)
        for line in batch.lines:
            self.progress.pop(line.source, None)
        self.total_lines += len(batch.lines)
        for source, line in batch.progress.items():
            self.progress[source] = line
            analysis.feed_progress(line)
        return True

    def adopt_history(self, analysis: Analysis) -> None:
        """The analysis of what the followed files held before they were followed, read by the Monitor
        in a thread on an Analysis of its own (no line is followed meanwhile): it replaces the store's."""
        self.analysis = analysis
        self.history_pending = False
        self.log_polls = 0
        self._bump("logs")

    def flood_sieve(self) -> Sieve:
        """For the log collector: which lines of a flood some rule needs (`Analysis.keep`)."""
        return lambda data: self.analysis.keep(data)

    # --- reads (from views) --------------------------------------------------------------------

    def collector_error(self, source: str) -> str:
        """What a pane says while its collector fails (the last good data stays below it); "" when fine."""
        health = self.health.get(source)
        return f"collector error: {health.error} (retrying)" if health is not None and not health.ok else ""

    def framework(self) -> Framework:
        """Which framework the job runs: the log's evidence and the processes' command lines (or the config's pin)."""
        return self.analysis.profiles.result([p.cmdline for p in self.voters()], self.config.framework)

    def voters(self) -> list[ProcInfo]:
        """The processes whose command lines may name the framework. Following log files, only those tied to
        them (capture.proc.tied_to_files: a writer, the pipe it reads, their process tree): a Ray cluster or
        another job on the machine says nothing of a log it does not write. Following none, all of them.

        The processes collector finds the tied ones with its rows, in its thread (`ProcTable.tied`): this is
        called on the UI thread at every frame, and that scan reads every /proc/N/fd. Files followed since its
        last poll count from its next one. Only a table no collector looked at (a store filled by hand) is
        scanned here, once per change of its processes or the files."""
        paths = self.followed_paths()
        if not paths or not self.processes:
            return self.processes
        tied = self.processes.tied if isinstance(self.processes, ProcTable) else None
        if tied is None:
            if self._tied is None:
                from gkdtop.capture.proc import TiedFinder

                self._tied = TiedFinder()
            tied = self._tied(paths, frozenset(p.pid for p in self.processes))
        return [p for p in self.processes if p.pid in tied]

    def stack_candidates(self, clock_offset: float | None) -> list[ProcInfo]:
        """The processes whose stacks may speak for the followed logs. A log stamped a day or more off this
        machine's clock (`clock_offset`) was copied here, not written by a job on it: only the processes tied to it
        (voters), usually none; a job that happens to run here is another's (audit 8: `snapshot --log` of a pasted
        log named another job's `wait` frame). Otherwise the job's processes, as the patterns found them."""
        from gkdtop.format import COPIED_OFFSET

        if clock_offset is not None and abs(clock_offset) >= COPIED_OFFSET and self.followed_paths():
            return self.voters()
        return self.processes

    def followed_paths(self) -> frozenset[str]:
        """The followed log files' real paths: the processes collector asks, from its thread, each poll."""
        import os

        return frozenset(os.path.realpath(f.path) for f in self.log_files)

    def gpu_pids(self) -> set[int]:
        return {p.pid for dev in self.gpus.devices for p in dev.processes}

    def proc_by_pid(self) -> dict[int, ProcInfo]:
        return {p.pid: p for p in self.processes}

    def findings(self) -> list[Finding]:
        return self.analysis.findings(self.framework())

    def anomalies(self) -> list[Anomaly]:
        """The run's slow failures at the config's thresholds (analysis/anomalies.py)."""
        return self.analysis.anomalies(self.config.anomalies)

    @property
    def phases(self) -> PhaseEngine:  # the phase engine (timeline, steps): tests and the bundle read it
        return self.analysis.phases

    def phase_status(self, now: float | None = None) -> PhaseStatus:
        """The phase verdict; a stall while Ray cannot place a demand says so before any guess."""
        tail, numbers = self.numbered_tail()
        status = self.analysis.status(time.time() if now is None else now, self.framework(), tail, numbers)
        if status.state == "stalled":
            demands = [str(d) for d in self.ray.pending]
            demands += [f.fields.get("demand") or f.fields.get("infeasible") or ""
                        for f in self.findings() if f.name in ("ray-unschedulable", "ray-unschedulable-cpu")]
            # Every distinct shape, the GPU ones first (they are what a training job waits for).
            demands = sorted(dict.fromkeys(d for d in demands if d), key=lambda d: "GPU" not in d)
            if demands:
                base = status.hint or Hint()
                status.hint = Hint(
                    causes=[f"waiting for resources: {d} cannot be scheduled" for d in demands] + base.causes,
                    actions=["Compare the demand with the Ray pane (5): fix the GPU/CPU counts the job asks for, "
                             "or add nodes.", *base.actions],
                )
        return self._task_causes(status, time.time() if now is None else now)

    def _task_causes(self, status: PhaseStatus, now: float) -> PhaseStatus:
        """A stall's hint leads with Ray's task table: who is still in a call the others left; a stall
        or a failure with a failed task whose error the log lacks."""
        causes: list[str] = []
        actions: list[str] = []
        if status.state == "stalled" and self.stragglers:
            causes += [f"Ray tasks: {s.sentence(now)}" for s in self.stragglers]
            late = self.stragglers[0]
            who = (late.running if late.kind == "straggler" else late.finished)[0]
            if who.pid:
                actions.append(f"Read what pid {who.pid} is doing: press s, or `py-spy dump --pid {who.pid}` on "
                               f"node {who.node or '?'}; the Ray pane (5) lists the running tasks.")
        if status.state in ("stalled", "failed"):
            causes += self.failed_task_causes(status.timeline[0].start - 60 if status.timeline else None)
        if causes:
            base = status.hint or Hint()
            status.hint = Hint(causes=causes + base.causes, actions=actions + base.actions)
        return status

    def numbered_tail(self) -> tuple[list[str], list[int | None]]:
        """The newest non-blank lines the followed logs hold (TAIL_LINES at most, oldest first), as written (their
        Ray prefix too): what the job printed last, which the verdict quotes where no rule knows it and whose words
        it reads where no rule placed the run (Analysis.status); and each one's number in its file, where the reader
        counted it (history's lines; None for live ones)."""
        from gkdtop.analysis.wordphase import TAIL_LINES

        newest = [(text, self._number(ln), ln.source) for ln in islice(reversed(self.lines), TAIL_LINES)
                  if (text := ln.raw or ln.text).strip()]
        bottom_up = self.analysis.read_bottom_up
        if not (bottom_up and newest and all(source in bottom_up for _, _, source in newest)):
            newest.reverse()  # oldest first, as written; a file that lists its newest line first is so already
        return [text for text, _, _ in newest], [number for _, number, _ in newest]

    def _number(self, line: LogLine) -> int | None:
        """A line's number in its file. A line of a file followed from its end holds its place after that end
        (FROM_END + n: follow.py) until history has counted the file's lines (Analysis.lines_in)."""
        number = line.number
        if number is None or number > 0:
            return number
        counted = self.analysis.lines_in.get(line.source)
        return counted[0] + number - FROM_END if counted is not None and counted[0] + number - FROM_END > 0 else None

    def _count_from_start(self, lines: list[LogLine]) -> None:
        """New lines of files followed from their end get their numbers in the file, once history counted what the
        file held before (so a claim's evidence live cites `train.log:812`, as history's does)."""
        for line in lines:
            if line.number is not None and line.number < 0 and (known := self._number(line)) is not None:
                line.number = known

    def lines_since(self, count: int) -> list[LogLine]:
        """Lines stored after the view had seen `count` in total (all kept ones if it fell behind)."""
        new = self.total_lines - count
        if new <= 0:
            return []
        if new >= len(self.lines):
            return list(self.lines)
        return list(self.lines)[-new:]

    def matching(self, pattern: Pattern | None, limit: int = 1000) -> list[LogLine]:
        """The newest `limit` lines that match the filter, oldest first."""
        found: list[LogLine] = []
        for line in reversed(self.lines):
            if pattern is None or pattern.search(line.raw or line.text):
                found.append(line)
                if len(found) >= limit:
                    break
        found.reverse()
        return found
