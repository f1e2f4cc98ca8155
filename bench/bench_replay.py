"""`gkdtop replay` against a baseline measured in the same run, on two logs:

- the dense 60k-step run (`../shared/bench/noisy_log.py`, or our copy of its shape): a vLLM bar, engine
  INFO lines and a ~60-metric `step:N - ...` line per step; baseline: an awk pass that parses every
  metric of every step line (the floor: replay <= 1.5x, all 60,000 steps counted);
- a large log that is mostly noise (`--mb`), against `grep -cE` with the default filter.

Usage: .venv/bin/python bench/bench_replay.py [--steps 60000] [--mb 1000] [--runs 3]
Times are medians of wall time, each command a process of its own (start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import report
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


AWK = "/step:[0-9]+ - /{for(i=2;i<=NF;i++){split($i,a,\":\"); s[a[1]]+=a[2]}; n++} END{print n}"
NOISY = Path(__file__).resolve().parents[2] / "shared" / "bench" / "noisy_log.py"


def steps_run(steps: int, runs: int) -> None:
    gkdtop = str(Path(sys.executable).with_name("gkdtop"))
    # As installed: with bytecode cached (PYTHONDONTWRITEBYTECODE, set in some shells, would have every
    # run compile gkdtop's modules again: ~0.1 s of start-up no user pays).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1] / "gkdtop")],
                   check=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "noisy.log"
        subprocess.run([sys.executable, str(NOISY), str(log), str(steps)], check=True)
        size = os.path.getsize(log) / 2**20
        awk = timed(["awk", "-F", " - ", AWK.replace('\\"', '"'), str(log)], runs)
        ours = timed([gkdtop, "replay", "--json", str(log)], runs)
        doc = json.loads(subprocess.run([gkdtop, "replay", "--json", str(log)], stdout=subprocess.PIPE,
                                        check=True).stdout)
    counted = doc["steps"]["count"]
    print(f"replay of {steps} steps ({size:.0f} MB): gkdtop replay {ours:.2f} s, awk (every metric of every step) "
          f"{awk:.2f} s, ratio {ours / awk:.2f}; steps counted {counted} (median of {runs})")
    report(f"`replay` of the dense {steps // 1000}k-step log ({size:.0f} MB), {counted} steps counted", f"{ours:.2f} s",
           f"{awk:.2f} s (awk parsing every metric)", ours / awk, f"bench/bench_replay.py --steps {steps}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=60000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if NOISY.exists() and args.steps:
        steps_run(args.steps, args.runs)
    if not args.mb:
        return
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
