"""Step times only where the log measured them: metric records that carry no stamp of their own (HF's dicts,
printed between bar redraws) give no step time, the loop's bar's s/it does; the loop's bar is the outermost
one; a step count says how far the run got; `iter N | … | 0.4 s/iter` lines are steps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

STEPS_LINE = "steps:"


def run(tmp_path: Path, lines: list[str], *args: str) -> str:
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    command = [sys.executable, "-m", "gkdtop", *args, str(log)]
    if args[0] == "snapshot":
        command = [sys.executable, "-m", "gkdtop", *args, "--log", str(log), "--ray-address", "127.0.0.1:9"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def steps_of(tmp_path: Path, lines: list[str]) -> tuple[dict[str, Any], str]:
    """replay --json's steps and replay's text steps line."""
    doc = json.loads(run(tmp_path, lines, "replay", "--json"))
    text = run(tmp_path, lines, "replay")
    said = [line for line in text.splitlines() if line.startswith(STEPS_LINE)]
    assert len(said) == 1, text
    assert "0.00s" not in text, text
    return doc["steps"], said[0]


# HF Trainer: the dicts come before the first stamp, which the save after the last step carries.
HF_GLUED = [
    "{'loss': 0.7102, 'grad_norm': 2.31, 'learning_rate': 3.3e-06, 'epoch': 0.5}",
    " 50%|█████     | 20/40 [01:47<01:47,  5.37s/it]",
    "{'loss': 0.6874, 'grad_norm': 2.05, 'learning_rate': 1.1e-06, 'epoch': 1.0}",
    "100%|██████████| 40/40 [03:34<00:00,  5.36s/it][INFO|trainer.py:3984] 2026-03-11 14:02:09,310 >> Saving "
    "model checkpoint to ./run/checkpoint-40",
    "[INFO|configuration_utils.py:419] 2026-03-11 14:02:09,322 >> Configuration saved in ./run/checkpoint-40",
]
# A launcher that prefixes every line with its stream: bars that no rule names but the bar pattern.
LAUNCHER = [
    "stderr: [INFO|trainer.py:1779] 2026-04-02 08:15:10,410 >> ***** Running training *****",
    "stderr:   0%|          | 0/900 [00:00<?, ?it/s]",
    "stderr:   1%|          | 10/900 [01:31<2:15:40,  9.15s/it]",
    "stdout: {'loss': 1.9021, 'learning_rate': 4.99e-05, 'epoch': 0.01}",
    "stderr:   2%|▏         | 20/900 [03:02<2:13:51,  9.13s/it]",
    "stdout: {'loss': 1.6635, 'learning_rate': 4.97e-05, 'epoch': 0.02}",
    "stderr:   3%|▎         | 27/900 [04:06<2:12:47,  9.12s/it]",
    "stderr: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 40417) "
    "of binary: /usr/bin/python3",
]


@pytest.mark.parametrize(("shape", "lines", "n", "pace"), [("glued", HF_GLUED, 40, 5.36),
                                                           ("stream prefix", LAUNCHER, 27, 9.12)])
def test_metric_dicts_without_stamps_of_their_own_have_no_step_time_but_the_bars_pace(
        tmp_path: Path, shape: str, lines: list[str], n: int, pace: float) -> None:
    """Two dicts dated by one stamp said `mean 0.00s … slowest: step 2 (0.00s)`; the bar said 5.19 s/it."""
    steps, said = steps_of(tmp_path, lines)
    assert steps["count"] == 2 and steps["mean_s"] is None and steps["slowest"] == [], (shape, steps)
    assert steps["bar"]["n"] == n and steps["bar"]["s_per_it"] == pytest.approx(pace), (shape, steps)
    assert f"{pace:.2f} s/it" in said, (shape, said)
    snap = run(tmp_path, lines, "snapshot")
    assert "0.00s" not in snap and f"{pace:.2f} s/it" in snap, (shape, snap)


def test_the_loops_bar_is_the_outermost_not_an_inner_per_update_bar(tmp_path: Path) -> None:
    """OpenRLHF's `Episode` bar over each step's `make_experience` and `Train epoch` bars: at 0/24, not 32/32."""
    actor = "(ActorModelRayActor pid=61210) "
    lines = [
        actor + "Episode [1/1]:   0%|          | 0/24 [00:00<?, ?it/s]",
        actor + "make_experience: 100%|██████████| 16/16 [12:40<00:00, 47.50s/it]",
        actor + "Train epoch [1/1]:  50%|█████     | 8/16 [01:50<01:50, 13.81s/it, pg=-0.012, kl=0.0002]",
        actor + "Train epoch [1/1]: 100%|██████████| 16/16 [03:41<00:00, 13.80s/it, pg=0.004, kl=0.0002]",
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
    ]
    doc = json.loads(run(tmp_path, lines, "replay", "--json"))
    assert doc["steps"]["bar"]["n"] == 0 and doc["steps"]["bar"]["total"] == 24, doc["steps"]
    assert "the loop's bar is at 0/24" in run(tmp_path, lines, "replay")


def test_a_bar_drawn_before_its_description_was_set_is_the_same_bar(tmp_path: Path) -> None:
    """torchtune draws its bar once bare (`0/120`), then sets its description every step (`1|120|Loss: 0.61:`): the
    same bar, not an inner one under a loop stuck at 0/120 (audit 17: "the loop's bar is at 0/161" at 161/161)."""
    lines = [
        "  0%|          | 0/120 [00:00<?, ?it/s]",
        "1|119|Loss: 0.6133: 99%|█████████▉| 119/120 [48:10<00:24, 24.30s/it]",
        "1|120|Loss: 0.6120: 100%|██████████| 120/120 [48:34<00:00, 24.29s/it]",
        "Saving checkpoint. This may take some time. Retrieving full model state dict...",
    ]
    doc = json.loads(run(tmp_path, lines, "replay", "--json"))
    assert (doc["steps"]["bar"]["n"], doc["steps"]["bar"]["total"]) == (120, 120), doc["steps"]
    assert doc["ran_for_s"] == pytest.approx(48 * 60 + 34), doc["ran_for_s"]
    assert "the loop's bar is at 120/120" in run(tmp_path, lines, "replay")


def test_the_loops_last_redraw_after_the_bar_that_ended_the_run_counts(tmp_path: Path) -> None:
    """OpenRLHF's trainers print the step bar's last redraw (`180/180`) after the epoch bar's `100%|`, which ends the
    run: the loop's bar is at 180/180, not 179/180 (audit 17). A final evaluation's bar after it is not the loop's."""
    lines = [
        "Train step of epoch 0:  99%|█████████▉| 179/180 [61:04<00:20, 20.47s/it, gpt_loss=0.702, lr=3e-7]",
        "Train epoch: 100%|██████████| 1/1 [61:25<00:00, 3685.10s/it]",
        "Train step of epoch 0: 100%|██████████| 180/180 [61:25<00:00, 20.47s/it, gpt_loss=0.699, lr=3e-7]",
    ]
    doc = json.loads(run(tmp_path, lines, "replay", "--json"))
    assert (doc["steps"]["bar"]["n"], doc["steps"]["bar"]["total"]) == (180, 180), doc["steps"]
    evaluation = "Evaluation: 100%|██████████| 40/40 [00:31<00:00,  1.29it/s]"
    doc = json.loads(run(tmp_path, [*lines, evaluation], "replay", "--json"))
    assert (doc["steps"]["bar"]["n"], doc["steps"]["bar"]["total"]) == (180, 180), doc["steps"]


