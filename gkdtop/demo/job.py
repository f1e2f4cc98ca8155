"""A real miniature GKD (on-policy distillation) job on Ray + torch, shaped like verl's GKD recipe.

Run as `python -m gkdtop.demo.job --steps N [--fault F]`. The driver starts a private Ray cluster
(`ray start --head --block` in a session of its own, on free ports, under a short temp dir) unless
`--ray-address` is given, connects, and runs a `TaskRunner` actor that does what verl's does:

- prints the config, generates a toy prompt dataset (a tqdm-style `Generating train split` bar),
- creates the resource pool (a real placement group),
- starts two `OnPolicyDistillActor` ranks (a gloo group, DDP-style gradient all_reduce), a
  `RolloutWorker` (samples responses from the student's current weights) and a `TeacherWorker`
  (a fixed, sharper LM that returns its log-probs over the vocabulary),
- weight sync: actor ranks 0/1 and the rollout form a second gloo group (a stateless
  ProcessGroupGloo over a TCPStore, as vLLM / verl build theirs, named `weight_sync`); rank 0 broadcasts every tensor,
  then all members all_reduce a checksum to confirm it,
- per step: generate -> teacher log-probs -> actor update (reverse KL to the teacher, gradients
  all_reduced) -> weight sync, with one verl-style `step:N - timing_s/... - actor/kl_loss:...` line.

This module is the driver: its arguments, its signals and its teardown. The job's other parts, one
job each: config.py (the knobs), printing.py (what it prints, and in which format), tiny_lm.py (the
models), actors.py (the Ray actors that do the work), task_runner.py (the orchestrator and its
training loop), faults.py (`--fault`, each a real failure), ray_cluster.py (the private Ray cluster).

Apart from the leak fault's debris (faults.py), the driver removes everything it started on its way
out (normal end, exception, SIGINT, SIGTERM, SIGHUP, or its launcher's death when `--parent-pid` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gkdtop import probe  # noqa: F401 - with GKDTOP_PROBE=1 (gkdtop demo, gkdtop run) this installs it
from gkdtop.demo import FAULTS
from gkdtop.demo.actors import ray_actor
from gkdtop.demo.config import DemoConfig
from gkdtop.demo.faults import run_engine_core
from gkdtop.demo.printing import logger
from gkdtop.demo.ray_cluster import LocalRayCluster
from gkdtop.demo.task_runner import TaskRunner

_received_signal: int | None = None


def _on_signal(signum: int, frame: object) -> None:
    """Turn SIGINT/SIGTERM/SIGHUP into KeyboardInterrupt: the one exception ray.get lets through."""
    global _received_signal
    _received_signal = signum
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _watch_parent(parent_pid: int) -> None:
    """Stop the job when the gkdtop that launched it is gone: a demo must not outlive its launcher."""
    while True:
        time.sleep(0.2)  # a cheap look: the teardown starts within a fifth of a second of the launcher's death
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _wait_for_runner(ref: Any, cluster: LocalRayCluster | None) -> Any:
    """ray.get of the TaskRunner's result, but failing fast if the private cluster goes down meanwhile.

    Short waits: a signal's handler (Ctrl-C, SIGTERM: the teardown) runs only once ray.wait returns."""
    import ray

    while True:
        ready, _ = ray.wait([ref], timeout=0.2)
        if ready:
            return ray.get(ref)
        if cluster is not None and cluster.proc is not None and cluster.proc.poll() is not None:
            raise RuntimeError(f"the private Ray cluster went down (`ray start` exited with "
                               f"{cluster.proc.returncode}; its reasons are above)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m gkdtop.demo.job", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fault", choices=FAULTS)
    ap.add_argument("--markers", choices=("verl", "playbook"), default="verl",
                    help="verl: print what verl jobs print (default); playbook: the old playbook's phase markers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pace", type=float, default=1.0, help="scale of the emulated accelerator time; 0: none")
    ap.add_argument("--run-dir", help="for cluster.json, debris.json, the dataset cache (default: cwd)")
    ap.add_argument("--ray-address", help="join this cluster instead of starting a private one")
    ap.add_argument("--ray-temp-dir", help="temp dir of the private cluster (keep it short: unix sockets)")
    ap.add_argument("--gcs-port", type=int, default=0)
    ap.add_argument("--dashboard-port", type=int, default=0)
    ap.add_argument("--client-port", type=int, default=0)
    ap.add_argument("--agent-port", type=int, default=0)
    ap.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the private cluster")
    ap.add_argument("--parent-pid", type=int, help="exit (with teardown) when this parent process is gone")
    ap.add_argument("--engine-core", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.engine_core:
        return run_engine_core(args.run_dir or os.getcwd())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # every rank's lines, not "[repeated 2x across cluster]"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    log = logger("driver")
    run_dir = Path(args.run_dir).resolve() if args.run_dir else Path.cwd()
    cfg = DemoConfig(steps=args.steps, fault=args.fault, seed=args.seed, run_dir=str(run_dir), pace=args.pace,
                     markers=args.markers)
    cluster: LocalRayCluster | None = None
    code = 1
    try:
        if args.ray_address:
            address = args.ray_address
        else:
            from gkdtop.demo.launcher import free_port, short_temp_dir

            temp_dir = Path(args.ray_temp_dir) if args.ray_temp_dir else short_temp_dir()
            ports: list[int] = []
            for asked in (args.gcs_port, args.dashboard_port, args.client_port, args.agent_port):
                ports.append(asked or free_port(avoid=ports))
            cluster = LocalRayCluster(temp_dir, *ports, num_cpus=args.num_cpus)
            log.info("Starting a private Ray cluster: gcs %s, dashboard %s, temp dir %s",
                     cluster.address, cluster.dashboard_url, temp_dir)
            cluster.start(run_dir)
            address = cluster.address
        import ray

        if cfg.markers == "verl":  # verl's main_ppo/main_gkd print it before ray.init (VLLM_LOGGING_LEVEL exported)
            print("ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {'TOKENIZERS_PARALLELISM': 'true', "
                  "'NCCL_DEBUG': 'WARN', 'CUDA_DEVICE_MAX_CONNECTIONS': '1'}}}", flush=True)
        ray.init(address=address, logging_level=logging.INFO, log_to_driver=True)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # ray.init made SIGTERM a bare sys.exit
            signal.signal(sig, _on_signal)
        runner = ray_actor(TaskRunner).options(num_cpus=0.5).remote()
        summary = _wait_for_runner(runner.run.remote(asdict(cfg)), cluster)
        time.sleep(1.0)  # let Ray's log monitor forward the runner's last lines before ours
        log.info("✓ Training finished: %d steps | actor/kl_loss %.4f -> %.4f", summary["steps"],
                 summary["first_kl_loss"], summary["last_kl_loss"])
        code = 0
    except KeyboardInterrupt:
        signum = _received_signal or signal.SIGINT
        log.warning("received %s: tearing down the job and its Ray cluster", signal.Signals(signum).name)
        code = 128 + signum
    except Exception:
        time.sleep(1.5)  # the workers' last words (faulthandler stacks, Ray's death notes) land first
        traceback.print_exc()
        sys.stderr.flush()
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        if cluster is not None:
            cluster.stop()
            log.info("Ray cluster at %s stopped", cluster.address)
    return code


if __name__ == "__main__":
    # The Ray actor classes live in importable modules (actors.py, task_runner.py), never in this
    # `__main__`: Ray pickles them by reference to their module, and a worker has no `__main__`.
    sys.exit(main())
