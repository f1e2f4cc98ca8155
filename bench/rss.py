"""RSS after following 10 million log lines: the collector and the store (bounded history), no UI.

Usage: .venv/bin/python bench/rss.py [--lines 10000000] [--chunk 1000000]

The log is written in chunks of verl-like lines (bench/writer.py's), each chunk a new file moved
onto the followed path the way logrotate does, so the disk holds one chunk at a time. After each
chunk has been read, RSS of this process is sampled. The baseline is RSS after the first chunk
(imports, caches and the 5,000-line history all warm): bounded history means the end is no higher.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report
from writer import templates

from gkdtop.analysis.rules import builtin_signatures
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.store import Store


def write_chunk(path: Path, start: int, count: int, tpl: list[str]) -> None:
    ts = time.strftime("%Y-%m-%d %H:%M:%S,000")
    tmp = path.with_name(path.name + ".next")
    k = len(tpl)
    with open(tmp, "w", encoding="utf-8") as fh:
        for base in range(start, start + count, 100_000):
            end = min(base + 100_000, start + count)
            fh.write("".join(tpl[i % k].format(ts=ts) + f" seq={i}\n" for i in range(base, end)))
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=1_000_000)
    args = parser.parse_args()
    me = psutil.Process()
    tpl = templates()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        log.write_text("")
        store = Store(Config(phases=builtin_phases(), findings=builtin_signatures()))
        collector = LogCollector([str(log)], backlog=200)
        store.put("logs", collector.collect())
        samples: list[tuple[int, float]] = []
        started = time.perf_counter()
        done = 0
        while done < args.lines:
            count = min(args.chunk, args.lines - done)
            write_chunk(log, done, count, tpl)
            got = 0
            while got < count:
                batch = collector.collect()
                got += len(batch.lines)
                store.put("logs", batch)
            done += count
            gc.collect()
            samples.append((done, me.memory_info().rss / 2**20))
            print(f"  {done:>10,} lines  RSS {samples[-1][1]:.0f} MiB  ({done / (time.perf_counter() - started):,.0f}"
                  " lines/s)", flush=True)
        took = time.perf_counter() - started
        collector.close()
    first, last, peak = samples[0][1], samples[-1][1], max(s for _, s in samples)
    print(f"RSS after {args.lines:,} lines: {last:.0f} MiB (after the first {samples[0][0]:,}: {first:.0f} MiB, "
          f"peak {peak:.0f} MiB); {took:.0f} s, {args.lines / took:,.0f} lines/s through collector + store")
    report(f"RSS after following {args.lines / 1e6:g}M lines (collector + store, bounded history)",
           f"{last:.0f} MiB (peak {peak:.0f}); {args.lines / took / 1e3:.0f}k lines/s",
           f"after the first {samples[0][0] / 1e6:g}M: {first:.0f} MiB", last / first, "bench/rss.py")


if __name__ == "__main__":
    main()
