"""Plain data shared by collectors, the store and every view (TUI, snapshot, bundle).

No I/O and no third-party imports here: this module is the contract between layers. A type that
goes into more than one JSON document (snapshot, replay, the bundle) has its one `as_json` here,
so the documents agree on its shape.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable


@dataclass(slots=True)
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes; None when the driver does not say


@dataclass(slots=True)
class GpuSample:
    index: int
    name: str
    uuid: str
    utilization: float | None  # percent 0-100
    memory_used: int | None  # bytes
    memory_total: int | None  # bytes
    temperature: float | None  # Celsius
    power: float | None  # watts
    power_limit: float | None  # watts
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None  # per-device failure, e.g. "GPU is lost"


@dataclass(slots=True)
class GpuState:
    """What the GPU collector knows. status: ok | unavailable | error."""

    status: str = "pending"
    reason: str = ""
    driver: str = ""
    devices: list[GpuSample] = field(default_factory=list)


@dataclass(slots=True)
class ProcInfo:
    pid: int
    ppid: int
    name: str
    cmdline: str
    role: str  # actor | rollout | ref | teacher | critic | driver | ray-daemon | ray-worker | engine | other
    user: str
    status: str  # psutil status string: running, sleeping, zombie, ...
    cpu_percent: float
    rss: int  # bytes
    create_time: float  # epoch seconds
    actor: str = ""  # Ray actor class from the `ray::Class` title, if any
    gpu_memory: int | None = None  # bytes, joined from NVML by PID
    flags: list[str] = field(default_factory=list)  # zombie, orphaned, stale-session


class ProcTable(list[ProcInfo]):
    """The processes collector's rows, and which of them are tied to the followed log files (a writer, the pipe
    it reads, their process tree: capture.proc.tied_to_files). Found in the collector's thread with the rows, so
    the views' `Store.framework()` reads it instead of scanning every /proc/N/fd on the UI thread.
    `tied` is None where nobody looked (a collector not told which files are followed)."""

    def __init__(self, rows: Iterable[ProcInfo] = (), tied: frozenset[int] | None = None) -> None:
        super().__init__(rows)
        self.tied = tied


@dataclass(slots=True)
class RayNode:
    node_id: str
    ip: str
    is_head: bool
    state: str  # ALIVE | DEAD
    resources_total: dict[str, float] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)  # from the node's own agent, when it reports GPUs


@dataclass(slots=True)
class RayActor:
    actor_id: str
    class_name: str
    state: str  # ALIVE | PENDING_CREATION | RESTARTING | DEPENDENCIES_UNREADY | DEAD
    pid: int | None
    node_id: str
    name: str = ""
    required_resources: dict[str, float] = field(default_factory=dict)
    death_cause: str = ""  # one line, for DEAD actors


@dataclass(slots=True)
class RayState:
    """What the Ray cluster says. status: connected | not connected | pending."""

    status: str = "pending"
    reason: str = ""
    address: str = ""
    session: str = ""
    resources_total: dict[str, float] = field(default_factory=dict)
    resources_available: dict[str, float] = field(default_factory=dict)
    pending: list[dict[str, float]] = field(default_factory=list)
    nodes_alive: int = 0
    nodes_dead: int = 0
    nodes: list[RayNode] = field(default_factory=list)
    actors: list[RayActor] = field(default_factory=list)
    actors_total: int = 0  # the cluster's count; `actors` is capped
    placement_groups: list[dict[str, str]] = field(default_factory=list)
    jobs: list[dict[str, str]] = field(default_factory=list)
    details_error: str = ""  # the state API failed while the status answered


@dataclass(slots=True)
class RemoteLogSource:
    """A log file on a Ray node, as the dashboard lists it (for the Logs pane's source picker)."""

    node_id: str
    node_ip: str
    filename: str  # relative to the node's Ray log dir
    followed: bool = False

    @property
    def source(self) -> str:
        """The LogLine.source / LogFileState.path of its lines (collectors/ray_logs.source_name)."""
        return f"ray:{self.node_ip or '?'}/{self.node_id[:8]}:{self.filename}"


@dataclass(slots=True)
class RayLogsState:
    """Remote log following (collectors/ray_logs). status: idle | connected | not connected."""

    status: str = "idle"
    reason: str = ""
    dashboard: str = ""
    patterns: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # node selection; empty: all
    files: list[LogFileState] = field(default_factory=list)  # the followed files, path = source name
    followed: list[RemoteLogSource] = field(default_factory=list)  # the files of `files`, by node
    available: list[RemoteLogSource] = field(default_factory=list)  # listed for the picker
    skipped: int = 0  # matches not followed (over max_files)


FROM_END = -(1 << 40)  # LogLine.number of the last line a file held when a follower began at its end


@dataclass(slots=True)
class LogLine:
    """One logical log line after decoding, ANSI stripping and `\\r` collapsing."""

    source: str  # path of the file it came from
    text: str  # the message, without Ray prefix; ANSI stripped; capped
    seen: float  # epoch seconds: arrival time; for backlog lines, the nearest timestamped line's time or the mtime
    ts: float | None = None  # epoch seconds parsed from the line itself, if any
    worker: str = ""  # Ray prefix name, e.g. WorkerDict / TaskRunner
    pid: int | None = None  # Ray prefix pid
    ip: str = ""  # Ray prefix ip
    truncated: int = 0  # bytes cut from an over-long line
    progress: bool = False  # a tqdm-style `\r` rewrite (latest state of a bar)
    backlog: bool = False  # read from the file's existing content at start-up
    raw: str = ""  # the full line as written (prefix included), ANSI stripped, capped
    # Its line in its file, where the reader counted; a follower's line in a file it began to follow at its end holds
    # FROM_END + its place after that end (0: the last line then, -1 the one before), until history has counted
    # the file's lines (Store.write_logs).
    number: int | None = None
    undated: bool = False  # history: no stamp came before it, so `seen` is the first stamp after it (an upper bound)

    @property
    def time(self) -> float:
        """Best time for the line: its own timestamp, unless that lies in the future."""
        if self.ts is not None and self.ts <= self.seen + 5:
            return self.ts
        return self.seen


@dataclass(slots=True)
class LogFileState:
    path: str
    state: str  # following | waiting (not there yet) | deleted | error
    error: str = ""
    size: int = 0
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    mtime: float | None = None


EVIDENCE_CHARS = 300  # a line cited as evidence is cut here


@dataclass(slots=True)
class Evidence:
    """A log line a claim stands on: which file, which line (where the reader counted), what it says."""

    claim: str  # what it backs: "failed", "last progress", "training loop started"
    source: str
    line: int | None
    text: str  # cut at EVIDENCE_CHARS

    @classmethod
    def of(cls, claim: str, line: LogLine) -> Evidence:
        number = line.number if line.number is None or line.number > 0 else None  # (FROM_END's: not counted yet)
        return cls(claim, line.source, number, (line.raw or line.text)[:EVIDENCE_CHARS])

    def as_json(self) -> dict[str, Any]:
        return {"claim": self.claim, "file": self.source, "line": self.line, "text": self.text}

    def where(self) -> str:
        """`train.log:812`, or the file alone where no line number is known."""
        name = self.source.rsplit("/", 1)[-1]
        return f"{name}:{self.line}" if self.line is not None else name


@dataclass(slots=True)
class EarlierRun:
    """A run the file held before the one the verdict is about (a job started again into the same log with `>>`):
    how it ended, kept apart so its failure, steps and start are not read as the next run's."""

    began: float | None  # its first phase's start
    ended: float | None  # its last progress, where after `began`; else None
    outcome: str  # failed | finished | ended (no line says how)
    phase: str | None  # where it failed or ended
    failure: str  # its failure's line, where it failed
    steps: int  # the steps it logged
    evidence: Evidence  # the next run's first line: where this one ends in the file
    began_after: bool = False  # its first line had no stamp: it began at or after `began` (PhaseSpan.start_after)
    interrupted: bool = False  # stopped from outside (Ctrl+C, SIGTERM): PhaseStatus.interrupted

    def told(self) -> str:
        """How it ended, in words: `FAILED in training loop, 25 steps: `torch.OutOfMemoryError: …``."""
        verb = "was INTERRUPTED" if self.interrupted else "FAILED" if self.outcome == "failed" else "ended"
        if self.outcome == "finished":
            how = "finished"
        elif self.phase is None or self.phase.startswith("after "):  # (the unnamed phase after one: "FAILED after X")
            how = f"{verb} {self.phase or '(phase unknown)'}"
        else:
            how = f"{verb} in {self.phase}"
        steps = f", {self.steps} steps" if self.steps else ""
        return how + steps + (f": `{self.failure[:160]}`" if self.failure else "")

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EarlierRun:
        """Back from as_json (snapshot's text is built from its JSON)."""
        e = doc["evidence"]
        return cls(doc["began"], doc["ended"], doc["outcome"], doc["phase"], doc["failure"] or "", doc["steps"],
                   Evidence(e["claim"], e["file"], e["line"], e["text"]), doc["began_after"], doc["interrupted"])

    def as_json(self) -> dict[str, Any]:
        return {"began": self.began, "began_after": self.began_after, "ended": self.ended, "outcome": self.outcome,
                "interrupted": self.interrupted, "phase": self.phase, "failure": self.failure or None,
                "steps": self.steps, "evidence": self.evidence.as_json()}


@dataclass(slots=True)
class PhaseSpan:
    name: str
    start: float
    end: float | None = None
    status: str = "running"  # running | done | failed | stalled | passed (the words put the run later; end unknown)
    evidence: Evidence | None = None  # the line that started it
    # Seconds by which the stamps jumped, in whole half-hours, where one writer handed over to another inside
    # the span (a driver in UTC, workers in UTC+8): likely a clock zone, so its duration is not measured.
    clock_jump: float | None = None
    done_by: list[str] = field(default_factory=list)  # the Ray actors whose lines said it is done (`LLMRayActor pid 7`)
    # Its first line had no stamp before it (a log that starts with a bar at 3:05:14): it began at or before `start`,
    # the first stamp after that line, so its duration is at least `duration`.
    start_before: bool = False
    # History: the line that began it (`start_after`) or ended it (`end_after`) carried no stamp, so its time is the
    # nearest stamp before that line: it began (ended) at or after it; with no time between, no length is known.
    start_after: bool = False
    end_after: bool = False
    # Read from the words of a line no phase rule knows (wordphase.py), not opened by a rule: the verdict's phase,
    # in the timeline as a guess. The rules' span before it is then `passed`: the run went on, when is not known.
    guess: bool = False

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def unmeasured(self) -> bool:
        """No length is known: its first or last line carried no stamp of their own and no second passed between the
        stamps they took (`0s` would say nothing about it), or the words put the run past it (`passed`) and no line
        says when it ended."""
        return self.status == "passed" or (
            self.end is not None and self.end - self.start < 1.0 and (self.start_after or self.end_after))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "start": self.start, "end": self.end, "duration": self.duration,
                "status": self.status, "evidence": self.evidence.as_json() if self.evidence else None,
                "clock_jump_s": self.clock_jump, "done_by": list(self.done_by), "start_before": self.start_before,
                "start_after": self.start_after, "end_after": self.end_after, "guess": self.guess}


