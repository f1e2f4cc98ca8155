"""The analysis of a job's log lines, one object for live and replay: a matcher over every rule, the
phase engine, the findings, step statistics, errors and the clock.

Live, the store feeds it batches of parsed lines (and a flood's lines go through `keep`, which
drops only what no rule matches). After the fact, and for what a followed file held before gkdtop
opened it, `read_history` streams the file in chunks: the matcher scans each chunk in one pass and
only the lines it names are parsed. Both paths meet the same patterns with the same engine, so
`snapshot` and `replay` of one file state the same phases, steps and failure.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.findings import FindingsEngine
from gkdtop.analysis.lines import clean_line, collapse_lines, parse_line, split_prefix, strip_escapes
from gkdtop.analysis.matcher import Matcher, Pattern, compile_pattern
from gkdtop.analysis.phases import PhaseEngine
from gkdtop.analysis.profiles import ProfileDetector
from gkdtop.analysis.time import ClockSkew, parse_timestamp
from gkdtop.model import Finding, LogLine, PhaseStatus
from gkdtop.safeopen import open_regular

if TYPE_CHECKING:
    from gkdtop.config import Config

TRACEBACK = "Traceback (most recent call last)"
CHUNK = 4 << 20  # bytes of history scanned at a time
LOOK_AROUND = 8  # lines searched before an untimed line for the nearest timestamp (then the last one known)


@dataclass
class ErrorGroup:
    exception: str  # the final exception line, e.g. "ray.exceptions.ActorDiedError: The actor died ..."
    count: int
    first_line: int | None  # 1-based line number in its file, where known (history)
    source: str


@dataclass(slots=True)
class HistoryRange:
    """Bytes [start, end) of a file to analyse as already written (mtime: when it was last written)."""

    path: str
    start: int
    end: int
    mtime: float
    final: bool = True  # the file is finished: an unterminated last line counts


class Analysis:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.patterns: list[Pattern] = []
        self._ids: dict[str, int] = {}
        self.phases = PhaseEngine(config, self.register)
        self.findings_engine = FindingsEngine(config.findings, self.register)
        self.profiles = ProfileDetector(self.register)  # which framework: evidence from matched lines
        self.traceback_id = self.register(TRACEBACK.replace("(", r"\(").replace(")", r"\)"))
        self.exception_id, self.bar_id = self.phases.exception_id, self.phases.bar_id
        self.matcher = Matcher(self.patterns, message=lambda raw: split_prefix(raw)[1])
        self.window_ids, self.window = self.findings_engine.opens_window()
        # The last line some phase rule or finding knew: what follows it is shown as unrecognised
        # ("after `Building rollout for sglang`: 37 lines no rule knows"), not charged to a phase.
        self.recognised_ids = self.phases.rule_ids | self.findings_engine.match_ids
        self.recognised_at = 0  # its position, counted in lines_read
        self.recognised_text = ""
        self.skew = ClockSkew()
        self.errors: dict[str, ErrorGroup] = {}
        self._open_traceback: dict[str, int | None] = {}
        self.lines_read = 0  # lines that went through the matcher
        self.started: float | None = None  # the earliest and latest timestamps seen
        self.ended: float | None = None

    def register(self, pattern: str | Pattern) -> int:
        """The matcher id of a pattern (one id per distinct pattern text)."""
        text = pattern if isinstance(pattern, str) else pattern.text
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = len(self.patterns)
            # A text here is gkdtop's own pattern or one config.py has checked already: compiled on use.
            self.patterns.append(pattern if isinstance(pattern, Pattern)
                                 else compile_pattern(text, every_engine=False, lazy=True))
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
            if ids and not recognised.isdisjoint(ids):
                self.recognised_at, self.recognised_text = base + i + 1, line.text
            self._feed_one(line, self._time(line), ids, None)

    def feed_progress(self, line: LogLine) -> None:
        """The latest state of an unfinished tqdm line."""
        ids = self.matcher.scan_texts([line.text]).get(0, ())
        self.phases.feed_progress(line, self._time(line), ids)

    def note_skipped(self, t: float, lines: int = 0) -> None:
        """`lines` a flood sieve found no rule for, the last of them at `t`."""
        self.lines_read += lines
        self.phases.note_skipped(t)

    def keep(self, data: bytes, head: int) -> set[int]:
        """Of a flood's `\\n`-separated raw lines `data`, which of the first `head` some rule may need:
        every line a pattern matches (rules, idle lines, bars, exceptions) and the lines after one
        whose finding reads fields from the next lines. The rest match nothing: skipping them changes
        no verdict."""
        kept: set[int] = set()
        index = 0
        pos = 0
        window_ids, window = self.window_ids, self.window
        for start, _end, ids in self.matcher.scan(data):
            index += data.count(b"\n", pos, start)
            pos = start
            if index >= head:
                break
            kept.add(index)
            if window and not window_ids.isdisjoint(ids):
                kept.update(range(index + 1, min(index + 1 + window, head)))
        return kept

    def _observe_clock(self, lines: list[LogLine]) -> None:
        """The newest stamped live line of each source in a batch: the one that arrived closest to when
        it was written (a flood's sieve keeps it too, so sieving changes no estimate)."""
        newest: dict[str, LogLine] = {}
        for line in lines:
            if line.ts is not None and not line.backlog:
                newest[line.source] = line
        for line in newest.values():
            self.skew.observe(line.source, line.ts, line.seen)  # type: ignore[arg-type]

    def _time(self, line: LogLine) -> float:
        """The line's time on this machine's clock: its stamp, corrected for its source's offset."""
        ts = line.ts
        if ts is None:
            return line.seen
        ts = self.skew.correct(line.source, ts)
        return ts if ts <= line.seen + 5 else line.seen

    def _feed_one(self, line: LogLine, t: float, ids: Collection[int], number: int | None, step: Any = None) -> None:
        if line.ts is not None:
            self.started = t if self.started is None else min(self.started, t)
            self.ended = t if self.ended is None else max(self.ended, t)
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

    def read_history(self, ranges: Iterable[HistoryRange]) -> None:
        """What files held before they were followed (or all of them, for replay), in chunks: each
        chunk scanned once and only the lines the matcher names parsed (`_extract`), then fed in file
        order (`_apply`)."""
        for part in ranges:
            state = _HistoryClock(part.mtime)
            base = 0
            for extract in _extract_range(self, part, state):
                self._apply(extract, state, base)
                base += extract.lines
            self._finish(part, state)

    def _extract(self, path: str, data: bytes, state: _HistoryClock) -> _Extract:
        """One chunk of whole lines, scanned as a terminal shows them (escapes and `\\r` rewrites
        aside): the lines the matcher names are cleaned, confirmed, dated (their stamp, else the
        nearest one before them) and step lines parsed. Engines are fed by `_apply`, in order."""
        data = strip_escapes(data)
        if b"\r" in data:  # tqdm's rewrites: scan what a terminal shows (one pass, not a confirm per bar line)
            data = collapse_lines(data)
        out = _Extract(data.count(b"\n") + (0 if data.endswith(b"\n") else 1))
        confirm = self.matcher.confirm
        bar_only = [self.bar_id]  # a bar's redraws matter live (did it move?), not after the fact
        step_id, traceback_id = self.phases.step_id, self.traceback_id
        counted = at = 0
        plain_end = -1  # the end of the last line no rule names: its time is the run's progress
        plain_last = None  # the last stamp known there (not the chunk's last: idle lines after it have stamps too)
        previous = -1
        recognised, last_known = self.recognised_ids, None
        for start, end, ids in self.matcher.scan(data):
            if start > previous + 1:
                plain_end, plain_last = start - 1, state.last
            previous = end
            if ids == bar_only:
                plain_end, plain_last = end, state.last
                continue
            raw = data[start:end]
            line = parse_line(clean_line(raw), path, state.mtime)
            prefix = line.raw[: len(line.raw) - len(line.text)] if line.text is not line.raw else ""
            ids = confirm(line.text, ids, prefix, everything=len(line.raw) != len(raw) or not raw.isascii())
            if not ids:
                plain_end, plain_last = end, state.last
                continue
            number = None
            if traceback_id in ids:  # line numbers only where an error group will name one
                counted += data.count(b"\n", at, start)
                at = start
                number = counted + 1
            line.backlog = True
            if line.ts is None:
                ts = state.before(data, start)
                line.seen = ts if ts is not None else -1.0  # -1: no stamp yet (the first one after it, then)
            else:
                line.seen = line.ts
                state.saw(line.ts)
            out.records.append((line, ids, number, self.phases.parse_step(line.text) if step_id in ids else None))
            if not recognised.isdisjoint(ids):
                last_known = (start, line.text)
        if previous < len(data) - 1:
            plain_end, plain_last = len(data), state.last
        out.newest = state.before(data, len(data) + 1)  # when the run was last heard of
        if plain_end >= 0:
            out.progress = state.before(data, plain_end + 1, (plain_last,))
        out.tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :].rstrip(b"\n")
        if last_known is not None:
            out.recognised = (data.count(b"\n", 0, last_known[0]) + 1, last_known[1])
        return out

    def _apply(self, extract: _Extract, state: _HistoryClock, base: int) -> None:
        """An extract's lines into the engines, in file order; `base`: lines before its part."""
        for line, ids, number, step in extract.records:
            if number is not None:
                number += base
            if line.seen < 0:  # no stamp before it: it waits for the first one after it
                state.waiting.append((line, ids, number, step))
                continue
            for early, early_ids, early_number, early_step in state.waiting:  # the first stamp after them
                early.seen = line.seen
                self._feed_one(early, line.seen, early_ids, early_number, early_step)
            state.waiting.clear()
            self._feed_one(line, self._time(line), ids, number, step)
        if extract.newest is not None:
            self.ended = extract.newest if self.ended is None else max(self.ended, extract.newest)
            if self.started is None:
                self.started = extract.newest
        if extract.progress is not None:
            self.phases.note_skipped(extract.progress)  # lines no rule needs are progress, as they are live
        if extract.recognised is not None:
            self.recognised_at, self.recognised_text = self.lines_read + extract.recognised[0], extract.recognised[1]
        self.lines_read += extract.lines
        state.tail = extract.tail

    def _finish(self, part: HistoryRange, state: _HistoryClock) -> None:
        if state.newest is not None:
            self.skew.observe_written(part.path, state.newest, part.mtime)
        if state.tail:  # an untimed last line (a bar, a metrics line) was written when the file last was
            text = split_prefix(clean_line(state.tail))[1]
            ids = self.matcher.scan_texts([text]).get(0, ())
            if parse_timestamp(text, part.mtime) is None and self.phases.idle_ids.isdisjoint(ids):
                self.phases.note_skipped(part.mtime)
        for line, ids, number, step in state.waiting:  # no timestamp anywhere: the file's own time
            self._feed_one(line, part.mtime, ids, number, step)
        state.waiting.clear()

    # --- verdicts -------------------------------------------------------------------------------

    def status(self, now: float) -> PhaseStatus:
        status = self.phases.status(now)
        status.unrecognised = self.lines_read - self.recognised_at
        status.recognised_last = self.recognised_text
        if self.skew.offsets:
            source, offset = max(self.skew.offsets.items(), key=lambda kv: abs(kv[1]))
            status.clock_offset, status.clock_source = offset, source
        return status

    def findings(self) -> list[Finding]:
        return self.findings_engine.findings()

    def error_groups(self) -> list[ErrorGroup]:
        return sorted(self.errors.values(), key=lambda g: (g.source, g.first_line or 0))


