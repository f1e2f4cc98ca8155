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


def summarize(values: array, steps: array, stride: int = 1) -> dict[str, Any]:
    """count, mean, p50/p95/max, the five slowest (with their steps) and the trend of one quantity.
    Three passes over the values (a sum, a sort, the slowest's places): replay sums up 60,000 steps
    of a dozen keys at its end."""
    try:
        total = math.fsum(values)
    except (OverflowError, ValueError):  # finite values whose sum is not, or inf and -inf: filtered below
        total = math.inf
    if not math.isfinite(total):
        keep = [i for i, v in enumerate(values) if math.isfinite(v)]  # nan / inf: not a duration
        values, steps = array("d", (values[i] for i in keep)), array("q", (steps[i] for i in keep))
        total = math.fsum(values)
    n = len(values)
    if not n:
        return {"count": 0, "mean_s": None, "p50_s": None, "p95_s": None, "max_s": None, "slowest": [],
                "trend": None}
    ordered = values.tolist()
    ordered.sort()
    tenth = n // 10
    trend = None
    if tenth:
        first, last = math.fsum(values[:tenth]) / tenth, math.fsum(values[-tenth:]) / tenth
        trend = last / first if first > 0 else None
    # The slowest: only the values at or above the fifth largest compete (ties included).
    at_least = ordered[-min(SLOWEST, n)]
    slowest = heapq.nlargest(SLOWEST, [(value, steps[i]) for i, value in enumerate(values) if value >= at_least])
    return {
        "count": n * stride,
        "mean_s": total / n,
        # Nearest rank: p95 of a few steps is their slowest, never below the mean (flooring put it at their fastest).
        "p50_s": ordered[math.ceil(0.5 * n) - 1],
        "p95_s": ordered[math.ceil(0.95 * n) - 1],
        "max_s": ordered[-1],
        "slowest": [{"step": step, "seconds": value} for value, step in slowest],
        "trend": trend,
    }


class _Rows:
    """Steps that printed the same timing keys in the same order (a run keeps them): one flat array
    of their values, row after row, so a step costs one C-level `extend`, not a Python loop."""

    __slots__ = ("flat", "keys", "steps")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.flat = array("d")
        self.steps = array("q")

    def column(self, key: str) -> tuple[array, array]:
        width = len(self.keys)
        return self.flat[self.keys.index(key) :: width], self.steps

    def thin(self) -> None:
        width = len(self.keys)
        flat = array("d")
        for row in range(0, len(self.steps), 2):
            flat.extend(self.flat[row * width : (row + 1) * width])
        self.flat, self.steps = flat, self.steps[::2]


