"""History: what files held before gkdtop followed them (or all of them, for replay), read into the
same Analysis the live lines go through, so `snapshot` and `replay` of one file state the same
phases, steps and failure.

A file is streamed in chunks, never loaded: the matcher scans each chunk in one pass and only the
lines it names are looked at. Most are parsed, dated and fed one at a time (the careful path); the
run's bulk (in verl's shape, a rollout bar and a metrics line per step) is read from the bytes, its
steps added in bulk and its time read only where it is kept (the fast path; docs/performance.md,
"Where replay's time goes"). `FAST_HISTORY = False` sends every line the careful way, and
tests/test_replay.py holds the two equal.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, pairwise
from operator import eq, itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from gkdtop.analysis.ahead import scan_ahead, usable_cores
from gkdtop.analysis.history_clock import HistoryClock, day_shift
from gkdtop.analysis.lines import (
    DIGITS,
    RELATIVE_STAMPED,
    STAMP_FIRST,
    clean_line,
    collapse_lines,
    collapse_unfinished,
    dayless_stamp,
    may_carry_stamp,
    message_start,
    parse_line,
    plain_ascii,
    raw_stamp_time,
    split_prefix,
    strip_escapes,
    utf8_cut,
)
from gkdtop.analysis.phases import (
    STEP_BYTES_RE,
    TIMING_BYTES_RE,
    TIMING_VALUE,
    VALIDATION_KEYS,
    count_said,
    stamp_bound,
)
from gkdtop.analysis.time import TAIL_BYTES, yearless_reference
from gkdtop.format import COPIED_OFFSET
from gkdtop.safeopen import open_regular

if TYPE_CHECKING:
    from gkdtop.analysis.findings import FindingsEngine
    from gkdtop.analysis.matcher import Matcher
    from gkdtop.analysis.phases import PhaseEngine
    from gkdtop.analysis.time import ClockSkew
    from gkdtop.model import LogLine

CHUNK = 4 << 20  # bytes of history scanned at a time
# Lines searched back from a chunk's end for when the run was last heard of: a log's last stamped
# lines often match no rule (vLLM's KV-cache sizes before a CUDA-graph bar), so its end is found by
# reading back to the last stamp, not taken from the last line a rule dated. Bounded: a chunk of
# unstamped output costs this many failed reads, not the chunk.
END_LOOK_BACK = 2000
MTIME_BEHIND = 3600.0  # a followed file's last stamp this far before its mtime is on another clock
FAST_HISTORY = True  # history's fast path for step, bar and repeated-start lines (off: every line the careful way)
RECENT_STEPS = 64  # a chunk's last step lines get their time (the Phases pane's recent steps)
_VALUE = TIMING_VALUE.encode()
VALIDATION_BYTES = tuple(key.encode() for key in VALIDATION_KEYS)  # a record that may be a validation's (no step)


@dataclass(slots=True)
class HistoryRange:
    """Bytes [start, end) of a file to analyse as already written (mtime: when it was last written)."""

    path: str
    start: int
    end: int
    mtime: float
    final: bool = True  # the file is finished: an unterminated last line counts
    newest_first: bool = False  # its lines are listed newest first (a log search's export): read bottom up


class Target(Protocol):
    """What history is read into: engine.Analysis as the reader uses it (the engines it drives, the
    counters it advances, `feed_one` for each line). A protocol, not an import: the Analysis owns its
    reader, and an import back would be a cycle."""

    matcher: Matcher
    phases: PhaseEngine
    findings_engine: FindingsEngine
    skew: ClockSkew
    traceback_id: int
    recognised_ids: frozenset[int]
    lines_read: int
    lines_in: dict[str, tuple[int, int]]
    read_bottom_up: set[str]
    recognised_at: int
    recognised_text: str
    started: float | None
    ended: float | None

    def feed_one(self, line: LogLine, t: float, ids: Collection[int], number: int | None, step: Any = None
                 ) -> None: ...

    def local_time(self, line: LogLine) -> float: ...


class HistoryReader:
    """Files as already written, into one analysis, in file order. One per Analysis: the timing text
    of a run's step lines, learnt from one file, serves the next (`_run_values`)."""

    def __init__(self, analysis: Target, max_line: int = 16384) -> None:
        self.analysis = analysis
        # At most max_line characters of a line are kept, as the follower keeps them live: the bytes of
        # that many in any UTF-8 (`cap`); a longer line is read past, never held (_read_chunks).
        self.max_line = max_line
        self.cap = max(max_line * 4, 4096)
        self.matcher, self.phases = analysis.matcher, analysis.phases
        # Lines with only these ids (and no stamp, no control bytes) are history's fast path (_fast_run).
        self.quick_ids = analysis.phases.quick_ids - analysis.findings_engine.match_ids - {analysis.traceback_id}
        self._skeletons: dict[bytes, re.Pattern[bytes]] = {}  # a run's timing text between its values (_run_values)
        self._timing_names: dict[bytes, str] = {}  # timing_s/* keys as read from bytes, decoded once
        self._flip = 0  # a newest-first file's lines + 1: a line's number in it is this minus its place in reading

    def _shown(self, number: int | None) -> int | None:
        """A line's number in its file, from its place in reading (they differ in a file read bottom up)."""
        return self._flip - number if self._flip and number is not None else number

    def read(self, ranges: Iterable[HistoryRange], ahead: bool = False, live: bool = False) -> None:
        """What files held before they were followed (or all of them, for replay), in chunks: each
        chunk scanned once and only the lines the matcher names parsed (`_scan_chunk`, then
        `_date_chunk`), then fed in file order (`_apply`). `ahead`: a large file's chunks are scanned
        by a forked process while this one applies the chunk before (analysis/ahead.py; only where
        forking is safe, i.e. no other threads: `gkdtop replay`). `live`: files being followed now, whose
        mtime is when their last line was written (not so for a log copied or downloaded to replay)."""
        written = None  # the newest mtime of the files read: nothing in them happened after it
        for part in ranges:
            try:
                self._read_part(part, ahead, live)
            except OSError:
                if not live:
                    raise  # replay says which file it could not read
                continue  # gone or unreadable since it was listed: its live lines still count
            written = part.mtime if written is None else max(written, part.mtime)
        if written is not None:
            self.phases.written_by(written)  # nothing in a file happened after it was last written

    def _read_part(self, part: HistoryRange, ahead: bool, live: bool) -> None:
        """One file's range, chunk by chunk, dated by its own clock (HistoryClock)."""
        reference, last_stamp = _clock_of(part)
        if live and last_stamp is not None and part.mtime - last_stamp >= MTIME_BEHIND:
            # The file was last written when its last line was: stamps that many hours behind
            # its mtime are on another clock (a zone, a year placed wrong), measured and shown.
            self.analysis.skew.observe_written_behind(part.path, last_stamp, part.mtime)
        state = HistoryClock(reference, self.analysis.skew.offsets.get(part.path, 0.0),
                             None if part.newest_first else _dayless_start(part, reference))
        base = 0
        self._flip = 0
        if part.newest_first:  # small (newest_first): read once, whole, its lines turned round
            with open_regular(part.path) as fh:
                data = _reversed_lines(fh.read(part.end - part.start), self.cap)
            self._flip = data.count(b"\n") + 1  # its lines, an unterminated last one included, + 1
            chunks = _whole_lines(data)
            self.analysis.read_bottom_up.add(part.path)
        else:
            chunks = _read_chunks(part, self.cap)
        if ahead and part.end - part.start > 2 * CHUNK and usable_cores() > 1:
            scanned = scan_ahead(chunks, partial(self._scan_chunk, part.path))
        else:
            scanned = map(partial(self._scan_chunk, part.path), chunks)
        for extract in scanned:
            self._sort_hits(extract)
            self._date_chunk(extract, state)
            self._apply(extract, state, base)
            base += extract.lines
        if part.start == 0 and not part.newest_first:
            self.analysis.lines_in[part.path] = (base, part.end)  # the tail's line numbers count from here
        self._finish(part, state)

    def _scan_chunk(self, path: str, data: bytes) -> _Extract:
        """One chunk of whole lines, scanned as a terminal shows them (escapes and `\\r` rewrites
        aside): which lines the matcher names. Bytes only, no state: it may run in another process
        (`ahead`)."""
        data = strip_escapes(data)
        if b"\r" in data:  # tqdm's rewrites: scan what a terminal shows (one pass, not a confirm per bar line)
            data = collapse_lines(data)
        out = _Extract(path)
        out.hits, out.plain, marked = self.matcher.scan_plain(data)  # usually plain: then so is every line of it
        out.cleared = bool(self.matcher.markers) and not marked  # (the markers are curves.LINE_BY_LINE)
        out.tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1 :].rstrip(b"\n")
        out.data = data
        out.count_lines()  # (the scan's half of the work is the lighter since HEAD_END: here, not in the applier)
        return out

    def _sort_hits(self, extract: _Extract) -> None:
        """The run's bulk (step, bar and repeated-start lines) becomes fast records, read from the
        bytes; every other named line is left for `_date_chunk` to parse and date."""
        data = extract.data
        records, careful = extract.records, extract.careful
        confirm_ascii = self.matcher.confirm_ascii
        bar_only = [self.phases.bar_id]  # a bar's redraws matter live (did it move?), not after the fact
        step_only = [self.phases.step_id]
        quick = self.quick_ids if FAST_HISTORY else frozenset()
        chunk_plain = extract.plain
        step_id = self.phases.step_id
        stamp_first, digits = STAMP_FIRST, DIGITS
        plain_end = -1  # the end of the last line no rule names: its time is the run's progress
        previous = -1
        recognised = self.analysis.recognised_ids
        cap = self.cap
        first_bar = True  # the chunk's first bar is read: where no phase is known, its description names one
        last_bar = None  # and the last before each line read the careful way: where the loop's bar was, its pace
        only_evidence, evidence = self.phases.only_evidence, self.phases.seen_ids
        evidence_sent: set[tuple[int, ...]] = set()  # a hint's evidence (Hint.seen): once per chunk, not per line
        for start, end, ids in extract.hits:
            if start > previous + 1:
                plain_end = start - 1
            previous = end
            if ids == bar_only:
                plain_end = end
                if first_bar:
                    first_bar = False
                    careful.append(len(records))
                    records.append((start, end, ids))
                else:
                    last_bar = (start, end, ids)
                continue
            if ids[0] in evidence and only_evidence(ids):  # the first test inline: this runs for every hit
                plain_end = end
                if tuple(ids) not in evidence_sent:
                    evidence_sent.add(tuple(ids))
                    if last_bar is not None:
                        careful.append(len(records))
                        records.append(last_bar)
                        last_bar = None
                    careful.append(len(records))
                    records.append((start, end, ids))
                continue
            raw = data[start:end]
            # A line that may carry its own stamp is read the careful way (lines.may_carry_stamp; its
            # common tests inline here: this runs for every step and bar line of a run).
            if (quick.issuperset(ids) and end - start <= cap and (chunk_plain or plain_ascii(raw))
                    and not raw.startswith(RELATIVE_STAMPED)
                    and raw[(msg := message_start(raw)) : msg + 1] not in stamp_first and raw[:1] not in digits
                    and (raw.find(b": ", msg + 1, msg + 130) < 0 or not may_carry_stamp(raw, msg))):
                # The run's bulk: a metrics line per step, a rollout bar per step, each also the start
                # line of the phase the job is in. Read from the bytes (no LogLine) and dated only
                # where the time is used (see _fast_run).
                if ids != step_only:
                    ids = confirm_ascii(raw, msg, ids)
                step = metrics_at = None
                m = STEP_BYTES_RE.search(raw, msg) if step_id in ids else None
                if step_id in ids and m is None:  # the pattern matched only inside the Ray prefix
                    ids = [i for i in ids if i != step_id]
                elif m is not None and not raw.startswith(VALIDATION_BYTES, m.end()):
                    step, metrics_at = int(m.group(1)), start + m.end()
                    extract.fast_steps += 1
                if m is None or step is not None:  # (maybe a validation's record, no step: the careful way)
                    if not ids or ids == bar_only:
                        plain_end = end
                        continue
                    records.append((None, ids, start, end, metrics_at, step))
                    if not recognised.isdisjoint(ids):
                        extract.last_fast = start
                    continue
            if last_bar is not None:
                careful.append(len(records))
                records.append(last_bar)
                last_bar = None
            careful.append(len(records))
            records.append((start, end, ids))  # _date_chunk makes it (line, ids, number, step)
        if last_bar is not None:
            careful.append(len(records))
            records.append(last_bar)
        if previous < len(data) - 1:
            plain_end = len(data)
        extract.plain_end = plain_end
        extract.hits = []

    def _date_chunk(self, extract: _Extract, state: HistoryClock) -> None:
        """The named lines `_scan_chunk` left, in file order: cleaned, confirmed, dated (their stamp,
        else the nearest one before them) and step lines parsed; and the chunk's times."""
        state.new_chunk()
        data, records = extract.data, extract.records
        path, confirm = extract.path, self.matcher.confirm
        step_id = self.phases.step_id
        recognised = self.analysis.recognised_ids
        plain_end = extract.plain_end
        last_known = (extract.last_fast, None) if extract.last_fast >= 0 else None
        for k in extract.careful:
            start, end, ids = records[k]
            raw = data[start:end]
            line = parse_line(self._clean(raw), path, state.mtime)
            if line.ts is not None and state.dayless_start is not None:
                line.ts = state.chained(line.ts)
            prefix = line.raw[: len(line.raw) - len(line.text)] if line.text is not line.raw else ""
            ids = confirm(line.text, ids, prefix, everything=len(line.raw) != len(raw) or not raw.isascii())
            if not ids:
                plain_end = max(plain_end, end)
                records[k] = None
                continue
            number = extract.number_at(start)  # every named line's: evidence cites it
            line.backlog = True
            if line.ts is None:
                ts = state.before(data, start)
                line.seen = ts if ts is not None else -1.0  # -1: no stamp yet (the first one after it, then)
            else:
                line.seen = line.ts + state.offset
                state.saw(line.seen, start, line.raw)
            records[k] = (line, ids, number, self.phases.parse_step(line.text) if step_id in ids else None)
            if not recognised.isdisjoint(ids) and (last_known is None or start > last_known[0]):
                last_known = (start, line.text)
        if len(extract.careful) and None in records:
            extract.records = [record for record in records if record is not None]
        extract.newest = state.before(data, len(data) + 1, END_LOOK_BACK)  # when the run was last heard of
        extract.oldest = state.first(data, END_LOOK_BACK)  # when it began, though no rule named its first lines
        if plain_end >= 0:
            plain_end = self._said_since(data, plain_end, path)
            extract.progress = state.before(data, plain_end + 1)
            begin = data.rfind(b"\n", 0, max(plain_end, 1) - 1) + 1  # that line, the evidence of its progress
            last = data[begin : min(plain_end, begin + 4096)].rstrip(b"\r\n")
            extract.progress_line = (extract.number_at(begin), last)
        if last_known is not None:
            text = last_known[1]
            if text is None:  # a fast step line: its message
                end = data.find(b"\n", last_known[0])
                text = split_prefix(self._clean(data[last_known[0] : end if end >= 0 else len(data)]))[1]
            newlines = extract.lines - (0 if data.endswith(b"\n") else 1)
            extract.recognised = (newlines - data.count(b"\n", last_known[0]) + 1, text)  # its line number

    def _apply(self, extract: _Extract, state: HistoryClock, base: int) -> None:
        """An extract's lines into the engines, in file order; `base`: lines before its part."""
        analysis, records = self.analysis, extract.records
        fast_seen = i = 0
        while i < len(records):
            record = records[i]
            i += 1
            line, ids, number, step = record[:4]
            if line is None:
                run = i
                while run < len(records) and records[run][0] is None:
                    run += 1
                done, steps = self._fast_run(records[i - 1 : run], fast_seen, extract, state, base)
                fast_seen += steps
                if done:
                    i += done - 1
                    continue
                if record[5] is not None:
                    fast_seen += 1  # this one the careful way
                line, ids, number, step = self._parse_record(record, extract, state)
            if number is not None:
                number += base
                line.number = self._shown(number)
            if line.seen < 0:  # no stamp before it: it waits for the first one after it
                state.waiting.append((line, ids, number, step))
                continue
            for early, early_ids, early_number, early_step in state.waiting:  # the first stamp after them
                early.seen, early.undated = line.seen, True
                analysis.feed_one(early, line.seen, early_ids, self._shown(early_number), early_step)
            state.waiting.clear()
            analysis.feed_one(line, analysis.local_time(line), ids, self._shown(number), step)
        if extract.newest is not None:
            analysis.ended = extract.newest if analysis.ended is None else max(analysis.ended, extract.newest)
            if analysis.started is None:
                analysis.started = extract.newest
        if extract.oldest is not None:
            analysis.started = extract.oldest if analysis.started is None else min(analysis.started, extract.oldest)
            if state.oldest_line is None and state.oldest_at is not None:  # found in this chunk
                state.oldest_line = base + extract.number_at(state.oldest_at)
        if extract.progress is not None:  # lines no rule needs are progress, as they are live
            line = None
            if extract.progress_line is not None:
                number, raw = extract.progress_line
                line = parse_line(clean_line(raw), extract.path, extract.progress)
                line.number = self._shown(base + number)
            self.phases.note_skipped(extract.progress, line)
        if extract.recognised is not None:
            analysis.recognised_at = analysis.lines_read + extract.recognised[0]
            analysis.recognised_text = extract.recognised[1]
        analysis.lines_read += extract.lines
        state.tail = extract.tail
        extract.data = b""

    def _finish(self, part: HistoryRange, state: HistoryClock) -> None:
        if state.newest is not None:
            self.analysis.skew.observe_written(part.path, state.newest, part.mtime)
        if state.tail:  # an untimed last line (a bar, a metrics line) was written when the file last was
            raw = self._clean(state.tail)
            ids = self.matcher.scan_texts([split_prefix(raw)[1]]).get(0, ())
            # Its own stamp, read as every line's is (` [2024-03-30 14:22:03] iteration 52/…` has one).
            if raw_stamp_time(raw, part.mtime) is None and self.phases.idle_ids.isdisjoint(ids):
                self.phases.note_skipped(part.mtime)
        for line, ids, number, step in state.waiting:  # no named line had a stamp after them
            t = part.mtime  # no stamp anywhere: the file's own time
            if state.oldest is not None:  # the file's first stamp: the first after a line above it (a bound),
                t = state.oldest  # else the nearest before one further down than the look-back reached
                line.undated = state.oldest_line is None or number is None or number < state.oldest_line
            line.seen = t
            self.analysis.feed_one(line, t, ids, self._shown(number), step)
        state.waiting.clear()
        for before, after in state.jumps:
            self.phases.note_zone_jump(before, after)

    def _said_since(self, data: bytes, end: int, path: str) -> int:
        """The end of the first of the lines before `end` (the chunk's last one no rule knows) that say the same count
        again (PhaseEngine._said_again): its repeats are no progress. `end` itself where that line counts nothing."""
        begin = data.rfind(b"\n", 0, max(end, 1) - 1) + 1
        said = count_said(parse_line(self._clean(data[begin:end]), path, 0.0))
        if said is None:
            return end
        self.phases.note_count(said)  # (the live lines after it compare with it)
        for _ in range(1000):
            if begin <= 0:
                break
            before = data.rfind(b"\n", 0, begin - 1) + 1
            text = self._clean(data[before : begin - 1])
            other = count_said(parse_line(text, path, 0.0))
            if other is None and not self._idle(text):
                break  # (review 26: an idle line between two repeats leaves the count in place, as it does live)
            if other is not None and other != said:
                break
            if other is not None:
                end = begin - 1
            begin = before
        return end

    def _idle(self, text: str) -> bool:
        """A line an idle rule names (`Waiting for … to be ready`): no progress, live or here."""
        ids = self.matcher.scan_texts([split_prefix(text)[1]]).get(0, ())
        return not self.phases.idle_ids.isdisjoint(ids)

    def _clean(self, raw: bytes) -> str:
        """clean_line, of at most max_line characters (as the follower delivers a line live)."""
        return clean_line(raw[: self.cap])[: self.max_line]

    # --- the fast path: runs of step, bar and repeated-start lines, read from the bytes ---------

    def _fast_run(self, run: list[tuple[Any, ...]], seen: int, extract: _Extract, state: HistoryClock,
                  base: int = 0) -> tuple[int, int]:
        """Consecutive fast records (`seen`: the chunk's step records before them): how many were
        taken, from the first, and how many of those were step lines. Each one's effect on the phases
        is that of feed() (PhaseEngine.quick_start) up to the first that would change the phase; steps
        go in bulk; the time is read only for what keeps it: the sub-phase's start, the run's last
        line (activity, progress) and the steps that need one (_bulk_steps)."""
        if self.analysis.findings_engine.open.get(extract.path):
            return 0, 0  # a finding reads the lines after one that matched: one at a time, the careful way
        data = extract.data
        if state.before(data, run[0][2]) is None:
            return 0, 0  # no stamp yet: these wait for the first one after them, the careful way
        phases = self.phases
        quick_start = phases.quick_start
        bar_id = self.phases.bar_id
        taken = 0
        inner_from = last_bar = last_other = loop_bar = None
        loop_id = phases.start_of.get(phases.loop_name() or "")
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
                if loop_id in record[1]:
                    loop_bar = record
            else:
                last_other = record
            taken += 1
        if not taken:
            return 0, 0
        if inner_from is not None:  # the sub-phase began at that line's own time (_parse_record dates it)
            line = self._parse_record(inner_from, extract, state)[0]
            phases.inner_since = line.seen if line.seen >= 0 else None
            phases.inner_bound = stamp_bound(line)
        if steps and not (len(steps) > 1 and self._bulk_steps(steps, seen, extract, state)):
            for index, record in enumerate(steps, seen + 1):
                self._fast_step(record, extract, state, index)
        if last_other is not None:
            line, _, number, _ = self._parse_record(last_other, extract, state)  # its time, and the evidence
            if number is not None:
                line.number = self._shown(base + number)
            if line.seen >= 0:
                phases.note_skipped(line.seen, line)
        if loop_bar is not None and loop_bar is not last_bar:  # the loop's own bar between a step's part's bars
            # (EasyR1's `Running step` among each rollout's `Processed prompts`): where the loop is
            phases.bar_moved(self._parse_record(loop_bar, extract, state)[0])
        if last_bar is not None:  # did the bar move since the last one fed? (only the last is compared)
            line = self._parse_record(last_bar, extract, state)[0]
            t = line.seen
            phases.last_activity = t if phases.last_activity is None else max(phases.last_activity, t)
            if phases.bar_moved(line):
                phases.note_skipped(t)
        return taken, len(steps)

    def _bulk_steps(self, run: list[tuple[Any, ...]], seen: int, extract: _Extract, state: HistoryClock) -> bool:
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
        self.phases.curves.add_bytes(steps, [data[record[4] : record[3]] for record in run], extract.cleared)
        phases = self.phases
        phases.stepped_to(steps[last])  # (a run that went on after an error it survived: a Ray OOM kill it retried)
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

    def _fast_step(self, record: tuple[Any, ...], extract: _Extract, state: HistoryClock, index: int) -> None:
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
        phases.curves.add_bytes((step,), (data[metrics_at:end],))
        t = state.before(data, start)  # never None here: _fast_run saw a stamp before the run
        if t is not None:
            phases.note_skipped(t)  # activity and progress, as feed() counts a step line
        phases.add_step(step, t, timings, data[metrics_at:end].decode() if index == extract.fast_steps else None)

    def _parse_record(self, record: tuple[Any, ...], extract: _Extract, state: HistoryClock
                      ) -> tuple[LogLine, list[int], int | None, Any]:
        """A fast record (a step, bar or repeated-start line) the careful way, as _date_chunk reads every
        other named line (a fast line is dated by the stamp before it, unless parsing finds its own)."""
        _, ids, start, end, _metrics_at, _step = record
        data = extract.data
        line = parse_line(self._clean(data[start:end]), extract.path, state.mtime)
        line.backlog = True
        if line.ts is not None:  # a stamp the fast scan did not see (vLLM's, behind a Ray actor's prefix)
            line.seen = line.ts + state.offset
            state.saw(line.seen, start, line.raw)  # as _date_chunk keeps a stamped line's
        else:
            ts = state.before(data, start)
            line.seen = ts if ts is not None else -1.0
        step = self.phases.parse_step(line.text) if self.phases.step_id in ids else None
        return line, ids, extract.number_at(start), step


