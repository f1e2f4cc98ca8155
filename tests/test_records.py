"""Step lines of other stacks (analysis/phases.py RECORD_STEP_PATTERN): HF Trainer / TRL / ms-swift's
metric dicts, Megatron's iteration lines and `Step N | 9.5s` summaries are steps, read through the real
follower live and through replay's history reader; stamps that go backwards measure no step."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from gkdtop.collectors.logs import LogCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.replay import replay
from gkdtop.store import Store
from tests.verlrun import live_and_history


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


def plain_iters(t0: float, steps: int) -> list[str]:
    """A hand-written loop's `iter N | loss … | … s/iter` every 100 iterations, behind mpirun's --timestamp-output
    and --tag-output prefixes: no total, no metric's colon."""
    return [f"{datetime.fromtimestamp(t0 + 41.3 * i):%Y-%m-%dT%H:%M:%S}.112Z: [1,0]<stdout>:iter {831300 + 100 * i} | "
            f"loss 2.1187 | lr 1.00e-04 | 0.413 s/iter" for i in range(1, steps + 1)]


def summaries(t0: float, steps: int) -> list[str]:
    return [f"{clock(t0 + 9.5 * i)} [SUCCESS] Step {i} | 9.5s | Loss: 0.21 | Reward: 0.44" for i in range(1, steps + 1)]


def headed_blocks(t0: float, steps: int) -> list[str]:
    """A step's header between rules, then a block of its results (no stamp on the header: the block's)."""
    out = []
    for i in range(1, steps + 1):
        out += [f"{'=' * 25} Step {i}/100 {'=' * 25}", "▶ Generating rollouts...",
                f"{clock(t0 + 45.2 * i)} Training Results:", "  • Loss: 0.0123", "  • Total step time: 45.2s"]
    return out


def torchtitan(t0: float, steps: int) -> list[str]:
    """torchtitan's `step:  10  loss:  9.8121  memory: 61.22GiB(77.31%)  tps: 6,231`."""
    return [f"[rank0]:{datetime.fromtimestamp(int(t0) + 8 * i):%Y-%m-%d %H:%M:%S},120 - root - INFO - step: {i:>3}  "
            f"loss: {9.8 - i / 10:7.4f}  memory: 61.22GiB(77.31%)  tps: 6,231  mfu: 36.51%"
            for i in range(1, steps + 1)]


def deepspeed_steps(t0: float, steps: int) -> list[str]:
    """DeepSpeed's engine every `steps_per_print`: `[Rank 0] step=20410, skipped=3, lr=[…], mom=[…]`."""
    return [f"[{datetime.fromtimestamp(int(t0) + 3 * i):%Y-%m-%d %H:%M:%S},002] [INFO] [logging.py:128:log_dist] "
            f"[Rank 0] step={i}, skipped=3, lr=[1.9e-05], mom=[(0.9, 0.999)]" for i in range(1, steps + 1)]


def arctic(t0: float, steps: int) -> list[str]:
    """ArcticTraining's rank lines (audit 13): `iter:  N/3000   4% | loss: … | iter time: 2.500s | …`, no stamp."""
    return [f"iter: {i:4d}/3000   0% | loss: 16.3238 | iter time: 2.500s | iter tflops: 932.5 | lr: 8.000E-04 | "
            "step time: 2.4s | epoch: 0 | MA 2.84 GB" for i in range(1, steps + 1)]


def plural_steps(t0: float, steps: int) -> list[str]:
    """A loop's own `Steps=N, loss=…` records behind a `date|LEVEL|name|rank|` stamp (DeBERTa's RTD, block 19)."""
    return [f"{datetime.fromtimestamp(int(t0) + 6 * i):%m/%d/%Y %H:%M:%S}|INFO|RTD|00| [D][0.0%][-1802.11h] Steps={i}, "
            f"loss=3.{i:02d}, examples={64 * i}, loss_scale=4096.0, 6.0s" for i in range(1, steps + 1)]


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
    ("ms-swift dict", swift, 7.0), ("Megatron", megatron, 2.1047), ("Step N | 9.5s", summaries, 9.5),
    ("=== Step N/M === blocks", headed_blocks, 45.2), ("torchtitan", torchtitan, 8.0),
    ("DeepSpeed step=", deepspeed_steps, 3.0), ("ArcticTraining iter:", arctic, 2.5),
    ("Steps=N, loss=", plural_steps, 6.0)])
def test_step_lines_of_other_stacks_are_steps(tmp_path: Path, shape: str, write, seconds: float) -> None:  # type: ignore[no-untyped-def]
    t0 = time.time() - 600
    status = live(tmp_path, write(t0, 12)).phase_status()
    assert status.steps_done == 12, shape
    assert status.last_step is not None and status.last_step.step == 12, shape
    assert status.step_time == pytest.approx(seconds, rel=0.02), shape
    report = replay([str(tmp_path / "train.log")], Config(phases=builtin_phases()))
    assert report.steps["count"] == 12, shape  # replay's history reader agrees


