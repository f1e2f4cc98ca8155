"""The phase engine: log lines in, a timeline and a verdict (running / stalled / done / failed) out.

Silence is measured from the lines' own time (their timestamp, or the file's mtime for lines
read at start-up), so a job that went quiet ten minutes before gkdtop opened is STALLED at once.
"""

from __future__ import annotations

import re
from collections import deque

from gkdtop.collectors.findings import unnamed
from gkdtop.collectors.prefilter import Prefiltered
from gkdtop.config import Config, PhaseRule
from gkdtop.model import Hint, LogLine, PhaseSpan, PhaseStatus, StepInfo

# Bounded digits: int() raises past 4,300 digits, which a junk line must not make the feed do.
STEP_RE = re.compile(r"\bstep:(\d{1,18})\s+-\s")
METRIC_RE = re.compile(r"([\w./@-]+):\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)\b")
# A tqdm bar's elapsed/rate part changes every redraw even when nothing moves; drop it to compare.
TQDM_CLOCK_RE = re.compile(r"\[[^\]]*\]|\d+(?:\.\d+)?\s*(?:s/it|it/s|examples/s)")
EXCEPTION_RE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt)\b")
# Lines holding these always reach feed(), even in a flood (collectors/prefilter.FloodSieve): tqdm
# bars (their redraws are compared) and the exception line that ends a traceback.
FLOOD_MARKERS = ["it/s", "s/it", "examples/s", "Error", "Exception", "Exit", "Interrupt"]
MAX_SPANS = 500
MAX_STEPS = 2000


