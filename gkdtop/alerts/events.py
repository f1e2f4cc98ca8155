"""The events worth telling someone, from the store's verdict each second: each once, re-armed only
when its condition clears, and no kind sent twice within `every` seconds (a flapping job is one
message, not sixty)."""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gkdtop.actions.redact import redact_text
from gkdtop.actions.stacks import stack_targets
from gkdtop.analysis.lines import parse_line
from gkdtop.analysis.phases import ended_short
from gkdtop.format import human_duration, shown
from gkdtop.model import EVIDENCE_CHARS

if TYPE_CHECKING:
    from gkdtop.model import EarlierRun, LogLine, PhaseStatus
    from gkdtop.store import Store

KINDS = ("stalled", "failed", "recovered", "finished", "anomaly", "heartbeat")
LAST_LINES = 5  # log lines in a message: enough to recognise the spot, few enough for a phone
DUMP_WAIT = 8.0  # seconds a stall message waits for its stack dump before it goes without one
FINISH_WAIT = 15.0  # seconds a finished run waits before told: its final save's line may come in the next poll
SAVE_WAIT = 600.0  # seconds a finished run whose log ends in its final save waits for the save to end before told
LINE_CHARS = 300
CONTEXT_LINES = 20  # lines before the last ones redacted with them: a YAML block's key opens above them
# A crash's own block (Ray's native frames and logging.cc echo, `Fatal Python error`, `Stack (most recent call first)`)
# follows its first line and names where it died (replay reads its frames): "failed" waits for the block's end, the
# next line of another writer, BLOCK_LINES of its own, or BLOCK_WAIT seconds (audit 22: "FAILED in actor init" at
# the signal's line where the stack under it said rollout init).
BLOCK_LINES = 60
BLOCK_WAIT = 5.0


@dataclass(slots=True)
class AlertEvent:
    """One message: what happened to which job, where, and the lines it stands on (already redacted)."""

    kind: str  # one of KINDS
    time: float
    job: str
    host: str
    framework: str
    phase: str
    state: str
    seconds: float | None  # stalled: for how long; finished/heartbeat: the run so far
    culprit: str = ""
    hint: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    dump: str = ""  # where the stall-time stack dump went
    steps: int = 0
    guess: bool = False  # the phase was read from a line's words, as replay's `FAILED, likely in …` says
    saving: bool = False  # finished: the log ends in its final save, maybe still running (PhaseStatus.final_save)
    interrupted: bool = False  # failed: stopped from outside (Ctrl+C, SIGTERM), as replay's `INTERRUPTED in …` says
    # `time` is a bound, no later than the event: replayed lines after the last stamp whose steps state their own
    # times (verl's timing_s/step) came at least that long after it (audit 24: a failure told at the last stamp)
    at_least: bool = False
    short: str = ""  # finished: `N/M` of the loop's bar where only the process's end was seen (phases.ended_short)

    @property
    def where(self) -> str:
        """` in PHASE` as replay says it: `, likely in PHASE` for a guess, ` after PHASE` for the unnamed one."""
        if not self.phase:
            return ""
        if self.phase.startswith("after "):
            return f" {self.phase}"
        return f"{', likely' if self.guess else ''} in {self.phase}"

    @property
    def title(self) -> str:
        where = self.where
        if self.kind == "stalled":
            return f"gkdtop: {self.job} STALLED{where} for {human_duration(self.seconds or 0)}"
        if self.kind == "failed":
            return f"gkdtop: {self.job} {'INTERRUPTED' if self.interrupted else 'FAILED'}{where}"
        if self.kind == "recovered":
            return f"gkdtop: {self.job} recovered{where}"
        if self.kind == "finished" and self.short:
            return f"gkdtop: {self.job} ended at {self.short} of the loop's bar, not finished (its process ended)"
        if self.kind == "finished":
            return f"gkdtop: {self.job} finished" + (" training; its log ends in the final save" if self.saving else "")
        if self.kind == "anomaly":
            return f"gkdtop: {self.job}: {self.culprit}"
        return f"gkdtop: {self.job} running{where}"

    @property
    def message(self) -> str:
        """The body a person reads: the title's facts, the culprit, the hint, the dump, the last lines."""
        head = f"{self.job} on {self.host}"
        if self.framework:
            head += f" ({self.framework})"
        head += f": {self.state}" + self.where
        if self.kind == "stalled" and self.seconds is not None:
            head += f", no progress for {human_duration(self.seconds)}"
        if self.steps:
            head += f", {self.steps} steps done"
        rows = [head]
        if self.culprit:
            label = {"anomaly": "changed", "finished": "note"}.get(self.kind, "culprit")
            rows.append(f"{label}: {self.culprit}")
        rows += [f"cause: {cause}" for cause in self.hint[:2]]
        if self.dump:
            rows.append(f"stacks at the stall: {self.dump}")
        if self.lines:
            rows.append("last lines:")
            rows += [f"  {line}" for line in self.lines]
        return "\n".join(rows)

    def as_json(self) -> dict[str, Any]:
        """`gkdtop watch --json`: one object per line (docs/alerts.md)."""
        return {"event": self.kind, "time": self.time, "job": self.job, "host": self.host,
                "framework": self.framework, "phase": self.phase, "state": self.state, "seconds": self.seconds,
                "steps": self.steps, "culprit": self.culprit, "hint": self.hint, "dump": self.dump,
                "lines": self.lines, "title": self.title, "guess": self.guess, "saving": self.saving,
                "interrupted": self.interrupted, "at_least": self.at_least}


