"""Dating the untimed lines of a file read as history: each takes the nearest stamp before it.

Its own object because a file's stamps outlive a chunk: a chunk's fast lines are dated after the
whole chunk was read, and lines before the file's first stamp wait for it, chunks later or at the
file's end (analysis/history.py). So what the reader has seen of the file's stamps travels with it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.lines import parse_line, raw_stamp_time

if TYPE_CHECKING:
    from gkdtop.model import LogLine

LOOK_AROUND = 8  # lines searched before an untimed line for the nearest timestamp (then the last one known)
DAYLESS_BACK = 3600.0  # a time-of-day stamp this far behind the one before it is a line out of order, not a new day
MAX_JUMPS = 64  # zone-sized gaps between two writers' stamps kept per file (one is enough to say so)


def day_shift(before: float, ts: float) -> float:
    """The whole days, in seconds, that move a time-of-day stamp `ts` to no earlier than the stamp `before` it, less
    DAYLESS_BACK: a time of day that went back further is the next day (midnight, a night idle); one that went
    back less is a line out of order. (Negative where `ts` lies more than a day less DAYLESS_BACK ahead of `before`.)"""
    return math.ceil((before - DAYLESS_BACK - ts) / 86400.0) * 86400.0


class HistoryClock:
    """Times for untimed lines of a file read in chunks: the nearest stamped line before them.

    HistoryReader._date_chunk reads stamps in file order and marks where it found them; _apply dates a
    fast line later, after the whole chunk was read, so where no stamp is near it the fallback is the
    last one marked before its offset, not the chunk's last one."""

    def __init__(self, mtime: float, offset: float = 0.0, dayless_start: float | None = None) -> None:
        self.mtime = mtime
        self.offset = offset  # added to every stamp read: the file's clock offset (ClockSkew), known before
        # A log stamped with the time of day alone: where its first stamp lies (history._dayless_start); each later
        # stamp then on the first day that keeps it no earlier than the one before (chained), not each on its own day
        # before the mtime.
        self.dayless_start = dayless_start
        self._chain: float | None = None  # the last stamp read in file order, without the offset
        self.last: float | None = None  # the last stamp seen, for lines whose neighbours have none
        self.newest: float | None = None
        self.oldest: float | None = None  # the file's first stamp, once found: when the run began
        self.oldest_at: int | None = None  # where in its chunk that stamp's line begins (until oldest_line is known)
        self.oldest_line: int | None = None  # that line's number in the file
        self.waiting: list[tuple[LogLine, Any, int | None, Any]] = []  # untimed lines before the first stamp
        self.tail = b""  # the last line read
        self._before_chunk: float | None = None  # `last` when the current chunk began
        self._marks: list[int] = []  # offsets in the current chunk where a stamp was found, ascending
        self._marked: list[float] = []  # ... and those stamps
        self._last_head: str | bytes = b""  # the start of the line `last` came from: its writer, where a jump asks
        # (before, after) of consecutive stamps (in file order) of two writers a whole number of half-hours apart:
        # two clocks in two zones, likely (PhaseEngine.note_zone_jump), seen here because history dates lines by
        # stamps on lines no rule names, which never reach the phases' own check (_writer_stamp).
        self.jumps: list[tuple[float, float]] = []

    def chained(self, ts: float) -> float:
        """A stamp `ts` (without the offset) of a log stamped with the time of day alone, moved by whole days: the
        first to where the log began, each later one to the first day that keeps it no earlier than the stamp
        before it (DAYLESS_BACK aside): a time of day that went back is the next day (midnight, a night idle)."""
        if self._chain is None:
            return ts if self.dayless_start is None else ts + round((self.dayless_start - ts) / 86400.0) * 86400.0
        return ts + day_shift(self._chain, ts)

    def new_chunk(self) -> None:
        self._before_chunk = self.last
        self._marks.clear()
        self._marked.clear()

    def saw(self, ts: float, at: int | None = None, head: str | bytes = b"") -> None:
        """A stamp `ts` found at offset `at` of the chunk, on the line that starts with `head`."""
        self.newest = ts if self.newest is None else max(self.newest, ts)
        if at is None or not self._marks or at > self._marks[-1]:
            if self.last is not None and ts - self.last >= 3300 and len(self.jumps) < MAX_JUMPS:
                self._zone_jump(self.last, ts, head)
            self.last, self._last_head = ts, head
            if self.dayless_start is not None:
                self._chain = ts - self.offset
            if at is not None:
                self._marks.append(at)
                self._marked.append(ts)
        else:  # found looking back, before a later mark: kept in file order (a stamp the first time only)
            where = bisect_left(self._marks, at)
            if self._marks[where] != at:
                self._marks.insert(where, at)
                self._marked.insert(where, ts)

    def _zone_jump(self, before: float, after: float, head: str | bytes) -> None:
        """Two consecutive stamps an hour or more apart, forward: kept where they are a whole number of half-hours
        apart (within 5 minutes, as PhaseEngine._writer_stamp reads one) and their lines' writers differ. (Backward,
        no span's times straddle the gap: the lines after it date earlier than the span's start.)"""
        gap = after - before
        zones = round(gap / 1800)
        if not (2 <= zones <= 29 and abs(gap - zones * 1800) <= 300) or not head or not self._last_head:
            return
        lines = [parse_line(h if isinstance(h, str) else h.decode("utf-8", "replace"), "", 0.0)
                 for h in (self._last_head, head)]
        if (lines[0].worker, lines[0].pid) != (lines[1].worker, lines[1].pid):
            self.jumps.append((before, after))

    def first(self, chunk: bytes, lines: int) -> float | None:
        """The file's first stamp, from the first `lines` lines of its first chunk that has one."""
        if self.oldest is None:
            begin = 0
            for _ in range(lines):
                end = chunk.find(b"\n", begin)
                head = chunk[begin : min(end if end >= 0 else len(chunk), begin + 300)]
                if head and (ts := raw_stamp_time(head.decode("utf-8", "replace"), self.mtime)) is not None:
                    if self.dayless_start is not None:
                        ts = self.chained(ts)
                    self.oldest, self.oldest_at = ts + self.offset, begin
                    break
                if end < 0:
                    break
                begin = end + 1
        return self.oldest

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
                ts = raw_stamp_time(head.decode("utf-8", "replace"), self.mtime)
                if ts is not None:
                    if self.dayless_start is not None:
                        ts = self.chained(ts)
                    ts += self.offset
                    self.saw(ts, begin, head)
                    return ts
            end = begin - 1
        if self._marks and start <= self._marks[-1]:  # dated after the chunk was read: the mark before it
            found = bisect_left(self._marks, start)
            return self._marked[found - 1] if found else self._before_chunk
        return self.last

