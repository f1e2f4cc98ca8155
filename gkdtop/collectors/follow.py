"""Follow one log file like `tail -F` and turn its new bytes into clean, parsed `LogLine`s.

Training jobs write logs that are hostile to naive readers: ANSI colour, tqdm's `\\r` rewrites,
multi-megabyte lines, junk bytes, logrotate, copytruncate, files that appear minutes after the
job starts. The follower survives all of that and reads in bounded chunks, so one flooding file
never stalls a poll. Bytes become lines in analysis/lines.py (cleaning, Ray prefix, timestamp);
collectors/logs.py follows many files with it, collectors/ray_logs.py feeds it remote bytes.
"""

from __future__ import annotations

import functools
import io
import os
import stat
import time
from collections.abc import Callable

from gkdtop.analysis.lines import (
    clean_bytes,
    clean_line,
    collapse_lines,
    collapse_unfinished,
    decode,
    parse_into,
    parse_line,
    utf8_cut,
)
from gkdtop.model import FROM_END, LogFileState, LogLine
from gkdtop.safeopen import kind_of, open_regular

BACKLOG_BLOCK = 64 << 10  # the tail is read backwards in blocks of this size ...
BACKLOG_LIMIT = 8 << 20  # ... up to this much, even if the last lines are huge
HEAD_BYTES = 1024  # the first bytes of a followed file, kept to notice it rewritten from the start
MAX_OPEN = 128  # files held open at once over all patterns (fewer under a low RLIMIT_NOFILE: open_limit)
PARK_DELAY = 1.0  # seconds a follower parked to free a descriptor waits before it reopens
FLOOD_TAIL = 2000  # a chunk with more lines than this (8k lines/s) is sieved: of its older lines, those rules need ...
FLOOD_SHOWN = 500  # ... its newest lines, these many (a screenful or more each poll), whole ...
BEHIND_TAIL = 100  # ... or only these, when more is waiting in the file (the next poll has newer lines)
IDLE_FLUSH = 5.0  # seconds a file must be idle before its unterminated last line counts as a line
# Which lines of a flood's older part (`\n`-separated raw bytes) some rule needs, as (index, start, end) in order,
# and how many lines that part holds (Analysis.keep).
Sieve = Callable[[bytes], tuple[list[tuple[int, int, int]], int]]


class OpenFiles:
    """At most `limit` followers hold their file open; opening one more parks the least recently read.

    A glob over thousands of worker logs would otherwise hold a descriptor per file and starve the
    process (EMFILE in the procs collector, the TUI, py-spy's pipes). A parked follower keeps its
    inode, position and head and reopens on the next change; only what a parked file gets after it is
    renamed away is lost (tail -F keeps reading it; we can't without a descriptor).

    When more files grow than may be open, every read would cost an open and a close (5,000 growing
    files: 2-4x the CPU of holding them all). So a follower parked less than `delay` seconds ago waits
    that long before it reopens: each then reads a second's worth per open, a second late at most.
    """

    def __init__(self, limit: int, delay: float = PARK_DELAY) -> None:
        self.limit = max(1, limit)
        self.delay = delay
        self._lru: dict[Follower, None] = {}  # insertion order: least recently read first

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, follower: Follower) -> None:
        self._lru.pop(follower, None)
        while len(self._lru) >= self.limit:
            oldest = next(iter(self._lru))
            del self._lru[oldest]
            oldest.park()
        self._lru[follower] = None

    def used(self, follower: Follower) -> None:
        if follower in self._lru:
            del self._lru[follower]
            self._lru[follower] = None

    def closed(self, follower: Follower) -> None:
        self._lru.pop(follower, None)


