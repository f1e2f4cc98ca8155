"""Follow log files like `tail -F`, and turn their bytes into clean, parsed `LogLine`s.

Training jobs write logs that are hostile to naive readers: ANSI colour, tqdm's `\\r` rewrites,
multi-megabyte lines, junk bytes, logrotate, copytruncate, files that appear minutes after the
job starts. The follower survives all of that and reads in bounded chunks, so one flooding file
never stalls a poll. Cleaning is done per chunk, on bytes, in a few C-level passes (escape regex,
translate, decode, split), so the per-line Python work is only the prefix / timestamp parse.

Timestamps read at the start of a message (after any Ray prefix): ISO 8601 with `T` or space,
optional fraction and `Z` / `+08:00` / `-0130`; Python logging's `2026-01-11 10:00:05,123`;
`2026/01/11 10:00:05`; any of those in brackets; glog `I1122 10:00:00.123456` and vLLM
`INFO 11-22 10:00:00` (no year: this year, or last year if that is over a day ahead). Times
without a zone are local time.
"""

from __future__ import annotations

import calendar
import glob
import io
import os
import re
import stat
import time
from dataclasses import dataclass, field

from gkdtop.collectors.prefilter import FloodSieve
from gkdtop.model import LogFileState, LogLine

# Bytes read per file per collect(): a flood is spread over polls (the collector polls again at once
# while behind), and no single C-level pass over a chunk holds the GIL from the UI for long.
READ_LIMIT = 1 << 20
TOTAL_LIMIT = 16 << 20  # bytes read per collect() over all files, so many floods can't stall it
GLOB_EVERY = 2.0  # seconds between two expansions of the patterns
BACKLOG_BLOCK = 64 << 10  # the tail is read backwards in blocks of this size ...
BACKLOG_LIMIT = 8 << 20  # ... up to this much, even if the last lines are huge
HEAD_BYTES = 1024  # the first bytes of a followed file, kept to notice it rewritten from the start
MAX_OPEN = 128  # files held open at once over all patterns (fewer under a low RLIMIT_NOFILE: _open_limit)
FLOOD_TAIL = 2000  # a chunk with more lines than this (8k lines/s) is sieved: its newest lines are all kept ...
BEHIND_TAIL = 100  # ... or only these, when more is waiting in the file (the next poll has newer lines)

# --- cleaning ------------------------------------------------------------------------------------

