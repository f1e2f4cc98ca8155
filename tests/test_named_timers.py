"""A trainer's own timers name the parts of its steps (issue 25; audit 12's SkyRL log, written in its shapes with
invented values): SkyRL's loguru `Started: 'generate'` … `Finished: 'generate', time cost: 141.02s` open and close
them, its console tracker's `Step N: ` (its metrics' dict on the lines below) counts the steps, and a loop whose
steps generate keeps the RL names of its parts though no known trainer is named."""

from __future__ import annotations

from pathlib import Path

from gkdtop.analysis.engine import Analysis
from gkdtop.analysis.history import file_range
from gkdtop.config import Config, builtin_phases
from tests.test_phase_nesting import text_of
from tests.verlrun import live_and_history

PARTS = ("generate", "fwd_logprobs_values_reward", "compute_advantages_and_returns", "train_critic_and_policy",
         "sync_weights")


def _skyrl(steps: int, then: list[str]) -> list[str]:
    """A SkyRL driver's log through Ray: `steps` whole steps (each part timed), then the timers in `then`."""
    lines: list[str] = []

    def log(message: str, where: str = "skyrl_train.trainer:train:260") -> None:
        t = 7 * (len(lines) + 1)
        lines.append(f"(skyrl_entrypoint pid=81231) 2025-09-14 10:{t // 60 % 60:02d}:{t % 60:02d}.{t % 997:03d} | "
                     f"INFO     | {where} - {message}")

    for step in range(1, steps + 1):
        log("Started: 'step'")
        for part in PARTS:
            log(f"Started: '{part}'")
            log(f"Finished: '{part}', time cost: {3.5 + len(part):.2f}s")
        log("Finished: 'step', time cost: 220.88s")
        log(f"Step {step}: ", "skyrl_train.utils.tracking:log:101")
        lines += [f"{{'generate/avg_num_tokens': '1841.{step}000',", " 'policy/final_loss': '0.0412',",
                  " 'trainer/epoch': 0}"]
    for message in then:
        log(message)
    return lines


def test_timers_open_and_close_a_steps_parts_and_the_steps_are_counted(tmp_path: Path) -> None:
    """Before: an empty timeline, no steps, and only a guess from the last line's words."""
    lines = _skyrl(3, ["Started: 'step'", "Started: 'generate'", "Finished: 'generate', time cost: 141.02s",
                       "Started: 'fwd_logprobs_values_reward'"])
    history = Analysis(Config(phases=builtin_phases()).rules())
    path = tmp_path / "skyrl.log"
    path.write_text(text_of(lines))
    history.read_history([file_range(str(path))])
    status = history.status(1e12)  # (long after its last line: stalled there)
    assert (status.current, status.within, status.state) == ("old log-prob", "training loop", "stalled")
    assert status.steps_done == 3 and status.worded is None


def test_a_failure_in_a_timed_part_keeps_its_rl_name(tmp_path: Path) -> None:
    """The policy's update ran out of memory under `train_critic_and_policy`. Before: "FAILED, likely in critic
    update" (the frame's words read `critic` first), and, with the timer read, `model update` (no known trainer)."""
    lines = [*_skyrl(2, ["Started: 'step'", "Started: 'train_critic_and_policy'"]),
             "(skyrl_entrypoint pid=81231) Traceback (most recent call last):",
             '(skyrl_entrypoint pid=81231)   File "/srv/skyrl/skyrl_train/trainer.py", line 311, in train',
             "(skyrl_entrypoint pid=81231)     status = self.train_critic_and_policy(training_input)",
             "(skyrl_entrypoint pid=81231) ray.exceptions.RayTaskError(OutOfMemoryError): ray::PolicyWorker.ppo_train()"
             " (pid=91022, ip=10.4.1.7, actor_id=2f1d)",
             "(skyrl_entrypoint pid=81231) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.12 GiB."]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    assert history.status(1e12).current == "actor update"
    live = store.phase_status()
    assert (live.current, live.state, live.worded) == ("actor update", "failed", None)
