"""Every step metric over the whole run, in bounded memory: the Metrics pane's curves, snapshot's
`metrics` and the anomaly scan's input.

A metric's history is at most MAX_BUCKETS buckets of consecutive steps; each keeps its lowest,
highest and last value, so a one-step spike survives any amount of down-sampling. When the buckets
are full, neighbours merge in pairs and a bucket stands for twice as many steps. History's step
lines come in runs that print the same keys with the same text between them: one pattern of that
text reads a run's values, and each metric takes its column in one C-level `extend`; values are
folded into the buckets FOLD_ROWS at a time, whole buckets by slices. 100,000 steps of 61 metrics
hold 1.5 MiB (bench/bench_curves.py); reading a verl line's sixty values costs ~20 us, which is why
replay reads only the metrics its anomaly checks need (`only`).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Collection, Sequence
from itertools import chain, pairwise
from operator import itemgetter
from typing import Any

MAX_BUCKETS = 1024  # per metric: 3 doubles and a step each (32 KB)
MAX_METRICS = 256  # a run prints sixty or so; past this new names are not kept
FOLD_ROWS = 512  # values of a metric held before they are folded into its buckets
VALUE = rb"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)"  # a value as verl prints it
# `key:value` (verl's ` - ` separated line) and `'key': value` (a metric dict), as phases.METRIC_RE reads them.
METRIC_BYTES_RE = re.compile(rb"([\w./@-]+)['\"]?:[\t ]*" + VALUE + rb"\b")
METRIC_TEXT_RE = re.compile(METRIC_BYTES_RE.pattern.decode())
# Bytes that send a run of step lines line by line in add_bytes (a value not finite, TRL's reward parts). History's
# scan reports whether a chunk holds any of them (Matcher markers): a chunk without them is not searched again.
LINE_BY_LINE = (b"nan", b"inf", b"'rewards/")
Sink = Callable[[int, tuple[str, ...], Sequence[float]], None]  # one step's row, as it lands (replay --csv)


def _lower(a: float, b: float) -> float:
    """min() where a NaN (an empty bucket, or no finite value) loses."""
    return b if a != a or b < a else a


def _higher(a: float, b: float) -> float:
    return b if a != a or b > a else a


def _bounds(chunk: array) -> tuple[float, float, int]:
    """Lowest and highest finite value of a chunk (NaN, NaN where none is) and how many were not finite."""
    total = sum(chunk)
    if math.isfinite(total):
        return min(chunk), max(chunk), 0
    finite = [v for v in chunk if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan, len(chunk)
    return min(finite), max(finite), len(chunk) - len(finite)


class Series:
    """One metric: exact count/first/last/min/max, the non-finite values, and the buckets."""

    __slots__ = (
        "count",
        "first",
        "hi_all",
        "highs",
        "last",
        "last_step",
        "lasts",
        "lo_all",
        "lows",
        "nonfinite",
        "nonfinite_step",
        "open",
        "steps",
        "width",
    )

    def __init__(self) -> None:
        self.count = 0
        self.first = self.last = math.nan
        self.lo_all = self.hi_all = math.nan  # over finite values
        self.nonfinite = 0
        self.nonfinite_step: tuple[int, float] | None = None  # the first NaN/inf: its step and value
        self.width = 1  # steps per bucket
        self.steps = array("q")  # each bucket's last step
        self.lows, self.highs, self.lasts = array("d"), array("d"), array("d")
        self.last_step = 0
        self.open = [0, math.nan, math.nan, math.nan]  # the unfinished bucket: values, lo, hi, last

    def extend(self, steps: Sequence[int], values: array) -> None:
        """Values of consecutive steps, in order (`steps` as long as `values`). Whole buckets are
        cut with C-level slices; only the unfinished one is stepped through."""
        n = len(values)
        if not n:
            return
        if self.count == 0:
            self.first = values[0]
        self.count += n
        self.last, self.last_step = values[-1], steps[-1]
        finite = math.isfinite(sum(values))
        lo, hi, bad = (min(values), max(values), 0) if finite else _bounds(values)
        self.lo_all, self.hi_all = _lower(self.lo_all, lo), _higher(self.hi_all, hi)
        if bad:
            self.nonfinite += bad
            if self.nonfinite_step is None:
                at = next(i for i, v in enumerate(values) if not math.isfinite(v))
                self.nonfinite_step = (steps[at], values[at])
        done = 0
        bucket = self.open
        while done < n:
            w = self.width
            if not bucket[0] and finite and (full := min((n - done) // w, MAX_BUCKETS - len(self.steps))):
                end = done + full * w
                if w == 1:
                    self.lows.extend(values[done:end])
                    self.highs.extend(values[done:end])
                else:
                    starts = range(done, end, w)
                    self.lows.extend([min(values[i : i + w]) for i in starts])
                    self.highs.extend([max(values[i : i + w]) for i in starts])
                self.lasts.extend(values[done + w - 1 : end : w])
                self.steps.extend(steps[done + w - 1 : end : w])
            else:
                end = min(n, done + w - bucket[0])
                chunk = values[done:end]
                lo, hi, _ = _bounds(chunk)
                bucket[0] += end - done
                bucket[1], bucket[2], bucket[3] = _lower(bucket[1], lo), _higher(bucket[2], hi), chunk[-1]
                if bucket[0] == w:
                    self.steps.append(steps[end - 1])
                    self.lows.append(bucket[1])
                    self.highs.append(bucket[2])
                    self.lasts.append(bucket[3])
                    bucket[:] = [0, math.nan, math.nan, math.nan]
            if len(self.steps) >= MAX_BUCKETS:
                self._halve()
            done = end

    def _halve(self) -> None:
        """Neighbours merge: half the buckets, each twice as wide, every extreme kept."""
        lo, hi = self.lows, self.highs
        self.lows = array("d", map(_lower, lo[::2], lo[1::2]))
        self.highs = array("d", map(_higher, hi[::2], hi[1::2]))
        self.lasts, self.steps = self.lasts[1::2], self.steps[1::2]
        self.width *= 2

    def points(self) -> list[tuple[int, float, float, float]]:
        """(last step, lowest, highest, last value) of every bucket, the unfinished one included."""
        out = list(zip(self.steps, self.lows, self.highs, self.lasts, strict=True))
        if self.open[0]:
            out.append((self.last_step, self.open[1], self.open[2], self.open[3]))
        return out

    def as_json(self, points: int = 200) -> dict[str, Any]:
        """count, first, last, min, max, the non-finite values and at most `points` buckets
        ([step, min, max, last], merged further where there are more)."""
        series = self.points()
        group = max(1, math.ceil(len(series) / points))
        if group > 1:
            merged = []
            for i in range(0, len(series), group):
                part = series[i : i + group]
                lo = hi = math.nan
                for _, a, b, _ in part:
                    lo, hi = _lower(lo, a), _higher(hi, b)
                merged.append((part[-1][0], lo, hi, part[-1][3]))
            series = merged
        return {"count": self.count, "first": _value(self.first), "last": _value(self.last),
                "min": _num(self.lo_all), "max": _num(self.hi_all), "nonfinite": self.nonfinite,
                "first_nonfinite_step": self.nonfinite_step[0] if self.nonfinite_step else None,
                "steps_per_point": self.width * group,
                "series": [[s, _num(lo), _num(hi), _value(last)] for s, lo, hi, last in series]}


def _num(value: float) -> float | None:
    """A lowest or highest value JSON can carry: None where there was no finite one."""
    return value if math.isfinite(value) else None


def _value(value: float) -> float | str:
    """A value as printed: NaN and inf as the strings verl prints ("nan", "inf", "-inf")."""
    return value if math.isfinite(value) else str(value)


class Curves:
    """Every metric of every step, fed as rows; read as Series (`series()` folds what is pending).
    Each metric holds its own pending values, so key sets that interleave (a validation step's extra
    keys every tenth step) keep every metric in step order."""

    def __init__(self, only: Collection[str] | None = None) -> None:
        """`only`: keep these metrics and any loss or grad norm (for NaN), not every one (replay's
        anomalies need no more; reading all sixty costs it about as much as the rest of the log)."""
        self.only = None if only is None else tuple(only)
        self._skeletons: dict[bytes, re.Pattern[bytes]] = {}  # patterns of a run's line text (_run_values)
        self._series: dict[str, Series] = {}
        self._pending: dict[str, tuple[array, array]] = {}  # per metric: steps, values not yet folded
        self.last_step: int | None = None
        self.count = 0  # steps added (a step printed twice in a row counts once)
        self.sink: Sink | None = None

    # --- input ----------------------------------------------------------------------------------

    def add(self, step: int, keys: Sequence[str], values: Sequence[float]) -> None:
        """One step's metrics (its keys in printed order)."""
        if step == self.last_step:
            return
        self.last_step = step
        self.count += 1
        for key, value in zip(keys, values, strict=True):
            if (pending := self._pending_of(key)) is not None:
                pending[0].append(step)
                pending[1].append(value)
                if len(pending[0]) >= FOLD_ROWS:
                    self._fold(key)
        if self.sink is not None:
            self.sink(step, tuple(keys), values)

    def add_text(self, step: int, text: str) -> None:
        """A step line's metrics part as text (`key:value - …`, or a metric dict's `'key': value, …`)."""
        pairs = METRIC_TEXT_RE.findall(text)
        self.add(step, list(map(itemgetter(0), pairs)), array("d", map(float, map(itemgetter(1), pairs))))

    def add_bytes(self, steps: Sequence[int], lines: Sequence[bytes], cleared: bool = False) -> None:
        """Step lines' metrics parts as bytes (history's fast path). Lines that print the same keys
        with the same text between them, as a run does, no step twice: one pass of a pattern of that
        text over all of them, values as its groups, and a C-level extend per metric; else line by line.
        `cleared`: the lines hold none of LINE_BY_LINE (the caller's scan found none where they came from)."""
        if not steps:
            return
        if len(lines) > 1 and steps[0] != self.last_step and all(a != b for a, b in pairwise(steps)):
            joined = b"\n".join(lines)
            if self.only is not None and self._add_only(steps, lines, joined, cleared):
                return
            found = self._run_values(lines, joined)
            if found is not None:
                self._extend(steps, *found)
                return
        for step, line in zip(steps, lines, strict=True):
            pairs = METRIC_BYTES_RE.findall(line)
            self.add(step, [k.decode() for k, _ in pairs], array("d", map(float, map(itemgetter(1), pairs))))

    def _run_values(self, lines: Sequence[bytes], joined: bytes) -> tuple[list[str], array] | None:
        """The keys and the values (row after row) of lines that each print the first one's keys with
        the very text between them; None when one differs (a validation step's extra keys)."""
        first = list(METRIC_BYTES_RE.finditer(lines[0]))
        if not first:
            return None
        between = [lines[0][first[0].start() : first[0].start(2)]]
        between += [lines[0][a.end(2) : b.start(2)] for a, b in pairwise(first)]
        skeleton = b"\0".join(between)
        pattern = self._skeletons.get(skeleton)
        if pattern is None:
            if len(self._skeletons) > 32:
                self._skeletons.clear()
            pattern = self._skeletons[skeleton] = re.compile(
                VALUE.join(map(re.escape, between)) + VALUE + rb"\b")
        rows = pattern.findall(joined)
        # A line with keys of its own after the shared ones has more colons than the first.
        if len(rows) != len(lines) or joined.count(b":") != lines[0].count(b":") * len(lines):
            return None
        keys = [m.group(1).decode() for m in first]
        values = array("d", map(float, chain.from_iterable(rows) if len(first) > 1 else rows))
        return keys, values

    def _add_only(self, steps: Sequence[int], lines: Sequence[bytes], joined: bytes, cleared: bool = False) -> bool:
        """`only` (replay without --csv: the metrics anomalies read): each one's values, one pattern
        pass each, of every step while the run fits the buckets, then of every `stride`-th (a change
        point is read from about a thousand points, as the buckets keep them); a run with a NaN or
        inf anywhere goes line by line (a loss that went NaN is read from it). False where a metric
        is missing from some lines."""
        if not cleared and any(marker in joined for marker in LINE_BY_LINE):
            return False  # (TRL's reward functions, `'rewards/accuracy_reward/mean'`: the run's own names, read line
            # by line; not verl's `critic/rewards/mean`, every step of the dense bench log)
        counted, last = len(steps), steps[-1]
        stride = 1 << max(0, (self.count // MAX_BUCKETS).bit_length() - 1)
        if stride > 1:
            first = (-self.count - 1) % stride  # the lines whose place in the run is a multiple of stride
            lines, steps = lines[first::stride], steps[first::stride]
            joined = b"\n".join(lines)
        found = []
        for key in self.only or ():
            pattern = self._skeletons.get(key.encode())
            if pattern is None:
                # A literal first, so the search skips ahead (a look-behind for the key's start would
                # try every byte): a longer key that ends in this one is caught by the count below.
                pattern = self._skeletons[key.encode()] = re.compile(
                    re.escape(key.encode()) + rb"['\"]?:[\t ]*" + VALUE + rb"\b")
            values = pattern.findall(joined)
            if values and len(values) != len(steps):
                return False
            if values:
                found.append((key, array("d", map(float, values))))
        at = array("q", steps)
        for key, values in found:
            self._extend_one(key, at, values)
        self.count += counted
        self.last_step = last
        return True

    def _extend(self, steps: Sequence[int], keys: list[str], values: array) -> None:
        """Rows of the same keys (`values` row after row), as add() would take them one by one."""
        width = len(keys)
        at = array("q", steps)
        for i, key in enumerate(keys):
            self._extend_one(key, at, values[i::width])
        self.count += len(steps)
        self.last_step = steps[-1]
        if self.sink is not None:
            for k, step in enumerate(steps):
                self.sink(step, tuple(keys), values[k * width : (k + 1) * width])

    def _extend_one(self, key: str, steps: array, values: array) -> None:
        if (pending := self._pending_of(key)) is not None:
            pending[0].extend(steps)
            pending[1].extend(values)
            if len(pending[0]) >= FOLD_ROWS:
                self._fold(key)

    def _pending_of(self, key: str) -> tuple[array, array] | None:
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= MAX_METRICS or (
                    self.only is not None and key not in self.only and "loss" not in key and "grad_norm" not in key
                    and not key.startswith("rewards/")):
                return None
            pending = self._pending[key] = (array("q"), array("d"))
            self._series[key] = Series()
        return pending

    def _fold(self, key: str) -> None:
        steps, values = self._pending[key]
        self._series[key].extend(steps, values)
        del steps[:]
        del values[:]

    def flush(self) -> None:
        """Fold every pending value into its series."""
        for key, (steps, _values) in self._pending.items():
            if steps:
                self._fold(key)

    # --- output ---------------------------------------------------------------------------------

    def series(self) -> dict[str, Series]:
        """Every metric, in the order first seen."""
        self.flush()
        return self._series

    def get(self, name: str) -> Series | None:
        return self.series().get(name)

    def as_json(self, points: int = 200) -> dict[str, Any]:
        return {name: s.as_json(points) for name, s in self.series().items()}