# CSI (colours, cursor moves), OSC (titles, hyperlinks; never across a newline, so an unterminated
# one can't eat the following lines), charset and two-byte escapes.
_ESC_PATTERN = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[()*+][0-~]|[@-Z\\-_])"
# ... then every other C0 / C1 control character except tab (and the \n / \r the splitter handles).
_CLEAN_RE = re.compile(_ESC_PATTERN + r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The bulk path works on bytes: the escapes by a regex with a literal first byte (a fast scan),
# the C0 controls by bytes.translate, and C1 (\xc2\x80-\x9f in UTF-8) only if a \xc2 is there.
_ESC_BYTES_RE = re.compile(_ESC_PATTERN.encode())
_C0_BYTES = bytes(c for c in range(32) if c not in (9, 10, 13)) + b"\x7f"
_C1_RE = re.compile("[\x80-\x9f]")


def strip_ansi(text: str) -> str:
    """Text without ANSI escapes (CSI, OSC, ...) and control characters; keeps tab, \\n and \\r."""
    return _CLEAN_RE.sub("", text)


def _clean(data: bytes) -> bytes:
    """strip_ansi for bytes (C1 controls aside, see _decode): what the bulk path runs per chunk."""
    if b"\x1b" in data:
        data = _ESC_BYTES_RE.sub(b"", data)
    return data.translate(None, _C0_BYTES)


def _decode(data: bytes) -> str:
    """Cleaned bytes to text; junk bytes become U+FFFD, never an error."""
    text = data.decode("utf-8", "replace")
    if b"\xc2" in data:
        text = _C1_RE.sub("", text)
    return text


def _last_segment(line: bytes) -> bytes:
    """What a terminal shows for a `\\r`-rewritten (cleaned) line: its last non-blank segment."""
    for part in reversed(line.split(b"\r")):
        if part.strip():
            return part
    return b""


def _collapse_lines(data: bytes) -> bytes:
    """Each line of a cleaned chunk that holds a `\\r` becomes its last non-blank segment.

    A plain `\\r\\n` ending just loses its `\\r`. Only lines with a `\\r` cost Python work: the
    rest of the chunk is copied through in slices.
    """
    pieces: list[bytes] = []
    pos = 0
    cr = data.find(b"\r")
    while cr >= 0:
        end = data.find(b"\n", cr)
        if end < 0:
            end = len(data)
        if end == cr + 1:  # the line's only \r (the first one after pos) ends it: CRLF
            pieces.append(data[pos:cr])
        else:
            nl = data.rfind(b"\n", pos, cr)
            start = pos if nl < 0 else nl + 1
            pieces.append(data[pos:start])
            pieces.append(_last_segment(data[start:end]))
        pos = end
        cr = data.find(b"\r", pos)
    pieces.append(data[pos:])
    return b"".join(pieces)


# --- parsing -------------------------------------------------------------------------------------

# `(WorkerDict pid=1234, ip=10.0.0.1)`, `(TaskRunner pid=133947)`, `(pid=42)`: checked once per
# distinct prefix, then found in _prefix_cache.
_RAY_RE = re.compile(r"\((?:([^\s()=,]+) )?pid=(\d+)(?:, ip=([^\s(),]+))?[^)]*\)")
# Bounded digits: int() refuses more than 4,300, and no real count has ten.
_REPEAT_RE = re.compile(r" \[repeated (\d{1,9})x across cluster\]")
_PREFIX_MAX = 256  # a Ray prefix closes within this many characters

# One regex for every timestamp form; group 1, 5 or 8 is the text of its minute (the cache key).
_TS_RE = re.compile(
    # ISO 8601, Python logging asctime, `2026/01/11 10:00:05`, optionally in brackets.
    r"\[?(\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
    # glog `I1122 10:00:00.123456`: no year.
    r"|[IWEF](\d{4} \d\d:\d\d):(\d\d)(?:\.(\d+))?(?!\d)"
    # vLLM `INFO 01-11 10:00:05`: no year.
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d):(\d\d)(?:\.(\d+))?(?!\d)"
)
_TS_FIRST = frozenset("0123456789[IWEFDC")  # a line starting otherwise has no timestamp: no regex

# Typed "not cached yet" markers, compared by identity.
_NO_MINUTE = float("nan")
_NO_PREFIX = ("", -1, "")
# Epoch seconds of each minute seen, keyed by its text (+ zone): a flood of lines from the same
# minute costs one regex match and a dict lookup each, not a calendar conversion.
_minute_cache: dict[str, float | None] = {}
_prefix_cache: dict[str, tuple[str, int, str] | None] = {}