@dataclass(slots=True)
class StepInfo:
    step: int
    time: float
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def timings(self) -> dict[str, float]:
        """verl's `timing_s/<name>` entries, keyed by <name>."""
        return {k[len("timing_s/") :]: v for k, v in self.metrics.items() if k.startswith("timing_s/")}

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Hint:
    causes: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    # Lines that hold for some frameworks only (verl's config keys, its method names): each such
    # text and the profiles (data/frameworks.yaml) it is shown for, a fork's base included; a name
    # after `!`: shown for any framework but that one (the general line a framework's own replaces).
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Lines that hold only where the log shows their evidence ("out of memory" advice, shown once a line
    # said so): each such text and the pattern one of the log's lines must have matched.
    seen: dict[str, str] = field(default_factory=dict)
    # Lines a later line of the log contradicts ("init waits for a rank" once every rank printed Init COMPLETE):
    # each such text and the pattern that, once matched, hides it.
    unseen: dict[str, str] = field(default_factory=dict)
    # Lines about the steps' timed parts ("compare the last step's breakdown"): each such text and how many
    # steps that timed their parts the log must hold.
    steps: dict[str, int] = field(default_factory=dict)
    # Lines about the first steps ("which part of the first step"): each such text and how many steps that ran
    # (timed or not: a step line, the loop's bar) end it.
    before_steps: dict[str, int] = field(default_factory=dict)
    # Lines about steps that ran, timed or not ("which part of the step"): each such text and how many must have.
    ran_steps: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"causes": self.causes, "actions": self.actions}

    def for_seen(self, matched: Collection[str]) -> Hint:
        """The lines whose evidence the log holds and that no line of it contradicts (`matched`: the `seen` and
        `unseen` patterns some line matched)."""
        if not self.seen and not self.unseen:
            return self
        keep = [t for t in (*self.causes, *self.actions) if (self.seen.get(t) is None or self.seen[t] in matched)
                and (self.unseen.get(t) is None or self.unseen[t] not in matched)]
        kept = set(keep)
        return Hint([c for c in self.causes if c in kept], [a for a in self.actions if a in kept],
                    {t: v for t, v in self.only.items() if t in kept})

    def for_steps(self, timed: int, ran: int = 0) -> Hint:
        """The lines whose steps the log holds (`timed`: how many steps timed their parts; `ran`: how many ran, by
        their lines or the loop's bar: five steps whose lines hold no timing are past the first, audit 20)."""
        if not self.steps and not self.before_steps and not self.ran_steps:
            return self
        ran = max(ran, timed)
        keep = {t for t in (*self.causes, *self.actions) if self.steps.get(t, 0) <= timed
                and self.ran_steps.get(t, 0) <= ran < self.before_steps.get(t, ran + 1)}
        return Hint([c for c in self.causes if c in keep], [a for a in self.actions if a in keep],
                    {t: v for t, v in self.only.items() if t in keep}, self.seen, self.unseen)

    def for_framework(self, names: tuple[str, ...]) -> Hint:
        """The lines that hold for a job of these frameworks (the detected one and its bases; none:
        unknown, so no framework's own lines): a hint never names a stack the log is not."""
        if not self.only:
            return self

        def keep(text: str) -> bool:
            scope = self.only.get(text)
            if scope is None:
                return True
            if scope[0].startswith("!"):
                return not any(f"!{name}" in scope for name in names)
            return any(name in scope for name in names)

        return Hint([c for c in self.causes if keep(c)], [a for a in self.actions if keep(a)], seen=self.seen,
                    unseen=self.unseen)


