"""The demo job's knobs (`DemoConfig`): one dataclass, printed verl-style, rebuilt in every process of the job.

The driver fills it from its arguments and hands it to the TaskRunner as a plain dict (`asdict`);
the TaskRunner and every actor rebuild their own copy from that dict. `as_verl` is the nested shape
the TaskRunner prints, as verl prints its resolved config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
