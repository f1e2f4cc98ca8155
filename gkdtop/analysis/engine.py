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
import re
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, pairwise
from operator import eq, itemgetter
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.ahead import scan_ahead, usable_cores
from gkdtop.analysis.findings import FindingsEngine
from gkdtop.analysis.lines import (
    clean_line,
    collapse_lines,
    inner_message,
    message_start,
    parse_line,
    plain_ascii,
    split_prefix,
    strip_escapes,
)
from gkdtop.analysis.matcher import Matcher, Pattern, compile_pattern
from gkdtop.analysis.phases import STEP_BYTES_RE, TIMING_BYTES_RE, TIMING_VALUE, PhaseEngine
from gkdtop.analysis.profiles import ProfileDetector
from gkdtop.analysis.time import SKEW_MIN, TAIL_BYTES, TS_FIRST, ClockSkew, parse_timestamp, yearless_reference
from gkdtop.safeopen import open_regular

if TYPE_CHECKING:
    from gkdtop.analysis.rules import RuleSet
    from gkdtop.model import Finding, LogLine, PhaseStatus

TRACEBACK = "Traceback (most recent call last)"
CHUNK = 4 << 20  # bytes of history scanned at a time
LOOK_AROUND = 8  # lines searched before an untimed line for the nearest timestamp (then the last one known)
# Lines searched back from a chunk's end for when the run was last heard of: a log's last stamped
# lines often match no rule (vLLM's KV-cache sizes before a CUDA-graph bar), so its end is found by
# reading back to the last stamp, not taken from the last line a rule dated. Bounded: a chunk of
# unstamped output costs this many failed reads, not the chunk.
END_LOOK_BACK = 2000
FAST_HISTORY = True  # history's fast path for step, bar and repeated-start lines (off: every line the careful way)
RECENT_STEPS = 64  # a chunk's last step lines get their time (the Phases pane's recent steps)
_VALUE = TIMING_VALUE.encode()
_STAMPED = frozenset(c.encode() for c in TS_FIRST)  # first bytes a timestamped message can have


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
    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self.patterns: list[Pattern] = []
        self._ids: dict[str, int] = {}
        self.phases = PhaseEngine(rules, self.register)
        self.findings_engine = FindingsEngine(rules.findings, self.register)
        self.profiles = ProfileDetector(self.register)  # which framework: evidence from matched lines
        self.traceback_id = self.register(TRACEBACK.replace("(", r"\(").replace(")", r"\)"))
        self.exception_id, self.bar_id = self.phases.exception_id, self.phases.bar_id
        self.matcher = Matcher(self.patterns, message=lambda raw: split_prefix(raw)[1])
        self.window_ids, self.window = self.findings_engine.opens_window()
        # The last line some phase rule or finding knew: what follows it is shown as unrecognised
        # ("after `Building rollout for sglang`: 37 lines no rule knows"), not charged to a phase.
        self.recognised_ids = self.phases.rule_ids | self.findings_engine.match_ids
        self.recognised_at = 0  # its position, counted in lines_read
        # Lines with only these ids (and no stamp, no control bytes) are history's fast path (_fast_run).
        self.quick_ids = self.phases.quick_ids - self.findings_engine.match_ids - {self.traceback_id}
        self.recognised_text = ""
        self.skew = ClockSkew()
        self.errors: dict[str, ErrorGroup] = {}
        self._open_traceback: dict[str, int | None] = {}
        self.lines_read = 0  # lines that went through the matcher
        self._skeletons: dict[bytes, re.Pattern[bytes]] = {}  # a run's timing text between its values (_run_values)
        self._timing_names: dict[bytes, str] = {}  # timing_s/* keys as read from bytes, decoded once
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

    def read_history(self, ranges: Iterable[HistoryRange], ahead: bool = False) -> None:
        """What files held before they were followed (or all of them, for replay), in chunks: each
        chunk scanned once and only the lines the matcher names parsed (`_scan_chunk`, then
        `_date_chunk`), then fed in file order (`_apply`). `ahead`: a large file's chunks are scanned
        by a forked process while this one applies the chunk before (analysis/ahead.py; only where
        forking is safe, i.e. no other threads: `gkdtop replay`)."""
        written = None  # the newest mtime of the files read: nothing in them happened after it
        for part in ranges:
            written = part.mtime if written is None else max(written, part.mtime)
            state = _HistoryClock(_year_reference(part))
            base = 0
            if ahead and part.end - part.start > 2 * CHUNK and usable_cores() > 1:
                scanned = scan_ahead(_read_chunks(part), partial(self._scan_chunk, part.path))
            else:
                scanned = map(partial(self._scan_chunk, part.path), _read_chunks(part))
            for extract in scanned:
                self._sort_hits(extract)
                self._date_chunk(extract, state)
                self._apply(extract, state, base)
                base += extract.lines
            self._finish(part, state)
        if written is not None:
            self.phases.written_by(written + SKEW_MIN)

    def _scan_chunk(self, path: str, data: bytes) -> _Extract:
        """One chunk of whole lines, scanned as a terminal shows them (escapes and `\\r` rewrites
        aside): which lines the matcher names. Bytes only, no state: it may run in another process
        (`ahead`)."""
        data = strip_escapes(data)
        if b"\r" in data:  # tqdm's rewrites: scan what a terminal shows (one pass, not a confirm per bar line)
            data = collapse_lines(data)
        out = _Extract(data.count(b"\n") + (0 if data.endswith(b"\n") else 1), path)
        out.hits, out.plain = self.matcher.scan_plain(data)  # usually plain: then so is every line of it
        out.tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :].rstrip(b"\n")
        out.data = data
        return out

    def _sort_hits(self, extract: _Extract) -> None:
        """The run's bulk (step, bar and repeated-start lines) becomes fast records, read from the
        bytes; every other named line is left for `_date_chunk` to parse and date."""
        data = extract.data
        records, careful = extract.records, extract.careful
        confirm = self.matcher.confirm
        bar_only = [self.bar_id]  # a bar's redraws matter live (did it move?), not after the fact
        step_only = [self.phases.step_id]
        quick = self.quick_ids if FAST_HISTORY else frozenset()
        chunk_plain = extract.plain
        step_id = self.phases.step_id
        plain_end = -1  # the end of the last line no rule names: its time is the run's progress
        previous = -1
        recognised = self.recognised_ids
        for start, end, ids in extract.hits:
            if start > previous + 1:
                plain_end = start - 1
            previous = end
            if ids == bar_only:
                plain_end = end
                continue
            raw = data[start:end]
            if (quick.issuperset(ids) and (chunk_plain or plain_ascii(raw)) and not raw.startswith(b"(autoscaler")
                    and raw[(msg := message_start(raw)) : msg + 1] not in _STAMPED):  # (its time is its +XmYs)
                # The run's bulk: a metrics line per step, a rollout bar per step, each also the start
                # line of the phase the job is in. Read from the bytes (no LogLine) and dated only
                # where the time is used (see _fast_run).
                if ids != step_only:
                    ids = confirm(raw[msg:].decode("ascii"), ids, raw[:msg].decode("ascii"))
                step = metrics_at = None
                if step_id in ids:
                    m = STEP_BYTES_RE.search(raw, msg)
                    if m is None:  # the pattern matched only inside the Ray prefix
                        ids = [i for i in ids if i != step_id]
                    else:
                        step, metrics_at = int(m.group(1)), start + m.end()
                        extract.fast_steps += 1
                if not ids or ids == bar_only:
                    plain_end = end
                    continue
                records.append((None, ids, start, end, metrics_at, step))
                if not recognised.isdisjoint(ids):
                    extract.last_fast = start
                continue
            careful.append(len(records))
            records.append((start, end, ids))  # _date_chunk makes it (line, ids, number, step)
        if previous < len(data) - 1:
            plain_end = len(data)
        extract.plain_end = plain_end
        extract.hits = []

    def _date_chunk(self, extract: _Extract, state: _HistoryClock) -> None:
        """The named lines `_scan_chunk` left, in file order: cleaned, confirmed, dated (their stamp,
        else the nearest one before them) and step lines parsed; and the chunk's times."""
        state.new_chunk()
        data, records = extract.data, extract.records
        path, confirm = extract.path, self.matcher.confirm
        step_id, traceback_id, recognised = self.phases.step_id, self.traceback_id, self.recognised_ids
        counted = at = 0
        plain_end = extract.plain_end
        last_known = (extract.last_fast, None) if extract.last_fast >= 0 else None
        for k in extract.careful:
            start, end, ids = records[k]
            raw = data[start:end]
            line = parse_line(clean_line(raw), path, state.mtime)
            prefix = line.raw[: len(line.raw) - len(line.text)] if line.text is not line.raw else ""
            ids = confirm(line.text, ids, prefix, everything=len(line.raw) != len(raw) or not raw.isascii())
            if not ids:
                plain_end = max(plain_end, end)
                records[k] = None
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
                state.saw(line.ts, start)
            records[k] = (line, ids, number, self.phases.parse_step(line.text) if step_id in ids else None)
            if not recognised.isdisjoint(ids) and (last_known is None or start > last_known[0]):
                last_known = (start, line.text)
        if len(extract.careful) and None in records:
            extract.records = [record for record in records if record is not None]
        extract.newest = state.before(data, len(data) + 1, END_LOOK_BACK)  # when the run was last heard of
        if plain_end >= 0:
            extract.progress = state.before(data, plain_end + 1)
        if last_known is not None:
            text = last_known[1]
            if text is None:  # a fast step line: its message
                end = data.find(b"\n", last_known[0])
                text = split_prefix(clean_line(data[last_known[0] : end if end >= 0 else len(data)]))[1]
            newlines = extract.lines - (0 if data.endswith(b"\n") else 1)
            extract.recognised = (newlines - data.count(b"\n", last_known[0]) + 1, text)  # its line number

    def _apply(self, extract: _Extract, state: _HistoryClock, base: int) -> None:
        """An extract's lines into the engines, in file order; `base`: lines before its part."""
        records = extract.records
        fast_seen = i = 0
        while i < len(records):
            record = records[i]
            i += 1
            line, ids, number, step = record[:4]
            if line is None:
                run = i
                while run < len(records) and records[run][0] is None:
                    run += 1
                done, steps = self._fast_run(records[i - 1 : run], fast_seen, extract, state)
                fast_seen += steps
                if done:
                    i += done - 1
                    continue
                if record[5] is not None:
                    fast_seen += 1  # this one the careful way
                line, ids, number, step = self._parse_record(record, extract, state)
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
        extract.data = b""

    def _fast_run(self, run: list[tuple[Any, ...]], seen: int, extract: _Extract, state: _HistoryClock
                  ) -> tuple[int, int]:
        """Consecutive fast records (`seen`: the chunk's step records before them): how many were
        taken, from the first, and how many of those were step lines. Each one's effect on the phases
        is that of feed() (PhaseEngine.quick_start) up to the first that would change the phase; steps
        go in bulk; the time is read only for what keeps it: the sub-phase's start, the run's last
        line (activity, progress) and the steps that need one (_bulk_steps)."""
        if self.findings_engine.open.get(extract.path):
            return 0, 0  # a finding reads the lines after one that matched: one at a time, the careful way
        data = extract.data
        if state.before(data, run[0][2]) is None:
            return 0, 0  # no stamp yet: these wait for the first one after them, the careful way
        phases = self.phases
        quick_start = phases.quick_start
        bar_id = self.bar_id
        taken = 0
        inner_from = last_bar = last_other = None
        steps: list[tuple[Any, ...]] = []
        for record in run:
            moved = quick_start(record[1])
            if moved is None:
                break  # a real change of phase: the careful path
            if moved:
                inner_from = record
            if record[5] is not None:
                steps.append(record)
            if bar_id in record[1]:
                last_bar = record
            else:
                last_other = record
            taken += 1
        if not taken:
            return 0, 0
        if inner_from is not None:
            phases.inner_since = state.before(data, inner_from[2])
        if steps and not (len(steps) > 1 and self._bulk_steps(steps, seen, extract, state)):
            for index, record in enumerate(steps, seen + 1):
                self._fast_step(record, extract, state, index)
        if last_other is not None:
            phases.note_skipped(state.before(data, last_other[2]))  # type: ignore[arg-type]
        if last_bar is not None:  # did the bar move since the last one fed? (only the last is compared)
            line = self._parse_record(last_bar, extract, state)[0]
            t = line.seen
            phases.last_activity = t if phases.last_activity is None else max(phases.last_activity, t)
            if phases.bar_moved(line):
                phases.note_skipped(t)
        return taken, len(steps)

    def _bulk_steps(self, run: list[tuple[Any, ...]], seen: int, extract: _Extract, state: _HistoryClock) -> bool:
        """A run of step lines that each print the same `timing_s/*` keys (`step` among them), no step
        twice: parsed in one regex pass over their timing parts and added in C-level extends. False
        (nothing done) when the run is not like that."""
        data = extract.data
        find, rfind = data.find, data.rfind
        parts = []
        for _, _ids, _start, end, metrics_at, _step in run:
            at = find(b"timing_s/", metrics_at, end)
            if at < 0:
                return False
            parts.append(data[at : min(end, rfind(b"timing_s/", at, end) + 200)])
        first = list(TIMING_BYTES_RE.finditer(parts[0]))
        keys = [m.group(1) for m in first]
        stats = self.phases.stats
        steps = [record[5] for record in run]
        if (b"step" not in keys or len(set(keys)) != len(keys)
                or steps[0] == stats.last or any(map(eq, steps, steps[1:]))):
            return False
        joined = b"\n".join(parts)
        values = self._run_values(joined, parts, first)
        if values is None:
            pairs = TIMING_BYTES_RE.findall(joined)
            if len(pairs) != len(keys) * len(run) or list(map(itemgetter(0), pairs)) != keys * len(run):
                return False
            values = array("d", map(float, map(itemgetter(1), pairs)))
        total = extract.fast_steps
        # Dated: the chunk's last steps (the recent ones shown), the run's last (a step after it without
        # `timing_s/step` is spaced from it) and the run's first when it is the first of all.
        dated = list(range(max(0, min(total - RECENT_STEPS - seen, len(run) - 1)), len(run)))
        if stats.first is None and dated[0]:
            dated.insert(0, 0)
        times: dict[int, float] = {}
        for k in dated:
            t = state.before(data, run[k][2])
            if t is None:
                return False  # no stamp yet: these wait for the first one after them
            times[k] = t
        names = tuple(key.decode() for key in keys)
        last = len(run) - 1
        stats.add_run(steps, times.get(0), times.get(last), names, values)
        phases = self.phases
        for k in dated:
            phases.note_skipped(times[k])  # activity and progress, as feed() counts a step line
            shown = seen + k + 1 == total
            phases.note_step(steps[k], times[k], data[run[k][4] : run[k][3]].decode() if shown else None)
        return True

    def _run_values(self, joined: bytes, parts: list[bytes], first: list[re.Match[bytes]]) -> array | None:
        """The timing values of a run's step lines (`joined`: their timing parts), when each prints its
        keys with the very text between them that the first does (verl prints them together): one
        pattern of that text, values as its groups, twice as fast as reading (key, value) pairs.
        None when a line differs."""
        head = parts[0]
        if head.count(b"timing_s/") != len(first):  # a `timing_s/` that is not a key and value
            return None
        between = [head[first[0].start() : first[0].start(2)]]
        between += [head[a.end(2) : b.start(2)] for a, b in pairwise(first)]
        key = b"\0".join(between)
        pattern = self._skeletons.get(key)
        if pattern is None:
            if len(self._skeletons) > 100:
                self._skeletons.clear()
            pattern = self._skeletons[key] = re.compile(_VALUE.join(map(re.escape, between)) + _VALUE + rb"\b")
        rows = pattern.findall(joined)
        if len(rows) != len(parts) or joined.count(b"timing_s/") != len(first) * len(parts):
            return None
        return array("d", map(float, chain.from_iterable(rows) if len(first) > 1 else rows))

    def _fast_step(self, record: tuple[Any, ...], extract: _Extract, state: _HistoryClock, index: int) -> None:
        """One step line of a fast run (`index`: its place among the chunk's), when the run is not one
        _bulk_steps takes (keys that change, a step printed twice): dated, as feed() would."""
        _, _ids, start, end, metrics_at, step = record
        data = extract.data
        timings: dict[str, float] = {}
        at = data.find(b"timing_s/", metrics_at, end)
        if at >= 0:  # verl prints the timing keys together: read from the first to the last
            names = self._timing_names
            for key, value in TIMING_BYTES_RE.findall(data, at, min(end, data.rfind(b"timing_s/", at, end) + 200)):
                name = names.get(key)
                if name is None:
                    name = names[key] = key.decode()
                    if len(names) > 1000:
                        names.clear()
                timings[name] = float(value)
        phases = self.phases
        t = state.before(data, start)  # never None here: _fast_run saw a stamp before the run
        if t is not None:
            phases.note_skipped(t)  # activity and progress, as feed() counts a step line
        phases.add_step(step, t, timings, data[metrics_at:end].decode() if index == extract.fast_steps else None)

    def _parse_record(self, record: tuple[Any, ...], extract: _Extract, state: _HistoryClock
                      ) -> tuple[LogLine, list[int], int | None, Any]:
        """A fast record (a step, bar or repeated-start line) the careful way, as _date_chunk reads every
        other named line (a fast line has no stamp of its own: it is dated by the one before it)."""
        _, ids, start, end, _metrics_at, _step = record
        data = extract.data
        line = parse_line(clean_line(data[start:end]), extract.path, state.mtime)
        line.backlog = True
        ts = state.before(data, start)
        line.seen = ts if ts is not None else -1.0
        return line, ids, None, self.phases.parse_step(line.text) if self.phases.step_id in ids else None

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
    """What `_scan_chunk` and `_date_chunk` found in one chunk: the lines to feed, and the chunk's times."""

    lines: int  # lines in the chunk
    path: str = ""
    data: bytes = b""  # the chunk as scanned, while its records are applied
    fast_steps: int = 0  # how many fast records, (None, ids, start, end, metrics_at, step), are step lines
    hits: list[tuple[int, int, list[int]]] = field(default_factory=list)  # the matcher's scan
    plain: bool = True  # ASCII without control bytes: every line as cleaning leaves it
    records: list[Any] = field(default_factory=list)
    careful: list[int] = field(default_factory=list)  # where in `records` the lines _date_chunk parses are
    plain_end: int = -1  # the end of its last line no rule names (-1: none)
    last_fast: int = -1  # the start of its last fast record some rule knows (-1: none)
    newest: float | None = None  # the newest stamp near its end
    progress: float | None = None  # the time of its last line no rule names
    tail: bytes = b""  # its last line
    recognised: tuple[int, str] | None = None  # the last line a rule knew: its number in the chunk, its text


