"""Time you can trust: timestamps read from log lines, and the offset between a log's clock and ours.

Forms read at the start of a message (after any Ray prefix, `[rank0]:`, `(Tag) `, a level's bracket
`[INFO|trainer.py:1786] `, a bar glued before it: see lines.stamp_text), one alternative of TS_RE each,
tested one by one in tests/test_stamps.py:

- ISO 8601, `T` or space, a fraction, `Z` / `+08:00` / `-0130`, in brackets or not:
  `2026-01-11T10:00:05.123Z` (most loggers, kubectl --timestamps, loguru's `2026-01-11 10:00:05.123 | INFO |`);
- Python logging's asctime `2026-01-11 10:00:05,123` (logging, Ray, verl); `2026/01/11 10:00:05`;
  `2026-01-11_10:00:05`, open_clip's `2026-01-11,10:00:05 | INFO |`, lm-evaluation-harness's
  `2026-01-11:10:00:05,123 INFO`, torchrun's error summary
  (`  time      : 2026-01-11_10:00:05`, behind its field name);
- logging's `%m/%d/%Y %H:%M:%S`, `03/18/2026 09:12:53 - INFO - name - msg` (HF's example scripts,
  accelerate, older LLaMA-Factory): month first, unless the first field is over 12 (then it is the
  day) or reading it month first would put the line after its reference time and day first would not;
- glog `I1122 10:00:00.123456`, also with a one-digit month and in brackets, as c10d prints it:
  `[W326 22:36:28.884042812 socket.cpp:489]` (Ray's C++ core, c10d, NCCL);
- vLLM's `INFO 11-22 10:00:00` (vLLM, SGLang);
- the compact `20260304-10:31:13.128` (AReaL);
- the time of day alone, `10:31:13.128 [INFO:swift]`, `10:31:13 [SUCCESS]` (ms-swift, loguru-style);
- fvcore's `[04/02 11:21:02 d2.engine.train_loop]:` (detectron2): month first, no year.

Times without a zone are local time. A date that does not exist (`2026-02-30`) is no stamp.

The time of day alone is placed on the latest day that does not put it more than an hour after its
line's reference time. glog and vLLM print no year: such a stamp is placed in the latest year that
does not put it after the line's reference time (the file's mtime for what was already written, the
arrival for live lines): no line was written after its file was last modified, so a log from March read in November is
from this March, and one from December read in January is from last year. A file whose own dated
stamps are older than its mtime by most of a year (a log copied or downloaded long after the run)
lends them its year instead (`yearless_reference`): its vLLM lines are from the run, not from the
year it was copied in.
"""

from __future__ import annotations

import calendar
import re
import time
from collections import deque

# One regex for every timestamp form; group 1, 5, 8, 11, 14, 17 or 20 is the text of its minute (the cache key).
TS_RE = re.compile(
    # ISO 8601, Python logging asctime, `2026/01/11 10:00:05`, optionally in brackets (old DeepSpeed's after its
    # level: `[INFO 2020-06-08 05:52:14]`).
    r"\[?(?:(?:INFO|WARNING|ERROR|DEBUG) )?"
    r"(\d{4}[-/]\d\d[-/]\d\d[T _,:]\d\d:\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?(?!\d)"
    # glog `I1122 10:00:00.123456`, c10d's `[W326 22:36:28.884042812` (a one-digit month): no year.
    r"|\[?[IWEF](\d{3,4} \d\d:\d\d):(\d\d)(?:\.(\d+))?(?!\d)"
    # vLLM `INFO 01-11 10:00:05`: no year.
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d):(\d\d)(?:\.(\d+))?(?!\d)"
    # AReaL `20260304-10:31:13.128`.
    r"|(\d{8}-\d\d:\d\d):(\d\d)(?:\.(\d+))?(?!\d)"
    # The time of day alone, `10:31:13.128 [INFO:swift]`: no date.
    r"|\[?(\d\d:\d\d):(\d\d)(?:[.,](\d+))?(?![\d:])"
    # logging's `%m/%d/%Y %H:%M:%S`, `03/18/2026 09:12:53` (or the day first, _slashed_epoch).
    r"|(\d\d/\d\d/\d{4} \d\d:\d\d):(\d\d)(?:[.,](\d+))?(?!\d)"
    # fvcore's (detectron2's) `[04/02 11:21:02 d2.engine.train_loop]:`, `%m/%d %H:%M:%S`: no year.
    r"|\[?(\d\d/\d\d \d\d:\d\d):(\d\d)(?![\d/])"
)
TS_FIRST = frozenset("0123456789[IWEFDC ")  # a line starting otherwise has no timestamp: no regex
SLACK = 86400.0  # a year-less stamp may lie this far past its reference (zones, a clock ahead)
DAYLESS_SLACK = 3600.0  # a day-less stamp may lie this far past its reference (a clock ahead)

_NO_MINUTE = float("nan")  # "not cached yet", compared by identity
# Epoch seconds of each minute seen, keyed by its text (+ zone, + the reference day for year-less
# forms): a flood of lines from the same minute costs a regex match and a dict lookup each.
_minute_cache: dict[str, float | None] = {}
_zone: tuple[object, ...] = ()  # the local zone the cache was filled under


