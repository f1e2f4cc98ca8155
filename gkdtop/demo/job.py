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

What it prints (`--markers`): by default the lines verl's GKD recipe and the engines around it
print (docs/real-logs.md): `ray init kwargs:`, `TaskRunner hostname:`, the config, `resource_pool_spec:`,
`dataset len:`, `Total training steps:`, `… contains N parameters`, the rollout's start-up and
sleep/wake lines in vLLM's format (it stands in for vLLM), the teacher server's `Reading configs
from`, `INFO: generate text done.` / `INFO: update actor done.` and the step line. `--markers
playbook` prints the old playbook's markers instead (`[ACTOR] init_model START`, `[SYNC] …`).

Faults (`--fault`), each a real failure:

- hang-sync: at the INITIAL weight sync (version 0, before step 1), actor rank 1 returns without
  joining the collective. Actor rank 0 and the rollout block inside the weight-sync group's gloo
  broadcast (`WeightSyncMember.broadcast_weights`; gloo timeout 1 h), rank 1 sits idle in Ray's
  main loop, the TaskRunner blocks in ray.get. The log stops after `Starting weight
  synchronization...` and rank 0's `[SYNC] Starting weight synchronization`.
- mismatch-sync: at the initial weight sync, actor rank 1 calls the checksum's all_reduce where
  the others broadcast the first tensor: different collectives at the same sequence number of the
  weight-sync group. All three block (gloo timeout 1 h); the Flight Recorder names the type mismatch.
- stall-dataset: a "shard writer" thread takes the dataset cache lock (flock) and waits on a queue
  that never fills; the TaskRunner's main thread blocks in flock() right after
  `Generating train split: 0 examples`.
- crash-rollout: the rollout worker raises SIGSEGV in itself at step 2 (faulthandler prints its
  stack). The TaskRunner's ray.get raises ActorDiedError; the driver prints the traceback, exits 1.
- infeasible: the resource pool asks for 8 GPUs on one node (or one more than the cluster has);
  `pg.ready()` never resolves and Ray's autoscaler reports the infeasible demand.
- leak: the rollout worker double-forks an "engine core" (`python -m gkdtop.demo.job --engine-core
  --run-dir RUN_DIR`, process name `VLLM::EngineCor` as vLLM's own engine, in a session of its own, reparented to PID 1
  or the nearest subreaper) and, at the initial weight sync, creates and maps a shared-memory
  segment `/dev/shm/nccl-XXXXXX` (4 MiB) as NCCL's SHM transport does, without unlinking it. At
  step 2 it SIGKILLs itself; the driver gets ActorDiedError and exits 1. Left behind: the engine
  core (alive, sleeping, maps nothing) and the segment (mapped by no process). Both are listed in
  RUN_DIR/debris.json: {"orphans": [{"pid", "cmdline"}], "shm": [path]}.

