"""CPU of a running `gkdtop` vs the by-hand setup doing the same job, idle and while a log floods.

Usage: .venv/bin/python bench/cpu.py [--seconds S] [--rates 0,1000,10000,100000] [--no-ray]

Both sides run in real tmux panes, one after the other, for S seconds per rate, against the same
sources: a log written by bench/writer.py at the rate, 8 GPUs of the tests' fake libnvidia-ml.so.1
(there is no GPU here), and a small local Ray cluster when Ray is installed.

- gkdtop: `gkdtop --log LOG --ray-address DASHBOARD` at its default refresh.
- by hand: `tail -F LOG | grep --line-buffered -E <default filter>`, `watch -n1 fake-smi` and
  `watch -n5 ray status`. fake-smi stands in for nvidia-smi (absent here): a Python one-shot that
  reads the same fields through pynvml from the same fake library, so it costs a Python start-up per
  second where the real nvidia-smi costs its own start-up and driver calls.

CPU is the user + system time of each pane's process tree (reaped children included, so every
`watch` run counts); the tmux server's own drawing is left out on both sides; the writer is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RayInfo, fake_nvml, ray_cluster, report, tree_cpu, tree_rss

from gkdtop.config import DEFAULT_FILTER
from tests.tmux import Tmux

BIN = Path(sys.executable).parent
WRITER = Path(__file__).resolve().with_name("writer.py")


def start_writer(log: Path, rate: int) -> subprocess.Popen[bytes] | None:
    if rate <= 0:
        return None
    return subprocess.Popen([sys.executable, str(WRITER), str(log), "--rate", str(rate)], stderr=subprocess.DEVNULL)


def measure(panes: list[Tmux], log: Path, rate: int, seconds: float, warmup: float) -> tuple[float, int]:
    """(percent of one core, RSS bytes at the end) of the panes' process trees while the writer runs."""
    writer = start_writer(log, rate)
    try:
        time.sleep(warmup)
        roots = [psutil.Process(p.pane_pid()) for p in panes]
        before = sum(tree_cpu(r) for r in roots)
        time.sleep(seconds)
        after = sum(tree_cpu(r) for r in roots)
        rss = sum(tree_rss(r) for r in roots)
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
    return 100 * (after - before) / seconds, rss


def run_gkdtop(log: Path, env: dict[str, str], ray: RayInfo | None, rate: int, seconds: float) -> tuple[float, int]:
    tmux = Tmux(width=160, height=50)
    cmd = [str(BIN / "gkdtop"), "--log", str(log)] + (["--ray-address", ray.dashboard] if ray else [])
    try:
        tmux.start(cmd, env=env)
        tmux.wait_for("4 Logs", timeout=30)
        return measure([tmux], log, rate, seconds, warmup=4)
    finally:
        tmux.kill()


def run_by_hand(log: Path, env: dict[str, str], ray: RayInfo | None, rate: int, seconds: float,
                smi: Path) -> tuple[float, int]:
    ere = DEFAULT_FILTER.replace(r"\d", "[0-9]")
    commands = [
        ["bash", "-c", f"tail -n 0 -F {shlex.quote(str(log))} | grep --line-buffered -E {shlex.quote(ere)}"],
        ["watch", "-n1", f"{shlex.quote(sys.executable)} {shlex.quote(str(smi))}"],
    ]
    if ray is not None:
        commands.append(["watch", "-n5", f"{shlex.quote(str(BIN / 'ray'))} status --address {ray.gcs}"])
    panes = []
    try:
        for cmd in commands:
            tmux = Tmux(width=160, height=50)
            tmux.start(cmd, env=env)
            panes.append(tmux)
        time.sleep(1)
        return measure(panes, log, rate, seconds, warmup=4)
    finally:
        for tmux in panes:
            tmux.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rates", default="0,1000,10000,100000")
    parser.add_argument("--no-ray", action="store_true", help="leave Ray out of both sides")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp, ray_cluster() if not args.no_ray else contextlib.nullcontext() as ray:
        root = Path(tmp)
        env = {"XDG_CONFIG_HOME": tmp, **fake_nvml(root / "nvml")}
        env["RAY_TMPDIR"] = ray.temp_root if ray else tmp
        smi = root / "nvml" / "fake_smi.py"
        by_hand = "tail -F | grep, watch -n1 fake-smi" + (", watch -n5 ray status" if ray else "")
        for rate in rates:
            log = root / f"train-{rate}.log"
            log.write_text("Initializing Actor Worker...\n" * 50)
            ours, rss = run_gkdtop(log, env, ray, rate, args.seconds)
            log.unlink()
            Path(str(log) + ".1").unlink(missing_ok=True)
            log.write_text("Initializing Actor Worker...\n" * 50)
            theirs, _ = run_by_hand(log, env, ray, rate, args.seconds, smi)
            log.unlink()
            label = "idle log" if rate == 0 else f"a log at {rate // 1000}k lines/s"
            print(f"CPU, {label}: gkdtop {ours:.1f}% of one core (RSS {rss / 2**20:.0f} MiB), "
                  f"by hand ({by_hand}) {theirs:.1f}%", flush=True)
            report(f"CPU following {label} (8 fake GPUs{', Ray' if ray else ''}), {args.seconds:.0f} s",
                   f"{ours:.1f}% of a core, RSS {rss / 2**20:.0f} MiB", f"by hand: {theirs:.1f}%",
                   ours / theirs if theirs > 0 else None, f"bench/cpu.py --rates {rate}")


if __name__ == "__main__":
    main()