def test_a_plain_loop_s_iter_lines_are_steps(tmp_path: Path) -> None:
    """`iter 831400 | loss 2.11 | …` every 100 iterations (the NCCL IB thread's PyTorch loop). Before: no step and
    no phase, so the IB fault that ended it was 'FAILED (phase unknown)'."""
    t0 = time.time() - 600
    status = live(tmp_path, plain_iters(t0, 12)).phase_status()
    assert (status.current, status.steps_done) == ("training loop", 12)
    assert status.last_step is not None and status.last_step.step == 832500
    assert status.step_time == pytest.approx(0.413, rel=0.02)  # 41.3 s per 100 iterations
    report = replay([str(tmp_path / "train.log")], Config(phases=builtin_phases()))
    assert report.steps["count"] == 12 and report.status.current == "training loop"


def test_the_dict_s_metrics_are_the_step_s_metrics(tmp_path: Path) -> None:
    status = live(tmp_path, swift(time.time() - 600, 3)).phase_status()
    assert status.last_step is not None
    assert status.last_step.metrics["loss"] == pytest.approx(1.47)
    assert status.last_step.metrics["grad_norm"] == pytest.approx(3.1)


def test_a_value_with_a_unit_or_a_thousands_comma_is_no_number() -> None:
    """torchtitan's `memory: 61.22GiB(77.31%)  tps: 6,231` read as memory 61 and tps 6: a false number in the Steps
    pane. A value ends where its number does; a dict's `'loss': 1.2, 'lr': …` keeps its values."""
    from gkdtop.analysis.phases import METRIC_RE

    assert dict(METRIC_RE.findall("loss:  9.7000  memory: 61.22GiB(77.31%)  tps: 6,231  mfu: 36.51%")) == {
        "loss": "9.7000", "mfu": "36.51"}
    assert dict(METRIC_RE.findall("{'loss': 1.2, 'grad_norm': 0.5, 'epoch': 0.03}")) == {
        "loss": "1.2", "grad_norm": "0.5", "epoch": "0.03"}


def test_a_torchtitan_run_s_steps_open_its_loop(tmp_path: Path) -> None:
    """Before: no step and no loop, so a save that hung after step 30 was '(phase unknown)' in the timeline."""
    report = replay([str(_write(tmp_path, torchtitan(time.time() - 900, 3)))], Config(phases=builtin_phases()))
    assert report.status.current == "training loop" and report.steps["count"] == 3
    last = report.status.last_step
    assert last is not None and last.metrics == {"loss": pytest.approx(9.5), "mfu": pytest.approx(36.51)}


def _write(tmp_path: Path, lines: list[str]) -> Path:
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    return log


def test_stamps_that_go_backwards_measure_no_step(tmp_path: Path) -> None:
    """A step p50 of -5 s came from stamps that went backwards (two ranks' lines interleaved)."""
    t0 = time.time() - 600
    steps = ((1, t0), (2, t0 + 10), (3, t0 + 5), (4, t0 + 20))
    status = live(tmp_path, [f"{datetime.fromtimestamp(t):%Y-%m-%d %H:%M:%S},000 INFO step:{i} - loss:1.0"
                             for i, t in steps]).phase_status()
    assert status.steps_done == 4
    assert status.steps["p50_s"] >= 0 and status.steps["mean_s"] >= 0, status.steps
    assert all(s["seconds"] >= 0 for s in status.steps["slowest"]), status.steps


# --- HF Trainer / TRL / LLaMA-Factory's metric dicts (no step number of their own) --------------------

TOTAL = 500  # the bar's total: HF's max_steps


def record(i: int, shape: str = "hf", grad_norm: str | None = None) -> str:
    """The i-th dict HF Trainer prints (one every logging_steps); TRL's GRPO adds its own keys."""
    loss, lr = f"{2.0 - i / 50:.4f}", repr(1e-05 * (1 - i / 100))
    norm = grad_norm or f"{1.0 + (i % 3) / 10:.4f}"
    if shape == "trl":
        return (f"{{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': {lr}, 'num_tokens': {i * 20480.0}, "
                f"'completions/mean_length': {380.5 + i}, 'rewards/accuracy_reward/mean': {0.4 + i / 100:.4f}, "
                f"'reward': {0.4 + i / 100:.4f}, 'kl': {0.001 * i:.4f}, 'epoch': {i / 100:.2f}}}")
    return f"{{'loss': {loss}, 'grad_norm': {norm}, 'learning_rate': {lr}, 'epoch': {i / 100:.2f}}}"