UNRECOGNISED_SHOWN = 20  # unrecognised lines after the last known one that are worth saying


def quotes_last_line(state: str) -> bool:
    """Whether a view quotes the log's own last line (`PhaseStatus.unrecognised_last`) for a job in
    `state`: one that stopped moving or has not started a phase. A running job's last line is the Logs
    pane's, changing with every line; a done or failed one has its verdict and its failing line."""
    return state not in ("running", "done", "failed")


@dataclass(slots=True)
class PhaseStatus:
    """The phase engine's verdict at one instant. state: waiting | running | stalled | done | failed."""

    current: str | None
    state: str
    since: float | None  # when the current phase started
    last_progress: float | None
    stalled_for: float | None  # seconds, when state == stalled
    stall_after: float
    hint: Hint | None
    failure: str = ""  # the line that failed the phase
    steps_done: int = 0
    last_step: StepInfo | None = None
    step_time: float | None = None  # seconds per step, from timing_s/step or step spacing
    timeline: list[PhaseSpan] = field(default_factory=list)
    expected: str | None = None  # after a phase finished: the next phase, the one that waits
    within: str | None = None  # when `current` is a per-step sub-phase: the phase it recurs in
    # How `since` bounds the start where its line carried no stamp: "before" (the first stamp after it, a line
    # before any), "after" (the nearest stamp before it, how history dates an unstamped line), else "".
    since_bound: str = ""
    steps: dict[str, Any] = field(default_factory=dict)  # analysis/steps.StepStats.summary(): the whole run
    clock_offset: float | None = None  # seconds added to a source's stamps (its clock or zone differs from ours)
    clock_source: str = ""  # the source with that offset
    unrecognised: int = 0  # lines after the last one a phase rule or finding knew
    recognised_last: str = ""  # that line
    # The log's own last line, where lines no rule knows follow `recognised_last` (Analysis.status judges it
    # from the line the store or replay hands it), else "": what the job printed last, often the answer.
    unrecognised_last: str = ""
    evidence: list[Evidence] = field(default_factory=list)  # the lines the verdict stands on
    # Where `current` was read from the words of a line no phase rule knows (analysis/wordphase.py): that line.
    worded: Evidence | None = None
    # A finished run whose last line is its final save's (`Saving model checkpoint to …`): still saving, if the job
    # has not exited. The verdict stays the rules' (it finished training); this line says what may still run.
    final_save: Evidence | None = None
    # The failure is an interrupt from outside (Ctrl+C, SIGINT, SIGTERM), not an error of the run's own: most likely
    # it was stopped while it hung.
    interrupted: bool = False
    # Runs before this one in the same file (a restart appended to the log), oldest first: the verdict, the
    # timeline and the steps are the last run's.
    earlier_runs: list[EarlierRun] = field(default_factory=list)

    @property
    def worded_note(self) -> str:
        """Where the phase was read from a line's words, not a rule: the line, so the guess can be checked."""
        if self.final_save is not None:
            return f"{self.final_save.claim}: `{self.final_save.text.strip()[:200]}`"
        if self.worded is None:
            return ""
        how = self.worded.claim.removeprefix("the phase, ")  # read from the words of a line no rule knows (a guess)
        return f"phase {how}: `{self.worded.text.strip()[:200]}`"

    @property
    def unsure(self) -> str:
        """For a job that stopped moving: the stretch after the last line a rule knew, if it is long
        enough to say so ("after `Building rollout for sglang`: 37 lines no rule knows"), else ""."""
        if self.state in ("running", "done") or self.unrecognised < UNRECOGNISED_SHOWN or self.worded is not None:
            return ""  # (where a line's words named the phase, worded_note speaks for the tail)
        after = f"after `{self.recognised_last.strip()[:100]}`" if self.recognised_last else "from the start"
        return f"{after}: {self.unrecognised} lines no rule knows"

    @property
    def last_known(self) -> str:
        """For a job that stopped moving with (almost) nothing after the last line a rule knew: that
        line, where it stopped in its own words (`Capturing CUDA graph shapes: 46%|…| 31/67`,
        `local_global_step_folder: …/global_step_10`); else "" (`unsure` speaks for a longer tail)."""
        if (self.state != "stalled" or not self.recognised_last.strip() or self.unrecognised >= UNRECOGNISED_SHOWN
                or self.worded is not None):
            return ""
        return self.recognised_last.strip()[:200]

    @property
    def finished_by(self) -> str:
        """Who said the phase the job stopped after is done, where Ray actors did (`rollout init was done by 2:
        LLMRayActor pid 18822, …`): after a stop, the ones missing from it are the question. "" otherwise."""
        last = self.timeline[-1] if self.timeline else None
        if self.state == "failed" or last is None or last.status != "done" or not last.done_by:
            return ""
        return f"{last.name} was done by {len(last.done_by)}: {', '.join(last.done_by)}"

    @property
    def last_line(self) -> str:
        """The log's own last line as the Phases pane, snapshot's text and the bundle quote it: for a job
        that stopped moving, where lines no rule knows follow the last one a rule knew; else ""."""
        return self.unrecognised_last if quotes_last_line(self.state) else ""

    def rename(self, names: dict[str, str]) -> None:
        """Phases shown by other names (`actor init` as `model load` on a log of no RL trainer): the verdict's,
        its timeline's (copies: the engine's spans keep their names) and its evidence's claims."""
        if not names:
            return
        self.current = names.get(self.current, self.current) if self.current else self.current
        self.expected = names.get(self.expected, self.expected) if self.expected else self.expected
        self.within = names.get(self.within, self.within) if self.within else self.within
        def claim(e: Evidence | None) -> Evidence | None:  # `actor init started` -> `model load started`
            old = next((n for n in names if e is not None and e.claim.startswith(n + " ")), None)
            return replace(e, claim=names[old] + e.claim[len(old):]) if old and e is not None else e

        self.timeline = [replace(s, name=names[s.name], evidence=claim(s.evidence)) if s.name in names else s
                         for s in self.timeline]
        self.evidence = [claim(e) or e for e in self.evidence]

    def as_json(self) -> dict[str, Any]:
        """The verdict as snapshot's `phases` shows it (docs/snapshot.md); replay and the bundle show
        parts of it under their own names."""
        last = self.last_step
        return {
            "current": self.current, "state": self.state, "since": self.since, "expected": self.expected,
            "within": self.within, "since_bound": self.since_bound, "last_progress": self.last_progress,
            "stalled_for": self.stalled_for, "stall_after": self.stall_after, "failure": self.failure,
            "hint": self.hint.as_json() if self.hint else None,
            "unrecognised": {"lines": self.unrecognised, "after": self.recognised_last,
                             "last": self.unrecognised_last or None},
            "last_known": self.last_known,
            "finished_by": self.finished_by,
            "clock_offset": self.clock_offset,
            "clock_source": self.clock_source,
            "steps": {
                "done": self.steps_done,
                "last": last.step if last else None,
                "step_time": self.step_time,
                "metrics": last.metrics if last else {},
                "run": self.steps,  # the whole run: count, p50/p95/max, slowest, trend, per timing key
            },
            "timeline": [span.as_json() for span in self.timeline],
            "evidence": [e.as_json() for e in self.evidence],
            "interrupted": self.interrupted,
            "earlier_runs": [run.as_json() for run in self.earlier_runs],
            "phase_from": "words" if self.worded is not None else "rules",
            "worded_note": self.worded_note or None,
        }