@dataclass(slots=True)
class _Extract:
    """What `_extract` found in one chunk: the lines to feed, and the chunk's times."""

    lines: int  # lines in the chunk
    records: list[tuple[LogLine, list[int], int | None, Any]] = field(default_factory=list)
    newest: float | None = None  # the newest stamp near its end
    progress: float | None = None  # the time of its last line no rule names
    tail: bytes = b""  # its last line
    recognised: tuple[int, str] | None = None  # the last line a rule knew: its number in the chunk, its text


def _extract_range(analysis: Analysis, part: HistoryRange, state: _HistoryClock) -> Iterator[_Extract]:
    """The chunks of bytes [start, end) of a file, extracted one after another."""
    with open_regular(part.path) as fh:  # a FIFO at the path by now is an OSError, never a hang
        fh.seek(part.start)
        pos = part.start
        carry = b""
        while pos < part.end:
            data = fh.read(min(CHUNK, part.end - pos))
            if not data:
                break
            pos += len(data)
            data = carry + data
            cut = data.rfind(b"\n")
            if pos < part.end or (not part.final and cut >= 0):
                carry, data = data[cut + 1 :], data[: cut + 1]
            else:
                carry = b""
            if data:
                yield analysis._extract(part.path, data, state)


class _HistoryClock:
    """Times for untimed lines of a file read in chunks: the nearest stamped line before them."""

    def __init__(self, mtime: float) -> None:
        self.mtime = mtime
        self.last: float | None = None  # the last stamp seen, for lines whose neighbours have none
        self.newest: float | None = None
        self.waiting: list[tuple[LogLine, Any, int | None, Any]] = []  # untimed lines before the first stamp
        self.tail = b""  # the last line read

    def saw(self, ts: float) -> None:
        self.last = ts
        self.newest = ts if self.newest is None else max(self.newest, ts)

    def before(self, chunk: bytes, start: int, fallback: tuple[float | None] | None = None) -> float | None:
        """The stamp of the nearest line before offset `start` that has one (up to LOOK_AROUND lines),
        else `fallback` when given, else the last one seen."""
        end = start - 1
        for _ in range(LOOK_AROUND):
            if end <= 0:
                break
            begin = chunk.rfind(b"\n", 0, end) + 1
            head = chunk[begin : min(end, begin + 300)]
            if head:
                text = split_prefix(head.decode("utf-8", "replace"))[1]
                ts = parse_timestamp(text, self.mtime)
                if ts is not None:
                    self.saw(ts)
                    return ts
            end = begin - 1
        return self.last if fallback is None else fallback[0]


def file_range(path: str, final: bool = True) -> HistoryRange:
    """All of a file, as history (replay)."""
    info = os.stat(path)
    return HistoryRange(path, 0, info.st_size, info.st_mtime, final)
