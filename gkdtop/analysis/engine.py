"""The analysis of a job's log lines, one object for live and replay: a matcher over every rule, the
phase engine, the findings, step statistics, errors and the clock.

Live, the store feeds it batches of parsed lines (and a flood's lines go through `keep`, which
drops only what no rule matches). After the fact, and for what a followed file held before gkdtop
opened it, `read_history` streams the file in chunks: the matcher scans each chunk in one pass and
only the lines it names are parsed. Both paths meet the same patterns with the same engine, so
`snapshot` and `replay` of one file state the same phases, steps and failure.

The modules, by job: engine (this one: the Analysis, the live feed, the verdicts), history (files
read in chunks, and its fast path for a run's bulk) and history_clock (dating a file's untimed
lines as its chunks go by).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.curves import LINE_BY_LINE
from gkdtop.analysis.findings import FindingsEngine
from gkdtop.analysis.history import HistoryReader
from gkdtop.analysis.lines import label_colon, split_prefix
from gkdtop.analysis.matcher import Matcher, Pattern, compile_pattern
from gkdtop.analysis.phases import ACTOR_INIT, PhaseEngine
from gkdtop.analysis.profiles import ProfileDetector
from gkdtop.analysis.time import ClockSkew

if TYPE_CHECKING:
    from gkdtop.analysis.anomalies import AnomalyLimits
    from gkdtop.analysis.history import HistoryRange
    from gkdtop.analysis.profiles import Framework
    from gkdtop.analysis.rules import RuleSet
    from gkdtop.model import Anomaly, Finding, LogLine, PhaseStatus

TRACEBACK = "Traceback (most recent call last)"
DAY = 86400.0

# What verl prints as it builds any role's model (the reference's, the critic's, the actor's), naming none.
ROLELESS_LOAD_RE = re.compile(r"\bModel config after override\b")


@dataclass
class ErrorGroup:
    exception: str  # the final exception line, e.g. "ray.exceptions.ActorDiedError: The actor died ..."
    count: int
    first_line: int | None  # 1-based line number in its file, where known (history)
    source: str


class Analysis:
    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self.patterns: list[Pattern] = []
        self._ids: dict[str, int] = {}
        self._registered: Counter[int] = Counter()  # how often each id was asked for (by every engine)
        self.phases = PhaseEngine(rules, self.register)
        self.findings_engine = FindingsEngine(rules.findings, self.register)
        self.profiles = ProfileDetector(self.register)  # which framework: evidence from matched lines
        self.traceback_id = self.register(TRACEBACK.replace("(", r"\(").replace(")", r"\)"))
        self.exception_id = self.phases.exception_id
        # A hint's evidence no other rule reads: one line of it per scan is enough (it is remembered once seen).
        once = frozenset(i for i, n in self.phases.seen_registered.items() if self._registered[i] == n)
        self.matcher = Matcher(self.patterns, message=lambda raw: split_prefix(raw)[1], once=once,
                               markers=LINE_BY_LINE)
        self.window_ids, self.window = self.findings_engine.opens_window()
        # Lines whose only effect is a bar or a phase's start (history's fast lines, steps aside): in a flood, a run of
        # them with the same ids is read at its first and last line per Ray prefix (keep).
        self.repeat_ids = (self.phases.quick_ids - {self.phases.step_id, self.traceback_id}
                           - self.findings_engine.match_ids - self.window_ids)
        # The last line some phase rule or finding knew: what follows it is shown as unrecognised
        # ("after `Building rollout for sglang`: 37 lines no rule knows"), not charged to a phase.
        self.recognised_ids = self.phases.rule_ids | self.findings_engine.match_ids
        self.recognised_at = 0  # its position, counted in lines_read
        self.recognised_text = ""
        self.skew = ClockSkew()
        self.errors: dict[str, ErrorGroup] = {}
        self._open_traceback: dict[str, int | None] = {}
        self.lines_read = 0  # lines that went through the matcher
        self.lines_in: dict[str, tuple[int, int]] = {}  # a file history read from its start: (its lines, its bytes)
        self.read_bottom_up: set[str] = set()  # files history read bottom up: they list their newest line first
        self.started: float | None = None  # the earliest and latest timestamps seen
        self.ended: float | None = None
        self.history = HistoryReader(self, rules.max_line)  # files as already written: analysis/history.py
        self._anomalies: tuple[tuple[int, int, AnomalyLimits], list[Anomaly]] | None = None

    def register(self, pattern: str | Pattern) -> int:
        """The matcher id of a pattern (one id per distinct pattern text)."""
        text = pattern if isinstance(pattern, str) else pattern.text
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = len(self.patterns)
            # A text here is gkdtop's own pattern or one config.py has checked already: compiled on use.
            self.patterns.append(pattern if isinstance(pattern, Pattern)
                                 else compile_pattern(text, every_engine=False, lazy=True))
        self._registered[found] += 1
        return found

    # --- live -----------------------------------------------------------------------------------

    def feed(self, lines: list[LogLine]) -> None:
        """Complete lines as they arrive (messages: the Ray prefix already split off)."""
        if not lines:
            return
        hits = self.matcher.scan_texts([line.text for line in lines])
        base = self.lines_read
        self.lines_read += len(lines)
        self._observe_clock(lines)
        recognised = self.recognised_ids
        for i, line in enumerate(lines):
            ids = hits.get(i, ())
            if not ids:
                if not self._feed_unmatched(line):
                    self.feed_one(line, self.local_time(line), ids, None)
                continue
            if not recognised.isdisjoint(ids):
                self.recognised_at, self.recognised_text = base + i + 1, line.text
            self.feed_one(line, self.local_time(line), ids, None)

    def _feed_unmatched(self, line: LogLine) -> bool:
        """feed_one for a line no pattern matched, the short way: it only dates the run and counts as progress
        (PhaseEngine.feed_unmatched). False, doing nothing, where an engine reads such lines too: a finding's window
        open in its source (the lines after its match), a bar's redraw, a worker not seen before."""
        if self.findings_engine.open.get(line.source) or not self.profiles.seen(line.worker):
            return False
        t = self.local_time(line)
        if not self.phases.feed_unmatched(line, t):
            return False
        if line.ts is not None:
            self._stamped(t)
        return True

    def _stamped(self, t: float) -> None:
        """A stamped line at `t`: the run's start and end as read so far. A stamp a day or more before the start is
        another clock (a year-less glog stamp of some library), not the run starting earlier: lines delivered late are
        minutes behind."""
        if self.started is None or self.started - DAY < t < self.started:
            self.started = t
        self.ended = t if self.ended is None else max(self.ended, t)

    def feed_progress(self, line: LogLine) -> None:
        """The latest state of an unfinished tqdm line."""
        ids = self.matcher.scan_texts([line.text]).get(0, ())
        self.phases.feed_progress(line, self.local_time(line), ids)

    def note_skipped(self, t: float, lines: int = 0) -> None:
        """`lines` a flood sieve found no rule for, the last of them at `t`."""
        self.lines_read += lines
        self.phases.note_skipped(t)

    def keep(self, data: bytes) -> tuple[list[tuple[int, int, int]], int]:
        """Of a flood's older lines `data` (`\\n`-separated raw bytes), the ones some rule may need, as (index, start,
        end) in order, and how many lines `data` holds: every line a pattern matches (rules, idle lines, bars,
        exceptions) and the lines after one whose finding reads fields from the next lines. The rest match nothing:
        skipping them changes no verdict. Nor do the middle lines of a run of repeats (a bar's redraws, an engine's
        `Processed prompts`: the same `repeat_ids`, no other rule's line between): each Ray prefix's first and last
        of a run are kept (a worker's first line names it; the last is the bar's state), an engine's line all."""
        kept: dict[int, tuple[int, int]] = {}
        index = 0
        pos = 0
        window_ids, window = self.window_ids, self.window
        phases = self.phases
        met = {i for i, text in phases.seen_ids.items() if text in phases.seen_matched}  # evidence already read
        repeat_ids = self.repeat_ids
        run_ids: list[int] | None = None  # the ids of the run of repeats under way
        run_last: dict[bytes, int | None] = {}  # its prefixes: the index of each one's last line kept after its first
        followers: set[int] = set()  # lines kept as a finding's window (never dropped as a repeat)
        size = len(data)
        for start, end, ids in self.matcher.scan(data):
            index += data.count(b"\n", pos, start)
            pos = start
            if phases.only_evidence(ids):  # the first line of each kind, once
                if met.issuperset(ids):
                    continue
                met.update(ids)
            # (a line PhaseEngine._engine may read an engine's id from, `Engine 001:` or SGLang's `DP1`, is kept: its
            # generation start marks that engine busy)
            if repeat_ids.issuperset(ids) and (
                    data.find(b"Engine ", start, end) < 0 and data.find(b"DP", start, end) < 0):
                head = start  # (past srun's task label, `0: (WorkerDict pid=…)`: the label is the prefix's too)
                if (colon := label_colon(data, start)) > 0:
                    head = colon + 2
                close = data.find(b") ", head, end) if data[head:head + 1] == b"(" else -1
                prefix = data[start:close + 2] if close >= 0 else b""
                if len(ids) > 1:
                    ids = sorted(ids)  # (Hyperscan reports a line's hits that end together in no set order)
                if ids != run_ids:
                    run_ids, run_last = ids, {prefix: None}
                elif prefix not in run_last:
                    run_last[prefix] = None
                else:
                    before = run_last[prefix]
                    if before is not None and before not in followers:
                        del kept[before]
                    run_last[prefix] = index
            else:
                run_ids = None
            kept[index] = (start, end)
            if window and not window_ids.isdisjoint(ids):
                after = end
                for following in range(index + 1, index + 1 + window):
                    if after >= size:
                        break
                    found = data.find(b"\n", after + 1)
                    line_end = size if found < 0 else found
                    kept.setdefault(following, (after + 1, line_end))
                    followers.add(following)
                    after = line_end
        count = index + data.count(b"\n", pos) + 1
        return [(i, start, end) for i, (start, end) in sorted(kept.items())], count

    def _observe_clock(self, lines: list[LogLine]) -> None:
        """The newest stamped live line of each source in a batch: the one that arrived closest to when
        it was written (a flood's sieve keeps it too, so sieving changes no estimate)."""
        newest: dict[str, LogLine] = {}
        for line in lines:
            if line.ts is not None and not line.backlog:
                newest[line.source] = line
        for line in newest.values():
            self.skew.observe(line.source, line.ts, line.seen)  # type: ignore[arg-type]

    def local_time(self, line: LogLine) -> float:
        """The line's time on this machine's clock: its stamp, corrected for its source's offset."""
        ts = line.ts
        if ts is None:
            return line.seen
        ts = self.skew.correct(line.source, ts)
        return ts if ts <= line.seen + 5 else line.seen

    def feed_one(self, line: LogLine, t: float, ids: Collection[int], number: int | None, step: Any = None) -> None:
        """One line into every engine at `t`, live or history (`number`: its line in its file, where an
        error group will name it)."""
        if line.ts is not None:
            self._stamped(t)
        self.phases.feed(line, t, ids, step)
        self.findings_engine.feed(line, t, ids)
        self.profiles.feed(line, ids)
        if not ids:
            return
        source = line.source
        if self.traceback_id in ids:
            self._open_traceback[source] = number
        elif self.exception_id in ids and source in self._open_traceback:
            key = line.text.strip()[:300]
            group = self.errors.get(key)
            if group is None:
                if len(self.errors) < 200:
                    self.errors[key] = ErrorGroup(key, 1, self._open_traceback[source], source)
            else:
                group.count += 1
            del self._open_traceback[source]

    # --- history --------------------------------------------------------------------------------

    def read_history(self, ranges: Iterable[HistoryRange], ahead: bool = False, live: bool = False) -> None:
        """What files held before they were followed (`live`), or all of them, for replay: analysis/history.py."""
        self.history.read(ranges, ahead, live)

    # --- verdicts -------------------------------------------------------------------------------

    def status(self, now: float, framework: Framework | None = None, tail: Sequence[str] = (),
               numbers: Sequence[int | None] = ()) -> PhaseStatus:
        """The phase verdict; its hint holds only lines true of `framework` (default: the log's own).
        `tail`: the log's own last lines as written, oldest first (the store's newest; replay's file's last):
        the verdict quotes the last where lines no rule knows follow the last one a rule knew, and reads their
        words where no rule placed the run that far (analysis/wordphase.py); `numbers`: their line numbers, where
        known (the evidence of a guess from them cites its line)."""
        name = (framework if framework is not None else self.profiles.result()).name
        status = self.phases.status(now, self.profiles.rl(name), list(tail), numbers)
        last_line = next((line for line in reversed(tail) if line.strip()), "")
        if status.hint is not None and status.hint.only:
            status.hint = status.hint.for_framework(self.profiles.lineage(name))
        if not self.profiles.rl(name) and not self.phases.rollout_in_step:  # no actor, no rollout: plain names
            status.rename(self._plain_names(status))
        elif self._roleless_load(status):
            # verl builds each role's model (reference, critic, actor) with the same print: a load it began names no
            # role, so it is a model's load, not the actor's (audit 23: `ended in actor init` while the reference
            # loaded). Once a line names the actor, its name stands.
            status.rename({k: v for k, v in self._plain_names(status).items() if k.endswith(ACTOR_INIT)})
        status.unrecognised = self.lines_read - self.recognised_at
        status.recognised_last = self.recognised_text
        line = last_line.strip()
        if line and status.unrecognised > 0 and split_prefix(line)[1].strip() != self.recognised_text.strip():
            status.unrecognised_last = line[:300]
        if self.skew.offsets:
            source, offset = max(self.skew.offsets.items(), key=lambda kv: abs(kv[1]))
            status.clock_offset, status.clock_source = offset, source
        return status

    def _roleless_load(self, status: PhaseStatus) -> bool:
        """The actor init span the verdict is in was begun by a print every role's model build makes."""
        span = status.timeline[-1] if status.timeline else None
        return (span is not None and span.name == ACTOR_INIT and status.current == ACTOR_INIT
                and not self.phases.actor_named
                and span.evidence is not None and ROLELESS_LOAD_RE.search(span.evidence.text) is not None)

    def _plain_names(self, status: PhaseStatus) -> dict[str, str]:
        """The plain name of each phase that has one (phases.yaml `plain`: `actor init` -> `model load`), unless a
        line that started it names it in its own words (`Initializing Actor Worker`, the probe's `phase 'actor
        init' START`): a log of no RL trainer is not told of an actor or a rollout it never mentioned."""
        names = {rule.name: rule.plain for rule in self.phases.rules if rule.plain}
        cited = [*status.evidence, *(s.evidence for s in status.timeline if s.evidence is not None)]
        for e in cited:
            for name in list(names):
                word = re.escape(name.split()[0])
                if e.claim.startswith(name + " ") and re.search(f"(?<![a-z]){word}", e.text.lower()):
                    del names[name]
        # and the failure's placeholder after one (`after rollout init`): `engine init`, then `after engine init`
        return {**names, **{f"after {name}": f"after {plain}" for name, plain in names.items()}}

    def anomalies(self, limits: AnomalyLimits) -> list[Anomaly]:
        """The run's slow failures (analysis/anomalies.py), scanned again only when a step landed."""
        stats = self.phases.stats  # (a log whose only progress is its bar: the bar's values move the key)
        key = (stats.count, self.phases.curves.count, stats.bar_added, limits)
        if self._anomalies is None or self._anomalies[0] != key:
            from gkdtop.analysis.anomalies import scan

            self._anomalies = (key, scan(self.phases.stats, self.phases.curves, limits))
        return self._anomalies[1]

    def findings(self, framework: Framework | None = None) -> list[Finding]:
        """The findings, each fix with the sentence for `framework` (default: the log's own) where its signature
        has one (`fix_for`): a framework's option names only on its own logs."""
        found = self.findings_engine.findings()
        by_name = self.findings_engine.by_name
        if not any(by_name[f.name].fix_for for f in found if f.name in by_name):
            return found
        lineage = self.profiles.lineage((framework if framework is not None else self.profiles.result()).name)
        out = []
        for f in found:
            sig = by_name.get(f.name)
            extra = [text for name, text in sig.fix_for.items() if name in lineage] if sig is not None else []
            out.append(replace(f, fix=f"{f.fix} {' '.join(extra)}") if extra else f)
        return out

    def error_groups(self) -> list[ErrorGroup]:
        return sorted(self.errors.values(), key=lambda g: (g.source, g.first_line or 0))