def check_zone() -> None:
    """Forget cached minutes when the local zone changed (`TZ` set and `time.tzset()`): naive stamps
    are local time. Called once per batch of lines, not per line."""
    global _zone
    zone = (time.timezone, time.altzone, time.tzname)
    if zone != _zone:
        _minute_cache.clear()
        _zone = zone


def _minute_epoch(year: int, month: int, day: int, hour: int, minute: int, tz: str) -> float | None:
    if not (1 <= month <= 12 and hour <= 23 and minute <= 59) or not 1 <= day <= _days_in(year, month):
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


def _days_in(year: int, month: int) -> int:
    if not 1 <= year <= 9999:
        return 0
    return calendar.monthrange(year, month)[1]


def _dayless_epoch(hour: int, minute: int, ref: float) -> float | None:
    """The latest day that keeps the time at most DAYLESS_SLACK after `ref`: no line was written after
    its reference (a file's mtime, a line's arrival); a clock a little ahead is tolerated."""
    day = time.localtime(ref)
    base = _minute_epoch(day.tm_year, day.tm_mon, day.tm_mday, hour, minute, "")
    if base is None:
        return None
    # A whole day back from today's base (mktime would normalise a day 0 into the month before).
    return base if base <= ref + DAYLESS_SLACK else base - 86400.0


def _yearless_epoch(month: int, day: int, hour: int, minute: int, ref: float) -> float | None:
    """The latest year that keeps the stamp at most SLACK after `ref` (never in the future of it)."""
    year = time.localtime(ref).tm_year
    for candidate in (year + 1, year, year - 1):  # Jan 1st's lines read on Dec 31st belong to next year
        base = _minute_epoch(candidate, month, day, hour, minute, "")
        if base is not None and base <= ref + SLACK:
            return base
    return None


def _slashed_epoch(first: int, second: int, year: int, hour: int, minute: int, ref: float) -> float | None:
    """`MM/DD/YYYY` as logging's `%m/%d/%Y` prints it, unless that cannot be: a first field over 12 is the
    day, and so is it when month first would put the line more than SLACK after its reference (a file's
    mtime: no line was written after it) while day first would not. Both in the past: month first."""
    month_first = _minute_epoch(year, first, second, hour, minute, "")
    if month_first is not None and month_first <= ref + SLACK:
        return month_first
    day_first = _minute_epoch(year, second, first, hour, minute, "")
    if day_first is not None and (month_first is None or day_first <= ref + SLACK):
        return day_first
    return month_first


def _minute_of(key: str, ref: float) -> float | None:
    """Epoch of a minute key from TS_RE: a date form, AReaL's `YYYYMMDD-hh:mm`, vLLM's `MM-DD hh:mm`,
    glog's `MMDD hh:mm` (or `MDD hh:mm`), `MM/DD/YYYY hh:mm`, or `hh:mm` alone."""
    if len(key) >= 16 and key[4] in "-/":
        return _minute_epoch(int(key[:4]), int(key[5:7]), int(key[8:10]), int(key[11:13]), int(key[14:16]), key[16:])
    if len(key) == 14 and key[8] == "-":
        return _minute_epoch(int(key[:4]), int(key[4:6]), int(key[6:8]), int(key[9:11]), int(key[12:14]), "")
    if len(key) == 5:
        return _dayless_epoch(int(key[:2]), int(key[3:5]), ref)
    if key[2] == "/":
        return _slashed_epoch(int(key[:2]), int(key[3:5]), int(key[6:10]), int(key[11:13]), int(key[14:16]), ref)
    if key[2] == "-":
        return _yearless_epoch(int(key[:2]), int(key[3:5]), int(key[6:8]), int(key[9:11]), ref)
    date, _, clock = key.partition(" ")
    return _yearless_epoch(int(date[:-2]), int(date[-2:]), int(clock[:2]), int(clock[3:5]), ref)


def stamp_of(groups: tuple[str | None, ...], ref: float) -> float | None:
    """Epoch seconds from the groups of a TS_RE match; `ref` places year-less forms (module doc)."""
    if groups[0]:
        key, sec, frac = groups[0] + (groups[3] or ""), groups[1], groups[2]
        cache_key = key
    elif groups[10]:
        key, sec, frac = groups[10], groups[11], groups[12]
        cache_key = key
    elif groups[16]:  # `MM/DD/YYYY`: which field is the day may depend on the reference (to the hour)
        key, sec, frac = groups[16], groups[17], groups[18]
        cache_key = f"{key}@{int(ref) // 3600}"
    elif groups[19]:  # fvcore's `MM/DD hh:mm`: no year
        key, sec, frac = groups[19].replace("/", "-"), groups[20], None  # as vLLM's `MM-DD hh:mm`
        cache_key = f"{key}@{int(ref) // 3600}"
    else:
        if groups[4]:  # glog
            key, sec, frac = groups[4], groups[5], groups[6]
            cache_key = f"{key}@{int(ref) // 3600}"  # the year chosen depends on the reference (to the hour)
        elif groups[7]:  # vLLM
            key, sec, frac = groups[7], groups[8], groups[9]
            cache_key = f"{key}@{int(ref) // 3600}"
        else:  # the time of day alone: the day chosen depends on the reference to the minute
            key, sec, frac = groups[13] or "", groups[14], groups[15]
            cache_key = f"{key}@{int(ref) // 60}"
    base = _minute_cache.get(cache_key, _NO_MINUTE)
    if base is _NO_MINUTE:
        base = _minute_of(key, ref)
        if len(_minute_cache) > 4096:
            _minute_cache.clear()
        _minute_cache[cache_key] = base
    if base is None or sec is None or sec > "60":
        return None
    return base + int(sec) + (float("0." + frac) if frac else 0.0)