Apart from that debris, the driver removes everything it started on its way out (normal end,
exception, SIGINT, SIGTERM, SIGHUP, or its launcher's death when `--parent-pid` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import pprint
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gkdtop import probe  # noqa: F401 - with GKDTOP_PROBE=1 (gkdtop demo, gkdtop run) this installs it
from gkdtop.demo import FAULT_HELP, FAULTS

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
GLOO_TIMEOUT = timedelta(hours=1)  # long on purpose: a hang stays a hang
SHM_BYTES = 4 << 20
# vLLM's engine title, cut to the kernel's 15-byte name limit as vLLM's own is: the debris must look real.
ENGINE_CORE_NAME = "VLLM::EngineCore"[:15]


@dataclass
class DemoConfig:
    """The job's knobs, printed verl-style at start. Small enough for 2 CPU cores."""

    steps: int = 20
    fault: str | None = None
    seed: int = 0
    run_dir: str | None = None
    train_examples: int = 1024
    batch_size: int = 64
    prompt_len: int = 4
    response_len: int = 12
    vocab: int = 32
    student_dim: int = 16
    student_hidden: int = 64
    teacher_dim: int = 32
    teacher_hidden: int = 128
    teacher_sharpness: float = 3.0
    lr: float = 0.02
    mini_batches: int = 2
    world_size: int = 2
    crash_step: int = 2
    markers: str = "verl"  # verl: the lines real verl jobs print; playbook: the old playbook's markers
    # Emulated accelerator time (sleeps) per decoded token / teacher batch / actor mini-batch, times
    # `pace`: the real work takes milliseconds here, and a dashboard needs steps it can watch.
    pace: float = 1.0
    decode_token_s: float = 0.04
    teacher_batch_s: float = 0.15
    update_minibatch_s: float = 0.1

    def as_verl(self, n_gpus_per_node: int) -> dict[str, Any]:
        """The nested shape verl prints (pprint of the resolved OmegaConf)."""
        return {
            "data": {"train_examples": self.train_examples, "train_batch_size": self.batch_size,
                     "max_prompt_length": self.prompt_len, "max_response_length": self.response_len,
                     "vocab_size": self.vocab},
            "actor_rollout_ref": {
                "model": {"path": "gkdtop/tiny-bigram-mlp", "hidden_size": self.student_hidden},
                "actor": {"strategy": "ddp", "optim": {"lr": self.lr}, "loss_agg_mode": "token-mean",
                          "kl_loss_type": "reverse_kl",
                          "ppo_mini_batch_size": self.batch_size // self.mini_batches},
                "rollout": {"name": "torch", "temperature": 1.0, "response_length": self.response_len},
            },
            "teacher": {"model": {"path": "gkdtop/tiny-teacher", "hidden_size": self.teacher_hidden},
                        "sharpness": self.teacher_sharpness},
            "trainer": {"project_name": "gkdtop-demo", "total_training_steps": self.steps, "nnodes": 1,
                        "n_gpus_per_node": n_gpus_per_node, "actor_world_size": self.world_size,
                        "seed": self.seed, "fault": self.fault},
        }


# --------------------------------------------------------------------------- logging and progress


def _logger(role: str) -> logging.Logger:
    """A logger that writes `asctime name LEVEL message` to stdout, whatever Ray did to the root logger."""
    log = logging.getLogger(f"gkd.{role}")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def _quiet_torch() -> Any:
    """Import torch without its 'NumPy is missing' warning in every worker, one thread per process."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        import torch
    torch.set_num_threads(1)
    return torch


def _vllm(where: str, message: str) -> None:
    """A line in vLLM's own format (`INFO 06-12 10:35:01 [file.py:N] message`): the rollout stands in for it."""
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [{where}] {message}", flush=True)


def _model_size(name: str, model: Any) -> str:
    """verl's print_model_size line: `Qwen2ForCausalLM contains 7.62B parameters`."""
    n = float(sum(p.numel() for p in model.parameters()))
    scale = ""
    for unit in ("K", "M", "B", "T"):
        if n < 1000:
            break
        n, scale = n / 1000, unit
    return f"{name} contains {n:.2f}{scale} parameters"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


class _Bar:
    """A tqdm look-alike (tqdm is not a dependency): `\\r` rewrites of one line, a newline at close.

    With `hold_line=False` every redraw ends its line at once: a bar that other prints interleave
    with would otherwise leave an empty `(TaskRunner pid=..)` line behind each time Ray's log monitor
    forwards the unfinished line before the newline that ends it.
    """

    _BLOCKS = " ▏▎▍▌▋▊▉█"

    def __init__(self, desc: str, total: int | None = None, unit: str = "it", hold_line: bool = True) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.hold_line = hold_line
        self.n = 0
        self.t0 = time.monotonic()
        self.open = False
        self._draw()

    def _text(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.n / elapsed if self.n and elapsed > 0 else None
        if self.total is None:
            shown = f"{rate:.2f} {self.unit}/s" if rate else f"? {self.unit}/s"
            return f"{self.desc}: {self.n} {self.unit} [{_clock(elapsed)}, {shown}]"
        frac = min(1.0, self.n / self.total) if self.total else 1.0
        eighths = int(frac * 10 * 8)
        bar = ("█" * (eighths // 8) + (self._BLOCKS[eighths % 8] if eighths < 80 else "")).ljust(10)
        left = _clock((self.total - self.n) / rate) if rate else "?"
        speed = f"{1 / rate:5.2f}s/{self.unit}" if rate else f"?{self.unit}/s"
        counts = f"{self.n}/{self.total} [{_clock(elapsed)}<{left}, {speed}]"
        return f"{self.desc}: {frac * 100:3.0f}%|{bar}| {counts}"

    def _draw(self) -> None:
        sys.stdout.write("\r" + self._text() + ("" if self.hold_line else "\n"))
        sys.stdout.flush()
        self.open = self.hold_line

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def end_line(self) -> None:
        """Finish the bar's line so that the next print starts on a line of its own."""
        if self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False

    def close(self) -> None:
        self._draw()
        self.end_line()


# --------------------------------------------------------------------------- the models


def build_lm(vocab: int, dim: int, hidden: int, seed: int, sharpness: float = 1.0) -> Any:
    """A next-token model over the previous two tokens: embed, concat, MLP. A few thousand parameters."""
    torch = _quiet_torch()
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Flatten(start_dim=-2), nn.Linear(2 * dim, hidden),
                          nn.Tanh(), nn.Linear(hidden, vocab))
    if sharpness != 1.0:
        with torch.no_grad():
            model[-1].weight.mul_(sharpness)
            model[-1].bias.mul_(sharpness)
    return model


def contexts(tokens: Any) -> Any:
    """[B, L] tokens -> [B, L, 2] (previous, current) pairs; position t predicts token t+1."""
    torch = _quiet_torch()
    prev = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
    return torch.stack([prev, tokens], dim=-1)


def response_logprobs(model: Any, seqs: Any, prompt_len: int) -> Any:
    """Log-probs over the vocabulary at the positions that predict the response tokens: [B, G, V]."""
    torch = _quiet_torch()
    logits = model(contexts(seqs))[:, prompt_len - 1:-1]
    return torch.log_softmax(logits.float(), dim=-1)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


# --------------------------------------------------------------------------- Ray actors


class WeightSyncMember:
    """Membership in the weight-sync group: actor ranks 0..W-1 and the rollout at rank W."""

    sync_pg: Any = None
    sync_rank: int = -1

    def join_sync_group(self, host: str, port: int, rank: int, size: int) -> int:
        torch = _quiet_torch()
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
        torch = _quiet_torch()

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
        self.log = _logger("actor")
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
        torch = _quiet_torch()
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
            print(_model_size("TinyBigramForCausalLM", self.model), flush=True)
        return {"pid": os.getpid(), "rank": self.rank, "params": n_params}

    def sync_weights(self, version: int) -> dict[str, Any]:
        if self.cfg.fault == "hang-sync" and version == 0 and self.rank == 1:
            # The bug under test: this rank takes a code path that never joins the collective.
            return {"rank": self.rank, "skipped": True}
        if self.cfg.fault == "mismatch-sync" and version == 0 and self.rank == 1:
            # The bug under test: this rank confirms a checksum before any weights were sent.
            torch = _quiet_torch()
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
        torch = _quiet_torch()
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
        self.log = _logger("rollout")
        self.model: Any = None
        self.version = -1
        self._shm: Any = None

    def init_model(self) -> dict[str, Any]:
        t0 = time.monotonic()
        c = self.cfg
        if c.markers == "playbook":
            self.log.info("[ROLLOUT] init_model START | pid=%d", os.getpid())
        else:
            _vllm("core.py:74", "Initializing a V1 LLM engine (v0.0.0+gkdtop.demo) with config: "
                  f"model='gkdtop/tiny-bigram-mlp', dtype=torch.float32, max_seq_len={c.prompt_len + c.response_len}, "
                  "enforce_eager=True, device_config=cpu, seed=0, enable_prefix_caching=False")
        self.model = build_lm(c.vocab, c.student_dim, c.student_hidden, seed=c.seed * 1000 + 99)
        self.model.requires_grad_(False)
        info: dict[str, Any] = {"pid": os.getpid()}
        if c.fault == "leak":
            info["engine_core_pid"] = self._spawn_engine_core()
        if c.markers == "playbook":
            self.log.info("[ROLLOUT] ✓ Engine ready in %.1fs | sampler=torch | max_response_length=%d",
                          time.monotonic() - t0, c.response_len)
            self.log.info("[ROLLOUT] init_model DONE")
        else:
            took = time.monotonic() - t0
            _vllm("core.py:171", f"init engine (profile, create kv cache, warmup model) took {took:.2f} seconds")
            _vllm("gpu_worker.py:81", "Sleep mode freed 0.00 GiB memory, 0.00 GiB memory is still in use.")
        return info

    def _spawn_engine_core(self) -> int:
        """Double-fork an engine process into its own session: it survives this worker, as vLLM's can."""
        run_dir = self.cfg.run_dir or os.getcwd()
        cmd = [sys.executable, "-m", "gkdtop.demo.job", "--engine-core", "--run-dir", run_dir]
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                             check=True)
        pid = int(out.stdout.strip().splitlines()[-1])
        self.log.info("[ROLLOUT] engine core started | pid=%d | cmd=%s", pid, " ".join(cmd))
        self._record_debris(orphan={"pid": pid, "cmdline": cmd})
        return pid

    def _record_debris(self, orphan: dict[str, Any] | None = None, shm: str | None = None) -> None:
        path = Path(self.cfg.run_dir or os.getcwd()) / "debris.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {"orphans": [], "shm": []}
        if orphan:
            doc["orphans"].append(orphan)
        if shm:
            doc["shm"].append(shm)
        path.write_text(json.dumps(doc, indent=1) + "\n")

    def _open_shm_segment(self) -> str:
        """Create and map /dev/shm/nccl-XXXXXX like NCCL's SHM transport, and (the leak) never unlink it."""
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
            self._shm = mmap.mmap(fd, SHM_BYTES)
            self._shm[:8] = b"gkdtop\0\0"
        finally:
            os.close(fd)
        self._record_debris(shm=path)
        self.log.info("NCCL INFO Channel 00 : 0[0] -> %d[0] via SHM/direct/direct | segment %s (%d MiB)",
                      self.cfg.world_size, path, SHM_BYTES >> 20)
        return path

    def receive_weights(self, version: int) -> dict[str, Any]:
        t0 = time.monotonic()
        if self.cfg.markers == "verl":  # verl wakes the engine's weights, then pushes the new ones in
            _vllm("executor_base.py:226", "It took 0.000100 seconds to wake up tags ['weights'].")
        if self.cfg.fault == "leak" and self._shm is None:
            self._open_shm_segment()
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
        torch = _quiet_torch()
        t0 = time.monotonic()
        if c.markers == "verl":
            _vllm("executor_base.py:226", "It took 0.000100 seconds to wake up tags ['kv_cache'].")
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
            _vllm("loggers.py:118", f"Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
                  f"{tokens / max(time.monotonic() - t0, 1e-6):.1f} tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
                  "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")
            _vllm("executor_base.py:210", "It took 0.000100 seconds to fall asleep.")
        return seqs


class TeacherWorker:
    """The fixed teacher: log-probs over the whole vocabulary for every response position."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = DemoConfig(**cfg)
        self.log = _logger("teacher")
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
        torch = _quiet_torch()
        with torch.no_grad():
            logp = response_logprobs(self.model, seqs, self.cfg.prompt_len)
        time.sleep(self.cfg.teacher_batch_s * self.cfg.pace)
        return logp


class TaskRunner:
    """The orchestrator, a Ray actor as in verl: its prints reach the driver as `(TaskRunner pid=..)`."""

    def __init__(self) -> None:
        self.log = _logger("trainer")

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

        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Actor Worker...")
        actor_cls = _remote("OnPolicyDistillActor")
        actors = [actor_cls.options(num_cpus=0.25, scheduling_strategy=in_pool(rank))
                  .remote(rank, cfg.world_size, cfg_dict) for rank in range(cfg.world_size)]
        master = ray.get(actors[0].master_address.remote())
        ray.get([a.init_model.remote(master) for a in actors])
        if playbook:
            log.info("✓ Actor Worker initialized in %.1fs | world_size=%d", time.monotonic() - t0, cfg.world_size)

        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Rollout Worker...")
        rollout_cls = _remote("RolloutWorker")
        rollout = rollout_cls.options(num_cpus=0.25, scheduling_strategy=in_pool(cfg.world_size)) \
            .remote(cfg_dict)
        ray.get(rollout.init_model.remote())
        if playbook:
            log.info("✓ Rollout Worker initialized in %.1fs", time.monotonic() - t0)

        t0 = time.monotonic()
        if playbook:
            log.info("Initializing Teacher...")
        teacher = _remote("TeacherWorker").options(num_cpus=0.25).remote(cfg_dict)
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
        torch = _quiet_torch()
        bar = _Bar("Generating train split", unit="examples")
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

        bar = _Bar("Training Progress", total=cfg.steps, hold_line=False)
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


@functools.cache
def _remote(name: str) -> Any:
    """The Ray actor class of one of the classes above (wrapped lazily: importing this needs no ray)."""
    import ray

    return ray.remote(globals()[name])


# --------------------------------------------------------------------------- the private Ray cluster


class LocalRayCluster:
    """`ray start --head --block` in a session of its own: everything Ray starts is in that session."""

    def __init__(self, temp_dir: Path, gcs_port: int, dashboard_port: int, client_port: int, agent_port: int,
                 num_cpus: int = 4) -> None:
        self.temp_dir = temp_dir
        self.gcs_port, self.dashboard_port = gcs_port, dashboard_port
        self.client_port, self.agent_port = client_port, agent_port
        self.num_cpus = num_cpus
        self.proc: subprocess.Popen[str] | None = None
        self.started = time.time()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self, run_dir: Path | None, timeout: float = 120.0) -> None:
        ray_exe = Path(sys.executable).with_name("ray")
        exe = [str(ray_exe)] if ray_exe.exists() else [shutil.which("ray") or "ray"]
        cmd = [*exe, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={self.gcs_port}",
               f"--num-cpus={self.num_cpus}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
               f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={self.client_port}",
               f"--dashboard-agent-listen-port={self.agent_port}", "--object-store-memory=100000000",
               f"--temp-dir={self.temp_dir}", "--disable-usage-stats", "--log-style=record",
               "--log-color=false"]
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        if run_dir is not None:
            info = {"ray_start_pid": self.proc.pid, "session_id": self.proc.pid,
                    "temp_dir": str(self.temp_dir), "gcs_address": self.address,
                    "dashboard_url": self.dashboard_url, "driver_pid": os.getpid()}
            (run_dir / "cluster.json").write_text(json.dumps(info, indent=1) + "\n")
        ready = threading.Event()
        threading.Thread(target=self._forward, args=(ready,), name="ray-start-output", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"`ray start` exited ({self.proc.returncode}) before the cluster was up")
            if time.monotonic() > deadline:
                raise RuntimeError("`ray start` did not bring the cluster up in time")

    def _forward(self, ready: threading.Event) -> None:
        """Copy `ray start`'s output into the job's log; flag the moment it reports the runtime started."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if "Ray runtime started" in line:
                ready.set()

    def processes(self) -> list[Any]:
        """This cluster's live processes: the `ray start` session, the temp dir's users, their descendants."""
        from gkdtop.demo.launcher import find_processes

        if self.proc is None:
            return []
        roots = [self.proc.pid] if self.proc.poll() is None else []
        return find_processes(roots=roots, sessions=[self.proc.pid], markers=[str(self.temp_dir)],
                              since=self.started)

    def stop(self) -> None:
        """Drain and stop this cluster only: SIGTERM to `ray start`, then kill what is left of its session."""
        from gkdtop.demo.launcher import terminate

        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # `ray start --block` drains the node and stops its processes
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15.0)
        deadline = time.monotonic() + 2.0  # stragglers (multiprocessing's resource tracker) go by themselves
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        terminate(left, grace=2.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


# --------------------------------------------------------------------------- driver


_received_signal: int | None = None


def _on_signal(signum: int, frame: object) -> None:
    """Turn SIGINT/SIGTERM/SIGHUP into KeyboardInterrupt: the one exception ray.get lets through."""
    global _received_signal
    _received_signal = signum
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _watch_parent(parent_pid: int) -> None:
    """Stop the job when the gkdtop that launched it is gone: a demo must not outlive its launcher."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _engine_core(run_dir: str) -> int:
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


def _wait_for_runner(ref: Any, cluster: LocalRayCluster | None) -> Any:
    """ray.get of the TaskRunner's result, but failing fast if the private cluster goes down meanwhile."""
    import ray

    while True:
        ready, _ = ray.wait([ref], timeout=1.0)
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
        return _engine_core(args.run_dir or os.getcwd())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # every rank's lines, not "[repeated 2x across cluster]"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    log = _logger("driver")
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
        runner = _remote("TaskRunner").options(num_cpus=0.5).remote()
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
    # Run the importable module, not this `__main__` copy: Ray pickles the actor classes by reference
    # to their module, and a worker has no `__main__` with them in it.
    from gkdtop.demo import job

    sys.exit(job.main())