class PhaseEngine:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rules = config.phases
        self.stall_after = config.stall_after
        self.fail_re = re.compile(config.fail_pattern)
        self.idle_re = (Prefiltered(re.compile("|".join(f"(?:{p})" for p in config.idle_patterns)))
                        if config.idle_patterns else None)
        # One search decides whether a line needs the per-rule checks at all: in a flood most don't.
        parts = [STEP_RE.pattern, config.fail_pattern]
        for rule in self.rules:
            parts += [p.pattern for p in (rule.start, rule.done, rule.fail) if p is not None]
        self.any_re = Prefiltered(re.compile("|".join(f"(?:{unnamed(p)})" for p in parts)))
        self.timeline: deque[PhaseSpan] = deque(maxlen=MAX_SPANS)
        self.first_spans: list[PhaseSpan] = []  # the start-up sequence survives the bound above
        self.current: PhaseRule | None = None
        self.inner: PhaseRule | None = None  # a per-step sub-phase of `current` (its rule's `inner`)
        self.inner_since: float | None = None
        self.order = {rule.name: i for i, rule in enumerate(self.rules)}
        self.last_progress: float | None = None
        self.last_activity: float | None = None
        self.failure = ""
        self._want_exception_line = False
        self.steps: deque[StepInfo] = deque(maxlen=MAX_STEPS)
        self._bar_keys: dict[str, str] = {}

    # --- input ----------------------------------------------------------------------------------

    def feed(self, line: LogLine) -> None:
        t = line.time
        self.last_activity = t if self.last_activity is None else max(self.last_activity, t)
        text = line.text
        if self._want_exception_line and EXCEPTION_RE.match(text):
            self.failure = text.strip()
            self._want_exception_line = False
        if self._is_progress(line):
            self._progress(t)
        if not self.any_re.search(text):
            return
        if (m := STEP_RE.search(text)) is not None:
            self._step(int(m.group(1)), text[m.end() :], t)
        for rule in self.rules:
            if rule.done is not None and rule.done.search(text):
                if not self._late(line, rule):
                    self._done(rule, t)
                return
            if rule.start.search(text):
                if not self._late(line, rule):
                    self._start(rule, t)
                return
        if self.fail_re.search(text) or (self.current and self.current.fail and self.current.fail.search(text)):
            self._fail(text, t)

    def note_skipped(self, t: float) -> None:
        """Lines a flood sieve ruled out (no rule, idle pattern or bar in them) up to time `t`: all
        that feed() would have done with them is count them as activity and progress."""
        self.last_activity = t if self.last_activity is None else max(self.last_activity, t)
        self._progress(t)

    def feed_progress(self, line: LogLine) -> None:
        """An unfinished tqdm line changed: progress only if its counter moved, not its clock."""
        self.last_activity = line.time if self.last_activity is None else max(self.last_activity, line.time)
        if self._is_progress(line):
            self._progress(line.time)
            if self.current is None or self.current.start.search(line.text) is None:
                for rule in self.rules:
                    if rule.start.search(line.text):
                        self._start(rule, line.time)
                        break

    def _is_progress(self, line: LogLine) -> bool:
        text = line.text
        if self.idle_re is not None and self.idle_re.search(text):
            return False
        # A bar's redraw that changed nothing is no progress. (`|`-only lines a flood sieve dropped
        # count as progress: a flood is activity.)
        if "it/s" in text or "examples/s" in text or "s/it" in text or "|" in text:
            key = TQDM_CLOCK_RE.sub("", text)
            bar = line.source + line.worker + text.split(":", 1)[0]
            if self._bar_keys.get(bar) == key:
                return False
            self._bar_keys[bar] = key
            if len(self._bar_keys) > 1000:
                self._bar_keys.clear()
        return True

    def _progress(self, t: float) -> None:
        if self.last_progress is None or t > self.last_progress:
            self.last_progress = t

    def _open(self, name: str, t: float) -> PhaseSpan:
        span = PhaseSpan(name=name, start=t)
        self.timeline.append(span)
        if len(self.first_spans) < 20:
            self.first_spans.append(span)
        return span

    def _close_current(self, t: float) -> None:
        if self.timeline and self.timeline[-1].end is None:
            span = self.timeline[-1]
            span.end = max(t, span.start)
            if span.status == "running":
                span.status = "done"

    def _start(self, rule: PhaseRule, t: float) -> None:
        self.failure = ""
        self._want_exception_line = False
        if self._is_inner(rule):
            if self.inner is not rule:
                self.inner, self.inner_since = rule, t
            return
        self.inner = None
        if self.current is rule and self.timeline and self.timeline[-1].end is None:
            return  # a repeated start line inside the same phase
        self._close_current(t)
        self.current = rule
        span = self._open(rule.name, t)
        if rule.terminal:
            span.end, span.status = t, "done"

    def _late(self, line: LogLine, rule: PhaseRule) -> bool:
        """A line of an earlier phase stamped before the current phase began: Ray's log monitor delivers
        workers' lines after the driver's, so the file's order is not the order things happened in."""
        span = self.timeline[-1] if self.timeline else None
        return (line.ts is not None and span is not None and rule is not self.current
                and self._earlier_than_current(rule) and line.ts < span.start)

    def _is_inner(self, rule: PhaseRule) -> bool:
        outer = self.current
        return (outer is not None and rule is not outer and rule.name in outer.inner
                and bool(self.timeline) and self.timeline[-1].end is None)

    def _earlier_than_current(self, rule: PhaseRule) -> bool:
        return self.current is not None and self.order.get(rule.name, 0) < self.order.get(self.current.name, 0)

    def _done(self, rule: PhaseRule, t: float) -> None:
        if self._is_inner(rule) or self.inner is rule:
            self.inner = None  # a sub-phase ended; its phase goes on
            self.failure = ""
            return
        if self._earlier_than_current(rule) and any(s.name == rule.name for s in self.timeline):
            return  # a slower rank's "done" for a phase the job has already moved past
        last = self.timeline[-1] if self.timeline else None
        if self.current is rule and last is not None and last.end is not None and last.name == rule.name:
            last.end = max(last.end, t)  # a second "done" line for the same phase (per rank, then driver)
            return
        if self.current is not rule or last is None or last.end is not None:
            # The start line was missed (or came before the backlog): record the phase at this point.
            self._close_current(t)
            self.current = rule
            self._open(rule.name, t)
        self._close_current(t)
        self.failure = ""

    def _fail(self, text: str, t: float) -> None:
        if not self.timeline or self.timeline[-1].end is not None:
            self._open(self.current.name if self.current else "(before any phase)", t)
        self.timeline[-1].status = "failed"
        if not self.failure:
            self.failure = text.strip()
            self._want_exception_line = text.lstrip().startswith("Traceback")

    def _step(self, step: int, rest: str, t: float) -> None:
        metrics: dict[str, float] = {}
        for key, value in METRIC_RE.findall(rest):
            try:
                metrics[key] = float(value)
            except ValueError:
                continue
        if self.steps and self.steps[-1].step == step:
            self.steps[-1] = StepInfo(step=step, time=t, metrics=metrics)
        else:
            self.steps.append(StepInfo(step=step, time=t, metrics=metrics))

    # --- output ---------------------------------------------------------------------------------

    def status(self, now: float) -> PhaseStatus:
        span = self.timeline[-1] if self.timeline else None
        rule = self.current
        expected = rule
        within = None
        since = span.start if span else None
        if rule is not None and span is not None and span.end is not None and not rule.terminal:
            expected = self._next_rule(rule) or rule  # finished a phase; the next one is what waits
        elif self.inner is not None and rule is not None:
            within, since = rule.name, self.inner_since
            rule = expected = self.inner
        stall_after = (expected.stall_after if expected and expected.stall_after else None) or self.stall_after
        hint = expected.hint if expected is not None else None

        if rule is not None and rule.terminal:
            state = "done"
        elif span is not None and span.status == "failed":
            state = "failed"
        elif self.last_progress is None:
            state = "waiting"
        elif now - self.last_progress > stall_after:
            state = "stalled"
        else:
            state = "running"
        stalled_for = now - self.last_progress if state == "stalled" and self.last_progress else None
        last_step = self.steps[-1] if self.steps else None
        return PhaseStatus(
            current=rule.name if rule else None,
            state=state,
            since=since,
            last_progress=self.last_progress,
            stalled_for=stalled_for,
            stall_after=stall_after,
            hint=hint if state in ("stalled", "failed") else None,
            failure=self.failure if state == "failed" else "",
            steps_done=len({s.step for s in self.steps}),
            last_step=last_step,
            step_time=self._step_time(),
            timeline=self.spans(),
            expected=expected.name if expected is not rule and expected else None,
            within=within,
        )

    def spans(self) -> list[PhaseSpan]:
        """The start-up sequence plus the most recent spans, without repeats."""
        recent = list(self.timeline)
        seen = {id(s) for s in recent}
        return [s for s in self.first_spans if id(s) not in seen] + recent

    def _next_rule(self, rule: PhaseRule) -> PhaseRule | None:
        try:
            i = self.rules.index(rule)
        except ValueError:
            return None
        return self.rules[i + 1] if i + 1 < len(self.rules) else None

    def _step_time(self) -> float | None:
        if not self.steps:
            return None
        last = self.steps[-1]
        if "timing_s/step" in last.metrics:
            return last.metrics["timing_s/step"]
        if len(self.steps) >= 2:
            prev = self.steps[-2]
            if last.step > prev.step:
                return (last.time - prev.time) / (last.step - prev.step)
        return None


def hint_text(hint: Hint | None) -> list[str]:
    if hint is None:
        return []
    return [f"cause: {c}" for c in hint.causes] + [f"try: {a}" for a in hint.actions]
