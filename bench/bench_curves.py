"""Training curves at 100,000 steps: the Metrics pane's redraw in the real app (against the same
redraw with 1,000 steps: the history is bounded, so the draw should not grow with the run), the
anomaly scan (against the whole-run step statistics the Phases pane already asks for), and the
memory the curves of sixty metrics hold (against the step statistics' own arrays).

Usage: .venv/bin/python bench/bench_curves.py [--steps 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from gkdtop.analysis.anomalies import AnomalyLimits, scan
from gkdtop.analysis.curves import Curves
from gkdtop.analysis.steps import StepStats
from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.metrics_pane import MetricsPane

KEYS = ["critic/score/mean", "response_length/mean", "response_length/clip_ratio", "actor/entropy",
        "perf/throughput", "actor/pg_loss", "actor/grad_norm"] + [f"extra/metric_{i}" for i in range(48)]
PARTS = ["gen", "reward", "old_log_prob", "ref", "update_actor", "step"]


def run_of(steps: int, curves: Curves | None = None, stats: StepStats | None = None) -> tuple[Curves, StepStats]:
    """A run's curves and step statistics, fed as history feeds them: verl step lines in blocks of 500."""
    rng = random.Random(1)
    curves = Curves() if curves is None else curves
    stats = StepStats() if stats is None else stats
    for start in range(1, steps + 1, 500):
        block = range(start, min(start + 500, steps + 1))
        lines = []
        for step in block:
            parts = {p: rng.uniform(5, 15) for p in PARTS[:-1]}
            parts["step"] = sum(parts.values())
            metrics = [f"{k}:{rng.uniform(0, 1):.6f}" for k in KEYS]
            metrics += [f"timing_s/{k}:{v:.6f}" for k, v in parts.items()]
            lines.append(" - ".join(metrics).encode())
            stats.add(step, None, parts)
        curves.add_bytes(list(block), lines)
    return curves, stats


def held(steps: int) -> tuple[int, int]:
    """Bytes the curves and the step statistics hold after `steps` steps (tracemalloc, once built)."""
    curves, stats = Curves(), StepStats()
    tracemalloc.start()
    run_of(steps, curves=curves)  # the step statistics it fills are dropped on return
    curves.flush()
    curves_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    run_of(steps, stats=stats)
    stats_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return curves_bytes, stats_bytes


async def pane_draw(curves: Curves, stats: StepStats, runs: int, size: tuple[int, int]) -> list[float]:
    """Seconds for the Metrics pane to redraw (its six charts built and painted) once a step landed."""
    monitor = Monitor(Config(phases=builtin_phases()), logs=["/nonexistent.log"], ray_address="http://127.0.0.1:9")
    monitor.collectors = []
    app = GkdtopApp(monitor.config, monitor)
    times = []
    async with app.run_test(size=size) as pilot:
        phases = app.store.analysis.phases
        phases.curves, phases.stats = curves, stats
        await pilot.press("6")
        pane = app.query_one(MetricsPane)
        for _ in range(5):  # laid out at its size, plotext imported, the charts mounted
            await pilot.pause(0.1)
        for _ in range(runs):
            pane._drawn = None  # as when a step landed
            started = time.perf_counter()
            pane.refresh_from(app.store)
            for plot in pane.query("PlotextPlot"):
                if plot.display:
                    plot.render()  # what the next paint does with each chart
            await pilot.pause()
            times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    big, big_stats = run_of(args.steps)
    small, small_stats = run_of(1000)
    size = (160, 48)
    draw_big = statistics.median(asyncio.run(pane_draw(big, big_stats, args.runs, size)))
    draw_small = statistics.median(asyncio.run(pane_draw(small, small_stats, args.runs, size)))
    print(f"Metrics pane redraw at {size[0]}x{size[1]}: {args.steps} steps {draw_big * 1000:.0f} ms, "
          f"1000 steps {draw_small * 1000:.0f} ms (median of {args.runs})")
    report(f"Metrics pane redraw (6 charts, {size[0]}x{size[1]}), {args.steps:,} steps", f"{draw_big * 1000:.0f} ms",
           f"{draw_small * 1000:.0f} ms with 1,000 steps", draw_big / draw_small, "bench/bench_curves.py")

    limits = AnomalyLimits()
    scans, summaries = [], []
    for _ in range(args.runs):
        big_stats._summary = None
        started = time.perf_counter()
        big_stats.summary()
        summaries.append(time.perf_counter() - started)
        started = time.perf_counter()
        scan(big_stats, big, limits)
        scans.append(time.perf_counter() - started)
    scanned, summed = statistics.median(scans), statistics.median(summaries)
    print(f"anomaly scan, {args.steps} steps, {len(KEYS)} metrics and {len(PARTS)} timing parts: "
          f"{scanned * 1000:.0f} ms; the step statistics' summary {summed * 1000:.0f} ms")
    report(f"anomaly scan, {args.steps:,} steps ({len(PARTS)} timing parts at full resolution)",
           f"{scanned * 1000:.0f} ms", f"{summed * 1000:.0f} ms (StepStats.summary, the same steps)",
           scanned / summed, "bench/bench_curves.py")

    curves_bytes, stats_bytes = held(args.steps)
    print(f"held after {args.steps} steps: curves of {len(KEYS) + len(PARTS)} metrics {curves_bytes / 2**20:.1f} MiB, "
          f"step statistics ({len(PARTS)} timing parts) {stats_bytes / 2**20:.1f} MiB")
    report(f"memory of the curves, {args.steps:,} steps x {len(KEYS) + len(PARTS)} metrics",
           f"{curves_bytes / 2**20:.1f} MiB", f"{stats_bytes / 2**20:.1f} MiB (StepStats, {len(PARTS)} timing parts)",
           curves_bytes / stats_bytes, "bench/bench_curves.py")


if __name__ == "__main__":
    main()
