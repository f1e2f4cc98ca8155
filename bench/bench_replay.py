"""`gkdtop replay` on a large log vs `grep -cE` with the default filter over the same file, same run.

Usage: .venv/bin/python bench/bench_replay.py [--mb 1000] [--runs 3]
The log is verl-like: mostly generation/INFO noise, Ray prefixes with ANSI, timestamps, a step
line every ~2,000 lines, phase markers at the start, a few warnings and a traceback at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gkdtop.config import DEFAULT_FILTER
from tests.gkdlog import asctime, ray, startup

NOISE = [
    "INFO 11-22 10:00:05 [metrics.py:351] Avg prompt throughput: 1843.2 tokens/s, Avg generation throughput: "
    "9120.4 tokens/s, Running: 256 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 41.3%",
    "DEBUG dataloader worker 3 fetched batch of 512 samples from shard 00017",
    "{t} root INFO rollout: generated 1024 sequences, mean length 812.4 tokens",
]


def make_log(path: Path, mb: int) -> int:
    t0 = time.time() - 86400
    head, t = startup(t0, steps=0)
    target = mb * 1024 * 1024
    written = lines = 0
    with path.open("w") as fh:
        for line in head:
            fh.write(line + "\n")
        step = 0
        while written < target:
            block = []
            for i in range(2000):
                t += 0.01
                text = NOISE[i % 3].format(t=asctime(t))
                block.append(ray("WorkerDict", 2001 + i % 4, text) if i % 2 else text)
            step += 1
            block.append(ray("TaskRunner", 9, f"step:{step} - timing_s/gen:12.3 - timing_s/update_actor:10.1 - "
                                              f"timing_s/step:30.2 - actor/kl_loss:{1 / step:.4f}"))
            chunk = "\n".join(block) + "\n"
            fh.write(chunk)
            written += len(chunk)
            lines += len(block)
        fh.write(ray("TaskRunner", 9, "Traceback (most recent call last):") + "\n")
        fh.write(ray("TaskRunner", 9, "RuntimeError: boom") + "\n")
    return lines


def timed(cmd: list[str], runs: int) -> float:
    best = []
    for _ in range(runs):
        started = time.perf_counter()
        # Not DEVNULL: GNU grep notices /dev/null and stops at the first match.
        subprocess.run(cmd, stdout=subprocess.PIPE, check=False)
        best.append(time.perf_counter() - started)
    return statistics.median(best)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        lines = make_log(log, args.mb)
        size = os.path.getsize(log) / 2**20
        ere = DEFAULT_FILTER.replace(r"\d", "[0-9]")
        grep = timed(["grep", "-cE", ere, str(log)], args.runs)
        gk = timed([str(Path(sys.executable).with_name("gkdtop")), "replay", "--json", str(log)], args.runs)
    print(f"replay {size:.0f} MB ({lines} lines): gkdtop replay {gk:.2f} s, grep -cE {grep:.2f} s, "
          f"ratio {gk / grep:.2f} (median of {args.runs})")


if __name__ == "__main__":
    main()