def job_name(store: Store, named: str = "") -> str:
    """What a message calls the job: the name given, else the first followed file's name."""
    if named:
        return named
    for state in store.log_files:
        return os.path.basename(state.path) or state.path
    return "the job"


class AlertWatcher:
    """Turns the store's verdict into events. `check(now)` once a second; it never blocks."""

    def __init__(self, store: Store, job: str = "", every: float = 600.0, heartbeat: float = 0.0,
                 wait_for_dump: bool = False, job_ended: Callable[[], tuple[int, str] | None] | None = None) -> None:
        """`job_ended`: for a job gkdtop started (`gkdtop run`), its exit status and how it ended, once it has."""
        self.store = store
        self.job = job
        self.every = every
        self.heartbeat = heartbeat
        self.wait_for_dump = wait_for_dump  # a stall-time dump will be taken: name it in the message
        self.host = socket.gethostname()
        self.sent: dict[str, float] = {}  # kind -> when it was last sent
        self.stall_told = False  # a "stalled" went out and its "recovered" is owed
        self.failed_told = False
        self.failure_told = ""  # the failure a "failed" message named
        self.finished_told = False
        self.done_since: float | None = None  # when the run was first seen finished
        self.saving_since: float | None = None  # when a finished run's log was first seen ending in its final save
        self.tasks_told: set[str] = set()  # failed Ray tasks already told
        self.anomalies_told: set[tuple[str, str]] = set()  # (kind, metric) of the slow failures told
        self.job_ended = job_ended
        self.exit_told = False
        self.stall_seen: float | None = None  # when the current stall was first seen
        self.failed_seen: float | None = None  # when the failure now held for its block's end was first seen
        self.failed_text = ""  # that failure's line's words (a stamped echo of them, under it, is still its block)
        self.failed_ended = False  # a replay saw the next line come past BLOCK_WAIT (failed_due): the block is over
        # Set by a replay (paced.py): BLOCK_WAIT runs from the failure line's date, not from the check that saw it.
        self.replayed = False
        self.runs_seen = 0  # earlier runs of the log (PhaseStatus.earlier_runs) already looked at
        self.started = time.time()

    def check(self, now: float, status: PhaseStatus | None = None, final: bool = False) -> list[AlertEvent]:
        """The events due at `now` (`status`: the store's verdict at `now`, if the caller has it; `final`: the log
        ends here and nothing more will come, as replay --alerts says at its end)."""
        store = self.store
        if store.history_pending or store.log_polls < 2:
            return []  # as for the stall-time dump: the first live lines set the clock offset, and silence with it
        status = status or store.phase_status(now)
        events: list[AlertEvent] = []
        if self.exit_told:
            return []  # the job gkdtop started has ended and that was told: its silent log is no stall
        ended = self.job_ended() if self.job_ended is not None else None
        if ended is not None:  # said once, and nothing after it
            self.exit_told = True
            code, outcome = ended
            if code != 0 and not self.failed_told:
                events.append(self._event("failed", status, now, culprit=f"the job {outcome}", ended=ended))
            elif code == 0 and not self.finished_told:
                events.append(self._event("finished", status, now))
            for event in events:
                self.sent[event.kind] = now
            return events
        for run in status.earlier_runs[self.runs_seen:]:
            # A run that failed and was started again into the log before a check saw its failure (the next run's
            # first lines in the same poll, or in one gap of a replay): its failure is still news.
            if run.outcome == "failed" and not self.failed_told and self._due("failed", now):
                events.append(self._event("failed", status, now, culprit=run.failure, earlier=run))
            self.failed_told = self.finished_told = self.stall_told = False  # the next run is told afresh
            self.failed_seen = None
        self.runs_seen = len(status.earlier_runs)
        stalled = status.state == "stalled"
        if not stalled:
            self.stall_seen = None
            if self.stall_told and status.state in ("running", "done", "waiting"):
                self.stall_told = False
                events.append(self._event("recovered", status, now))
        elif not self.stall_told and self._due("stalled", now) and self._dump_ready(status, now):
            self.stall_told = True
            events.append(self._event("stalled", status, now))
        holding = False
        if status.state == "failed":
            if not self.failed_told and self._due("failed", now):
                block = self._failure_block(status, now, final)
                holding = block is None
                if block is not None:
                    self.failed_told = True
                    self.failure_told = status.failure
                    self.stall_told = False  # a failure ends the stall: no "recovered" is owed
                    event = self._event("failed", status, now)
                    event.time = block
                    events.append(event)
        else:
            self.failed_seen = None
            if self.failed_told and status.state == "running":
                # Its steps went on after the error (a Ray task retried after its worker was killed): the run
                # survived what was told as its failure, and the message that said so is corrected.
                events.append(self._event("recovered", status, now,
                                          culprit=f"it went on after: {self.failure_told}"))
            self.failed_told = False
        # This run's failed Ray tasks only (as the store's own verdict takes them), one message a window.
        since = status.timeline[0].start - 60 if status.timeline else self.started
        for cause in store.failed_task_causes(since):
            if cause not in self.tasks_told and not self.failed_told and not holding and self._due("failed", now):
                self.tasks_told.add(cause)
                self.sent["failed"] = now
                events.append(self._event("failed", status, now, culprit=cause))
        if status.state == "done":
            # A log that ends in its final save waits SAVE_WAIT for the save's end (audit 19: "finished, still saving"
            # on a save that ended 3 minutes later); a save that never ends is told with that note then. Any finish
            # waits FINISH_WAIT, for a save whose line comes a poll later (review of session 24).
            saving = status.final_save is not None
            self.done_since = now if self.done_since is None else self.done_since
            if saving and self.saving_since is None:
                self.saving_since = now
            waited = final or now - self.done_since >= FINISH_WAIT
            if not self.finished_told and waited and (not saving or now - (self.saving_since or now) >= SAVE_WAIT):
                self.finished_told = True
                events.append(self._event("finished", status, now))
        else:
            self.finished_told = False
            self.done_since = self.saving_since = None
        # A run that raised nothing but got slower, collapsed or went NaN (analysis/anomalies.py): each once while
        # it lasts (one that went away and came back is told again), one a window.
        if status.state not in ("failed", "done"):
            anomalies = store.anomalies()
            self.anomalies_told &= {(anomaly.kind, anomaly.metric) for anomaly in anomalies}
            for anomaly in anomalies if self._due("anomaly", now) else ():
                if (anomaly.kind, anomaly.metric) not in self.anomalies_told:
                    self.anomalies_told.add((anomaly.kind, anomaly.metric))
                    events.append(self._event("anomaly", status, now, culprit=anomaly.text))
                    break
        quiet_since = max([self.started, *self.sent.values()])  # any message says it is alive
        if self.heartbeat and now - quiet_since >= self.heartbeat and not events:
            events.append(self._event("heartbeat", status, now))
        for event in events:
            self.sent[event.kind] = now
        return events

    def finish_due(self) -> float | None:
        """When the "finished" owed for a run seen done falls due (FINISH_WAIT, or SAVE_WAIT for a log that ends in
        its final save), None where none is owed: a replay checks then, inside a gap, not at the next stamp."""
        if self.finished_told or self.done_since is None:
            return None
        due = self.done_since + FINISH_WAIT
        return due if self.saving_since is None else max(due, self.saving_since + SAVE_WAIT)

    def failed_due(self, following: LogLine) -> float | None:
        """When a held "failed" falls due by BLOCK_WAIT: a replay checks then, inside the gap before `following`
        (review 26: a plain file's failure told 30 minutes late, at the next stamp, or never where the run went on).
        None where `following` comes within the wait or echoes the failure's words (that stamp is the failure's own,
        and its block goes on)."""
        if self.failed_told or self.failed_seen is None or (self.failed_text and self.failed_text in following.text):
            return None
        due = self.failed_seen + BLOCK_WAIT
        if following.seen <= due:
            return None
        self.failed_ended = True
        return due

    def _failure_block(self, status: PhaseStatus, now: float, final: bool) -> float | None:
        """None while the failure's own block may still be coming (the verdict waits for it), else the time to date
        the message by: the block's first line with a stamp of its own (Ray's `[… E pid tid] logging.cc:` echo of a
        `*** SIGSEGV received at time=N` line that has none; N is UTC, not the log's clock), else the failure's line."""
        said = next((e for e in status.evidence if e.claim == "failed"), None)
        tail = list(itertools.islice(reversed(self.store.lines), BLOCK_LINES + 1))[::-1]
        at = next((i for i in range(len(tail) - 1, -1, -1) if tail[i].source == (said and said.source)
                   and (tail[i].raw or tail[i].text)[:EVIDENCE_CHARS] == said.text), None) if said else None
        if at is None:
            return now  # (not among the last lines: its block is long over)
        failed = tail[at]
        if self.failed_seen is None:
            self.failed_seen = min(now, failed.seen) if self.replayed else now
            self.failed_ended = False
        limit = self.failed_seen + BLOCK_WAIT
        writer = (failed.source, failed.worker, failed.pid)
        after = tail[at + 1:]
        # A line with a stamp of its own past the wait ends the block, whoever wrote it (a plain file has one writer;
        # review 26, a failure told 30 minutes late), unless it echoes the failure's own words (that echo dates it).
        said_again = self.failed_text = failed.text.strip()
        block = [failed, *itertools.takewhile(
            lambda ln: (ln.source, ln.worker, ln.pid) == writer
            and not (ln.seen > limit and said_again not in ln.text and _stamped(ln)), after)]
        # (a replay's check inside a gap, for a stall, is no wait: the next line may still be the block's)
        waited = now >= limit and (self.failed_ended or not self.replayed)
        if len(block) > len(after) and len(after) < BLOCK_LINES and not final and not waited:
            return None  # nothing of another writer after it yet, and not BLOCK_LINES of its own: more may come
        stamped = next((ln for ln in block if _stamped(ln)), failed)
        return min(now, stamped.seen if stamped.seen <= limit or said_again in stamped.text else limit)

    def _due(self, kind: str, now: float) -> bool:
        last = self.sent.get(kind)
        return last is None or now - last >= self.every

    def _dump_ready(self, status: PhaseStatus, now: float) -> bool:
        """A stall is told with where its stack dump went: wait for the dump a few seconds, no longer."""
        if self.stall_seen is None:
            self.stall_seen = now
        if not self.wait_for_dump or now - self.stall_seen >= DUMP_WAIT:
            return True
        if not stack_targets(self.store.processes):
            return True  # no process to dump (a log followed from afar): nothing to wait for
        taken = self.store.stall_stacks
        return taken is not None and taken.stalled_since == status.last_progress

    def _event(self, kind: str, status: PhaseStatus, now: float, culprit: str = "",
               earlier: EarlierRun | None = None, ended: tuple[int, str] | None = None) -> AlertEvent:
        """`earlier`: the event is that earlier run's (its phase, its steps), not the run the status is about;
        `ended`: the job gkdtop ran exited (its exit says how, not the log's words)."""
        store = self.store
        framework = store.framework()
        seconds: float | None = None
        if kind == "stalled":
            seconds = status.stalled_for
        elif status.timeline:
            seconds = now - status.timeline[0].start
        hint = list(status.hint.causes) if status.hint and kind in ("stalled", "failed") else []
        dump = ""
        taken = store.stall_stacks
        if kind == "stalled" and taken is not None and taken.stalled_since == status.last_progress:
            dump = taken.path or (f"not saved: {taken.error}" if taken.error else "")
            colls = getattr(taken.report, "collectives", None)
            if not culprit and colls is not None and colls.sentence:
                culprit = colls.sentence
        if not culprit and kind in ("stalled", "failed"):
            culprit = status.failure if kind == "failed" and status.failure else _culprit(store, status, now)
        saving = kind == "finished" and status.final_save is not None
        if saving:  # a save that hangs would never say so: the message must not read as "all done" (audits 16, 18)
            culprit = status.worded_note
        clean = _last_lines(store, LAST_LINES) if kind != "heartbeat" else []
        # The phase replay's verdict names: the part of the step where the rules or the words place it (audit 17: an
        # alert said `FAILED in training loop` where replay said `FAILED, likely in checkpoint save`).
        if earlier is not None:  # (its lines are the next run's start now: where the file says it ended instead)
            where = f" at {shown(earlier.evidence.where())}" if earlier.evidence.line else ""
            return AlertEvent(kind, now, shown(job_name(store, self.job)), self.host, framework.label,
                              earlier.phase or "", "failed", None, _redacted(culprit, LINE_CHARS * 2), [],
                              [f"the job was started again{where}"], steps=earlier.steps,
                              interrupted=earlier.interrupted)
        return AlertEvent(kind, now, shown(job_name(store, self.job)), self.host, framework.label,
                          status.current or "", status.state, seconds,
                          _redacted(culprit, LINE_CHARS * 2), [_redacted(h, LINE_CHARS * 2) for h in hint],
                          clean, dump, status.steps_done, guess=status.worded is not None and bool(status.current),
                          saving=saving, interrupted=kind == "failed" and status.interrupted and ended is None,
                          short=ended_short(status) if kind == "finished" else "")


