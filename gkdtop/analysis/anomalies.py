"""The slow failures of a run that never raises: a step (or one of its `timing_s/*` parts) that got
slower and stayed slower, throughput that dropped, a score that collapsed, clip ratio or response
length that jumped, and NaN/inf in a loss. Each is stated with the step it began at and the numbers.

A change is a change point, not one slow step: the run is cut into windows, each window's median
stands for it (a validation or checkpoint step every N steps moves no median), and a change is where
the medians of the windows after a boundary differ from those before it by the threshold, and the
latest window still does (a transient that recovered is not an anomaly), by more than window
medians move by chance (a metric as noisy as its level is not read as changing); the numbers stated are
those medians. Then the boundary is pinned to the first step that looks like the new level. A run
that drifts (responses growing step by step) moves little from one window to the next: no change.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from gkdtop.model import Anomaly

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gkdtop.analysis.curves import Curves, Series
    from gkdtop.analysis.steps import StepStats

NEIGHBOURS = 3  # windows each side of a boundary that are compared
NOISE_SIGMAS = 4.0  # a change stands this far out of how much window medians move by chance
# Which metrics each check reads, by the names frameworks print (verl, then TRL's).
THROUGHPUT = ("perf/throughput",)
SCORE = ("critic/score/mean", "reward")
CLIP_RATIO = ("response_length/clip_ratio", "completions/clipped_ratio")
LENGTH = ("response_length/mean", "completions/mean_length")
# GRPO's groups with rewards all equal (TRL): all of them, and no advantage is left to learn from.
NO_SIGNAL = ("frac_reward_zero_std", "reward_std")
REWARD_PART = "rewards/"  # TRL GRPO's per reward function means (`rewards/accuracy_reward`, `rewards/x/mean`) ...
# ... not DPO's (KTO's, ORPO's) own `rewards/chosen`, `rewards/rejected`, `rewards/margins`: a rejected reward falling
# is what DPO trains for (review of session 22).
PREFERENCE_REWARD_RE = re.compile(r"\b(?:chosen|rejected|margins?|accurac(?:y|ies))\b|_sum\b")
PART_NAMES = {"gen": "generation", "step": "step time", "update_actor": "actor update",
              "old_log_prob": "old log-prob", "ref": "reference", "update_weights": "weight sync"}


@dataclass(frozen=True, slots=True)
class AnomalyLimits:
    """The thresholds (config `anomalies:`; docs/configuration.md). Defaults stay quiet on every
    healthy run of tests/corpus."""

    slower: float = 1.5  # step time or a timing_s/* part: this many times its earlier median
    min_share: float = 0.05  # ... and grown by at least this share of the step time (not a 0.3 s part)
    throughput_drop: float = 0.4  # throughput fell by this fraction
    score_drop: float = 0.5  # the score fell by this fraction of its earlier level
    clip_jump: float = 0.1  # the clip ratio rose by this much (a fraction: 0.004 -> 0.2)
    length_jump: float = 1.5  # response length this many times its earlier median
    min_steps: int = 20  # steps before any change is judged
    window: int = 5  # the fewest steps a window holds (a run of n steps: n/64 at least)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones): statistics.median, without importing
    statistics (fractions, decimal) into the dashboard's first frame, which builds a Config."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def change_point(values: Sequence[float], limits: AnomalyLimits, changed: Callable[[float, float], bool]
                 ) -> tuple[int, float, float] | None:
    """Where a run's level changed so that `changed(before, after)` holds, and still holds for its
    latest window: (the index it began at, the median before, the median after), or None."""
    if not math.isfinite(sum(values)):  # a NaN or inf is no level: left out (a loss's own anomaly says it)
        values = [v for v in values if math.isfinite(v)]
    n = len(values)
    if n < max(limits.min_steps, 2 * limits.window):
        return None
    w = max(limits.window, n // 64)
    medians = [median(values[i : i + w]) for i in range(0, n - w + 1, w)]
    latest = median(values[-w:])
    # How much a window's median moves by chance: from the steps between neighbours (one change
    # point is one big step among many small ones, so it barely moves their median).
    steps = sorted(abs(b - a) for a, b in pairwise(medians))
    noise = 1.4826 * steps[len(steps) // 2] / math.sqrt(2) if steps else 0.0
    best = None
    for b in range(1, len(medians)):
        before = median(medians[max(0, b - NEIGHBOURS) : b])
        after = median(medians[b : b + NEIGHBOURS])
        if changed(before, after) and changed(before, latest) and abs(after - before) >= NOISE_SIGMAS * noise:
            strength = abs(after - before)
            if best is None or strength > best[0]:
                best = (strength, b, before, after)
    if best is None:
        return None
    _, b, before, after = best
    # Pinned: the first step of the boundary's neighbourhood that is nearer the new level, with most
    # of the window after it nearer too. The neighbourhood reaches a window past each next boundary: where the change
    # fell on a window's edge, the boundary before it scores the same (its window after holds the old level and the
    # median of its neighbours the new), and the change lies a whole window on (review of session 21: "since step
    # 76" for a slowdown at step 81, the old fallback).
    def new(v: float) -> bool:
        return abs(v - after) < abs(v - before)

    start = next((i for i in range(max(1, (b - 2) * w), min(n, (b + 2) * w))
                  if new(values[i]) and 2 * sum(map(new, values[i : i + w])) > len(values[i : i + w])), b * w)
    return start, before, after


def _slower(limits: AnomalyLimits, floor: float) -> Callable[[float, float], bool]:
    return lambda before, after: before > 0 and after >= limits.slower * before and after - before >= floor


def _timing(stats: StepStats, limits: AnomalyLimits) -> list[Anomaly]:
    out = []
    seconds, steps = stats.seconds, stats.seconds_steps
    base = median(seconds) if len(seconds) else 0.0
    parts = [("step", seconds, steps)] + [(key, *stats.column(key)) for key in stats.timing_keys() if key != "step"]
    for key, values, at in parts:
        found = change_point(values, limits, _slower(limits, limits.min_share * base))
        if found is None:
            continue
        i, before, after = found
        finite = [s for s, v in zip(at, values, strict=True) if math.isfinite(v)]
        name = PART_NAMES.get(key, key)
        logged = key if key in stats.named else "timing_s/" + key  # as the log wrote it
        label = name if key == "step" or key in stats.named else f"{name} ({logged})"
        out.append(Anomaly("slower", logged, finite[i], before, after,
                           f"{label} {after / before:.1f}x slower since step {finite[i]} "
                           f"({before:.1f} s → {after:.1f} s)"))
    return out


def _bar(stats: StepStats, limits: AnomalyLimits) -> list[Anomaly]:
    """The loop's bar's pace, where no step carries a time of its own (HF's dicts, an unstamped log)."""
    if len(stats.seconds) or not len(stats.bar_seconds):
        return []
    values = stats.bar_seconds
    found = change_point(values, limits, _slower(limits, limits.min_share * median(values)))
    if found is None:
        return []
    i, before, after = found
    item = stats.bar_items[i]
    return [Anomaly("slower", "bar s/it", item, before, after,
                    f"the loop's bar {after / before:.1f}x slower since item {item} "
                    f"({before:.2f} s/it → {after:.2f} s/it)")]


def _curve(series: Series) -> tuple[list[int], list[float]]:
    """A metric's samples: each bucket's last value (every step's, while the run fits the buckets)."""
    points = series.points()
    return [p[0] for p in points], [p[3] for p in points]


def watched() -> tuple[str, ...]:
    """The metrics the checks read (losses and grad norms, for NaN, and reward parts are watched by name: curves.py)."""
    return (*THROUGHPUT, *SCORE, *CLIP_RATIO, *LENGTH, *NO_SIGNAL)


def _first(curves: Curves, names: Sequence[str]) -> tuple[str, Series] | None:
    found = curves.series()
    return next(((name, found[name]) for name in names if name in found), None)


def _level_checks(curves: Curves, limits: AnomalyLimits) -> list[Anomaly]:
    checks: list[tuple[str, Sequence[str], Callable[[float, float], bool], str]] = [
        ("throughput", THROUGHPUT, lambda b, a: b > 0 and a <= (1 - limits.throughput_drop) * b,
         "throughput dropped {pct} since step {step} ({before:.4g} → {after:.4g})"),
        ("score", SCORE, lambda b, a: b > 0 and b - a >= limits.score_drop * b,
         "score collapsed {pct} since step {step} ({before:.4g} → {after:.4g})"),
        ("clip_ratio", CLIP_RATIO, lambda b, a: a - b >= limits.clip_jump,
         "clip ratio jumped since step {step} ({before:.3g} → {after:.3g})"),
        ("length", LENGTH, lambda b, a: b > 0 and a >= limits.length_jump * b,
         "response length {ratio:.1f}x since step {step} ({before:.0f} → {after:.0f} tokens)"),
    ]
    out = []
    for kind, names, changed, text in checks:
        if (found := _first(curves, names)) is not None:
            out += _level_check(kind, [found], limits, changed, text)
    # Each GRPO reward function's own mean collapsing (an accuracy reward going to 0 while a format reward holds the
    # total up): where the run is GRPO's (it logs its groups' reward spread).
    series = curves.series()
    if any(name in series for name in NO_SIGNAL):
        parts = [(name, found) for name, found in series.items() if name.startswith(REWARD_PART)
                 and not name.endswith("/std") and not PREFERENCE_REWARD_RE.search(name)]
        _, _, collapsed, text = next(check for check in checks if check[0] == "score")
        out += _level_check("score", parts, limits, collapsed, text)
    return out


def _level_check(kind: str, found: Sequence[tuple[str, Series]], limits: AnomalyLimits,
                 changed: Callable[[float, float], bool], text: str) -> list[Anomaly]:
    out = []
    for name, series in found:
        steps, values = _curve(series)
        finite_steps = [s for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
        point = change_point(values, limits, changed)
        if point is None:
            continue
        i, before, after = point
        step = finite_steps[i]
        pct = f"{100 * (1 - after / before):.0f}%" if before else ""
        ratio = after / before if before else math.inf
        out.append(Anomaly(kind, name, step, before, after,
                           f"{name}: " + text.format(pct=pct, step=step, before=before, after=after, ratio=ratio)))
    return out


def _no_signal(curves: Curves, limits: AnomalyLimits) -> list[Anomaly]:
    """GRPO whose every group got equal rewards for its latest `window` records or more (TRL's frac_reward_zero_std at
    1, its reward_std at 0): advantages of 0, so the loss and the gradient carry nothing (audit 15: a run whose loss
    was 0.0 in every record, and one whose reward was always 0)."""
    found = _first(curves, NO_SIGNAL)
    if found is None:
        return []
    name, series = found
    steps, values = _curve(series)
    flat = (lambda v: v >= 0.999) if name == NO_SIGNAL[0] else (lambda v: abs(v) <= 1e-9)
    run = 0
    while run < len(values) and flat(values[len(values) - 1 - run]):
        run += 1
    if run < limits.window:
        return []
    step = steps[len(values) - run]
    return [Anomaly("no_signal", name, step, None, values[-1],
                    f"no learning signal since step {step}: every group's rewards were equal ({name} {values[-1]:g} "
                    f"in the last {run} records), so the advantages are 0 (only a KL term, if any, moves the policy)")]


def _nonfinite(curves: Curves) -> list[Anomaly]:
    """One anomaly for the losses (and grad norms) that went NaN or inf, from the first step one did."""
    bad = [(s.nonfinite_step, name, s) for name, s in curves.series().items()
           if s.nonfinite_step is not None and ("loss" in name or "grad_norm" in name)]
    if not bad:
        return []
    (step, value), name, series = min(bad, key=lambda b: b[0][0])  # type: ignore[index,type-var]
    others = [n for _, n, _ in bad if n != name]
    also = f" (also {', '.join(others[:4])}{' …' if len(others) > 4 else ''})" if others else ""
    return [Anomaly("nonfinite", name, step, None, value,
                    f"{name} is {value} from step {step} ({series.nonfinite} steps){also}")]


def scan(stats: StepStats, curves: Curves, limits: AnomalyLimits) -> list[Anomaly]:
    """Every anomaly of the run so far, in the order it began."""
    found = (_timing(stats, limits) + _bar(stats, limits) + _level_checks(curves, limits) + _nonfinite(curves)
             + _no_signal(curves, limits))
    return sorted(found, key=lambda a: a.step)


def parse_limits(node: Any, where: str) -> AnomalyLimits:
    """Config `anomalies:` (a map of the AnomalyLimits fields), each a positive number."""
    from gkdtop.analysis.rules import check_keys, node_error, number

    check_keys(node, where, "anomalies", set(AnomalyLimits.keys()))
    values: dict[str, Any] = {}
    for k, v in node.value:
        value = number(v, where, f"anomalies.{k.value}")
        if value <= 0:
            raise node_error(where, v, f"anomalies.{k.value}", f"expected a positive number, got {v.value}")
        if k.value in ("min_steps", "window"):
            if value != int(value):
                raise node_error(where, v, f"anomalies.{k.value}", f"expected a whole number, got {v.value}")
            value = int(value)
        values[k.value] = value
    return AnomalyLimits(**values)