def open_limit() -> int:
    """MAX_OPEN, or a quarter of the soft RLIMIT_NOFILE when that is lower (`ulimit -n 256`: 64)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_OPEN
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_OPEN
    return max(4, min(MAX_OPEN, soft // 4))


KEEP_FREED = 32 << 20  # freed heap memory up to this much stays in the process for the next chunks ...
MMAP_ABOVE = 4 << 20  # ... and only blocks larger than this are the kernel's own mappings


@functools.cache
def keep_freed_chunks() -> bool:
    """A flood is read in megabyte chunks, each copied a few times (cleaned, collapsed, cut). glibc gave every freed
    chunk back to the kernel and faulted the next one in page by page: 15k page faults a second at 100k lines/s,
    a sixth of the flood's CPU. Process-wide, once; False where the C library has no mallopt (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # (TypeError: Windows loads no C library by None)
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_ABOVE)) and bool(mallopt(m_trim_threshold, KEEP_FREED))


class Follower:
    """One followed path: its open handle, read position and unfinished last line."""

    def __init__(
        self, path: str, max_line: int, at_start_up: bool, sieve: Sieve | None = None,
        pool: OpenFiles | None = None,
    ) -> None:
        self.path = path
        self.pool = pool  # bounds how many followers hold a file open; None: no bound
        self.max_line = max_line
        self.sieve = sieve
        self.skipped = 0  # lines the sieve ruled out since the last collect(), and the last one's time
        self.skipped_time = 0.0
        self.behind = False  # this poll's chunk ends before the file does: more is waiting
        # The unfinished line is kept in bytes up to this much: enough for max_line characters of
        # any UTF-8 plus some ANSI; what lies beyond is only counted.
        self.cap = max(max_line * 4, 4096)
        self.backlog_pending = at_start_up  # existing content: start from its last lines
        self.fh: io.FileIO | None = None
        self.ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the open handle
        self.pos = 0
        # The file's first bytes (up to HEAD_BYTES, never past pos) and mtime when last looked at: a
        # file truncated and regrown past pos between two polls shows only in a changed head.
        self.head = b""
        self.mtime_ns = 0
        self.parked = False  # closed to bound the open files; ident, pos and head say where to go on
        self.reopen_at = 0.0  # a parked follower reopens no sooner (monotonic clock), see OpenFiles
        self.read_at = -1e9  # when new bytes were last read (monotonic; the start-up backlog is not new)
        self.partial = b""  # the unfinished last line, bounded by self.cap
        self.over = 0  # bytes of the unfinished line dropped past the cap
        self.shown = ""  # the progress text last reported for the unfinished line
        self.partial_counted = False  # the unfinished line was delivered (history, or the file went idle)
        self.history: tuple[str, int, float, bool] | None = None  # what the file held at start-up
        # The number of the last line delivered: in the file (read from its start), else relative to its end when
        # following began (FROM_END + n: history counts the lines before it, Store.write_logs adds them).
        self.line_no: int | None = None
        self.opened_once = False
        self.state = LogFileState(path, "waiting")

    # --- polling -------------------------------------------------------------------------------

    def poll(self, out: list[LogLine], progress: dict[str, LogLine], backlog: int, budget: int) -> int:
        """Read what's new, up to `budget` bytes; lines go to `out`, a changed bar to `progress`.

        Returns the number of bytes read.
        """
        start = budget
        st = self.state
        self.behind = False
        try:
            info = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            self.backlog_pending = False  # when it appears, all of it is new
            budget -= self._gone(out, budget)
            st.state = "deleted" if self.opened_once else "waiting"
            st.error = ""
            return start - budget
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            self._error(out, exc if isinstance(exc, OSError) else OSError(0, str(exc), ascii(self.path)))
            return 0
        st.size = info.st_size
        st.mtime = info.st_mtime
        if not stat.S_ISREG(info.st_mode):
            budget -= self._gone(out, budget)
            st.state, st.error = "error", f"{kind_of(info.st_mode)}: {self.path}"
            return start - budget
        ident = (info.st_dev, info.st_ino)
        if ((self.fh is not None or self.parked) and ident == self.ident and info.st_size == self.pos
                and info.st_mtime_ns == self.mtime_ns):
            st.state, st.error = "following", ""
            if self.partial and not self.partial_counted and time.time() - info.st_mtime >= IDLE_FLUSH:
                self._deliver_partial(out)  # a last line without its newline, in a file gone quiet
            return 0  # the idle case: one stat, nothing else
        if budget <= 0:
            return 0
        if self.parked and time.monotonic() < self.reopen_at:
            st.state, st.error = "following", ""
            return 0  # parked a moment ago to let another file read: its turn comes (see OpenFiles)
        try:
            if self.fh is not None:
                if ident != self.ident:
                    # Rotated, or deleted and re-created: finish the old file (we hold it open, so
                    # its inode number can't have been reused), then read the new one from its start.
                    budget -= self._drain(out, budget)
                    if self.fh is not None:
                        return start - budget  # more left in the old file: next poll
                    st.rotations += 1
                elif info.st_size < self.pos or not self._same_head(self.fh.fileno()):
                    # copytruncate, or truncated and written past our position before this poll
                    self._flush(out)
                    self.fh.seek(0)
                    self.pos, self.head, self.line_no = 0, b"", 0
                    st.truncations += 1
            if self.fh is None:
                self._open(out, progress, backlog)
            st.state, st.error = "following", ""
            self.mtime_ns = info.st_mtime_ns
            if budget > 0 and info.st_size > self.pos:
                self.behind = info.st_size - self.pos > budget
                budget -= self._read(min(budget, info.st_size - self.pos), out, progress)
            if len(self.head) < min(self.pos, HEAD_BYTES) and self.fh is not None:
                self.head = os.pread(self.fh.fileno(), min(self.pos, HEAD_BYTES), 0)
        except OSError as exc:
            self._error(out, exc)
        if start > budget and self.pool is not None:
            self.pool.used(self)
        return start - budget

    def _same_head(self, fd: int) -> bool:
        """The file still starts with the bytes it started with when we read them."""
        return not self.head or os.pread(fd, len(self.head), 0) == self.head

    def _open(self, out: list[LogLine], progress: dict[str, LogLine], backlog: int) -> None:
        fh = open_regular(self.path)
        info = os.fstat(fh.fileno())
        ident = (info.st_dev, info.st_ino)
        reopen = self.ident == ident and self.pos <= info.st_size and self._same_head(fh.fileno())
        if self.ident is not None and not reopen:
            # What we followed changed while we held no handle (parked, or after an error): finish its
            # unfinished line and read this file from its start.
            self._flush(out)
            if self.ident == ident:
                self.state.truncations += 1
            else:
                self.state.rotations += 1
            self.pos, self.head, self.line_no = 0, b"", 0
        if self.pool is not None:
            self.pool.opened(self)
        self.fh = fh
        self.ident = ident
        self.opened_once = True
        self.parked = False
        if reopen:  # the same file after a read error or a park: go on where we were
            fh.seek(self.pos)
        elif self.backlog_pending:
            self._backlog(info.st_size, info.st_mtime, out, progress, backlog)
        else:
            self.pos, self.line_no = 0, 0
        self.backlog_pending = False

    def _backlog(
        self, size: int, mtime: float, out: list[LogLine], progress: dict[str, LogLine], backlog: int
    ) -> None:
        """The last `backlog` lines of the existing content, read from the end, marked as backlog.

        An unfinished `\\r` bar at the end is reported as progress, so its state shows at once.
        """
        assert self.fh is not None
        # All of it is analysed as history (the lines below only fill the Logs pane); a last line
        # without its newline counts there too once the file is idle.
        idle = time.time() - mtime >= IDLE_FLUSH
        self.history, self.partial_counted = (self.path, size, mtime, idle), idle
        start = size
        newlines = 0
        blocks: list[bytes] = []
        while start > 0 and newlines <= backlog and size - start < BACKLOG_LIMIT:
            step = min(BACKLOG_BLOCK, start)
            start -= step
            self.fh.seek(start)
            block = self.fh.read(step) or b""
            blocks.append(block)
            newlines += block.count(b"\n")
        data = b"".join(reversed(blocks))
        self.fh.seek(start + len(data))
        self.pos = start + len(data)
        if start > 0:  # we began inside a line: drop its tail end
            cut = data.find(b"\n")
            if cut < 0:
                self.over = len(data)  # inside a giant line: the rest of it is counted, not kept
                return
            data = data[cut + 1 :]
        if backlog <= 0:  # no lines wanted: only the unfinished last one, to complete later
            data = data[data.rfind(b"\n") + 1 :]
        lines: list[LogLine] = []
        bar: dict[str, LogLine] = {}
        self._feed(data, mtime, lines, bar)
        kept = lines[-backlog:] if backlog > 0 else []
        for line in [*kept, *bar.values()]:
            line.backlog = True
        # Counted from the end: history counts the file's lines, the last of them FROM_END + 0; an unfinished last
        # line is one of them once the file is idle (its end, when it comes, ends that line, not a new one).
        self.line_no = FROM_END - (1 if idle and data and not data.endswith(b"\n") else 0)
        if len(lines) == data.count(b"\n"):  # one line per newline (none sifted out): each one's place is known
            for number, line in enumerate(kept, self.line_no + 1 - len(kept)):
                line.number = number
        _date_untimed(kept, mtime)
        out.extend(kept)
        progress.update(bar)
        self.state.lines -= len(lines) - len(kept)  # count only what was delivered

    def _read(self, limit: int, out: list[LogLine], progress: dict[str, LogLine]) -> int:
        assert self.fh is not None
        data = self.fh.read(limit) or b""
        if data:
            self.read_at = time.monotonic()
            self.pos += len(data)
            self._feed(data, time.time(), out, progress)
        return len(data)

    def _drain(self, out: list[LogLine], budget: int) -> int:
        """Read the old handle of a rotated / deleted file towards its end; close it at the end."""
        assert self.fh is not None
        left = os.fstat(self.fh.fileno()).st_size - self.pos
        self.behind = left > budget
        data = (self.fh.read(min(left, budget)) or b"") if left > 0 and budget > 0 else b""
        self.pos += len(data)
        if data:
            self._feed(data, time.time(), out, None)
        if left <= len(data):
            self._flush(out)
            self.close()
            self.ident, self.pos, self.head = None, 0, b""
        return len(data)

    def _gone(self, out: list[LogLine], budget: int) -> int:
        """The path names nothing readable now: drain the old handle; keep it while it's only renamed.

        Returns the number of bytes read.
        """
        if self.fh is None:
            if self.parked:  # it went while parked: what it held past pos can't be read any more
                self._flush(out)
                self.parked, self.ident, self.pos, self.head = False, None, 0, b""
            return 0
        try:
            info = os.fstat(self.fh.fileno())
            if info.st_nlink == 0:
                return self._drain(out, budget)
            # logrotate moved it away: its writer may still append, so keep reading it until a new
            # file takes the path.
            left = info.st_size - self.pos
            if left <= 0 or budget <= 0:
                return 0
            self.behind = left > budget
            data = self.fh.read(min(left, budget)) or b""
            self.pos += len(data)
            self._feed(data, time.time(), out, None)
            return len(data)
        except OSError:
            self._flush(out)
            self.close()
            self.ident, self.pos, self.head = None, 0, b""
            return 0

    def _error(self, out: list[LogLine], exc: OSError) -> None:
        self._flush(out)
        self.close()  # ident and pos stay: a reopen of the same file goes on where it was
        self.parked = False
        reason = exc.strerror or type(exc).__name__
        self.state.state = "error"
        self.state.error = f"{reason}: {exc.filename or self.path}"

    def close(self) -> None:
        if self.fh is not None:
            if self.pool is not None:
                self.pool.closed(self)
            try:
                self.fh.close()
            finally:
                self.fh = None

    def park(self) -> None:
        """Give the open file back to bound the open files; a later poll reopens it where it was."""
        now = time.monotonic()
        delay = self.pool.delay if self.pool is not None else 0.0
        self.close()
        self.parked = self.ident is not None
        # Only a file that is being written waits: the start-up sweep (backlog reads) parks the rest
        # of a big glob without delaying their first new lines.
        self.reopen_at = now + delay if now - self.read_at < delay else 0.0

    # --- bytes to lines ------------------------------------------------------------------------

    def _feed(
        self, data: bytes, seen: float, out: list[LogLine], progress: dict[str, LogLine] | None
    ) -> None:
        """Split a chunk: finish the pending line, bulk-convert the complete ones, keep the rest."""
        last = data.rfind(b"\n")
        if last < 0:
            self._extend(data)
        else:
            start = 0
            if self.partial or self.over:
                first = data.find(b"\n")
                out.append(self._finish(data[:first], seen))
                self._ended()
                start = first + 1
            if start <= last:
                self._bulk(data[start:last], seen, out)
            self.partial = b""
            self.over = 0
            self.shown = ""
            self.partial_counted = False
            if last + 1 < len(data):
                self._extend(data[last + 1 :])
        # A bar's state is read where the file ends, not where a read budget cut a redraw in half.
        if progress is not None and self.partial and b"\r" in self.partial[:-1] and not self.behind:
            line = self._progress_line(seen)
            if line is not None:
                progress[self.path] = line

    def _bulk(self, data: bytes, seen: float, out: list[LogLine]) -> None:
        """Complete lines (`data` without its final newline): clean, collapse, decode, split per chunk."""
        data = clean_bytes(data)
        if b"\r" in data:
            data = collapse_lines(data)
        cut = self._flood_cut(data) if self.sieve is not None else None
        if cut is not None and b"\xc2" in data:  # the sieve reads bytes; C1 controls are only gone from the text
            data = decode(data).encode()  # (see decode)
            cut = self._flood_cut(data)
        if cut is None:
            lines = decode(data).split("\n")
            places: list[int] | None = None  # each kept line's place among the chunk's, where the sieve dropped some
            count = len(lines)
        else:
            lines, places, count = self._sift(data, cut, seen)
        self.state.lines += count
        first = len(out)
        max_line = self.max_line
        if max(map(len, lines)) <= max_line:
            parse_into(out, lines, self.path, seen)
        else:
            for raw in lines:
                if len(raw) <= max_line:
                    parse_into(out, [raw], self.path, seen)
                else:
                    parse_into(out, [raw[:max_line]], self.path, seen)
                    out[-1].truncated = len(raw[max_line:].encode("utf-8", "surrogatepass"))
        if self.line_no is not None:
            base = self.line_no + 1
            if places is None:
                for number, line in enumerate(out[first:], base):
                    line.number = number
            else:
                for place, line in zip(places, out[first:], strict=True):
                    line.number = base + place
            self.line_no += count

    def _flood_cut(self, data: bytes) -> int | None:
        """Where a flood's newest lines begin in `data` (cleaned lines, no final newline): the chunk holds more
        lines than FLOOD_TAIL (BEHIND_TAIL while more is waiting) and only its newest FLOOD_SHOWN (BEHIND_TAIL)
        are kept whole; None for a chunk that is no flood (every line is kept)."""
        limit, shown = (BEHIND_TAIL, BEHIND_TAIL) if self.behind else (FLOOD_TAIL, FLOOD_SHOWN)
        pos = len(data)
        cut = 0
        for count in range(1, limit + 1):
            pos = data.rfind(b"\n", 0, pos)
            if pos < 0:
                return None
            if count == shown:
                cut = pos + 1
        return cut

    def _sift(self, data: bytes, cut: int, seen: float) -> tuple[list[str], list[int], int]:
        """A flood's chunk: its lines from `cut` on, and of the older ones only those the sieve keeps, decoded
        one by one (the rest never become text); the kept lines' places among the chunk's, and the chunk's count."""
        assert self.sieve is not None
        older = data[: cut - 1]
        kept, head = self.sieve(older)
        newest = decode(data[cut:]).split("\n")
        lines = [decode(older[start:end]) for _, start, end in kept]
        places = [index for index, _, _ in kept]
        if len(kept) < head:
            self.skipped += head - len(kept)
            self.skipped_time = max(self.skipped_time, parse_line(self._newest_skipped(older, places, head),
                                                                  self.path, seen).time)
        return lines + newest, places + list(range(head, head + len(newest))), head + len(newest)

    @staticmethod
    def _newest_skipped(older: bytes, kept: list[int], head: int) -> str:
        """The newest of `older`'s lines the sieve left out: it tells how far the skipped ones went (the stall
        clock)."""
        taken = set(kept)
        index, end = head - 1, len(older)
        start = older.rfind(b"\n", 0, end) + 1
        while index in taken:
            index, end = index - 1, start - 1
            start = older.rfind(b"\n", 0, end) + 1
        return decode(older[start:end])

    def _extend(self, data: bytes) -> None:
        """Append to the unfinished line, collapsing `\\r` rewrites and bounding what is kept."""
        if self.over:
            self.over += len(data)
            return
        buf = self.partial + data if self.partial else data
        if b"\r" in data:
            buf = collapse_unfinished(buf)
        if len(buf) > self.cap:
            keep = utf8_cut(buf, self.cap)
            self.over = len(buf) - keep
            buf = buf[:keep]
        self.partial = buf

    def _text_of(self, buf: bytes, dropped: int) -> tuple[str, int]:
        """One line's bytes to (text, bytes cut): the careful path for pending and odd lines."""
        text = clean_line(buf)
        if len(text) > self.max_line:
            dropped += len(text[self.max_line :].encode("utf-8", "surrogatepass"))
            text = text[: self.max_line]
        return text, dropped

    def _finish(self, rest: bytes, seen: float) -> LogLine:
        """The pending line, completed by `rest` (the bytes up to its newline)."""
        if self.over:
            buf, dropped = self.partial, self.over + len(rest)
        else:
            buf, dropped = self.partial + rest, 0
            if b"\r" in rest:
                buf = collapse_unfinished(buf)
            if len(buf) > self.cap:
                keep = utf8_cut(buf, self.cap)
                buf, dropped = buf[:keep], len(buf) - keep
        text, dropped = self._text_of(buf, dropped)
        line = parse_line(text, self.path, seen)
        line.truncated = dropped
        if self.line_no is not None:
            line.number = self.line_no + 1  # (its count moves on where the line ends: _ended)
        self.state.lines += 1
        return line

    def _progress_line(self, seen: float) -> LogLine | None:
        """The unfinished `\\r` line as a progress update, if it shows something new."""
        text, dropped = self._text_of(self.partial, self.over)
        if not text or text == self.shown:
            return None
        self.shown = text
        line = parse_line(text, self.path, seen)
        line.truncated = dropped
        line.progress = True
        if self.line_no is not None:
            line.number = self.line_no + 1
        return line

    def _ended(self) -> None:
        """The pending line got its end: the next line is the one after it."""
        if self.line_no is not None:
            self.line_no += 1

    def _deliver_partial(self, out: list[LogLine]) -> None:
        """The unfinished line as a line, once (a crash's last words often lack their newline)."""
        line = self._finish(b"", time.time())
        if line.text:
            out.append(line)
        else:
            self.state.lines -= 1
        self.partial_counted = True

    def _flush(self, out: list[LogLine]) -> None:
        """The file ends (rotated, truncated, deleted) with an unfinished line: it is finished now."""
        if self.partial_counted:  # delivered already
            self.partial, self.over, self.shown, self.partial_counted = b"", 0, "", False
            return
        if self.partial or self.over:
            line = self._finish(b"", time.time())
            self._ended()
            if line.text or line.truncated:
                out.append(line)
            else:
                self.state.lines -= 1
        self.partial = b""
        self.over = 0
        self.shown = ""

    def snapshot(self) -> LogFileState:
        s = self.state
        return LogFileState(s.path, s.state, s.error, s.size, s.lines, s.rotations, s.truncations, s.mtime)


def _date_untimed(lines: list[LogLine], mtime: float) -> None:
    """Date the untimed lines already in a file better than by its mtime (the last write only).

    Lines before the first timestamped one get its time, lines between two get the earlier one's;
    lines after the last keep the mtime, since the last of them is what was written then. Without
    this, one untimed line at the top of a long-silent log makes it look fresh.
    """
    stamps = [ln.ts if ln.ts is not None and ln.ts <= mtime + 5 else None for ln in lines]
    timed = [i for i, t in enumerate(stamps) if t is not None]
    if not timed:
        return
    known = stamps[timed[0]]
    for i in range(timed[-1]):
        if stamps[i] is not None:
            known = stamps[i]
        else:
            lines[i].seen = known  # type: ignore[assignment]
