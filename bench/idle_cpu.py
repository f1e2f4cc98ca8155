"""CPU of a running `gkdtop` following an idle log, with ~200 processes on the machine.

Usage: .venv/bin/python bench/idle_cpu.py [--seconds S] [--procs N] [--warmup W] [--stalled]
Runs gkdtop in a real tmux at the default refresh, lets it warm up, then reads the CPU time the
gkdtop process used over S seconds (psutil), as percent of one core. 20% of the extra processes
carry Ray worker titles and 10% vLLM titles, so they are job processes gkdtop tracks.

The job processes start with the bench: for their first minute every row's AGE ticks every poll
(seconds), so the whole visible process table repaints every poll. `--warmup 65` measures a job
past its first minute (ages tick once a minute), the steady state of an idle job.

`--stalled`: the log is a verl GKD start-up that went quiet 20 minutes ago in weight sync (the test
suite's `tests/gkdlog.startup`), in a 120-column pane: the Phases pane shows the stall, its hints, and
a timeline that wraps and ticks every second — the screen a user watches while a job hangs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from tests.tmux import Tmux


def spawn(n: int) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        title = "ray::WorkerDict" if i % 5 == 0 else ("VLLM::Worker_TP0" if i % 10 == 1 else "sleep")
        procs.append(subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 600"]))
    return procs


def gkdtop_process(tmux: Tmux) -> psutil.Process:
    shell = psutil.Process(tmux.pane_pid())
    for child in shell.children(recursive=True):
        if "gkdtop" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("gkdtop is not running in the pane")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--procs", type=int, default=200)
    parser.add_argument("--warmup", type=float, default=5, help="seconds between gkdtop's first frame and the measure")
    parser.add_argument("--stalled", action="store_true", help="a job stalled in weight sync, 120 columns")
    args = parser.parse_args()
    extra = spawn(max(0, args.procs - len(psutil.pids())))
    tmux = Tmux(width=120 if args.stalled else 160, height=50)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "train.log"
            if args.stalled:
                from tests.gkdlog import startup

                lines, last = startup(time.time() - 1200, upto="sync")
                log.write_text("".join(line + "\n" for line in lines))
                os.utime(log, (last, last))
            else:
                log.write_text("Initializing Actor Worker...\n" * 50)
            tmux.start([str(Path(sys.executable).with_name("gkdtop")), "--log", str(log)],
                       env={"XDG_CONFIG_HOME": tmp, "RAY_TMPDIR": tmp})
            tmux.wait_for("4 Logs", timeout=30)
            proc = gkdtop_process(tmux)
            time.sleep(args.warmup)  # the first scans read every command line once: a few seconds at least
            before = proc.cpu_times()
            time.sleep(args.seconds)
            after = proc.cpu_times()
            used = (after.user - before.user) + (after.system - before.system)
            rss = proc.memory_info().rss / 2**20
            young = "new at the start" if args.warmup < 60 else "over a minute old"
            if args.stalled:
                assert "STALLED" in tmux.screen(), tmux.screen()
                young += "; a job stalled in weight sync, 120 columns"
            print(f"idle CPU: {100 * used / args.seconds:.2f}% of one core over {args.seconds:.0f} s, "
                  f"{len(psutil.pids())} processes on the machine (job processes {young}), rss {rss:.0f} MiB")
            report(f"idle CPU, default refresh, {len(psutil.pids())} processes on the machine (job processes "
                   f"{young}), no GPU",
                   f"{100 * used / args.seconds:.2f}% of a core over {args.seconds:.0f} s, RSS {rss:.0f} MiB",
                   "budget: < 3%", None,
                   "bench/idle_cpu.py" + (f" --warmup {args.warmup:g}" if args.warmup != 5 else "")
                   + (" --stalled" if args.stalled else ""))
    finally:
        tmux.kill()
        for p in extra:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