def bar(n: int, seconds: float = 2.1) -> str:
    """HF's training bar at n of TOTAL, as tqdm draws it."""
    return (f" {n * 100 // TOTAL:2d}%|{'█' * (n * 10 // TOTAL):<10}| {n}/{TOTAL} "
            f"[{n * 2 // 60:02d}:{n * 2 % 60:02d}<17:00, {seconds:.2f}s/it]")


def hf_log(steps: int, shape: str = "hf", prefix: str = "", every: int = 10, glued: bool = False) -> list[str]:
    """An HF Trainer run: its banner, a dict every `every` steps (alone, or glued after the bar tqdm
    redrew before it), an eval dict, and the end-of-run summary (no step)."""
    lines = ["[INFO|trainer.py:2414] 2026-11-27 10:00:00,101 >> ***** Running training *****",
             "[INFO|trainer.py:2415] 2026-11-27 10:00:00,101 >>   Num examples = 8,000",
             f"[INFO|trainer.py:2420] 2026-11-27 10:00:00,102 >>   Total optimization steps = {TOTAL}"]
    for i in range(1, steps + 1):
        lines.append(prefix + (bar(i * every) if glued else "") + record(i, shape))
    lines.append(prefix + "{'eval_loss': 1.4321, 'eval_runtime': 12.5, 'eval_samples_per_second': 80.0, "
                 "'eval_steps_per_second': 2.5, 'epoch': 0.12}")
    lines.append(prefix + "{'train_runtime': 1234.5, 'train_samples_per_second': 6.48, 'train_steps_per_second': 0.1, "
                 "'train_loss': 1.8765, 'epoch': 0.12}")
    return lines


@pytest.mark.parametrize(("shape", "lines", "last"), [
    ("HF Trainer", hf_log(12), 12),
    ("TRL GRPO behind [rank0]:", hf_log(12, "trl", "[rank0]:"), 12),
    ("Ray Train worker", hf_log(12, prefix="(RayTrainWorker pid=4242, ip=10.0.0.3) "), 12),
    ("glued after the bar", hf_log(12, glued=True), 120),  # the bar's n is HF's global step
])
def test_hf_metric_dicts_are_steps(tmp_path: Path, shape: str, lines: list[str], last: int) -> None:
    """Each per-step dict is a step (numbered by the bar glued to it, else counted); eval's dict and
    the `{'train_runtime': …}` summary are not."""
    status = live(tmp_path, lines).phase_status()
    assert status.steps_done == 12, shape
    assert status.last_step is not None and status.last_step.step == last, shape
    assert status.last_step.metrics["loss"] == pytest.approx(1.76), shape
    assert status.last_step.metrics["learning_rate"] == pytest.approx(8.8e-06), shape
    assert "train_runtime" not in status.last_step.metrics and "eval_loss" not in status.last_step.metrics
    report = replay([str(tmp_path / "train.log")], Config(phases=builtin_phases()))
    assert report.steps["count"] == 12 and report.steps["last"] == last, shape


def test_live_and_history_read_the_same_dict_steps(tmp_path: Path) -> None:
    """Live (the follower, tqdm's `\\r` redraws and all) and history (replay's reader) agree on every
    dict step: numbers, curves, the last step. Dicts with no bar are counted on from the last
    numbered one, spaced as HF logged them; each node's rank 0 printing the same dict is one step; a
    NaN grad norm is kept as non-finite."""
    lines = hf_log(0)[:3]
    for i in (1, 2, 3):
        lines.append(record(i))
    for i in (4, 5):  # tqdm redrew the bar on the same line, the dict came right after it
        lines.append("\r".join(bar(10 * i - k) for k in (2, 1)) + "\r" + bar(10 * i) + record(i))
    lines.append(record(6, grad_norm="nan"))
    lines += ["[rank0]:" + record(7), "[rank8]:" + record(7)]
    text = "".join(line + "\n" for line in lines)
    # Until every line is delivered (a count the old code keeps too).
    history, store = live_and_history(tmp_path, text, lambda store: store.analysis.lines_read >= len(lines))
    steps = [point[0] for point in history.curves.get("loss").points()]  # type: ignore[union-attr]
    assert steps == [1, 2, 3, 40, 50, 60, 70]
    assert store.phases.curves.as_json() == history.curves.as_json()
    assert history.curves.get("grad_norm").nonfinite == 1  # type: ignore[union-attr]
    assert store.phases.stats.count == history.stats.count == 7
    assert store.phases.last_step is not None and history.last_step is not None
    assert store.phases.last_step.metrics == history.last_step.metrics
    assert store.phases.last_step.step == history.last_step.step == 70


