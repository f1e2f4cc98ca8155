"""The TaskRunner: the demo's orchestrator, a Ray actor as in verl, and the training loop it runs.

It does what verl's does, printing what verl's GKD recipe prints (main_gkd.py, ray_trainer.py):
the config, a toy prompt dataset (a tqdm-style `Generating train split` bar), the resource pool (a
real placement group), the actors (actors.py), the weight-sync group and its initial sync, then per
step: generate -> teacher log-probs -> actor update -> weight sync, with one verl-style
`step:N - timing_s/... - actor/kl_loss:...` line. Its prints reach the driver as `(TaskRunner pid=..)`.
"""

from __future__ import annotations

import os
import pprint
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gkdtop.demo import FAULT_HELP
from gkdtop.demo.actors import OnPolicyDistillActor, RolloutWorker, TeacherWorker, ray_actor
from gkdtop.demo.config import DemoConfig
from gkdtop.demo.printing import ProgressBar, logger
from gkdtop.demo.tiny_lm import quiet_torch


class TaskRunner:
    """The orchestrator, a Ray actor as in verl: its prints reach the driver as `(TaskRunner pid=..)`."""

    def __init__(self) -> None:
        self.log = logger("trainer")

    def run(self, cfg_dict: dict[str, Any]) -> dict[str, Any]:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cfg = DemoConfig(**cfg_dict)
        log = self.log
        playbook = cfg.markers == "playbook"  # else print what verl's GKD recipe prints (main_gkd.py, ray_trainer.py)
        total_gpus = int(ray.cluster_resources().get("GPU", 0))
        n_gpus = max(8, total_gpus + 1) if cfg.fault == "infeasible" else 0
        print(f"TaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}", flush=True)
        pprint.pprint(cfg.as_verl(n_gpus), width=110, sort_dicts=False)
        sys.stdout.flush()
        if playbook:
            log.info("✓ Configuration loaded")
        else:
            print(f"resource_pool_spec: {{'rollout_pool': [1], 'actor_pool': [{cfg.world_size}]}}", flush=True)
        if cfg.fault:
            log.warning("fault injection armed: %s: %s", cfg.fault, FAULT_HELP[cfg.fault])

        t0 = time.monotonic()
        if playbook:
            log.info("Starting dataset generation...")
        prompts = self._generate_dataset(cfg)
        if playbook:
            log.info("✓ Dataset generation completed in %.1fs | %d examples", time.monotonic() - t0, len(prompts))
        else:
            print(f"dataset len: {len(prompts)}", flush=True)
            print(f"Size of train dataloader: {len(prompts) // cfg.batch_size}", flush=True)
            print(f"Total training steps: {cfg.steps}", flush=True)

        t0 = time.monotonic()
        if playbook:
            log.info("Creating ResourcePool...")
        n_bundles = cfg.world_size + 1  # actor ranks + rollout
        if n_gpus:
            bundles = [{"CPU": 0.25, "GPU": 1.0} for _ in range(n_gpus)]
        else:
            bundles = [{"CPU": 0.25} for _ in range(n_bundles)]
        pg = placement_group(bundles, strategy="STRICT_PACK" if n_gpus else "PACK", name="gkd_global_pool")
        ray.get(pg.ready())
        if playbook:
            log.info("✓ ResourcePool created in %.1fs | bundles=%d", time.monotonic() - t0, len(bundles))

        def in_pool(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index)

        # The actor ranks named as verl names its workers (`<random prefix><Class>_<placement group>:<local
        # rank>`): Ray's actor table then says each one's rank, and gkdtop's task view names ranks by it.
        prefix = secrets.token_hex(3)
        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Actor Worker...")
        actor_cls = ray_actor(OnPolicyDistillActor)
        actors = [actor_cls.options(num_cpus=0.25, scheduling_strategy=in_pool(rank),
                                    name=f"{prefix}OnPolicyDistillActor_0:{rank}")
                  .remote(rank, cfg.world_size, cfg_dict) for rank in range(cfg.world_size)]
        master = ray.get(actors[0].master_address.remote())
        ray.get([a.init_model.remote(master) for a in actors])
        if playbook:
            log.info("✓ Actor Worker initialized in %.1fs | world_size=%d", time.monotonic() - t0, cfg.world_size)

        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Rollout Worker...")
        rollout_cls = ray_actor(RolloutWorker)
        rollout = rollout_cls.options(num_cpus=0.25, scheduling_strategy=in_pool(cfg.world_size)) \
            .remote(cfg_dict)
        ray.get(rollout.init_model.remote())
        if playbook:
            log.info("✓ Rollout Worker initialized in %.1fs", time.monotonic() - t0)

        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Teacher...")
        teacher = ray_actor(TeacherWorker).options(num_cpus=0.25).remote(cfg_dict)
        ray.get(teacher.init_model.remote())
        if playbook:
            log.info("✓ Teacher initialized in %.1fs", time.monotonic() - t0)

        t0 = time.monotonic()
        if playbook:
            log.info("Starting weight synchronization...")
        host, port = ray.get(actors[0].master_address.remote())
        size = cfg.world_size + 1
        ray.get([a.join_sync_group.remote(host, port, r, size) for r, a in enumerate(actors)]
                + [rollout.join_sync_group.remote(host, port, cfg.world_size, size)])
        self._sync(actors, rollout, version=0)
        if playbook:
            log.info("✓ Weight synchronization completed in %.1fs", time.monotonic() - t0)

        losses = self._train(cfg, prompts, actors, rollout, teacher)
        return {"steps": len(losses), "first_kl_loss": losses[0], "last_kl_loss": losses[-1]}

    def _generate_dataset(self, cfg: DemoConfig) -> Any:
        torch = quiet_torch()
        bar = ProgressBar("Generating train split", unit="examples")
        if cfg.fault == "stall-dataset":
            self._wait_for_cache_lock(cfg)  # never returns
        gen = torch.Generator().manual_seed(cfg.seed)
        chunks = []
        chunk = 128
        for start in range(0, cfg.train_examples, chunk):
            n = min(chunk, cfg.train_examples - start)
            chunks.append(torch.randint(1, cfg.vocab, (n, cfg.prompt_len), generator=gen))
            time.sleep(0.02)  # "tokenizing": slow enough for the bar to be seen
            bar.update(n)
        bar.close()
        return torch.cat(chunks)

    def _wait_for_cache_lock(self, cfg: DemoConfig) -> None:
        """The stall: a writer thread holds the cache lock while it waits for shards that never come."""
        import fcntl
        import queue

        cache = Path(cfg.run_dir or os.getcwd()) / "datasets-cache"
        cache.mkdir(parents=True, exist_ok=True)
        lock_path = cache / "train.arrow.lock"
        shards: queue.Queue[bytes] = queue.Queue()
        holding = threading.Event()

        def shard_writer() -> None:
            with open(lock_path, "a+") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                holding.set()
                shards.get()  # no producer ever puts anything

        threading.Thread(target=shard_writer, name="shard-writer", daemon=True).start()
        holding.wait()
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # blocks here, in the kernel, for good

    def _sync(self, actors: list[Any], rollout: Any, version: int) -> None:
        import ray

        ray.get([a.sync_weights.remote(version) for a in actors] + [rollout.receive_weights.remote(version)])

    def _train(self, cfg: DemoConfig, prompts: Any, actors: list[Any], rollout: Any,
               teacher: Any) -> list[float]:
        import ray

        bar = ProgressBar("Training Progress", total=cfg.steps, hold_line=False)
        losses: list[float] = []
        for step in range(1, cfg.steps + 1):
            timing: dict[str, float] = {}
            t_step = time.monotonic()
            start = ((step - 1) * cfg.batch_size) % len(prompts)
            batch = prompts[start:start + cfg.batch_size]
            t = time.monotonic()
            seqs = ray.get(rollout.generate.remote(batch, step))
            timing["gen"] = time.monotonic() - t
            t = time.monotonic()
            teacher_logp = ray.get(teacher.get_knowledge.remote(seqs))
            timing["get_teacher_knowledge"] = time.monotonic() - t
            if cfg.markers == "verl":  # the GKD recipe's ray_trainer.py, once generation and teacher are in
                bar.end_line()
                print("INFO: generate text done.", flush=True)
                print("DEBUG:", " ".join(f"t{int(x)}" for x in seqs[0].tolist()), flush=True)
            t = time.monotonic()
            seqs_ref, teacher_ref = ray.put(seqs), ray.put(teacher_logp)
            metrics = ray.get([a.update.remote(seqs_ref, teacher_ref) for a in actors])[0]
            timing["update_actor"] = time.monotonic() - t
            if cfg.markers == "verl":
                print("INFO: update actor done.", flush=True)
            t = time.monotonic()
            self._sync(actors, rollout, version=step)
            timing["sync_rollout_weights"] = time.monotonic() - t
            timing["step"] = time.monotonic() - t_step
            losses.append(metrics["kl_loss"])
            bar.end_line()
            print(f"step:{step} - timing_s/gen:{timing['gen']:.3f} - "
                  f"timing_s/sync_rollout_weights:{timing['sync_rollout_weights']:.3f} - "
                  f"timing_s/get_teacher_knowledge:{timing['get_teacher_knowledge']:.3f} - "
                  f"timing_s/update_actor:{timing['update_actor']:.3f} - "
                  f"timing_s/step:{timing['step']:.3f} - "
                  f"actor/kl_loss:{metrics['kl_loss']:.4f} - actor/lr:{metrics['lr']:g}", flush=True)
            bar.update(1)
        bar.end_line()
        return losses
