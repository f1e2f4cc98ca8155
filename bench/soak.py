"""Soak: the real `gkdtop` in tmux following a busy, rotating log for a long time; RSS and CPU over time.

Usage (on demand, not in CI): .venv/bin/python bench/soak.py [--minutes 30] [--rate 5000] [--every 10]

bench/writer.py writes at --rate lines/s and rotates every 500k lines; gkdtop runs at its default
refresh against the 8 GPUs of the fake libnvidia-ml.so.1. Every --every seconds the gkdtop
process's RSS and CPU are sampled (printed, and written as CSV next to --csv). The verdict compares
the mean RSS of the last fifth with that of the second fifth (after warm-up) and fits a slope.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fake_nvml, report

from tests.tmux import Tmux

WRITER = Path(__file__).resolve().with_name("writer.py")


def gkdtop_process(tmux: Tmux) -> psutil.Process:
    for child in psutil.Process(tmux.pane_pid()).children(recursive=True):
        if "gkdtop" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("gkdtop is not running in the pane")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=5000, help="lines per second written")
    parser.add_argument("--every", type=float, default=10, help="seconds between samples")
    parser.add_argument("--csv", help="write the samples here")
    args = parser.parse_args()
    samples: list[tuple[float, float, float]] = []  # (minutes, RSS MiB, CPU % of a core since last)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = root / "train.log"
        log.write_text("Initializing Actor Worker...\n")
        env = {"XDG_CONFIG_HOME": tmp, "RAY_TMPDIR": tmp, **fake_nvml(root / "nvml")}
        tmux = Tmux(width=160, height=50)
        writer = None
        try:
            tmux.start([str(Path(sys.executable).with_name("gkdtop")), "--log", str(log)], env=env)
            tmux.wait_for("4 Logs", timeout=30)
            proc = gkdtop_process(tmux)
            writer = subprocess.Popen([sys.executable, str(WRITER), str(log), "--rate", str(args.rate),
                                       "--rotate-every", "500000"], stderr=subprocess.DEVNULL)
            started = time.monotonic()
            last_cpu, last_t = sum(proc.cpu_times()[:2]), started
            while (now := time.monotonic()) - started < args.minutes * 60:
                time.sleep(args.every)
                now = time.monotonic()
                cpu = sum(proc.cpu_times()[:2])
                rss = proc.memory_info().rss / 2**20
                samples.append(((now - started) / 60, rss, 100 * (cpu - last_cpu) / (now - last_t)))
                last_cpu, last_t = cpu, now
                print(f"  {samples[-1][0]:6.1f} min  RSS {rss:6.1f} MiB  CPU {samples[-1][2]:5.1f}%", flush=True)
            if writer.poll() is not None or tmux.screen().find("EXITED") >= 0:
                raise RuntimeError("the writer or gkdtop stopped during the soak:\n" + tmux.screen())
        finally:
            if writer is not None:
                writer.kill()
                writer.wait()
            tmux.kill()
    if args.csv:
        Path(args.csv).write_text("minutes,rss_mib,cpu_pct\n" + "".join(f"{m:.2f},{r:.1f},{c:.1f}\n"
                                                                          for m, r, c in samples))
    n = len(samples)
    early = statistics.fmean(s[1] for s in samples[n // 5: 2 * n // 5 or 1])
    late = statistics.fmean(s[1] for s in samples[4 * n // 5:])
    per_min = slope([(m, r) for m, r, _ in samples[n // 5:]])
    cpu = statistics.fmean(s[2] for s in samples)
    print(f"soak {args.minutes:g} min at {args.rate} lines/s: RSS {early:.0f} MiB early -> {late:.0f} MiB late "
          f"(max {max(s[1] for s in samples):.0f}), slope after warm-up {per_min:+.2f} MiB/min, CPU {cpu:.0f}%")
    report(f"soak: {args.minutes:g} min following {args.rate} lines/s, rotating",
           f"RSS {late:.0f} MiB at the end, slope {per_min:+.2f} MiB/min, CPU {cpu:.0f}%",
           f"RSS after warm-up: {early:.0f} MiB", late / early, f"bench/soak.py --minutes {args.minutes:g}")


if __name__ == "__main__":
    main()
