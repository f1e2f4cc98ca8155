"""The log follower over a glob of many files: descriptors held and time per collect().

Usage: .venv/bin/python bench/bench_many_files.py [--files N] [--max-open M] [--polls P]
Writes N one-line worker logs to a temp dir and follows `*.log`: the first collect() (each file's
backlog), P idle polls (one stat per file), P polls in which only 10 files grow (the common case:
few active writers), then P polls 0.25 s apart in which every file grew a line (more growing files
than may be open: parked files reopen, each at most once a second). Prints the median ms per
collect() of each kind, the growing polls' share of the wall time, and the most descriptors held.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gkdtop.collectors.logs import LogCollector


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--max-open", type=int, default=None, help="default: the collector's own limit")
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"worker-{i:05d}.log" for i in range(args.files)]
        for i, p in enumerate(paths):
            p.write_text(f"start {i}\n")
        base = fds()
        c = LogCollector([str(Path(tmp) / "*.log")], max_open=args.max_open)
        c.glob_every = 1e9  # one expansion: time the following, not glob.glob
        peak = 0

        def timed(grow: list[Path], tag: int, exact: bool = True) -> float:
            nonlocal peak
            for p in grow:
                with open(p, "a") as fh:
                    fh.write(f"line {tag}\n")
            t = time.perf_counter()
            batch = c.collect()
            took = (time.perf_counter() - t) * 1000
            delivered[0] += len(batch.lines)
            assert not exact or len(batch.lines) == len(grow), (len(batch.lines), len(grow))
            peak = max(peak, fds() - base)
            return took

        delivered = [0]
        t = time.perf_counter()
        first = c.collect()
        first_ms = (time.perf_counter() - t) * 1000
        assert len(first.lines) == args.files
        peak = fds() - base
        idle = [timed([], 0) for _ in range(args.polls)]
        few = [timed(paths[i * 10 % len(paths):][:10], i) for i in range(args.polls)]
        delivered[0] = 0
        every = []
        start = time.perf_counter()
        for i in range(args.polls):
            every.append(timed(paths, i, exact=False))
            time.sleep(max(0.0, start + (i + 1) * 0.25 - time.perf_counter()))
        wall = time.perf_counter() - start
        deadline = time.monotonic() + 5
        while delivered[0] < args.polls * args.files and time.monotonic() < deadline:
            delivered[0] += len(c.collect().lines)
        assert delivered[0] == args.polls * args.files, delivered[0]
        c.close()
        print(f"files={args.files} max_open={c._open_files.limit} first={first_ms:.0f}ms "
              f"idle={statistics.median(idle):.1f}ms 10-grow={statistics.median(few):.1f}ms "
              f"all-grow={statistics.median(every):.1f}ms ({sum(every) / 10 / wall:.0f}% of the wall time) "
              f"peak_fds={peak}")


if __name__ == "__main__":
    main()
