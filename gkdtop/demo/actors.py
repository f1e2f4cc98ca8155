"""The Ray actors that do the demo's work: the student's data-parallel ranks, the rollout and the teacher.

Each is a plain class, made a Ray actor class only when the TaskRunner starts it (`ray_actor`):
importing this module imports neither ray nor torch. Ray pickles an actor class by reference to its
module, so every worker of the job imports this module (the TaskRunner's through task_runner.py),
and with it the probe.

- `WeightSyncMember`: membership in the weight-sync group, a stateless ProcessGroupGloo over a
  TCPStore named `weight_sync`, as vLLM / verl build theirs (actor ranks 0..W-1, the rollout at W).
- `OnPolicyDistillActor`: one DDP-style rank of the student (reverse KL to the teacher, gradients
  all_reduced over its own gloo group); sends the weights at each sync.
- `RolloutWorker`: samples responses from the student's weights as of the last sync, and prints the
  start-up and sleep/wake lines of the vLLM engine it stands in for.
- `TeacherWorker`: a fixed, sharper LM that returns its log-probs over the vocabulary.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from datetime import timedelta
from typing import Any

from gkdtop import probe  # noqa: F401 - with GKDTOP_PROBE=1 (gkdtop demo, gkdtop run) this installs it
from gkdtop.demo.config import DemoConfig
from gkdtop.demo.faults import open_shm_segment, spawn_engine_core
from gkdtop.demo.printing import logger, model_size_line, print_vllm
from gkdtop.demo.tiny_lm import build_lm, contexts, quiet_torch, response_logprobs

GLOO_TIMEOUT = timedelta(hours=1)  # long on purpose: a hang stays a hang


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


class WeightSyncMember:
    """Membership in the weight-sync group: actor ranks 0..W-1 and the rollout at rank W."""

    sync_pg: Any = None
    sync_rank: int = -1

    def join_sync_group(self, host: str, port: int, rank: int, size: int) -> int:
        torch = quiet_torch()
        import torch.distributed as dist

        store = dist.TCPStore(host, port, size, is_master=rank == 0, timeout=timedelta(seconds=300))
        prefixed = dist.PrefixStore("weight_sync", store)
        gloo = dist.ProcessGroupGloo(prefixed, rank, size, GLOO_TIMEOUT)
        # Named, as torch names the groups it makes: the Flight Recorder records each collective's group name.
        self.sync_pg = dist.ProcessGroup(prefixed, rank, size)
        self.sync_pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
        self.sync_pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        self.sync_pg._set_group_name("weight_sync")
        self.sync_rank = rank
        return os.getpid()

    def broadcast_weights(self, tensors: list[Any]) -> float:
        """Every member calls this: rank 0 sends each tensor, all check the same checksum arrived."""
        torch = quiet_torch()

        for tensor in tensors:
            self.sync_pg.broadcast(tensor, 0).wait()
        checksum = float(sum(t.double().sum() for t in tensors))
        both = torch.tensor([checksum, -checksum], dtype=torch.float64)
        self._allreduce_max(both)
        if abs(both[0].item() + both[1].item()) > 1e-9 * max(1.0, abs(checksum)):
            raise RuntimeError(f"weight sync checksum mismatch: max {both[0].item()} min {-both[1].item()}")
        return checksum

    def _allreduce_max(self, tensor: Any) -> None:
        import torch.distributed as dist

        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self.sync_pg.allreduce([tensor], opts).wait()


class OnPolicyDistillActor(WeightSyncMember):
    """One data-parallel rank of the student: DDP-style updates over a gloo group, sends weights at sync."""

    def __init__(self, rank: int, world_size: int, cfg: dict[str, Any]) -> None:
        self.rank, self.world_size = rank, world_size
        self.cfg = DemoConfig(**cfg)
        self.log = logger("actor")
        self.model: Any = None
        self.optim: Any = None

    def master_address(self) -> tuple[str, int]:
        from gkdtop.demo.launcher import free_port

        return _node_ip(), free_port()

    def init_model(self, master: tuple[str, int]) -> dict[str, Any]:
        t0 = time.monotonic()
        playbook = self.cfg.markers == "playbook"
        if playbook:
            self.log.info("[ACTOR] init_model START | pid=%d | rank=%d", os.getpid(), self.rank)
        torch = quiet_torch()
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{master[0]}:{master[1]}", rank=self.rank,
                                world_size=self.world_size, timeout=GLOO_TIMEOUT)
        c = self.cfg
        self.model = build_lm(c.vocab, c.student_dim, c.student_hidden, seed=c.seed * 1000 + 1 + self.rank)
        with torch.no_grad():  # DDP semantics: every rank starts from rank 0's weights
            for p in self.model.parameters():
                dist.broadcast(p.data, src=0)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=c.lr)
        n_params = sum(p.numel() for p in self.model.parameters())
        if playbook:
            self.log.info("[ACTOR] ✓ Model built in %.1fs | rank=%d | params=%d | dp_world=%d",
                          time.monotonic() - t0, self.rank, n_params, self.world_size)
            self.log.info("[ACTOR] init_model DONE | rank=%d", self.rank)
        elif self.rank == 0:
            print(model_size_line("TinyBigramForCausalLM", self.model), flush=True)
        return {"pid": os.getpid(), "rank": self.rank, "params": n_params}

    def sync_weights(self, version: int) -> dict[str, Any]:
        if self.cfg.fault == "hang-sync" and version == 0 and self.rank == 1:
            # The bug under test: this rank takes a code path that never joins the collective.
            return {"rank": self.rank, "skipped": True}
        if self.cfg.fault == "mismatch-sync" and version == 0 and self.rank == 1:
            # The bug under test: this rank confirms a checksum before any weights were sent.
            torch = quiet_torch()
            self._allreduce_max(torch.zeros(2, dtype=torch.float64))
        params = [p.data for p in self.model.parameters()]
        nbytes = sum(t.numel() * t.element_size() for t in params)
        t0 = time.monotonic()
        if self.rank == 0 and self.cfg.markers == "playbook":
            self.log.info("[SYNC] Starting weight synchronization | version=%d | tensors=%d | %.1f KB | "
                          "group=weight_sync(world=%d)", version, len(params), nbytes / 1024,
                          self.world_size + 1)
        tensors = params if self.rank == 0 else [t.clone() for t in params]
        checksum = self.broadcast_weights(tensors)
        if self.rank == 0 and self.cfg.markers == "playbook":
            self.log.info("[SYNC] ✓ Broadcast %d tensors to the rollout in %.3fs | version=%d",
                          len(params), time.monotonic() - t0, version)
        return {"rank": self.rank, "checksum": checksum}

    def update(self, seqs: Any, teacher_logp: Any) -> dict[str, float]:
        """Reverse KL(student || teacher) on this rank's shard; gradients averaged over the DP group."""
        torch = quiet_torch()
        import torch.distributed as dist

        c = self.cfg
        shard = slice(self.rank, None, self.world_size)
        seqs, teacher_logp = seqs[shard], teacher_logp[shard]
        params = [p for p in self.model.parameters()]
        losses, norms = [], []
        for idx in torch.arange(seqs.shape[0]).chunk(c.mini_batches):
            student_logp = response_logprobs(self.model, seqs[idx], c.prompt_len)
            kl = (student_logp.exp() * (student_logp - teacher_logp[idx])).sum(-1).mean()
            self.optim.zero_grad(set_to_none=False)
            kl.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in params])  # one bucket, like DDP's
            dist.all_reduce(flat)
            flat /= self.world_size
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))
            time.sleep(c.update_minibatch_s * c.pace)
            self.optim.step()
            losses.append(float(kl.detach()))
        stats = torch.tensor([sum(losses) / len(losses), sum(norms) / len(norms)])
        dist.all_reduce(stats)
        stats /= self.world_size
        lr = self.optim.param_groups[0]["lr"]
        return {"kl_loss": float(stats[0]), "grad_norm": float(stats[1]), "lr": lr}


