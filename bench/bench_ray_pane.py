"""The Ray pane with 10,000 synthetic actors: time to build its text, and a full refresh in the real app.

Usage: .venv/bin/python bench/bench_ray_pane.py [--actors N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from gkdtop.config import Config, builtin_phases
from gkdtop.model import RayActor, RayNode, RayState
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.ray_pane import render_cluster

STATES = ["ALIVE"] * 8 + ["PENDING_CREATION", "DEAD"]


def synthetic(n: int) -> RayState:
    actors = [
        RayActor(actor_id=f"{i:032x}", class_name=f"Worker{i % 120}", state=STATES[i % len(STATES)], pid=10_000 + i,
                 node_id=f"node{i % 16}", required_resources={"CPU": 1.0, "GPU": 0.5},
                 death_cause="The actor died because its worker process exited (SIGKILL)" if i % 10 == 9 else "")
        for i in range(n)
    ]
    nodes = [RayNode(node_id=f"node{i}", ip=f"10.0.0.{i}", is_head=i == 0, state="ALIVE",
                     resources_total={"CPU": 64.0, "GPU": 8.0}) for i in range(16)]
    return RayState(status="connected", address="http://127.0.0.1:8265", resources_total={"CPU": 1024.0, "GPU": 128.0},
                    resources_available={"CPU": 10.0, "GPU": 0.0}, pending=[{"GPU": 8.0}], nodes_alive=16,
                    nodes=nodes, actors=actors, actors_total=n)


async def app_refresh(state: RayState, runs: int) -> list[float]:
    monitor = Monitor(Config(phases=builtin_phases()), logs=["/nonexistent.log"], ray_address="http://127.0.0.1:9")
    monitor.collectors = []
    app = GkdtopApp(monitor.config, monitor)
    times = []
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("5")
        app.store.ray = state
        for _ in range(runs):
            started = time.perf_counter()
            app.ray.refresh_from(app.store)
            await pilot.pause()
            times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actors", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    state = synthetic(args.actors)
    text_times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        render_cluster(state)
        text_times.append(time.perf_counter() - started)
    full = asyncio.run(app_refresh(state, args.runs))
    print(f"Ray pane, {args.actors} actors: text {statistics.median(text_times) * 1000:.1f} ms, "
          f"refresh + draw in the app {statistics.median(full) * 1000:.1f} ms (median of {args.runs})")
    report(f"Ray pane update, {args.actors:,} actors", f"text {statistics.median(text_times) * 1000:.1f} ms, "
           f"refresh + draw {statistics.median(full) * 1000:.1f} ms", "-", None, "bench/bench_ray_pane.py")


if __name__ == "__main__":
    main()
