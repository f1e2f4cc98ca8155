"""The Ray task view's cost: CPU per poll of the tasks collector with 10,000 tasks in Ray's task table,
against the Ray pane's own poll (collectors/ray.py) measured in the same run on the same cluster.

A real local cluster (bench/run.py's, else one of our own): four actors each run `step` until the
table holds N finished tasks; then one call of `step` hangs on one actor while the other three
return, the shape the straggler check looks for. Measured, per poll: this process's CPU (the
collector's parsing and joining) and the cluster's (GCS, dashboard: its CPU beyond its idle rate), for
  - the Ray pane's poll (status every poll, actors/nodes/placement groups/jobs every other poll): the baseline;
  - the tasks poll on an empty table, and on the full table (running tasks, actors, failed tasks);
  - the one poll that looks up the split round (every finished `step` of the three peers: the worst
    case, once per round) and the polls after it (the round's members unchanged: no lookup);
  - as the monitor runs it: how often it polls (its interval, or later when its requests took long:
    `idle()`), and the share of a core that makes here and on the cluster.

Usage: .venv/bin/python bench/bench_ray_tasks.py [--tasks 10000] [--polls 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RayInfo, ray_cluster, report, wait_until

from gkdtop.collectors.ray import RayCollector
from gkdtop.collectors.ray_tasks import RayTasksCollector

DRIVER = """
import os, sys, threading, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
n, flag = int(sys.argv[2]), sys.argv[3]
@ray.remote(num_cpus=0.1)
class Worker:
    def step(self, hang=False):
        if hang:
            threading.Event().wait()
        return os.getpid()
workers = [Worker.remote() for _ in range(4)]
done = 0
while done < n:
    ray.get([w.step.remote() for w in workers for _ in range(50)])
    done += 200
print("filled", flush=True)
while not os.path.exists(flag):
    time.sleep(0.1)
calls = [w.step.remote(i == 2) for i, w in enumerate(workers)]
ray.get([c for i, c in enumerate(calls) if i != 2])
print("split", flush=True)
time.sleep(3600)
"""


def cluster(ray: RayInfo) -> list[psutil.Process]:
    """The cluster's own processes (GCS, raylet, the dashboard and its module processes, agents), by temp dir;
    not the driver and its workers, which our requests do not wake."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if ray.temp_root in cmd and "default_worker.py" not in cmd and "GKD" not in cmd:
            found.append(proc)
    return found


def cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


def measure(collect, polls: int, server: list[psutil.Process],  # type: ignore[no-untyped-def]
            pause: float = 0.2) -> tuple[float, float, float]:
    """Median CPU ms per poll here, the cluster's mean CPU ms per poll beyond its idle rate (measured just
    before, as long), and the median wall ms, of `polls` calls of `collect`."""
    s0, w0 = cpu(server), time.perf_counter()
    time.sleep(polls * pause)
    idle = (cpu(server) - s0) / (time.perf_counter() - w0)
    ours, wall = [], []
    s0, w0 = cpu(server), time.perf_counter()
    for _ in range(polls):
        c0, p0 = time.process_time(), time.perf_counter()
        collect()
        ours.append(time.process_time() - c0)
        wall.append(time.perf_counter() - p0)
        time.sleep(pause)
    theirs = max(0.0, cpu(server) - s0 - idle * (time.perf_counter() - w0)) / polls
    return statistics.median(ours) * 1000, theirs * 1000, statistics.median(wall) * 1000