def test_of_bar_redraws_glued_on_one_line_the_last_is_the_bars_state(tmp_path: Path) -> None:
    """Redraws a pipe glued without a newline (an error printed after them): the bar is at the last one."""
    lines = [
        "{'loss': 2.3318, 'grad_norm': 11.204, 'learning_rate': 9.97e-05, 'epoch': 0.02}",
        "  2%|▏         | 8/376 [35:02<26:47:40, 262.12s/it]  2%|▏         | 9/376 [39:31<26:51:07, 263.40s/it]"
        "[rank2]: Traceback (most recent call last):",
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.52 GiB.",
    ]
    doc = json.loads(run(tmp_path, lines, "replay", "--json"))
    assert (doc["steps"]["bar"]["n"], doc["steps"]["bar"]["total"]) == (9, 376), doc["steps"]
    assert doc["steps"]["bar"]["s_per_it"] == pytest.approx(263.40), doc["steps"]
    assert "the loop's bar is at 9/376, 263.40 s/it" in run(tmp_path, lines, "replay")


def test_a_step_count_says_how_far_the_run_got(tmp_path: Path) -> None:
    """One metric line at step 150 after an epoch bar at 150/150: not `steps: 1 (150..150)`."""
    lines = [
        "W0704 11:20:03.512000 7310 torch/distributed/run.py:792] Setting OMP_NUM_THREADS to 1",
        "Number of steps/epoch 150, number of epochs 2, total number of steps 300",
        "Epoch 1/2: 100%|██████████| 150/150 [48:12<00:00, 19.28s/it]",
        "step:150 - train/loss:0.583 - train/lr(1e-3):0.0064",
        "Epoch 2/2:   0%|          | 0/150 [00:00<?, ?it/s]",
        "[rank2]:[E704 12:18:40.118206644 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=2911, OpType=ALLTOALL, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for "
        "600031 milliseconds before timing out.",
    ]
    steps, said = steps_of(tmp_path, lines)
    assert steps["count"] == 1 and steps["last"] == 150
    assert said.startswith("steps: up to 150, 1 with metrics"), said