def test_replay_csv_and_snapshot_metrics_of_an_hf_run(tmp_path: Path) -> None:
    """The whole-run curves reach replay's CSV (a row per step) and snapshot's `metrics`."""
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in hf_log(12, "trl", glued=True)))
    out = tmp_path / "steps.csv"
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--csv", str(out), str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(10, 121, 10))
    assert float(rows[-1]["loss"]) == pytest.approx(1.76) and float(rows[0]["kl"]) == pytest.approx(0.001)
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout)["metrics"]
    assert metrics["rewards/accuracy_reward/mean"]["count"] == 12 and metrics["loss"]["last"] == pytest.approx(1.76)


async def test_metrics_pane_charts_hf_defaults(tmp_path: Path) -> None:
    """An HF Trainer log's Metrics pane: its defaults (loss, grad norm, learning rate) as real curves."""
    from textual_plotext import PlotextPlot

    from gkdtop.tui.metrics_pane import MetricsPane, chosen
    from tests.test_app import make_app, settle

    app, _log = make_app(tmp_path, hf_log(30))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(MetricsPane)
        await settle(pilot, lambda: app.store.phases.stats.count == 30)
        assert app.store.framework().name == "hf-trainer"
        assert chosen(app.store)[:3] == ["loss", "grad_norm", "learning_rate"]
        await pilot.press("6")
        await settle(pilot, lambda: "30 steps" in str(pane.query_one("#metrics-head").render()))
        await pilot.pause()
        rendered = [str(p.render()) for p in pane.query(PlotextPlot) if p.display]
        assert any("loss" in r for r in rendered) and any("grad_norm" in r for r in rendered)
        assert any("learning_rate" in r for r in rendered)


def test_stamped_records_with_no_step_number_time_no_step(tmp_path: Path) -> None:
    """`kubectl logs --timestamps` puts a stamp on HF's `{'loss': …}` dicts, which carry no step number: one is
    printed every logging_steps. Before: 'mean 300.85s … slowest: step 2', an interval timed as one step beside a
    bar at 9.38 s/it. With no two numbered records, their stamps time no step."""
    lines = [
        "2026-11-28T02:00:01.001Z [INFO|trainer.py:2128] 2026-11-28 02:00:01,001 >> ***** Running training *****",
        "2026-11-28T02:05:01.300Z {'loss': 1.4121, 'grad_norm': 3.1, 'learning_rate': 2e-05, 'epoch': 0.03}",
        "2026-11-28T02:10:02.410Z {'loss': 1.2034, 'grad_norm': 2.2, 'learning_rate': 2e-05, 'epoch': 0.07}",
        "2026-11-28T02:15:03.002Z {'loss': 1.1087, 'grad_norm': 1.9, 'learning_rate': 2e-05, 'epoch': 0.1}",
        "2026-11-28T02:15:40.100Z [rank0]:  3%|▎         | 100/3000 [15:39<7:33:20,  9.38s/it]",
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    summary = replay([str(path)], Config(phases=builtin_phases())).steps
    assert summary.get("count") == 3 and summary.get("p50_s") is None and summary.get("mean_s") is None, summary
    # Numbered records (ms-swift's `global_step/max_steps`) are timed as before.
    numbered = [f"2026-11-28T02:0{i}:00.000Z {{'loss': 1.{i}, 'global_step/max_steps': '{i}/90', 'epoch': 0.0{i}}}"
                for i in range(1, 6)]
    path.write_text("\n".join([lines[0], *numbered]) + "\n")
    assert replay([str(path)], Config(phases=builtin_phases())).steps.get("p50_s") == 60.0


def test_a_validation_record_is_no_step_but_keeps_its_numbers(tmp_path: Path) -> None:
    """verl validates before training and prints `step:0 - val-core/…`; its SFT trainer prints `step:N - val/loss:…`
    after step N's own record. Before: 'steps: 4 (0..3)' for a run of three steps. The first scores stay on the
    curves."""
    who = "(TaskRunner pid=5120) "
    record = ("step:{n} - actor/pg_loss:0.01 - critic/score/mean:0.5{n} - timing_s/gen:50.{n} - "
              "timing_s/update_actor:30.{n} - timing_s/step:100.{n}")
    lines = [who + "step:0 - val-aux/openai/gsm8k/reward/mean@1:0.512 - val-core/openai/gsm8k/acc/mean@1:0.498",
             who + record.format(n=1), who + "step:1 - val/loss:0.345", who + record.format(n=2),
             who + record.format(n=3)]
    text = "\n".join(lines) + "\n"
    history, store = live_and_history(
        tmp_path, text, lambda s: (last := s.phases.last_step) is not None and last.step == 3)
    for phases in (history, store.phases):
        assert (phases.stats.count, phases.stats.first, phases.stats.last) == (3, 1, 3)
        curves = phases.curves.as_json()
        assert curves["val-core/openai/gsm8k/acc/mean@1"]["series"][0][:2] == [0, 0.498]
