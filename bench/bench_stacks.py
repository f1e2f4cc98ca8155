"""Parallel stack dump (gkdtop.actions.stacks.dump_stacks) against a sequential `py-spy dump` loop.

Usage: .venv/bin/python bench/bench_stacks.py [--procs 32] [--rounds 3] [--workers 16] [--native]
Starts N Python processes that sleep (each waits until it is in its sleep), then times, in the same
run and alternating, one `py-spy dump --pid P --json` after another over all of them, and
dump_stacks() over the same PIDs. Prints the median of each, and the sequential/parallel ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from gkdtop.actions.stacks import dump_stacks, find_py_spy


def spawn(n: int) -> list[subprocess.Popen[bytes]]:
    code = "import time; print('ready', flush=True); time.sleep(600)"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(n)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return procs


def sequential(exe: str, pids: list[int], native: bool) -> float:
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    start = time.perf_counter()
    for pid in pids:
        argv = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else [])
        subprocess.run(argv, capture_output=True, check=True, env=env, timeout=60)
    return time.perf_counter() - start


def parallel(pids: list[int], native: bool, workers: int) -> float:
    start = time.perf_counter()
    report = dump_stacks(pids, native=native, timeout=60, workers=workers)
    elapsed = time.perf_counter() - start
    failed = [d for d in report.dumps if not d.ok]
    assert not failed, failed[0].error
    assert len(report.groups) == 1, [g.summary for g in report.groups]  # all sleep at the same line
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--native", action="store_true")
    args = parser.parse_args()
    exe = find_py_spy()
    if exe is None:
        print("py-spy not found", file=sys.stderr)
        return 1
    procs = spawn(args.procs)
    try:
        pids = [p.pid for p in procs]
        seq, par = [], []
        for _ in range(args.rounds):
            seq.append(sequential(exe, pids, args.native))
            par.append(parallel(pids, args.native, args.workers))
        s, p = statistics.median(seq), statistics.median(par)
        print(f"{args.procs} Python processes, {os.cpu_count()} CPUs, {args.rounds} rounds, median"
              + (", --native" if args.native else ""))
        print(f"  sequential py-spy loop   {s:7.3f} s  ({1000 * s / args.procs:.1f} ms/process)")
        print(f"  dump_stacks workers={args.workers:<3} {p:7.3f} s  (grouped into 1 stack)")
        print(f"  ratio sequential/parallel {s / p:6.2f}x")
        report(f"stack dump of {args.procs} Python processes" + (" (--native)" if args.native else ""),
               f"{p:.2f} s (dump_stacks, {args.workers} workers)", f"sequential `py-spy dump` loop: {s:.2f} s",
               p / s, "bench/bench_stacks.py")
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
