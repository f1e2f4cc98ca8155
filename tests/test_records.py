"""Step lines of other stacks (analysis/phases.py RECORD_STEP_PATTERN): HF Trainer / TRL / ms-swift's
metric dicts, Megatron's iteration lines and `Step N | 9.5s` summaries are steps, read through the real
follower live and through replay's history reader; stamps that go backwards measure no step."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from gkdtop.collectors.logs import LogCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.replay import replay
from gkdtop.store import Store


def clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


def swift(t0: float, steps: int) -> list[str]:
    return [f"{clock(t0 + 7 * i)}.250 [INFO:swift] {{'loss': {1.5 - i / 100:.4f}, 'grad_norm': 3.1, "
            f"'learning_rate': 1e-05, 'epoch': 0.01, 'global_step/max_steps': '{i}/2290'}}"
            for i in range(1, steps + 1)]


def megatron(t0: float, steps: int) -> list[str]:
    return [f"[{datetime.fromtimestamp(t0 + 2 * i):%Y-%m-%d %H:%M:%S}] iteration      {i}/  250000 | consumed samples: "
            f"{i * 256} | elapsed time per iteration (ms): 2104.7 | learning rate: 3.0E-04 | lm loss: 7.5E+00 |"
            for i in range(1, steps + 1)]


def summaries(t0: float, steps: int) -> list[str]:
    return [f"{clock(t0 + 9.5 * i)} [SUCCESS] Step {i} | 9.5s | Loss: 0.21 | Reward: 0.44" for i in range(1, steps + 1)]


def live(tmp_path: Path, lines: list[str]) -> Store:
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    store = Store(Config(phases=builtin_phases()))
    collector = LogCollector([str(log)], backlog=1000)
    try:
        store.put("logs", collector.collect())
    finally:
        collector.close()
    return store


@pytest.mark.parametrize(("shape", "write", "seconds"), [
    ("ms-swift dict", swift, 7.0), ("Megatron", megatron, 2.1047), ("Step N | 9.5s", summaries, 9.5)])
def test_step_lines_of_other_stacks_are_steps(tmp_path: Path, shape: str, write, seconds: float) -> None:  # type: ignore[no-untyped-def]
    t0 = time.time() - 600
    status = live(tmp_path, write(t0, 12)).phase_status()
    assert status.steps_done == 12, shape
    assert status.last_step is not None and status.last_step.step == 12, shape
    assert status.step_time == pytest.approx(seconds, rel=0.02), shape
    report = replay([str(tmp_path / "train.log")], Config(phases=builtin_phases()))
    assert report.steps["count"] == 12, shape  # replay's history reader agrees


def test_the_dict_s_metrics_are_the_step_s_metrics(tmp_path: Path) -> None:
    status = live(tmp_path, swift(time.time() - 600, 3)).phase_status()
    assert status.last_step is not None
    assert status.last_step.metrics["loss"] == pytest.approx(1.47)
    assert status.last_step.metrics["grad_norm"] == pytest.approx(3.1)


def test_stamps_that_go_backwards_measure_no_step(tmp_path: Path) -> None:
    """A step p50 of -5 s came from stamps that went backwards (two ranks' lines interleaved)."""
    t0 = time.time() - 600
    steps = ((1, t0), (2, t0 + 10), (3, t0 + 5), (4, t0 + 20))
    status = live(tmp_path, [f"{datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S},000 INFO step:{i} - loss:1.0"
                             for i, t in steps]).phase_status()
    assert status.steps_done == 4
    assert status.steps["p50_s"] >= 0 and status.steps["mean_s"] >= 0, status.steps
    assert all(s["seconds"] >= 0 for s in status.steps["slowest"]), status.steps
