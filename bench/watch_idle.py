"""CPU of `gkdtop watch` (no screen, metrics endpoint on, scraped every 15 s as Prometheus does) against
the dashboard in a real tmux, on the same idle log with ~200 processes on the machine, interleaved.

Usage: .venv/bin/python bench/watch_idle.py [--seconds S] [--warmup W] [--rounds N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report
from idle_cpu import gkdtop_process, spawn

from tests.alerting import METRICS_URL
from tests.tmux import Tmux


def cpu_of(proc: psutil.Process, warmup: float, seconds: float) -> float:
    time.sleep(warmup)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return 100 * ((after.user - before.user) + (after.system - before.system)) / seconds


def measure_watch(log: Path, tmp: str, warmup: float, seconds: float) -> float:
    env = {"XDG_CONFIG_HOME": tmp, "RAY_TMPDIR": tmp, "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([str(Path(sys.executable).with_name("gkdtop")), "watch", "--log", str(log),
                             "--metrics-port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    url = None
    for line in proc.stderr:  # type: ignore[union-attr]
        if found := METRICS_URL.search(line):
            url = found.group(1)
            break
    stop = threading.Event()

    def scrape() -> None:  # Prometheus' default interval
        while not stop.wait(15):
            urllib.request.urlopen(url, timeout=5).read()

    threading.Thread(target=scrape, daemon=True).start()
    try:
        return cpu_of(psutil.Process(proc.pid), warmup, seconds)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=30)


def measure_dashboard(log: Path, tmp: str, warmup: float, seconds: float) -> float:
    tmux = Tmux(width=160, height=50)
    try:
        tmux.start([str(Path(sys.executable).with_name("gkdtop")), "--log", str(log)],
                   env={"XDG_CONFIG_HOME": tmp, "RAY_TMPDIR": tmp})
        tmux.wait_for("4 Logs", timeout=30)
        return cpu_of(gkdtop_process(tmux), warmup, seconds)
    finally:
        tmux.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    extra = spawn(max(0, 200 - len(psutil.pids())))
    watch, dashboard = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "train.log"
            log.write_text("Initializing Actor Worker...\n" * 50)
            for _ in range(args.rounds):
                watch.append(measure_watch(log, tmp, args.warmup, args.seconds))
                dashboard.append(measure_dashboard(log, tmp, args.warmup, args.seconds))
    finally:
        for p in extra:
            p.kill()
            p.wait()
    w, d = sorted(watch)[len(watch) // 2], sorted(dashboard)[len(dashboard) // 2]
    runs = ", ".join(f"{x:.2f}" for x in watch), ", ".join(f"{x:.2f}" for x in dashboard)
    print(f"idle CPU: watch {runs[0]}% / dashboard {runs[1]}% of a core over {args.seconds:.0f} s")
    report("idle CPU of `gkdtop watch` (metrics on, scraped every 15 s), ~200 processes, interleaved with the "
           "dashboard",
           f"{w:.2f}% of a core", f"dashboard in tmux: {d:.2f}%", w / d if d else None, "bench/watch_idle.py")


if __name__ == "__main__":
    main()