@dataclass(slots=True)
class Anomaly:
    """A slow failure of a run that raised nothing (analysis/anomalies.py): what changed, from which
    step, and the numbers that say so."""

    kind: str  # slower | throughput | score | clip_ratio | length | nonfinite | no_signal
    metric: str  # the metric it was read from: timing_s/gen, critic/score/mean, actor/pg_loss
    step: int  # the step it began at
    before: float | None  # the median before (None for nonfinite)
    after: float | str  # the median since (nonfinite: the value, "nan" / "inf")
    text: str  # "generation (timing_s/gen) 2.0x slower since step 400 (10.1 s → 20.3 s)"

    def as_json(self) -> dict[str, Any]:
        after = self.after if not isinstance(self.after, float) or math.isfinite(self.after) else str(self.after)
        return {"kind": self.kind, "metric": self.metric, "step": self.step, "before": self.before,
                "after": after, "text": self.text}


@dataclass(slots=True)
class StackPhase:
    """The phase read from the job's Python stacks (collectors/stackphase.py) while the log is silent
    or says nothing a rule knows: shown with its source, never merged into the log's timeline."""

    phase: str | None  # None: the stacks were read but no rule (data/stack_phases.yaml) knew them
    where: str  # whose code and which function: `vllm … capture_model`, `verl … fit → generate_sequences`
    frame: str  # the frame that says so: `capture_model (vllm/worker/model_runner.py:1234)`
    pid: int | None  # the process it was read from
    label: str  # what a person calls that process: `driver TaskRunner`
    taken: float  # epoch seconds of the sample
    reason: str  # why the stacks were read: `log silent for 40s`, `stalled`, ...
    waiting: str = ""  # what its innermost frames wait on: `ray.get`, `broadcast`
    processes: int = 0  # processes read
    agree: int = 0  # of those, how many are in `phase`
    note: str = ""  # one line: a process that could not be read, and why

    @property
    def text(self) -> str:
        """`generation (from stacks: vllm … capture_model)`."""
        if self.phase is None:
            return f"no rule knows the stack (from stacks: {self.where})" if self.where else "stacks unreadable"
        return f"{self.phase} (from stacks: {self.where})"

    def as_json(self, now: float) -> dict[str, Any]:
        """With its age at `now` (schema in docs/snapshot.md)."""
        return {
            "phase": self.phase, "source": "stacks", "text": self.text, "where": self.where, "frame": self.frame,
            "pid": self.pid, "process": self.label, "waiting": self.waiting,
            "age": round(max(0.0, now - self.taken), 1), "taken": self.taken, "reason": self.reason,
            "processes": self.processes, "agree": self.agree,
            "note": self.note,
        }


@dataclass(slots=True)
class SourceHealth:
    """How one collector is doing: the pane shows `error` while it retries."""

    name: str
    ok: bool = True
    error: str = ""
    failures: int = 0
    last_ok: float | None = None
    next_try: float | None = None


@dataclass(slots=True)
class Finding:
    """A known failure signature seen in the logs, deduplicated: one entry, a count, first/last seen."""

    name: str
    severity: str  # error | warning | info
    first_seen: float
    last_seen: float
    count: int
    fields: dict[str, str]
    cause: str
    fix: str
    source: str  # the log file
    sample: list[str] = field(default_factory=list)  # the matching line (and the lines that filled fields)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
