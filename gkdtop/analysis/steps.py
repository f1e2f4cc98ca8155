"""Step statistics over the whole run, in bounded memory: one summary for snapshot, replay, the
Phases pane and the bundle.

A 60,000-step run is described by its 60,000 steps, not its last 2,000: count, first/last, mean,
p50/p95/max, the five slowest steps with their numbers and the trend (last tenth vs first tenth),
for the step time and for every `timing_s/*` key verl prints. Values are kept as C doubles (8 MB
for a million steps of one key), so the statistics are exact; summaries are computed when asked.
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import Any

MAX_VALUES = 1 << 18  # per quantity; past this every other value is dropped (the shape stays)
SLOWEST = 5


class Series:
    """One quantity, one value per step, kept as C doubles (8 bytes a step, bounded by MAX_VALUES)."""

    __slots__ = ("_summary", "steps", "stride", "values")

    def __init__(self) -> None:
        self.values = array("d")
        self.steps = array("q")
        self.stride = 1  # each kept value stands for this many (1 until MAX_VALUES was reached)
        self._summary: dict[str, Any] | None = None

    def add(self, value: float, step: int) -> None:
        self.values.append(value)
        self.steps.append(step)
        self._summary = None

    def thin(self) -> None:
        """Past MAX_VALUES: keep every other value."""
        self.values, self.steps = self.values[::2], self.steps[::2]
        self.stride *= 2

    def summary(self) -> dict[str, Any]:
        """Computed when asked for, then kept until the next value: a view asks every second."""
        if self._summary is not None:
            return self._summary
        values = self.values
        if any(not math.isfinite(v) for v in (min(values, default=0.0), max(values, default=0.0), sum(values))):
            values = array("d", (v for v in values if math.isfinite(v)))  # nan / inf: not a duration
        n = len(values)
        if not n:
            return {"count": 0, "mean_s": None, "p50_s": None, "p95_s": None, "max_s": None, "slowest": [],
                    "trend": None}
        ordered = sorted(values)
        tenth = n // 10
        trend = None
        if tenth:
            first, last = math.fsum(values[:tenth]) / tenth, math.fsum(values[-tenth:]) / tenth
            trend = last / first if first > 0 else None
        steps = self.steps if n == len(self.values) else [s for v, s in zip(self.values, self.steps, strict=True)
                                                            if math.isfinite(v)]
        slowest = heapq.nlargest(SLOWEST, zip(values, steps, strict=True))
        self._summary = {
            "count": n * self.stride,
            "mean_s": math.fsum(values) / n,
            "p50_s": ordered[int(0.5 * (n - 1))],
            "p95_s": ordered[int(0.95 * (n - 1))],
            "max_s": ordered[-1],
            "slowest": [{"step": step, "seconds": value} for value, step in slowest],
            "trend": trend,
        }
        return self._summary


class StepStats:
    """Every step line of the run: how many, which, and how long each part took."""

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.seconds = Series()  # per step: timing_s/step, else the spacing of step lines
        self.timing: dict[str, Series] = {}

    def add(self, step: int, t: float, timings: dict[str, float]) -> None:
        if self.last == step:
            return  # the same step printed again (another rank, a re-print)
        seconds = timings.get("step")
        if seconds is None and self.last is not None and self.last_time is not None and step > self.last:
            seconds = (t - self.last_time) / (step - self.last)
        self.count += 1
        if self.first is None:
            self.first, self.first_time = step, t
        self.last, self.last_time = step, t
        if seconds is not None:
            self.seconds.add(seconds, step)
        timing = self.timing
        for key, value in timings.items():
            series = timing.get(key)
            if series is None:
                if len(timing) >= 32:  # a bound: verl prints about ten timing keys
                    continue
                series = timing[key] = Series()
            series.values.append(value)
            series.steps.append(step)
            series._summary = None
        if self.count % 4096 == 0 and any(len(s.values) >= MAX_VALUES for s in (self.seconds, *timing.values())):
            for series in (self.seconds, *timing.values()):
                series.thin()

    def summary(self) -> dict[str, Any]:
        if not self.count:
            return {"count": 0}
        out: dict[str, Any] = {"count": self.count, "first": self.first, "last": self.last,
                               "first_time": self.first_time, "last_time": self.last_time}
        out.update(self.seconds.summary())
        out["count"] = self.count  # steps, not the steps that had a duration
        out["timing"] = {key: series.summary() for key, series in self.timing.items()}
        out["timing_mean_s"] = {key: s["mean_s"] for key, s in out["timing"].items() if s["count"]}
        return out
