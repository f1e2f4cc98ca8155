"""Realistic verl / GKD log text for tests: Ray prefixes, ANSI colour, mixed timestamp formats, tqdm."""

from __future__ import annotations

import time

ESC = "\x1b"


def asctime(t: float) -> str:
    """Python logging's default `%(asctime)s`: local time with `,ms`."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def glog(t: float) -> str:
    return time.strftime("I%m%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1e6) % 1000000:06d} 4242 nccl.cc:12]"


def ray(name: str, pid: int, text: str, color: bool = True) -> str:
    prefix = f"({name} pid={pid}, ip=10.0.0.7)"
    if color:
        prefix = f"{ESC}[36m{prefix}{ESC}[0m"
    return f"{prefix} {text}"


def startup(t0: float, upto: str = "training", steps: int = 3, step_s: float = 30.0) -> tuple[list[str], float]:
    """The GKD start-up sequence the playbook patches in, as verl's driver log shows it.

    Returns (lines, time of the last line). `upto` stops the log early: one of dataset, actor,
    actor-done, rollout, sync, training.
    """
    t = t0
    out: list[str] = []

    def at(dt: float, text: str, fmt=asctime, who: tuple[str, int] | None = ("TaskRunner", 133947)) -> None:
        nonlocal t
        t += dt
        line = f"{fmt(t)} root INFO {text}" if fmt is not None else text
        out.append(ray(who[0], who[1], line) if who else line)

    out.append("{'actor_rollout_ref': {'model': {'path': 'Qwen/Qwen2.5-0.5B'}}, 'trainer': {'nnodes': 1}}")
    at(1, "✓ Configuration loaded")
    at(1, "Starting dataset generation...")
    out.append(ray("TaskRunner", 133947, "Generating train split: 0 examples [00:00, ? examples/s]\r"
                   "Generating train split: 5000 examples [00:02, 2400 examples/s]\r"
                   "Generating train split: 10000 examples [00:04, 2450 examples/s]"))
    if upto == "dataset":
        return out, t
    at(20, "✓ Dataset generation completed in 20.1s")
    at(1, "Creating ResourcePool...")
    at(5, "✓ ResourcePool created in 5.2s")
    at(1, "Initializing Actor Worker...")
    at(1, "[ACTOR] init_model START | pid=2001 | rank=0", fmt=iso, who=("WorkerDict", 2001))
    at(0, "[ACTOR] init_model START | pid=2002 | rank=1", fmt=iso, who=("WorkerDict", 2002))
    if upto == "actor":
        return out, t
    at(12, "[ACTOR] ✓ Model built in 12.0s", fmt=iso, who=("WorkerDict", 2001))
    at(1, "[ACTOR] init_model DONE", fmt=iso, who=("WorkerDict", 2001))
    at(1, "✓ Actor Worker initialized in 15.1s")
    if upto == "actor-done":
        return out, t
    at(1, "Initializing Rollout Worker...")
    at(2, "[ROLLOUT] init_model START | pid=2003 | rank=0", fmt=None, who=("WorkerDict", 2003))
    at(0, "W1122 10:00:00.123456 4242 nccl.cc:12] NCCL WARN Cuda failure 'out of memory' ignored", fmt=None,
       who=("WorkerDict", 2003))
    if upto == "rollout":
        return out, t
    at(28, "✓ Rollout Worker initialized in 30.5s")
    at(1, "Starting weight synchronization...")
    at(1, "[SYNC] Syncing actor weights...", fmt=glog, who=("WorkerDict", 2001))
    if upto == "sync":
        return out, t
    at(3, "✓ Weight synchronization completed in 5.2s")
    for step in range(1, steps + 1):
        out.append(ray("TaskRunner", 133947, f"Training Progress:  {step * 10}%|{'█' * step}| {step}/10 "
                       f"[00:{step:02d}<00:10, 1.2s/it]"))
        at(step_s, f"step:{step} - timing_s/gen:{12.5 + step:.3f} - timing_s/sync_rollout_weights:1.250 - "
           f"timing_s/get_teacher_knowledge:4.000 - timing_s/update_actor:10.500 - timing_s/step:{step_s:.3f} - "
           f"actor/kl_loss:{1.0 / step:.4f} - actor/lr:0.0001", fmt=None)
    return out, t
