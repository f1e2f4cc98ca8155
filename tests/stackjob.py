"""Small Python processes that sit where verl's and vLLM's do, for real py-spy to read.

Each is a package tree written under a temp dir (`verl/...`, `vllm/...`) and started with
`python -m`, as verl's driver is, so py-spy names its files as it names verl's own
(`verl/trainer/ppo/ray_trainer.py`). The innermost function prints `ready` and then blocks, so
once `ready` is read the stack is the one the test means.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The driver: RayPPOTrainer.fit blocked on a worker group's call, which (as in verl's
# single_controller/ray/base.py) goes through one generic Functor.__call__ into ray.get.
DRIVER = '''\
import sys
import time


class Functor:
    def __call__(self, *args):
        print("ready", flush=True)
        while True:
            time.sleep(0.05)


class WorkerGroup:
    def __init__(self):
        self.generate_sequences = Functor()
        self.update_actor = Functor()


class RayPPOTrainer:
    def fit(self):
        self.actor_rollout_wg = WorkerGroup()
        batch = None
        if "--update" in sys.argv:
            actor_output = self.actor_rollout_wg.update_actor(batch)
            return actor_output
        gen_batch_output = self.actor_rollout_wg.generate_sequences(batch)
        return gen_batch_output


if __name__ == "__main__":
    RayPPOTrainer().fit()
'''

# A rollout worker whose main thread blocks in generate_sequences (verl/workers/fsdp_workers.py).
WORKER = '''\
import time


class ActorRolloutRefWorker:
    def generate_sequences(self, prompts):
        print("ready", flush=True)
        while True:
            time.sleep(0.05)


if __name__ == "__main__":
    ActorRolloutRefWorker().generate_sequences(None)
'''

# vLLM capturing CUDA graphs while verl builds its rollout (init_model -> vLLM -> capture_model).
ENGINE = '''\
import time


class GPUModelRunner:
    def capture_model(self):
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
'''
ENGINE_WORKER = '''\
from vllm.v1.worker.gpu_model_runner import GPUModelRunner


class ActorRolloutRefWorker:
    def init_model(self):
        GPUModelRunner().capture_model()


if __name__ == "__main__":
    ActorRolloutRefWorker().init_model()
'''

MODULES = {
    "driver": ("verl.trainer.ppo.ray_trainer", {"verl/trainer/ppo/ray_trainer.py": DRIVER}),
    "worker": ("verl.workers.fsdp_workers", {"verl/workers/fsdp_workers.py": WORKER}),
    "engine": ("verl.workers.rollout_init", {"verl/workers/rollout_init.py": ENGINE_WORKER,
                                             "vllm/v1/worker/gpu_model_runner.py": ENGINE}),
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()


def start(root: Path, kind: str, *args: str) -> subprocess.Popen[bytes]:
    """Start one of MODULES under `root` and wait until it sits in its innermost function."""
    module, files = MODULES[kind]
    write_tree(root, files)
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=root, stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    if proc.stdout.readline() != b"ready\n":
        proc.kill()
        raise AssertionError(f"{module} did not start")
    return proc