def count(url: str, state: str) -> int:
    """How many `Worker.step` tasks the table holds in `state` (the GCS filters the state)."""
    import json

    with urllib.request.urlopen(f"{url}/api/v0/tasks?limit=1&filter_keys=state&filter_predicates=%3D&filter_values="
                                f"{state}&filter_keys=func_or_class_name&filter_predicates=%3D"
                                "&filter_values=Worker.step", timeout=60) as resp:
        return int(json.load(resp)["data"]["result"].get("num_filtered", 0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--polls", type=int, default=20)
    args = parser.parse_args()
    with ray_cluster() as ray:
        if ray is None:
            print("Ray is not installed: skipped")
            report(f"Ray task view: CPU per poll, {args.tasks:,} tasks", "skipped (no Ray)",
                   command="bench/bench_ray_tasks.py")
            return
        dash = cluster(ray)
        ray_poll = RayCollector(ray.dashboard, details_every=2)
        empty = RayTasksCollector(ray.dashboard)
        base_empty = measure(ray_poll.collect, args.polls, dash)
        tasks_empty = measure(empty.collect, args.polls, dash)

        flag = Path(tempfile.mkdtemp(prefix="gkbench")) / "split"
        env = {**os.environ, **ray.env()}
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, ray.gcs, str(args.tasks), str(flag)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert driver.stdout is not None
            started = time.monotonic()
            assert driver.stdout.readline().strip() == "filled", "the driver ended early"
            # Workers report their events every second, and drop a few past their buffer: most is enough.
            wait_until(lambda: count(ray.dashboard, "FINISHED") >= 0.99 * args.tasks, timeout=120, interval=2.0)
            listed = count(ray.dashboard, "FINISHED")
            print(f"{listed} finished tasks in the table after {time.monotonic() - started:.0f}s")
            base_full = measure(ray_poll.collect, args.polls, dash)
            full = RayTasksCollector(ray.dashboard)
            tasks_full = measure(full.collect, args.polls, dash)
            # As the monitor runs it: every `interval`, or later when its requests took long (its idle()).
            gaps = []
            for _ in range(8):
                began = time.monotonic()
                full.collect()
                gaps.append(time.monotonic() - began + full.idle())  # from this poll to the next one allowed
            period = max(full.interval, statistics.mean(gaps))

            flag.touch()
            assert driver.stdout.readline().strip() == "split", "the driver ended early"
            wait_until(lambda: count(ray.dashboard, "RUNNING") == 1, timeout=60, interval=0.5)  # the returns listed
            split = RayTasksCollector(ray.dashboard, min_age=0.0)  # looks the round up on its first poll
            state = split.collect()
            # A fresh collector's first poll: actors, nodes, failed tasks and one lookup of the round.
            lookup = measure(lambda: RayTasksCollector(ray.dashboard, min_age=0.0).collect(), 3, dash, pause=1.0)
            after = measure(split.collect, args.polls, dash)
            assert len(state.finished) == 3, f"{len(state.finished)} peers found"
        finally:
            driver.kill()
            driver.wait()

    def row(name: str, m: tuple[float, float, float]) -> str:
        return f"{name}: {m[0]:.1f} ms CPU here, {m[1]:.1f} ms on the cluster, {m[2]:.0f} ms wall"

    lines = [row("Ray pane poll, empty cluster (baseline)", base_empty),
             row("tasks poll, empty table", tasks_empty),
             row(f"Ray pane poll, {listed:,} tasks (baseline)", base_full),
             row(f"tasks poll, {listed:,} tasks", tasks_full),
             row("tasks poll that looks up a split round (all finished calls of the method; median of 3)", lookup),
             row("tasks polls after it (same round)", after)]
    here, there = tasks_full[0] / period / 10, tasks_full[1] / period / 10  # ms per poll -> % of a core
    lines.append(f"as the monitor runs it on {listed:,} tasks: a poll every {period:.1f} s, "
                 f"{here:.3f}% of a core here, {there:.2f}% on the cluster")
    print("\n".join(lines), flush=True)
    ratio = tasks_full[0] / base_full[0] if base_full[0] else None
    report(f"Ray task view: CPU per poll, {listed:,} tasks in the table (median of {args.polls}); the poll "
           "that looks up a split round, once per round",
           f"{tasks_full[0]:.1f} ms here + {tasks_full[1]:.1f} ms cluster (a poll every {period:.1f} s: "
           f"{there:.1f}% of a core there); lookup {lookup[0]:.0f} + {lookup[1]:.0f} ms",
           f"Ray pane poll: {base_full[0]:.1f} ms + {base_full[1]:.1f} ms", ratio,
           f"bench/bench_ray_tasks.py --tasks {args.tasks}")


if __name__ == "__main__":
    main()