def test_iter_lines_with_their_seconds_per_iter_are_steps(tmp_path: Path) -> None:
    """`iter N | loss … | 0.377 s/iter` behind an ISO stamp and mpirun's `[1,0]<stdout>:`: steps, timed by the line."""
    lines = [f"2026-02-03T05:{10 + i}:00.000Z: [1,0]<stdout>:iter {52100 + 100 * i} | loss {2.31 - i / 100:.4f} | "
             f"lr 2.00e-04 | {0.377 + i / 1000:.3f} s/iter" for i in range(3)]
    lines.append("2026-02-03T05:13:10.004Z: [1,3]<stderr>:terminate called after throwing an instance of "
                 "'std::runtime_error'")
    steps, said = steps_of(tmp_path, lines)
    assert steps["count"] == 3 and (steps["first"], steps["last"]) == (52100, 52300), steps
    assert steps["mean_s"] == pytest.approx(0.378), steps
    assert said.startswith("steps: up to 52300, 3 with metrics (52100..52300), mean 0.38s"), said


def test_metric_dicts_posted_with_typographic_quotes_are_read_as_printed(tmp_path: Path) -> None:
    """Audit 18: HF Trainer's dicts pasted through an editor that curled the quotes (`{‘loss’: …}`, `{“epoch”: …}`),
    read as history and live. Before: 'lines no rule knows', no steps, no finished: 'ended in training loop'."""
    from tests.verlrun import live_and_history

    lines = ["***** Running training *****",
             *(f"{{‘loss’: 0.{9 - k}12, ‘grad_norm’: 1.{k}, ‘learning_rate’: 2e-05, ‘epoch’: 0.{k}}}"
               for k in range(1, 6)),
             "{‘train_runtime’: 611.4, ‘train_samples_per_second’: 12.2, ‘train_loss’: 0.61, ‘epoch’: 1.0}"]
    text = "".join(line + "\n" for line in lines)
    deadline = time.monotonic() + 30  # (a store that never reads the end fails below, not hangs)
    history, store = live_and_history(tmp_path, text,
                                      lambda s: s.phase_status().state == "done" or time.monotonic() > deadline)
    for status in (history.status(1e12), store.phase_status()):
        assert status.state == "done" and status.steps["count"] == 5, status.steps
    # double quotes too (a JSON record); the rest of a line's non-ASCII text stays as it was
    from gkdtop.analysis.lines import clean_line, strip_escapes

    for clean in (clean_line, lambda raw: strip_escapes(raw).decode()):
        assert clean('| valid | {“epoch”: 3, “loss”: “2.9”} — 100% █'.encode()) == \
            '| valid | {"epoch": 3, "loss": "2.9"} — 100% █'