class RolloutWorker(WeightSyncMember):
    """Samples responses from the student's weights as of the last sync (the generation engine's role)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = DemoConfig(**cfg)
        self.log = logger("rollout")
        self.model: Any = None
        self.version = -1
        self._shm: Any = None

    def init_model(self) -> dict[str, Any]:
        t0 = time.monotonic()
        c = self.cfg
        if c.markers == "playbook":
            self.log.info("[ROLLOUT] init_model START | pid=%d", os.getpid())
        else:
            print_vllm("core.py:74", "Initializing a V1 LLM engine (v0.0.0+gkdtop.demo) with config: "
                       "model='gkdtop/tiny-bigram-mlp', dtype=torch.float32, "
                       f"max_seq_len={c.prompt_len + c.response_len}, enforce_eager=True, device_config=cpu, "
                       "seed=0, enable_prefix_caching=False")
        self.model = build_lm(c.vocab, c.student_dim, c.student_hidden, seed=c.seed * 1000 + 99)
        self.model.requires_grad_(False)
        info: dict[str, Any] = {"pid": os.getpid()}
        if c.fault == "leak":
            info["engine_core_pid"] = spawn_engine_core(c, self.log)
        if c.markers == "playbook":
            self.log.info("[ROLLOUT] ✓ Engine ready in %.1fs | sampler=torch | max_response_length=%d",
                          time.monotonic() - t0, c.response_len)
            self.log.info("[ROLLOUT] init_model DONE")
        else:
            took = time.monotonic() - t0
            print_vllm("core.py:171",
                       f"init engine (profile, create kv cache, warmup model) took {took:.2f} seconds")
            print_vllm("gpu_worker.py:81",
                       "Sleep mode freed 0.00 GiB memory, 0.00 GiB memory is still in use.")
        return info

    def receive_weights(self, version: int) -> dict[str, Any]:
        t0 = time.monotonic()
        if self.cfg.markers == "verl":  # verl wakes the engine's weights, then pushes the new ones in
            print_vllm("executor_base.py:226", "It took 0.000100 seconds to wake up tags ['weights'].")
        if self.cfg.fault == "leak" and self._shm is None:
            self._shm = open_shm_segment(self.cfg, self.log)
        params = [p.data for p in self.model.parameters()]
        checksum = self.broadcast_weights(params)
        self.version = version
        if self.cfg.markers == "playbook":
            self.log.info("[SYNC] ✓ Rollout weights updated to version %d in %.3fs | checksum=%.6f",
                          version, time.monotonic() - t0, checksum)
        return {"version": version, "checksum": checksum}

    def generate(self, prompts: Any, step: int) -> Any:
        c = self.cfg
        if step == c.crash_step and c.fault == "crash-rollout":
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file debris
            os.kill(os.getpid(), signal.SIGSEGV)
        if step == c.crash_step and c.fault == "leak":
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would: no cleanup runs
        torch = quiet_torch()
        t0 = time.monotonic()
        if c.markers == "verl":
            print_vllm("executor_base.py:226", "It took 0.000100 seconds to wake up tags ['kv_cache'].")
        gen = torch.Generator().manual_seed(c.seed * 7919 + step)
        seqs = prompts.clone()
        with torch.no_grad():
            for _ in range(c.response_len):
                logits = self.model(contexts(seqs[:, -2:]))[:, -1]
                nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)
                seqs = torch.cat([seqs, nxt], dim=1)
                time.sleep(c.decode_token_s * c.pace)
        if c.markers == "verl":
            tokens = seqs.shape[0] * c.response_len
            print_vllm("loggers.py:118", f"Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
                       f"{tokens / max(time.monotonic() - t0, 1e-6):.1f} tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
                       "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")
            print_vllm("executor_base.py:210", "It took 0.000100 seconds to fall asleep.")
        return seqs


class TeacherWorker:
    """The fixed teacher: log-probs over the whole vocabulary for every response position."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = DemoConfig(**cfg)
        self.log = logger("teacher")
        self.model: Any = None

    def init_model(self) -> dict[str, Any]:
        t0 = time.monotonic()
        c = self.cfg
        if c.markers == "playbook":
            self.log.info("[TEACHER] init_model START | pid=%d", os.getpid())
        else:  # what the GKD recipe's teacher server prints as it reads its model (teacher/vllm_engine.py)
            print(f"Reading configs from gkdtop/tiny-teacher: config.vocab_size={c.vocab}", flush=True)
        self.model = build_lm(c.vocab, c.teacher_dim, c.teacher_hidden, seed=c.seed * 1000 + 7,
                              sharpness=c.teacher_sharpness)
        self.model.requires_grad_(False)
        n_params = sum(p.numel() for p in self.model.parameters())
        if c.markers == "playbook":
            self.log.info("[TEACHER] ✓ Teacher model loaded in %.1fs | params=%d", time.monotonic() - t0,
                          n_params)
            self.log.info("[TEACHER] init_model DONE")
        return {"pid": os.getpid(), "params": n_params}

    def get_knowledge(self, seqs: Any) -> Any:
        torch = quiet_torch()
        with torch.no_grad():
            logp = response_logprobs(self.model, seqs, self.cfg.prompt_len)
        time.sleep(self.cfg.teacher_batch_s * self.cfg.pace)
        return logp


@functools.cache
def ray_actor(cls: type) -> Any:
    """The Ray actor class of one of the demo's actor classes (wrapped lazily: importing this needs no ray)."""
    import ray

    return ray.remote(cls)
