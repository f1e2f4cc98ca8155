"""A job started again into the same log (`python train.py >> train.log` twice, a resume after a crash): the
verdict, the timeline and the steps are the last run's, and the earlier run is told apart with how it ended
(audit 18: a Megatron run and its resumed run read as one, steps merged, durations spanning both). Written in
the shapes users posted (Megatron's iteration lines, HF Trainer's banner and metric dicts, torchrun's banner),
with invented values; read by replay's history reader and by the real follower live."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import replay, report_text
from tests.verlrun import live_and_history

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity of 79.15 GiB"


def megatron_run(first: int, last: int, hour: int, crash: bool) -> list[str]:
    lines = [
        "using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1, "
        "pipeline-model-parallel size: 1",
        "> initializing torch distributed ...",
        "> building train, validation, and test datasets ...",
    ]
    if first > 1:
        lines.append(f"  successfully loaded checkpoint from /ckpt/gpt2 [ t 0, p 0 ] at iteration {first - 1}")
    lines.append(f"[before the start of training step] datetime: 2026-11-20 {hour}:02:00")
    for k, iteration in enumerate(range(first + 9, last + 1, 10), 1):
        lines.append(
            f" [2026-11-20 {hour}:{2 + k // 6:02d}:{k * 10 % 60:02d}] iteration {iteration:8d}/    5000 | consumed "
            f"samples: {iteration * 256:12d} | elapsed time per iteration (ms): 1000.4 | learning rate: 1.500E-04 | "
            f"global batch size:   256 | lm loss: {6.5 - iteration / 1000:.6E} | loss scale: 1.0 | grad norm: 0.512 |")
    if crash:
        lines += ["Traceback (most recent call last):",
                  '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 250, in <module>', "    pretrain(", OOM]
    return lines


def run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.log"
    path.write_text("".join(line + "\n" for line in lines))
    return replay([str(path)], load_config(None))


def test_a_run_resumed_below_a_crashed_one_is_the_verdict_and_the_crash_is_its_past(tmp_path: Path) -> None:
    lines = megatron_run(1, 250, 10, crash=True) + megatron_run(201, 330, 14, crash=False)
    result = run(tmp_path, lines)
    st = result.status
    assert st.state != "failed" and st.current == "training loop", report_text(result)
    [earlier] = st.earlier_runs
    assert earlier.outcome == "failed" and earlier.failure == OOM and earlier.steps == 25
    assert earlier.evidence.line == len(megatron_run(1, 250, 10, crash=True)) + 1  # the second run's first line
    assert st.steps["count"] == 13 and st.timeline[-1].start > earlier.ended  # the second run's steps and loop only
    said = report_text(result)
    assert "earlier in this log: a run from 10:02:00 to 10:06:10 that FAILED in training loop, 25 steps" in said
    assert f"the run below began at train.log:{earlier.evidence.line}" in said
    assert "FAILED" not in said.split("timeline:")[1].split("errors:")[0]  # the verdict is the running run's


def test_a_run_started_again_after_it_finished_is_a_new_run_live_and_in_history(tmp_path: Path) -> None:
    def hf_run(stamp: str, steps: int) -> list[str]:
        return [
            f"[INFO|trainer.py:2128] 2026-11-20 {stamp},100 >> ***** Running training *****",
            f"[INFO|trainer.py:2133] 2026-11-20 {stamp},101 >>   Total optimization steps = {steps}",
            *(f"{{'loss': {1.9 - k / 50:.4f}, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': {k / steps:.2f}}}"
              for k in range(1, steps + 1)),
            "{'train_runtime': 611.2, 'train_samples_per_second': 4.1, 'train_steps_per_second': 0.52, "
            "'train_loss': 1.41, 'epoch': 1.0}",
        ]

    text = "".join(line + "\n" for line in hf_run("09:00:01", 6) + hf_run("11:30:01", 4)[:-1])
    history, store = live_and_history(tmp_path, text, lambda s: bool(s.phase_status().earlier_runs))
    for st in (history.status(now=0.0), store.phase_status()):
        [earlier] = st.earlier_runs
        assert earlier.outcome == "finished" and earlier.steps == 6
        assert st.state != "done" and st.current == "training loop" and st.steps_done == 4


def test_two_launch_banners_before_anything_ran_are_one_run(tmp_path: Path) -> None:
    """Two nodes' torchrun banners (each node's agent prints one) at the start: nothing ran between, one run."""
    banner = ("W1120 09:00:01.204000 2210 site-packages/torch/distributed/run.py:793] *****************************"
              "***********")
    lines = [banner, banner.replace("2210", "3317"), "[rank0]: Loading checkpoint shards: 100%|██████████| 4/4 "
             "[00:08<00:00,  2.01s/it]"]
    result = run(tmp_path, lines)
    assert result.status.earlier_runs == [], report_text(result)


def test_the_phases_pane_and_the_snapshot_say_the_log_holds_an_earlier_run(tmp_path: Path) -> None:
    from gkdtop.tui.phases_pane import render_phases

    st = run(tmp_path, megatron_run(1, 250, 10, crash=True) + megatron_run(201, 330, 14, crash=False)).status
    pane = render_phases(st, now=st.last_progress or 0.0, width=200).plain
    assert "earlier run in this log (this run from train.log:" in pane
    assert "): FAILED in training loop, 25 steps: `torch.OutOfMemoryError" in pane
    log = tmp_path / "train.log"  # (written by run() above)
    snap = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--log", str(log), "--ray-address",
                           "127.0.0.1:9"], capture_output=True, text=True, timeout=120)
    first = len(megatron_run(1, 250, 10, crash=True)) + 1
    assert "earlier run in this log: FAILED in training loop, 25 steps: `torch.OutOfMemoryError" in snap.stdout, (
        snap.stdout + snap.stderr)
    assert f"; this run from line {first}" in snap.stdout, (
        snap.stdout + snap.stderr)


def test_replay_alerts_tell_the_earlier_run_s_failure_and_no_stall_in_the_restart_s_gap(tmp_path: Path) -> None:
    """The crash's traceback and the next run's first lines carry no stamp: they came somewhere in the four hours
    between the two runs' stamps. A watcher would have told the failure; the gap is no stall of either run (before:
    no failure told, and 'STALLED, likely in dataset generation for 5m01s' five minutes after the crash)."""
    from gkdtop.alerts.paced import paced_events

    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in megatron_run(1, 250, 10, crash=True) + megatron_run(
        201, 330, 14, crash=False)))
    events = paced_events(str(log), load_config(None))
    assert [(e.kind, e.phase, e.culprit) for e in events] == [("failed", "training loop", OOM)], events
    assert events[0].steps == 25 and events[0].lines == ["the job was started again"]


def _hf(stamp: str, text: str) -> str:
    return f"[INFO|trainer.py:2128] 2026-11-20 {stamp},100 >> {text}"


def test_what_only_looks_like_a_second_run_is_not_one(tmp_path: Path) -> None:
    """Review of session 25: node 1's log read after node 0's (`cat node*.log`: its torchrun banner stamped before
    node 0's last line), and an evaluation before `train()` (its bar, no step), each read as a run and the next."""
    banner = "W1120 {} 2210 site-packages/torch/distributed/run.py:793] ***************************************"
    node = [banner.format("09:00:02.881000"),
            *(f"{{'loss': {1.9 - k / 50:.4f}, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': {k / 40:.2f}}}"
              for k in range(1, 5)),
            _hf("09:11:40", "Saving model checkpoint to /data/out/checkpoint-4")]
    assert run(tmp_path, node + node).status.earlier_runs == []
    evaluated = [_hf("09:00:01", "***** Running Evaluation *****"),
                 "100%|██████████| 63/63 [00:31<00:00,  2.01it/s]",
                 "{'eval_loss': 2.1043, 'eval_runtime': 31.2, 'eval_samples_per_second': 16.0, 'epoch': 0}",
                 _hf("09:00:40", "***** Running training *****"),
                 "{'loss': 1.8800, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': 0.00}"]
    assert run(tmp_path, evaluated).status.earlier_runs == []


def test_the_launcher_s_sigterm_during_the_final_save_still_stops_the_run(tmp_path: Path) -> None:
    """Review of session 25: HF finished, began its final save, and torchrun's agent got SIGTERM 30 minutes later.
    A Ray worker's signal after the finish is its teardown (audit 20); the launcher's own is no teardown."""
    lines = [_hf("09:00:01", "***** Running training *****"),
             "{'loss': 1.7800, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': 1.00}",
             "{'train_runtime': 611.2, 'train_samples_per_second': 4.1, 'train_loss': 1.41, 'epoch': 1.0}",
             _hf("09:10:13", "Saving model checkpoint to /data/out/qwen-sft"),
             "W1120 09:40:01.100000 2210 site-packages/torch/distributed/elastic/agent/server/api.py:704] Received "
             "Signals.SIGTERM death signal, shutting down workers"]
    st = run(tmp_path, lines).status
    assert st.state == "failed" and st.interrupted


def test_a_restart_at_a_stamped_line_keeps_the_stall_after_it(tmp_path: Path) -> None:
    """Review of session 25: run 2's banner carried its own stamp, its steps none, then it hung two hours; the gap
    after it is a stall of the run that began at that stamp (only a restart whose first line has no stamp is
    placed anywhere in the gap)."""
    from gkdtop.alerts.paced import paced_events

    log = tmp_path / "train.log"
    log.write_text("\n".join([
        _hf("09:00:01", "***** Running training *****"),
        "{'loss': 1.8800, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': 0.10}",
        "{'loss': 1.8600, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': 0.20}",
        OOM,
        _hf("11:00:01", "***** Running training *****"),
        "{'loss': 1.8800, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': 0.10}",
        "[rank5]:[E1120 13:00:20.100000 4415 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=912, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=7200000) ran for "
        "7200041 milliseconds before timing out.",
    ]) + "\n")
    kinds = [e.kind for e in paced_events(str(log), load_config(None))]
    assert kinds == ["failed", "stalled", "failed"], kinds


def test_a_nan_of_the_earlier_run_is_no_anomaly_of_the_resumed_one(tmp_path: Path) -> None:
    """Review of session 25: the first run's loss went NaN from iteration 200 and it stopped; the run resumed below
    it from its checkpoint trains with finite losses. Before: 'anomalies: loss is nan from step 200' under it."""
    first = [re.sub(r"lm loss: \S+", "lm loss: nan", line) if "iteration      2" in line else line
             for line in megatron_run(1, 250, 10, crash=True)]
    report = run(tmp_path, first + megatron_run(201, 330, 14, crash=False))
    assert report.status.earlier_runs and report.anomalies == [], report.anomalies
    alone = run(tmp_path, first)
    assert [a.kind for a in alone.anomalies] == ["nonfinite"]  # (the first run alone does show it)
