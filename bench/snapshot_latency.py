"""`gkdtop snapshot --json` latency without and with a Ray cluster, against the one-shot commands it replaces.

Usage: .venv/bin/python bench/snapshot_latency.py [--runs 5] [--no-ray]

Wall time of the whole command (interpreter start-up included), median of --runs, over 8 fake GPUs
(the tests' libnvidia-ml.so.1). Baselines, same run: without Ray, the fake-smi one-shot (nvidia-smi's
stand-in, see bench/cpu.py); with Ray, `ray status` on the same cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fake_nvml, ray_cluster, report

BIN = Path(sys.executable).parent


def timed(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {proc.stderr[-1000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, (contextlib.nullcontext() if args.no_ray else ray_cluster()) as ray:
        root = Path(tmp)
        log = root / "train.log"
        log.write_text("Initializing Actor Worker...\n" * 200)
        base = {**os.environ, "XDG_CONFIG_HOME": tmp, **fake_nvml(root / "nvml")}
        snap = [str(BIN / "gkdtop"), "--log", str(log)]
        alone = timed([*snap, "snapshot", "--json"], {**base, "RAY_TMPDIR": tmp}, args.runs)
        smi = timed([sys.executable, str(root / "nvml" / "fake_smi.py")], base, args.runs)
        print(f"snapshot without Ray {alone * 1000:.0f} ms; fake-smi one-shot {smi * 1000:.0f} ms", flush=True)
        report("`gkdtop snapshot --json`, no Ray (8 fake GPUs)", f"{alone * 1000:.0f} ms",
               f"fake-smi one-shot: {smi * 1000:.0f} ms", alone / smi, "bench/snapshot_latency.py")
        if ray is None:
            return
        env = {**base, **ray.env()}
        with_ray = timed([*snap, "--ray-address", ray.dashboard, "snapshot", "--json"], env, args.runs)
        status = timed([str(BIN / "ray"), "status", "--address", ray.gcs], env, args.runs)
        print(f"snapshot with Ray {with_ray * 1000:.0f} ms; ray status {status * 1000:.0f} ms", flush=True)
        report("`gkdtop snapshot --json`, with a local Ray cluster", f"{with_ray * 1000:.0f} ms",
               f"`ray status`: {status * 1000:.0f} ms", with_ray / status, "bench/snapshot_latency.py")


if __name__ == "__main__":
    main()