def _read_chunks(part: HistoryRange) -> Iterator[bytes]:
    """The bytes [start, end) of a file in chunks of whole lines; at the end of a range that is not
    `final` (a file still being written) an unterminated last line is left for later, unless the
    range's last read holds no line break at all."""
    with open_regular(part.path) as fh:  # a FIFO at the path by now is an OSError, never a hang
        fd = fh.fileno()
        pos = part.start
        carry = b""  # a line longer than a chunk, so far
        while pos < part.end:
            data = os.pread(fd, min(CHUNK, part.end - pos), pos)
            if not data:
                break
            pos += len(data)
            if carry:
                data, carry = carry + data, b""
            cut = data.rfind(b"\n")
            more = pos < part.end
            if more or (not part.final and cut >= 0):
                if cut < 0:
                    carry = data
                    continue
                if cut + 1 < len(data):
                    if more:  # the partial last line: read again with the next chunk (no copy)
                        pos -= len(data) - cut - 1
                    data = data[: cut + 1]  # (at the end of a file not final: not history yet)
            yield data


class _HistoryClock:
    """Times for untimed lines of a file read in chunks: the nearest stamped line before them.

    _date_chunk reads stamps in file order and marks where it found them; _apply dates a fast line
    later, after the whole chunk was read, so where no stamp is near it the fallback is the last
    one marked before its offset, not the chunk's last one."""

    def __init__(self, mtime: float) -> None:
        self.mtime = mtime
        self.last: float | None = None  # the last stamp seen, for lines whose neighbours have none
        self.newest: float | None = None
        self.waiting: list[tuple[LogLine, Any, int | None, Any]] = []  # untimed lines before the first stamp
        self.tail = b""  # the last line read
        self._before_chunk: float | None = None  # `last` when the current chunk began
        self._marks: list[int] = []  # offsets in the current chunk where a stamp was found, ascending
        self._marked: list[float] = []  # ... and those stamps

    def new_chunk(self) -> None:
        self._before_chunk = self.last
        self._marks.clear()
        self._marked.clear()

    def saw(self, ts: float, at: int | None = None) -> None:
        self.newest = ts if self.newest is None else max(self.newest, ts)
        if at is None or not self._marks or at > self._marks[-1]:
            self.last = ts
            if at is not None:
                self._marks.append(at)
                self._marked.append(ts)

    def before(self, chunk: bytes, start: int, lines: int = LOOK_AROUND) -> float | None:
        """The stamp of the nearest line before offset `start` that has one (up to `lines` lines),
        else the last one seen before it."""
        end = start - 1
        for _ in range(lines):
            if end <= 0:
                break
            begin = chunk.rfind(b"\n", 0, end) + 1
            head = chunk[begin : min(end, begin + 300)]
            if head:
                text = inner_message(split_prefix(head.decode("utf-8", "replace"))[1])
                ts = parse_timestamp(text, self.mtime)
                if ts is not None:
                    self.saw(ts, begin)
                    return ts
            end = begin - 1
        if self._marks and start <= self._marks[-1]:  # dated after the chunk was read: the mark before it
            found = bisect_left(self._marks, start)
            return self._marked[found - 1] if found else self._before_chunk
        return self.last


def _year_reference(part: HistoryRange) -> float:
    """What places the range's year-less stamps: its mtime, or its own dates' year for a log copied
    long after its run (analysis/time.yearless_reference reads the range's last TAIL_BYTES, and its
    first ones: a verl log's only full date is often Ray's start line, its end all vLLM's `06-08 …`)."""
    try:
        with open_regular(part.path) as fh:
            head = b""
            if part.end - part.start > TAIL_BYTES:
                fh.seek(part.start)
                head = (fh.read(TAIL_BYTES) or b"") + b"\n"
            fh.seek(max(part.start, part.end - TAIL_BYTES))
            tail = head + (fh.read(min(TAIL_BYTES, part.end - part.start)) or b"")
    except OSError:
        return part.mtime  # reading the range itself will say why
    return yearless_reference(tail, part.mtime)


def file_range(path: str, final: bool = True) -> HistoryRange:
    """All of a file, as history (replay)."""
    info = os.stat(path)
    return HistoryRange(path, 0, info.st_size, info.st_mtime, final)