def _stamped(line: LogLine) -> bool:
    """The line carries a stamp of its own (a replay dates the others at the stamp before them)."""
    return parse_line(line.raw or line.text, line.source, line.seen).ts is not None


def _culprit(store: Store, status: PhaseStatus, now: float) -> str:
    """The one sentence that says who or where: a straggler, the stacks' phase, the last known line."""
    for straggler in store.stragglers:
        return straggler.sentence(now)
    found = store.stack_phase
    if found is not None and found.phase is not None:
        return f"the stacks say {found.phase} ({found.where})"
    if status.last_known:
        return f"last known line: {status.last_known}"
    return status.unsure


def _last_lines(store: Store, count: int) -> list[str]:
    """The newest `count` stored lines as written (Ray prefix included: it names the worker), redacted
    as one text with the lines before them, so a secret in a YAML block opened above is still seen;
    redacted whole, then cut."""
    kept = store.lines
    first = max(0, len(kept) - count - CONTEXT_LINES)
    text = "\n".join(kept[i].raw or kept[i].text for i in range(first, len(kept)))
    lines = redact_text(text)[0].split("\n")[-count:] if text else []
    return [shown(line[:LINE_CHARS]) for line in lines]


def _redacted(text: str, limit: int) -> str:
    """Redacted whole, then cut: a token cut in half is no longer a token the redactor knows."""
    return shown(redact_text(text)[0][:limit])