@dataclass(slots=True)
class _Extract:
    """What `_scan_chunk` and `_date_chunk` found in one chunk: the lines to feed, and the chunk's times."""

    path: str = ""
    lines: int = 0  # lines in the chunk (count_lines)
    data: bytes = b""  # the chunk as scanned, while its records are applied
    fast_steps: int = 0  # how many fast records, (None, ids, start, end, metrics_at, step), are step lines
    hits: list[tuple[int, int, list[int]]] = field(default_factory=list)  # the matcher's scan
    plain: bool = True  # ASCII without control bytes: every line as cleaning leaves it
    cleared: bool = False  # holds none of curves.LINE_BY_LINE
    records: list[Any] = field(default_factory=list)
    careful: list[int] = field(default_factory=list)  # where in `records` the lines _date_chunk parses are
    plain_end: int = -1  # the end of its last line no rule names (-1: none)
    last_fast: int = -1  # the start of its last fast record some rule knows (-1: none)
    newest: float | None = None  # the newest stamp near its end
    oldest: float | None = None  # its file's first stamp
    progress: float | None = None  # the time of its last line no rule names
    progress_line: tuple[int, bytes] | None = None  # that line: its number in the chunk, its bytes
    counted: tuple[int, int] = (0, 0)  # (offset, newlines before it): number_at counts on from there
    marks: list[int] = field(default_factory=list)  # newlines before each MARK bytes, and in all (_newline_marks)

    def count_lines(self) -> None:
        self.marks = _newline_marks(self.data)
        self.lines = self.marks[-1] + (0 if self.data.endswith(b"\n") else 1)

    def number_at(self, start: int) -> int:
        """The number in the chunk of the line at `start` (1-based), counted from the last one asked
        or the mark nearest before it, whichever is closer: only the bytes between are read."""
        at, newlines = self.counted
        mark = min(start // MARK, len(self.marks) - 2)
        if mark >= 0 and abs(start - mark * MARK) < abs(start - at):
            at, newlines = mark * MARK, self.marks[mark]
        if start >= at:
            newlines += self.data.count(b"\n", at, start)
        else:
            newlines -= self.data.count(b"\n", start, at)
        self.counted = (start, newlines)
        return newlines + 1
    tail: bytes = b""  # its last line
    recognised: tuple[int, str] | None = None  # the last line a rule knew: its number in the chunk, its text


MARK = 256 << 10  # bytes between the newline counts a chunk's scan keeps (_Extract.number_at)


def _newline_marks(data: bytes) -> list[int]:
    """The newlines in data[:k * MARK] for each k, then in all of it: one pass, as counting them did."""
    marks = [0]
    count = data.count
    for at in range(0, len(data), MARK):
        marks.append(marks[-1] + count(b"\n", at, at + MARK))
    if len(marks) == 1:
        marks.append(0)
    return marks


def _read_chunks(part: HistoryRange, cap: int = 1 << 16) -> Iterator[bytes]:
    """The bytes [start, end) of a file in chunks of whole lines; at the end of a range that is not
    `final` (a file still being written) an unterminated last line is left for later, unless the
    range's last read holds no line break at all. A line longer than a chunk keeps its first `cap`
    bytes, its `\\r` redraws collapsed as they come (a bar's latest, as the follower keeps it live);
    the rest is read past, never held: memory stays flat on a 1 GiB line or a file of bars."""
    with open_regular(part.path) as fh:  # a FIFO at the path by now is an OSError, never a hang
        fd = fh.fileno()
        pos = part.start
        carry = b""  # a line longer than a chunk, so far (at most `cap` bytes of it)
        over = False  # ... and it reached `cap`: the rest of the line is skipped
        while pos < part.end:
            data = os.pread(fd, min(CHUNK, part.end - pos), pos)
            if not data:
                break
            pos += len(data)
            more = pos < part.end
            if carry or over:
                nl = data.find(b"\n")
                if not over:
                    carry, over = _bounded(carry, data if nl < 0 else data[:nl], cap)
                if nl < 0 and more:
                    continue
                data, carry, over = carry + (data[nl:] if nl >= 0 else b""), b"", False
            cut = data.rfind(b"\n")
            if more or (not part.final and cut >= 0):
                if cut < 0:
                    carry, over = _bounded(b"", data, cap)
                    continue
                if cut + 1 < len(data):
                    if more:  # the partial last line: read again with the next chunk (no copy)
                        pos -= len(data) - cut - 1
                    data = data[: cut + 1]  # (at the end of a file not final: not history yet)
            yield data


def _bounded(kept: bytes, more: bytes, cap: int) -> tuple[bytes, bool]:
    """An unfinished line's bytes `kept` so far and `more` of it, as kept: `\\r` redraws collapsed, at
    most `cap` bytes; and whether it reached `cap` (what follows is then skipped, as live)."""
    buf = collapse_unfinished(kept + more) if b"\r" in more else kept + more[: cap + 1 - len(kept)]
    if len(buf) > cap:
        return buf[: utf8_cut(buf, cap)], True
    return buf, False


def _clock_of(part: HistoryRange) -> tuple[float, float | None]:
    """What places the range's year-less stamps, and the newest stamp at its end.

    The reference is its mtime, or its own dates' year for a log copied long after its run
    (analysis/time.yearless_reference reads the range's last TAIL_BYTES, and its first ones: a verl
    log's only full date is often Ray's start line, its end all vLLM's `06-08 …`). The stamp is its last line's; where
    that line has none, the newest of the LAST_STAMP_LINES before it a day or more behind the mtime; else None."""
    try:
        with open_regular(part.path) as fh:
            head = b""
            if part.end - part.start > TAIL_BYTES:
                fh.seek(part.start)
                head = (fh.read(TAIL_BYTES) or b"") + b"\n"
            fh.seek(max(part.start, part.end - TAIL_BYTES))
            tail = head + (fh.read(min(TAIL_BYTES, part.end - part.start)) or b"")
    except OSError:
        return part.mtime, None  # reading the range itself will say why
    reference = yearless_reference(tail, part.mtime)
    lines = tail.rstrip(b"\n").split(b"\n")
    last = raw_stamp_time(clean_line(lines[-1][:300]), reference)
    if last is not None:
        return reference, last
    # A last line with no stamp (a bar, Ray's tqdm JSON) may have come long after the stamped ones (a hang, then an
    # unstamped error): only a stamp a day or more behind the file's mtime speaks, a copy's clock, not a silence.
    for raw in reversed(lines[-LAST_STAMP_LINES:-1]):
        if (stamp := raw_stamp_time(clean_line(raw[:300]), reference)) is not None:
            return reference, stamp if part.mtime - stamp >= COPIED_OFFSET else None
    return reference, None


LAST_STAMP_LINES = 50  # lines read back from a range's end for its newest stamp (_clock_of)


def _dayless_start(part: HistoryRange, reference: float) -> float | None:
    """Where a log stamped with the time of day alone began. Each such stamp read alone lies on the latest day that
    keeps it before the mtime, so a run across midnight had lines a day early (audit 15: SGLang's `[23:59:50 TP0]` …
    `[01:30:10 TP0]`, "23h from 01:30:10 to 00:30:10" and a false STALLED). Its stamps are read once through: each
    time of day that goes back is a new day (HistoryClock.chained, as it places them), which gives the log's span;
    its last stamp is placed by the mtime, its first that span before it. None unless the range's first and last
    stamped lines are of the time of day alone."""
    try:
        with open_regular(part.path) as fh:
            fh.seek(part.start)
            head = fh.read(min(TAIL_BYTES, part.end - part.start)) or b""
            fh.seek(max(part.start, part.end - TAIL_BYTES))
            tail = fh.read(min(TAIL_BYTES, part.end - part.start)) or b""
    except OSError:
        return None

    def stamped(lines: Iterable[bytes]) -> str | None:
        for raw in lines:
            text = clean_line(raw[:300])
            if raw_stamp_time(text, reference) is not None:
                return text
        return None

    first = stamped(head.split(b"\n")[:LAST_STAMP_LINES * 4])
    last = stamped(reversed(tail.rstrip(b"\n").split(b"\n")[-LAST_STAMP_LINES * 4:]))
    if first is None or last is None or not (dayless_stamp(first) and dayless_stamp(last)):
        return None
    began, ended = raw_stamp_time(first, reference), raw_stamp_time(last, reference)
    if began is None or ended is None:
        return None
    try:
        span = _dayless_span(part) if part.end - part.start <= DAYLESS_SCAN else None
    except OSError:
        span = None  # reading the range itself will say why
    return ended - (span if span is not None else (ended - began) % 86400.0)


DAYLESS_SCAN = 1 << 30  # a larger range's span is read from its first and last stamps alone (under a day)
_DAYLESS_RE = re.compile(rb"(?m)^(?:\([^)\n]{1,200}\) |\[rank\d+\]: ?)?\[?(\d\d):(\d\d):(\d\d)(?![\d:])")


def _dayless_span(part: HistoryRange) -> float | None:
    """Seconds from a range's first time-of-day stamp to its last, a day added wherever the time of day went back
    (by more than DAYLESS_BACK), as HistoryClock.chained places them (day_shift)."""
    span, before = 0.0, None
    for chunk in _read_chunks(part):
        for m in _DAYLESS_RE.finditer(chunk):
            tod = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
            if before is not None:
                span += tod + day_shift(before, tod) - before
            before = tod
    return span if before is not None else None


def file_range(path: str, final: bool = True) -> HistoryRange:
    """All of a file, as history (replay); one whose stamps run backwards is read bottom up (newest_first)."""
    info = os.stat(path)
    return HistoryRange(path, 0, info.st_size, info.st_mtime, final, final and newest_first(path, info.st_size))


NEWEST_FIRST_BYTES = 8 << 20  # a log search's export is small: larger files are read as written
NEWEST_FIRST_LINES = 200  # stamped lines looked at, in its first NEWEST_FIRST_HEAD bytes
NEWEST_FIRST_HEAD = 256 << 10


def newest_first(path: str, size: int) -> bool:
    """Whether a file lists its lines newest first, as Loki, Grafana or Kibana export a search: its stamps go back in
    time from line to line far more often than forward (at least 3 steps back, 4 for each one forward)."""
    if size > NEWEST_FIRST_BYTES:
        return False
    try:
        with open_regular(path) as fh:
            data = fh.read(NEWEST_FIRST_HEAD)
    except OSError:
        return False
    back = forward = 0
    last = None
    seen = 0
    for raw in data.split(b"\n"):
        if seen >= NEWEST_FIRST_LINES:
            break
        t = raw_stamp_time(clean_line(raw[:300]), 0.0) if raw[:1].strip() else None
        if t is None:
            continue
        seen += 1
        if last is not None and t != last:
            back, forward = back + (t < last), forward + (t > last)
        last = t
    return back >= 3 and back >= 4 * forward


def _whole_lines(data: bytes) -> Iterator[bytes]:
    """`data` in chunks of at most CHUNK bytes that end on a line's end (a longer line alone)."""
    while data:
        cut = data.rfind(b"\n", 0, CHUNK) + 1 if len(data) > CHUNK else len(data)
        yield data[: cut or len(data)]
        data = data[cut or len(data) :]


def _reversed_lines(data: bytes, cap: int) -> bytes:
    """A newest-first file's lines in the order they were written, each at most `cap` bytes (as _read_chunks keeps)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"\n".join(line[: utf8_cut(line, cap)] if len(line) > cap else line for line in reversed(lines)) + b"\n"