def _minute_epoch(year: int, month: int, day: int, hour: int, minute: int, tz: str) -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59):
        return None
    try:
        if not tz:  # naive: local time, DST included
            return time.mktime((year, month, day, hour, minute, 0, 0, 0, -1))
        base = calendar.timegm((year, month, day, hour, minute, 0, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    if tz == "Z":
        return float(base)
    sign = -1 if tz[0] == "+" else 1
    digits = tz[1:].replace(":", "")
    return float(base + sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60))


def _yearless_epoch(month: int, day: int, hour: int, minute: int) -> float | None:
    """glog / vLLM give no year: this year, unless that is more than a day ahead (then last year)."""
    now = time.time()
    year = time.localtime(now).tm_year
    base = _minute_epoch(year, month, day, hour, minute, "")
    if base is not None and base > now + 86400:
        base = _minute_epoch(year - 1, month, day, hour, minute, "")
    return base


def _minute_of(key: str) -> float | None:
    """Epoch of a minute key from _TS_RE (date form, vLLM `MM-DD hh:mm` or glog `MMDD hh:mm`), cached."""
    if len(key) >= 16 and key[4] in "-/":
        base = _minute_epoch(int(key[:4]), int(key[5:7]), int(key[8:10]), int(key[11:13]), int(key[14:16]),
                             key[16:])
    elif key[2] == "-":
        base = _yearless_epoch(int(key[:2]), int(key[3:5]), int(key[6:8]), int(key[9:11]))
    else:
        base = _yearless_epoch(int(key[:2]), int(key[2:4]), int(key[5:7]), int(key[8:10]))
    if len(_minute_cache) > 4096:
        _minute_cache.clear()
    _minute_cache[key] = base
    return base


def _ts_of(g: tuple[str | None, ...]) -> float | None:
    """Epoch seconds from the groups of a _TS_RE match."""
    if g[0]:
        key, sec, frac = g[0] + (g[3] or ""), g[1], g[2]
    elif g[4]:
        key, sec, frac = g[4], g[5], g[6]
    else:
        key, sec, frac = g[7] or "", g[8], g[9]
    base = _minute_cache.get(key, _NO_MINUTE)
    if base is _NO_MINUTE:
        base = _minute_of(key)
    if base is None or sec is None or sec > "60":
        return None
    return base + int(sec) + (float("0." + frac) if frac else 0.0)


def parse_timestamp(text: str) -> float | None:
    """Epoch seconds of a timestamp at the very start of `text` (forms: module doc), else None."""
    if text[:1] not in _TS_FIRST or (m := _TS_RE.match(text)) is None:
        return None
    return _ts_of(m.groups())


def _prefix_of(key: str) -> tuple[str, int, str] | None:
    """(worker, pid, ip) of a Ray prefix `(...)`, None if `key` is not one; cached."""
    m = _RAY_RE.fullmatch(key)
    found = (m.group(1) or "", int(m.group(2)), m.group(3) or "") if m is not None else None
    if len(_prefix_cache) > 4096:
        _prefix_cache.clear()
    _prefix_cache[key] = found
    return found


def repeat_count(text: str) -> int:
    """N from Ray's ` [repeated Nx across cluster]` dedup suffix (kept in the text), else 1."""
    if "[repeated " not in text:
        return 1
    m = _REPEAT_RE.search(text)
    return int(m.group(1)) if m else 1


def _parse_into(out: list[LogLine], lines: list[str], source: str, seen: float) -> None:
    """parse_line over many lines, appended to `out`. The hot loop: everything local, caches first."""
    append = out.append
    prefixes = _prefix_cache
    ts_match = _TS_RE.match
    ts_first = _TS_FIRST
    miss = _NO_PREFIX
    for raw in lines:
        text = raw
        worker = ip = ""
        pid: int | None = None
        if raw[:1] == "(":
            close = raw.find(")", 1, _PREFIX_MAX)
            if close > 0:
                key = raw[: close + 1]
                hit = prefixes.get(key, miss)
                if hit is miss:
                    hit = _prefix_of(key)
                if hit is not None:
                    worker, pid, ip = hit
                    text = raw[close + 2 :] if raw[close + 1 : close + 2] == " " else raw[close + 1 :]
        ts = None
        if text[:1] in ts_first and (m := ts_match(text)) is not None:
            ts = _ts_of(m.groups())
        append(LogLine(source, text, seen, ts, worker, pid, ip, 0, False, False, raw))


def parse_line(raw: str, source: str, seen: float) -> LogLine:
    """One cleaned line (no ANSI, no \\r / \\n) into a LogLine: Ray prefix split off, timestamp read."""
    out: list[LogLine] = []
    _parse_into(out, [raw], source, seen)
    return out[0]


# --- following -----------------------------------------------------------------------------------


@dataclass(slots=True)
class LogBatch:
    """What one collect() found: new complete lines, unfinished-bar updates, and every file's state."""

    lines: list[LogLine] = field(default_factory=list)
    progress: dict[str, LogLine] = field(default_factory=dict)  # source -> latest `\r` state
    files: list[LogFileState] = field(default_factory=list)
    skipped: int = 0  # flood lines the sieve found nothing in: counted, not parsed (see FloodSieve)
    skipped_time: float = 0.0  # the time of the last of them

    def slices(self, size: int) -> list[LogBatch]:
        """The same batch as several of at most `size` lines (bar updates with the last), in order."""
        if len(self.lines) <= size:
            return [self]
        parts = [LogBatch(self.lines[i:i + size], {}, self.files) for i in range(0, len(self.lines), size)]
        parts[0].skipped, parts[0].skipped_time = self.skipped, self.skipped_time
        parts[-1].progress = self.progress
        return parts


class NotRegularFile(OSError):
    """A path that names a FIFO, socket, device or directory where a log file was expected."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str) -> io.FileIO:
    """`path` opened for reading, refused (NotRegularFile) unless it is a regular file.

    Opened non-blocking, so a FIFO that took the path after our stat can't block the open (no writer)
    or a read, and checked on the opened descriptor, so what we read is what we checked.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(0, _kind(mode), path)
    except BaseException:
        os.close(fd)
        raise
    return io.FileIO(fd, "rb", closefd=True)


class _OpenFiles:
    """At most `limit` followers hold their file open; opening one more parks the least recently read.

    A glob over thousands of worker logs would otherwise hold a descriptor per file and starve the
    process (EMFILE in the procs collector, the TUI, py-spy's pipes). A parked follower keeps its
    inode, position and head and reopens on the next change; only what a parked file gets after it is
    renamed away is lost (tail -F keeps reading it; we can't without a descriptor).
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._lru: dict[_Follower, None] = {}  # insertion order: least recently read first

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, follower: _Follower) -> None:
        self._lru.pop(follower, None)
        while len(self._lru) >= self.limit:
            oldest = next(iter(self._lru))
            del self._lru[oldest]
            oldest.park()
        self._lru[follower] = None

    def used(self, follower: _Follower) -> None:
        if follower in self._lru:
            del self._lru[follower]
            self._lru[follower] = None

    def closed(self, follower: _Follower) -> None:
        self._lru.pop(follower, None)


def _open_limit() -> int:
    """MAX_OPEN, or a quarter of the soft RLIMIT_NOFILE when that is lower (`ulimit -n 256`: 64)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_OPEN
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_OPEN
    return max(4, min(MAX_OPEN, soft // 4))


class _Follower:
    """One followed path: its open handle, read position and unfinished last line."""

    def __init__(
        self, path: str, max_line: int, at_start_up: bool, sieve: FloodSieve | None = None,
        pool: _OpenFiles | None = None,
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
        self.partial = b""  # the unfinished last line, bounded by self.cap
        self.over = 0  # bytes of the unfinished line dropped past the cap
        self.shown = ""  # the progress text last reported for the unfinished line
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
            st.state, st.error = "error", f"{_kind(info.st_mode)}: {self.path}"
            return start - budget
        ident = (info.st_dev, info.st_ino)
        if ((self.fh is not None or self.parked) and ident == self.ident and info.st_size == self.pos
                and info.st_mtime_ns == self.mtime_ns):
            st.state, st.error = "following", ""
            return 0  # the idle case: one stat, nothing else
        if budget <= 0:
            return 0
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
                    self.pos, self.head = 0, b""
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
            self.pos, self.head = 0, b""
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
            self.pos = 0
        self.backlog_pending = False

    def _backlog(
        self, size: int, mtime: float, out: list[LogLine], progress: dict[str, LogLine], backlog: int
    ) -> None:
        """The last `backlog` lines of the existing content, read from the end, marked as backlog.

        An unfinished `\\r` bar at the end is reported as progress, so its state shows at once.
        """
        assert self.fh is not None
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
        _date_untimed(kept, mtime)
        out.extend(kept)
        progress.update(bar)
        self.state.lines -= len(lines) - len(kept)  # count only what was delivered

    def _read(self, limit: int, out: list[LogLine], progress: dict[str, LogLine]) -> int:
        assert self.fh is not None
        data = self.fh.read(limit) or b""
        if data:
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
        """Give the open file back to bound the open files; the next poll reopens it where it was."""
        self.close()
        self.parked = self.ident is not None

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
                start = first + 1
            if start <= last:
                self._bulk(data[start:last], seen, out)
            self.partial = b""
            self.over = 0
            self.shown = ""
            if last + 1 < len(data):
                self._extend(data[last + 1 :])
        # A bar's state is read where the file ends, not where a read budget cut a redraw in half.
        if progress is not None and self.partial and b"\r" in self.partial[:-1] and not self.behind:
            line = self._progress_line(seen)
            if line is not None:
                progress[self.path] = line

    def _bulk(self, data: bytes, seen: float, out: list[LogLine]) -> None:
        """Complete lines (`data` without its final newline): clean, collapse, decode, split per chunk."""
        data = _clean(data)
        if b"\r" in data:
            data = _collapse_lines(data)
        text = _decode(data)
        lines = text.split("\n")
        self.state.lines += len(lines)
        tail = BEHIND_TAIL if self.behind else FLOOD_TAIL
        if self.sieve is not None and len(lines) > tail:
            # grep reads the bytes; C1 controls are only gone from the text (see _decode)
            lines = self._sift(data if b"\xc2" not in data else text.encode(), lines, tail, seen)
        max_line = self.max_line
        if max(map(len, lines)) <= max_line:
            _parse_into(out, lines, self.path, seen)
            return
        for raw in lines:
            if len(raw) <= max_line:
                _parse_into(out, [raw], self.path, seen)
            else:
                _parse_into(out, [raw[:max_line]], self.path, seen)
                out[-1].truncated = len(raw[max_line:].encode("utf-8", "surrogatepass"))

    def _sift(self, data: bytes, lines: list[str], tail: int, seen: float) -> list[str]:
        """A flood's chunk: the newest `tail` lines, and of the older ones only those the sieve keeps."""
        assert self.sieve is not None
        head = len(lines) - tail
        keep = self.sieve.keep(lines, data, head, lambda raw: parse_line(raw, self.path, seen).text)
        if keep is None or len(keep) == head:
            return lines
        self.skipped += head - len(keep)
        newest = head - 1  # the newest skipped line tells how far the skipped ones went (the stall clock)
        while newest in keep:
            newest -= 1
        self.skipped_time = max(self.skipped_time, parse_line(lines[newest], self.path, seen).time)
        return [lines[i] for i in sorted(keep)] + lines[head:]

    def _extend(self, data: bytes) -> None:
        """Append to the unfinished line, collapsing `\\r` rewrites and bounding what is kept."""
        if self.over:
            self.over += len(data)
            return
        buf = self.partial + data if self.partial else data
        if b"\r" in data:
            buf = _collapse(buf)
        if len(buf) > self.cap:
            keep = _utf8_boundary(buf, self.cap)
            self.over = len(buf) - keep
            buf = buf[:keep]
        self.partial = buf

    def _text_of(self, buf: bytes, dropped: int) -> tuple[str, int]:
        """One line's bytes to (text, bytes cut): the careful path for pending and odd lines."""
        buf = _clean(buf)
        if b"\r" in buf:
            buf = _last_segment(buf)
        text = _decode(buf)
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
                buf = _collapse(buf)
            if len(buf) > self.cap:
                keep = _utf8_boundary(buf, self.cap)
                buf, dropped = buf[:keep], len(buf) - keep
        text, dropped = self._text_of(buf, dropped)
        line = parse_line(text, self.path, seen)
        line.truncated = dropped
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
        return line

    def _flush(self, out: list[LogLine]) -> None:
        """The file ends (rotated, truncated, deleted) with an unfinished line: it is finished now."""
        if self.partial or self.over:
            line = self._finish(b"", time.time())
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


def _collapse(buf: bytes) -> bytes:
    """Drop the `\\r`-overwritten segments of a line, keeping the last visible one (and a trailing \\r)."""
    parts = buf.split(b"\r")
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part.strip() and (b"\x1b" not in part or strip_ansi(part.decode("utf-8", "replace")).strip()):
            head = b"\r" if i else b""
            tail = b"\r" if i < len(parts) - 1 else b""
            return head + part + tail
    return b"\r"


def _utf8_boundary(buf: bytes, limit: int) -> int:
    """A cut position <= limit that does not split a UTF-8 sequence."""
    cut = limit
    while cut > limit - 3 and cut > 0 and 0x80 <= buf[cut] < 0xC0:
        cut -= 1
    return cut


# --- the collector -------------------------------------------------------------------------------


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


class LogCollector:
    """Follows every file the patterns name, now or later; a collect() returns what's new since the last."""

    name = "logs"

    def __init__(
        self, patterns: list[str], backlog: int = 200, max_line: int = 16384, interval: float = 0.25,
        sieve: FloodSieve | None = None, max_open: int | None = None,
    ) -> None:
        self.patterns = [os.path.expanduser(p) for p in patterns]
        self.sieve = sieve  # in a flood, parse only the lines the analysis needs (None: every line)
        self.backlog = backlog
        self.max_line = max_line
        self.interval = interval
        self._files: dict[str, _Follower] = {}
        self._open_files = _OpenFiles(max_open if max_open is not None else _open_limit())
        self.glob_every = GLOB_EVERY  # seconds between two expansions of the patterns
        self._next_glob = 0.0
        self._started = False
        self._turn = 0  # which file reads first: turns go round, so no flood starves the others
        self.behind = False  # the last collect() left unread bytes (its read budget ran out)

    def _expand(self) -> None:
        """Add the paths the patterns name now. Named paths are followed even before they exist."""
        for pattern in self.patterns:
            if glob.has_magic(pattern):
                try:
                    found = sorted(glob.glob(pattern))
                except ValueError:  # a NUL in the pattern: it names nothing
                    found = []
                for path in found:
                    path = os.path.normpath(path)
                    # A glob may match directories (`logs/*`): those are no log files, skip them.
                    if path not in self._files and not os.path.isdir(path):
                        self._add(path)
            elif (path := os.path.normpath(pattern)) not in self._files:
                self._add(path)

    def _add(self, path: str) -> None:
        # Files there at start-up begin with their last lines; those that appear later, at their start.
        self._files[path] = _Follower(path, self.max_line, at_start_up=not self._started, sieve=self.sieve,
                                      pool=self._open_files)

    def collect(self) -> LogBatch:
        now = time.monotonic()
        if now >= self._next_glob:
            self._expand()
            self._next_glob = now + self.glob_every
        self._started = True
        batch = LogBatch()
        followers = list(self._files.values())
        if followers:
            self._turn %= len(followers)
            budget = TOTAL_LIMIT
            for follower in followers[self._turn :] + followers[: self._turn]:
                budget -= follower.poll(batch.lines, batch.progress, self.backlog, min(budget, READ_LIMIT))
                if follower.skipped:
                    batch.skipped += follower.skipped
                    batch.skipped_time = max(batch.skipped_time, follower.skipped_time)
                    follower.skipped, follower.skipped_time = 0, 0.0
            self._turn += 1
        self.behind = any(follower.behind for follower in followers)
        batch.files = [follower.snapshot() for follower in followers]
        return batch

    def close(self) -> None:
        for follower in self._files.values():
            follower.close()
