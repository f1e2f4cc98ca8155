"""Hostile rules and lines (issue 30): what they cost `gkdtop replay`, each a process of its own.

- a 1 GiB line (a short line, 1 GiB of `x` with no newline, then a traceback): wall time and peak RSS;
- 250 MB of tqdm `\\r` redraws with no newline: the same;
- a config of 40 rules of 1.2 KB (repeats before alternatives, as the issue's): load time with an
  empty rule cache (cold) and again (warm); `--accepted` rules of the same length that compile
  under the limit (80 repeats) give the time of a config that loads.

Usage: [PYTHONPATH=TREE] .venv/bin/python bench/bench_bounds.py [--skip-gib] [--tmp DIR]
Peak RSS is the child's `ru_maxrss` (with its forked reader), read by a parent of its own.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in MiB, the first line of stderr) of `gkdtop ARGS`, measured by a fresh parent."""
    code = ("import resource, subprocess, sys, time\n"
            "t = time.perf_counter()\n"
            "p = subprocess.run([sys.executable, '-m', 'gkdtop.cli', *sys.argv[1:]], capture_output=True, text=True)\n"
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
            "print((p.stderr.strip().splitlines() or [''])[0][:160])\n")
    env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent", **(env or {})}
    env.setdefault("PYTHONPATH", str(ROOT))  # set: the tree to measure (the code before a change, say)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                         cwd="/", env=env).stdout
    numbers, said = out.split("\n", 1)
    wall, rss = numbers.split()
    return float(wall), int(rss), said.strip()


def rules(path: Path, repeats: int) -> None:
    rng = random.Random(1)

    def word(n: int) -> str:
        return "".join(rng.choice("abcdefghij") for _ in range(n))

    with path.open("w") as fh:
        fh.write("findings:\n")
        for k in range(40):
            text = "".join(f"\\S+{word(2)}" for _ in range(repeats)) + "(?:" + "|".join(word(6) for _ in range(200))
            fh.write(f"  - name: rule{k}\n    match: '{text[:1200].rsplit('|', 1)[0]})'\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-gib", action="store_true")
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        base = Path(tmp)
        if not args.skip_gib:
            gib = base / "gib.log"
            with gib.open("wb") as fh:
                fh.write(b"2024-05-01 10:00:00 start\n")
                block = b"x" * (1 << 20)
                for _ in range(1024):
                    fh.write(block)
                fh.write(b"\n2024-05-01 10:00:09 Traceback (most recent call last):\n"
                         b"2024-05-01 10:00:09 RuntimeError: CUDA error: out of memory\n")
            wall, rss, _ = run(["replay", "--json", str(gib)])
            print(f"replay of a 1 GiB line: {wall:.2f} s, peak RSS {rss} MiB")
            gib.unlink()
        bars = base / "bars.log"
        bar = b"".join(b"\rTraining:  %3d%%|#####     | %d/100000 [01:02<05:00, 12.00it/s]" % (i % 100, i)
                       for i in range(10_000))
        with bars.open("wb") as fh:
            fh.write(b"2024-05-01 10:00:00 epoch 1\n")
            for _ in range(400):
                fh.write(bar)
        wall, rss, _ = run(["replay", "--json", str(bars)])
        print(f"replay of {bars.stat().st_size >> 20} MiB of \\r bars, no newline: {wall:.2f} s, peak RSS {rss} MiB")
        tiny = base / "tiny.log"
        tiny.write_text("2024-05-01 10:00:00 start\n")
        for name, repeats in (("costly", 180), ("accepted", 80)):
            cfg = base / f"{name}.yaml"
            rules(cfg, repeats)
            cache = base / f"cache-{name}"
            for when in ("cold", "warm"):
                wall, _, said = run(["replay", "--config", str(cfg), str(tiny)], {"XDG_CACHE_HOME": str(cache)})
                print(f"40 {name} rules of 1.2 KB, {when}: {wall:.2f} s{': ' + said if said else ''}")
        print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB; "
              f"{time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