class StepStats:
    """Every step line of the run: how many, which, and how long each part took."""

    def __init__(self) -> None:
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.seconds = array("d")  # per step: timing_s/step, else the spacing of step lines
        self.seconds_steps = array("q")
        self.rows: list[_Rows] = []  # timing_s/* values, grouped by the keys a step printed
        self.named: set[str] = set()  # parts a loop's own print times under its own names (not verl's timing_s/*)
        self.stride = 1  # each kept step stands for this many (1 until MAX_VALUES was reached)
        self._last_own = False  # the last step's time was its line's own stamp (not a neighbour's)
        self._summary: tuple[int, dict[str, Any]] | None = None
        # The loop's bar's own pace, one value per item it reached (`2.00s/it`, `3.1it/s` turned round): a log
        # whose steps carry no time (HF's dicts, an unstamped bar) still shows where its steps got slower.
        self.bar_seconds = array("d")
        self.bar_items = array("q")
        self._bar_item: int | None = None
        self._bar_key = ""
        self.bar_added = 0  # values added, ever (a series started again or thinned keeps counting: a cache's key)

    def add_bar(self, item: int, seconds: float, key: str = "") -> None:
        """The loop's bar (`key`: its text before the percentage, digits aside) reached `item` at a pace of `seconds`
        an item (tqdm's smoothed rate); a redraw at the same item adds nothing. Another bar taken for the loop's
        starts the series again: two bars' paces are no one level."""
        if key != self._bar_key:
            self.bar_seconds, self.bar_items, self._bar_key, self._bar_item = array("d"), array("q"), key, None
        if item == self._bar_item:
            return
        self._bar_item = item
        self.bar_added += 1
        self.bar_seconds.append(seconds)
        self.bar_items.append(item)
        if len(self.bar_seconds) >= MAX_VALUES:
            self.bar_seconds, self.bar_items = self.bar_seconds[::2], self.bar_items[::2]

    def add(self, step: int, t: float | None, timings: dict[str, float], own: bool = True) -> None:
        """`t`: None where the reader did not need it (a step that carries its own `timing_s/step`);
        `own`: `t` is the line's own stamp. Only two own stamps space a step: lines dated by a stamp
        before them (metric dicts printed in one burst) would say their steps took 0 s."""
        if self.last == step:
            return  # the same step printed again (another rank, a re-print)
        seconds = timings.get("step")
        if seconds is None and own and self._last_own and self.last is not None and self.last_time is not None and (
                step > self.last and t is not None and t >= self.last_time):  # stamps going backwards: no step
            seconds = (t - self.last_time) / (step - self.last)
        self._last_own = own
        self.count += 1
        if self.first is None:
            self.first, self.first_time = step, t
        self.last, self.last_time = step, t
        if seconds is not None:
            self.seconds.append(seconds)
            self.seconds_steps.append(step)
        if timings and (rows := self._rows_for(tuple(timings))) is not None:
            rows.flat.extend(timings.values())
            rows.steps.append(step)
        if len(self.seconds) >= MAX_VALUES:
            self._thin()

    def add_run(self, steps: list[int], first_time: float | None, last_time: float | None,
                keys: tuple[str, ...], flat: array) -> None:
        """What `add` does for each of `steps`, in C-level extends: steps that each printed the same
        timing keys `keys` (`step` among them), no step twice in a row nor equal to the last one;
        `flat`: their values, row after row. Times are the first's and the last's."""
        width, column, n = len(keys), keys.index("step"), len(steps)
        self.count += n
        if self.first is None:
            self.first, self.first_time = steps[0], first_time
        self.last, self.last_time = steps[-1], last_time
        self._last_own = False  # history's fast lines carry no stamp of their own
        rows = self._rows_for(keys)
        done = 0
        while done < n:  # up to where `add` would thin, then on
            take = min(n - done, MAX_VALUES - len(self.seconds))
            part, at = flat[done * width : (done + take) * width], steps[done : done + take]
            self.seconds.extend(part[column::width])
            self.seconds_steps.extend(at)
            if rows is not None:
                rows.flat.extend(part)
                rows.steps.extend(at)
            done += take
            if len(self.seconds) >= MAX_VALUES:
                self._thin()

    def _rows_for(self, keys: tuple[str, ...]) -> _Rows | None:
        """The rows of a key set, made the latest; None past the bound (a run prints a few, not thousands)."""
        rows = self.rows[-1] if self.rows else None
        if rows is None or rows.keys != keys:
            rows = next((r for r in self.rows if r.keys == keys), None)
            if rows is None:
                if len(self.rows) >= 64:
                    return None
                rows = _Rows(keys)
                self.rows.append(rows)
            else:  # back to an earlier key set: keep the latest one last
                self.rows.remove(rows)
                self.rows.append(rows)
        return rows

    def _thin(self) -> None:
        self.seconds, self.seconds_steps = self.seconds[::2], self.seconds_steps[::2]
        for rows in self.rows:
            rows.thin()
        self.stride *= 2

    def timing_keys(self) -> list[str]:
        """Every `timing_s/*` key the run printed, in the order first seen."""
        return list(dict.fromkeys(k for rows in self.rows for k in rows.keys))

    def column(self, key: str) -> tuple[array, array]:
        """One timing key's values and their steps, the whole run (thinned by `stride`)."""
        values, steps = array("d"), array("q")
        for rows in sorted(self.rows, key=lambda r: r.steps[0] if r.steps else 0):
            if key in rows.keys:
                column, at = rows.column(key)
                values.extend(column)
                steps.extend(at)
        return values, steps

    def summary(self) -> dict[str, Any]:
        """Computed when asked for, then kept until the next step: a view asks every second."""
        if not self.count:
            return {"count": 0}
        if self._summary is not None and self._summary[0] == self.count:
            return self._summary[1]
        out: dict[str, Any] = {"count": self.count, "first": self.first, "last": self.last,
                               "first_time": self.first_time, "last_time": self.last_time}
        out.update(summarize(self.seconds, self.seconds_steps, self.stride))
        out["count"] = self.count  # steps, not the steps that had a duration
        timing: dict[str, dict[str, Any]] = {}
        for key in self.timing_keys():
            timing[key] = summarize(*self.column(key), self.stride)
        out["timing"] = timing
        out["timing_mean_s"] = {key: s["mean_s"] for key, s in timing.items() if s["count"]}
        out["named"] = sorted(self.named)
        self._summary = (self.count, out)
        return out


def timed_steps(steps: dict[str, Any]) -> int:
    """How many steps timed their parts (a `timing_s/*` key besides the step's own time): a hint comparing
    a step's breakdown needs two."""
    return max((s["count"] for key, s in (steps.get("timing") or {}).items() if key != "step"), default=0)


def ran_steps(steps: dict[str, Any]) -> int:
    """How many steps ran, timed or not: the step lines read, or where the loop's bar is, whichever says more."""
    return max(timed_steps(steps), steps.get("count") or 0, (steps.get("bar") or {}).get("n") or 0)


def bar_pace(bar: dict[str, Any] | None) -> str:
    """The loop's bar's own pace, `5.19 s/it` (`it/s` turned round), or "" where it shows none."""
    pace = (bar or {}).get("s_per_it")
    return "" if pace is None else f"{pace:.2f} s/it"


def step_pace(steps: dict[str, Any]) -> str:
    """Where a step's time goes, as the log's own timing keys measured it: the largest part and its share of
    the step (a slow run's first question), or "" where the log times no parts."""
    means = dict(steps.get("timing_mean_s") or {})
    total = means.pop("step", None) or steps.get("mean_s")
    if not means or not total or total <= 0:
        return ""
    key, mean = max(means.items(), key=lambda kv: kv[1])
    if mean <= 0 or mean > total * 1.05:
        return ""
    named = steps.get("named") or ()
    part = key if key in named else f"timing_s/{key}"
    return f"{part} takes {100 * mean / total:.0f}% of a step ({mean:.1f} s of {total:.1f} s, mean)"
