"""The live analysis alone during a flood: the log collector and the store (every line meets every
rule: the matcher scans all of them, the lines a rule matches are parsed and fed), headless.

Usage: .venv/bin/python bench/flood_cpu.py [--rate 100000] [--seconds 15]
Reports this process's CPU (all threads) as a share of one core while bench/writer.py writes at the
rate, and checks no line went unseen: lines stored + lines the matcher found nothing in = lines written.
The floor (issue 14): at most 20% of a core at 100k lines/s. Baseline in the same run: `tail -F | grep
-E <the default filter>` following the same writer (by hand, a user's cheapest way to watch it).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import report
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import DEFAULT_FILTER, load_config
from gkdtop.store import Store

WRITER = Path(__file__).with_name("writer.py")


def follow(log: Path, rate: int, seconds: float) -> tuple[float, int, int]:
    """(share of a core, lines seen, lines written) following a writer at `rate` for `seconds`."""
    store = Store(load_config(None))
    collector = LogCollector([str(log)], backlog=0, sieve=store.flood_sieve())
    writer = subprocess.Popen([sys.executable, str(WRITER), str(log), "--rate", str(rate)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # warm-up: the file exists and is being written
            store.put("logs", collector.collect())
            time.sleep(0.05)
        me = psutil.Process()
        cpu0, wall0 = sum(me.cpu_times()[:2]), time.monotonic()
        while time.monotonic() - wall0 < seconds:
            store.put("logs", collector.collect())
            if not collector.behind:
                time.sleep(0.25)  # the collector's own interval (refresh.logs)
        cpu = sum(me.cpu_times()[:2]) - cpu0
        wall = time.monotonic() - wall0
    finally:
        writer.kill()
        writer.wait()
    while (batch := collector.collect()).lines or batch.skipped:  # what was written before it stopped
        store.put("logs", batch)
    written = sum(1 for _ in log.open("rb"))
    return cpu / wall, store.total_lines + store.skipped_lines, written


def by_hand(log: Path, rate: int, seconds: float) -> float:
    ere = DEFAULT_FILTER.replace(r"\d", "[0-9]")
    writer = subprocess.Popen([sys.executable, str(WRITER), str(log), "--rate", str(rate)], stderr=subprocess.DEVNULL)
    time.sleep(1)
    pipe = subprocess.Popen(f"tail -F {shlex.quote(str(log))} | grep --line-buffered -E {shlex.quote(ere)} > /dev/null",
                            shell=True)
    try:
        time.sleep(2)
        procs = [psutil.Process(pipe.pid), *psutil.Process(pipe.pid).children(recursive=True)]
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
        started = time.monotonic()
        time.sleep(seconds)
        cpu = sum(sum(p.cpu_times()[:2]) for p in procs) - cpu0
        return cpu / (time.monotonic() - started)
    finally:
        pipe.kill()
        subprocess.run(["pkill", "-f", f"tail -F {log}"], check=False)
        writer.kill()
        writer.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        share, seen, written = follow(Path(tmp) / "ours.log", args.rate, args.seconds)
        theirs = by_hand(Path(tmp) / "theirs.log", args.rate, args.seconds)
    print(f"live analysis at {args.rate} lines/s: {100 * share:.1f}% of a core; lines seen {seen} of {written} "
          f"written; tail -F | grep -E: {100 * theirs:.1f}%")
    what = (f"live analysis (collector + store, every line to every rule) at {args.rate // 1000}k lines/s, "
            f"{seen} of {written} lines seen")
    report(what, f"{100 * share:.1f}% of a core", f"{100 * theirs:.1f}% (tail -F | grep -E)",
           share / theirs if theirs else None, f"bench/flood_cpu.py --rate {args.rate}")


if __name__ == "__main__":
    main()