def parse_timestamp(text: str, ref: float | None = None) -> float | None:
    """Epoch seconds of a timestamp at the very start of `text` (forms: module doc), else None.
    `ref` (default: now) is when the line was known to exist: it places year-less stamps."""
    if text[:1] not in TS_FIRST or (m := TS_RE.match(text)) is None:
        return None
    check_zone()
    return stamp_of(m.groups(), time.time() if ref is None else ref)


# How far past a file's newest dated stamp its year-less stamps may lie (a run, or a rollover).
YEARLESS_REACH = 300 * 86400.0
TAIL_BYTES = 64 * 1024  # how much of a file's end is read for its newest dated stamp
_DATED_RE = re.compile(rb"(?<!\d)(\d{4})[-/](\d\d)[-/](\d\d)[T _,:](\d\d):(\d\d):(\d\d)(?!\d)")
_SLASHED_RE = re.compile(rb"(?<![\d/])(\d\d)/(\d\d)/(\d{4}) (\d\d):(\d\d):(\d\d)(?!\d)")  # MM/DD/YYYY


def yearless_reference(tail: bytes, mtime: float) -> float:
    """What places a file's year-less stamps (vLLM's `INFO 06-07 …`, glog): its mtime, unless the
    newest full date in its `tail` is more than YEARLESS_REACH older, then that date plus the reach.
    A log copied months after its run keeps its lines in the run's year (a 365-day phase otherwise)."""
    found = [_minute_epoch(*(int(g) for g in m.groups()[:5]), "") for m in _DATED_RE.finditer(tail)]
    if b"/" in tail:
        found += [_slashed_epoch(*(int(g) for g in (m[1], m[2], m[3], m[4], m[5])), mtime)
                  for m in _SLASHED_RE.finditer(tail)]
    newest = None
    for t in found:
        if t is not None and t <= mtime + SLACK and (newest is None or t > newest):
            newest = t
    return mtime if newest is None else min(mtime, newest + YEARLESS_REACH)


SKEW_MIN = 60.0  # below this, arrival minus stamp is write/flush/transport delay, not a clock offset
SKEW_SAMPLES = 32  # live lines whose least delay estimates a source's offset


class ClockSkew:
    """The offset between the clock a log's stamps were written by and this machine's.

    A job in a container that stamps in UTC while the dashboard runs with TZ=Asia/Shanghai, or a
    node whose clock is 10 minutes behind, writes lines whose stamps are far from when they arrive.
    Delays (buffering, Ray's log monitor) only ever make a line late, so the least `arrival - stamp`
    over the last few live lines is the offset; under SKEW_MIN it is taken to be no offset at all.
    A stamp ahead of its file's mtime is an offset too (a line cannot be written after its file).
    """

    def __init__(self) -> None:
        self._samples: dict[str, deque[float]] = {}
        self.offsets: dict[str, float] = {}  # source -> seconds to add to its stamps (only when >= SKEW_MIN)

    def observe(self, source: str, stamp: float, arrival: float) -> None:
        samples = self._samples.get(source)
        if samples is None:
            samples = self._samples[source] = deque(maxlen=SKEW_SAMPLES)
        samples.append(arrival - stamp)
        offset = min(samples)  # arrival - stamp = offset + delay, and delay >= 0
        if abs(offset) >= SKEW_MIN:
            self.offsets[source] = offset
        else:
            self.offsets.pop(source, None)

    def observe_written(self, source: str, newest_stamp: float, mtime: float) -> None:
        """Existing content: only a stamp after the file's mtime proves an offset (the file can have
        been quiet since its last stamp, so one before it proves nothing)."""
        if newest_stamp - mtime >= SKEW_MIN and source not in self.offsets:
            self.offsets[source] = mtime - newest_stamp

    def observe_written_behind(self, source: str, last_stamp: float, mtime: float) -> None:
        """A followed file's last line stamped long before its mtime: the file was written then, so
        its stamps are on a clock that far behind (history.MTIME_BEHIND says how far counts)."""
        if source not in self.offsets:
            self.offsets[source] = mtime - last_stamp

    def correct(self, source: str, stamp: float) -> float:
        return stamp + self.offsets.get(source, 0.0)
