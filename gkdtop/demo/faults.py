"""The demo's injected faults (`--fault`): what each one does, and the machinery of the one that leaves debris.

Each fault is a real failure, struck where a real job would fail, so it strikes inline at that
place: the frames it leaves are what gkdtop's stack view shows and what the docs name
(`WeightSyncMember.broadcast_weights`, `TaskRunner._wait_for_cache_lock`). What a fault needs
running beside the job, or leaves behind it, lives here: the leak's engine-core orphan, its
shared-memory segment and the debris.json that lists both.

- hang-sync: at the INITIAL weight sync (version 0, before step 1), actor rank 1 returns without
  joining the collective. Actor rank 0 and the rollout block inside the weight-sync group's gloo
  broadcast (`WeightSyncMember.broadcast_weights`; gloo timeout 1 h), rank 1 sits idle in Ray's
  main loop, the TaskRunner blocks in ray.get. The log stops after `Starting weight
  synchronization...` and rank 0's `[SYNC] Starting weight synchronization`.
  (`OnPolicyDistillActor.sync_weights`)
- mismatch-sync: at the initial weight sync, actor rank 1 calls the checksum's all_reduce where
  the others broadcast the first tensor: different collectives at the same sequence number of the
  weight-sync group. All three block (gloo timeout 1 h); the Flight Recorder names the type mismatch.
  (`OnPolicyDistillActor.sync_weights`)
- stall-dataset: a "shard writer" thread takes the dataset cache lock (flock) and waits on a queue
  that never fills; the TaskRunner's main thread blocks in flock() right after
  `Generating train split: 0 examples`. (`TaskRunner._wait_for_cache_lock`)
- crash-rollout: the rollout worker raises SIGSEGV in itself at step 2 (faulthandler prints its
  stack). The TaskRunner's ray.get raises ActorDiedError; the driver prints the traceback, exits 1.
  (`RolloutWorker.generate`)
- infeasible: the resource pool asks for 8 GPUs on one node (or one more than the cluster has);
  `pg.ready()` never resolves and Ray's autoscaler reports the infeasible demand. (`TaskRunner.run`)
- leak: the rollout worker double-forks an "engine core" (`python -m gkdtop.demo.job --engine-core
  --run-dir RUN_DIR`, process name `VLLM::EngineCor` as vLLM's own engine, in a session of its own, reparented to PID 1
  or the nearest subreaper) and, at the initial weight sync, creates and maps a shared-memory
  segment `/dev/shm/nccl-XXXXXX` (4 MiB) as NCCL's SHM transport does, without unlinking it. At
  step 2 it SIGKILLs itself; the driver gets ActorDiedError and exits 1. Left behind: the engine
  core (alive, sleeping, maps nothing) and the segment (mapped by no process). Both are listed in
  RUN_DIR/debris.json: {"orphans": [{"pid", "cmdline"}], "shm": [path]}. (`RolloutWorker.init_model`,
  `RolloutWorker.receive_weights`, `RolloutWorker.generate`; the functions below)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import string
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging
    import mmap

    from gkdtop.demo.config import DemoConfig

SHM_BYTES = 4 << 20
# vLLM's engine title, cut to the kernel's 15-byte name limit as vLLM's own is: the debris must look real.
ENGINE_CORE_NAME = "VLLM::EngineCore"[:15]


def spawn_engine_core(cfg: DemoConfig, log: logging.Logger) -> int:
    """Double-fork an engine process into its own session: it survives this worker, as vLLM's can."""
    run_dir = cfg.run_dir or os.getcwd()
    cmd = [sys.executable, "-m", "gkdtop.demo.job", "--engine-core", "--run-dir", run_dir]
    out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                         check=True)
    pid = int(out.stdout.strip().splitlines()[-1])
    log.info("[ROLLOUT] engine core started | pid=%d | cmd=%s", pid, " ".join(cmd))
    record_debris(cfg, orphan={"pid": pid, "cmdline": cmd})
    return pid


def record_debris(cfg: DemoConfig, orphan: dict[str, Any] | None = None, shm: str | None = None) -> None:
    """Add an orphan or a segment to RUN_DIR/debris.json: what the run leaves behind on purpose."""
    path = Path(cfg.run_dir or os.getcwd()) / "debris.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = {"orphans": [], "shm": []}
    if orphan:
        doc["orphans"].append(orphan)
    if shm:
        doc["shm"].append(shm)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def open_shm_segment(cfg: DemoConfig, log: logging.Logger) -> mmap.mmap:
    """Create and map /dev/shm/nccl-XXXXXX like NCCL's SHM transport, and (the leak) never unlink it.

    The caller keeps the mapping: the segment stays mapped for as long as the worker lives.
    """
    import mmap

    alphabet = string.ascii_letters + string.digits
    for _ in range(100):
        path = "/dev/shm/nccl-" + "".join(random.choices(alphabet, k=6))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise RuntimeError("no free /dev/shm/nccl-* name")
    try:
        os.ftruncate(fd, SHM_BYTES)
        segment = mmap.mmap(fd, SHM_BYTES)
        segment[:8] = b"gkdtop\0\0"
    finally:
        os.close(fd)
    record_debris(cfg, shm=path)
    log.info("NCCL INFO Channel 00 : 0[0] -> %d[0] via SHM/direct/direct | segment %s (%d MiB)",
             cfg.world_size, path, SHM_BYTES >> 20)
    return segment


def run_engine_core(run_dir: str) -> int:
    """The leak fault's orphan: detach twice, report the grandchild's pid, then sleep holding nothing."""
    pid = os.fork()
    if pid:
        return 0  # the intermediate; the grandchild prints its pid
    os.setsid()
    if os.fork():
        os._exit(0)
    with contextlib.suppress(Exception):  # name it like the engine processes that survive `ray stop`
        import ctypes

        ctypes.CDLL(None).prctl(15, ENGINE_CORE_NAME.encode(), 0, 0, 0)  # PR_SET_NAME
    print(os.getpid(), flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.chdir("/")
    while True:
        signal.pause()
