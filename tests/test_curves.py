"""Training curves and anomalies (issue 28): every step metric over the whole run, down-sampled so a
spike survives; a change point in a timing part found near where it began, and nothing on healthy
runs; replay's CSV; the Metrics pane in the real app."""

from __future__ import annotations

import csv
import json
import math
import random
import re
import subprocess
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

import pytest

from gkdtop.analysis.anomalies import AnomalyLimits
from gkdtop.analysis.curves import MAX_BUCKETS, Curves, Series
from gkdtop.analysis.rules import builtin_phases
from gkdtop.config import Config, load_config
from gkdtop.replay import replay
from tests.corpus.frameworks import Verl, verl_startup
from tests.corpus.logkit import Log
from tests.corpus.make_corpus import run_steps
from tests.gkdlog import ray, startup
from tests.tmux import Tmux, tmux_available
from tests.verlrun import RUNNER, live_and_history, step_line, verl_run

CORPUS = Path(__file__).parent / "corpus"
def gkdtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gkdtop", *args], capture_output=True, text=True, timeout=120)


# --- the history -----------------------------------------------------------------------------------

def test_downsampling_keeps_a_one_step_spike() -> None:
    """100,000 steps in at most MAX_BUCKETS buckets; the one step at 50x stays the maximum, at its step."""
    rng = random.Random(3)
    values = array("d", (rng.uniform(0.9, 1.1) for _ in range(100_000)))
    values[61_234] = 50.0
    series = Series()
    for start in range(0, len(values), 777):  # in uneven pieces, as blocks of steps arrive
        series.extend(range(start + 1, min(start + 778, len(values) + 1)), values[start : start + 777])
    points = series.points()
    assert len(points) <= MAX_BUCKETS and series.width >= 64
    spike = max(points, key=lambda p: p[2])
    assert spike[2] == 50.0 and spike[0] - series.width < 61_235 <= spike[0]
    assert series.as_json(100)["max"] == 50.0 and max(p[2] for p in series.as_json(100)["series"]) == 50.0
    assert series.count == 100_000 and series.lo_all == min(values)


def test_a_spike_in_a_long_run_survives_into_snapshot_json(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    verl_run(log, 5000, gen_at=lambda step, rng: 500.0 if step == 3210 else rng.gauss(10.0, 0.6))
    proc = gkdtop("snapshot", "--json", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    gen = json.loads(proc.stdout)["metrics"]["timing_s/gen"]
    assert gen["count"] == 5000 and gen["max"] == 500.0 and len(gen["series"]) <= 200
    assert any(point[2] == 500.0 and point[0] >= 3210 for point in gen["series"])


def test_curves_stay_bounded_at_100k_steps() -> None:
    """Sixty metrics of 100,000 steps, through the bulk path history uses."""
    curves = Curves()
    line = " - ".join(f"m/{i}:{i * 1.5:.6f}" for i in range(60)).encode()
    for start in range(0, 100_000, 500):
        curves.add_bytes(list(range(start + 1, start + 501)), [line] * 500)
    series = curves.series()
    assert curves.count == 100_000 and len(series) == 60
    assert all(len(s.steps) <= MAX_BUCKETS and s.count == 100_000 for s in series.values())
    assert series["m/3"].points()[-1] == (100_000, 4.5, 4.5, 4.5)


def test_live_lines_and_history_make_the_same_curves(tmp_path: Path) -> None:
    """The dashboard's live feed and replay's chunked reader (its bulk path) agree on every metric."""
    log = tmp_path / "train.log"
    verl_run(log, 300, every=10)
    phases, store = live_and_history(tmp_path, log.read_text(), lambda store: store.phases.stats.count >= 300)
    history = phases.curves.as_json()
    live = store.phases.curves.as_json()
    assert live.keys() == history.keys() and "val-core/acc/mean@1" in live
    assert live == history


# --- anomalies -----------------------------------------------------------------------------------

def test_generation_that_doubles_is_a_change_point_found_where_it_began(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    verl_run(log, 600, gen_at=lambda step, rng: rng.gauss(20.0 if step >= 400 else 10.0, 0.6))
    proc = gkdtop("replay", "--json", str(log))
    assert proc.returncode == 0, proc.stderr
    found = [a for a in json.loads(proc.stdout)["anomalies"] if a["metric"] == "timing_s/gen"]
    assert len(found) == 1, found
    gen = found[0]
    assert gen["kind"] == "slower" and 400 <= gen["step"] <= 403, gen
    assert gen["before"] == pytest.approx(10.0, rel=0.05) and gen["after"] == pytest.approx(20.0, rel=0.05)
    assert re.fullmatch(r"generation \(timing_s/gen\) 2\.0x slower since step 40\d \(10\.0 s → 2[01]\.\d s\)",
                        gen["text"])
    text = gkdtop("replay", str(log)).stdout
    assert "anomalies:\n  generation (timing_s/gen) 2.0x slower since step 40" in text


def test_one_slow_step_and_slow_validation_steps_are_no_change_point(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    verl_run(log, 400, gen_at=lambda step, rng: 90.0 if step % 10 == 0 or step == 250 else rng.gauss(10.0, 0.6))
    assert replay([str(log)], Config(phases=builtin_phases())).anomalies == []


@pytest.mark.parametrize(("seed", "kw"), [(1, {}), (2, {"algo": "ppo", "critic": True}), (3, {"engine": "sglang"}),
                                          (5, {"algo": "ppo", "strategy": "megatron", "nodes": 2, "critic": True})])
def test_healthy_noisy_runs_raise_no_anomaly(tmp_path: Path, seed: int, kw: dict) -> None:
    """300 steps of the corpus's verl generator: every metric uniformly noisy, validation every 5 steps,
    a checkpoint at step 10."""
    log = Log("2025-03-04 10:00:00", seed)
    verl = Verl(log, steps=300, **kw)
    verl_startup(verl)
    verl.validate(initial=True)
    run_steps(verl, 300)
    verl.finish()
    path = tmp_path / "train.log"
    path.write_text(log.text())
    report = replay([str(path)], load_config(None))
    assert report.steps["count"] == 300 and report.anomalies == []


@pytest.mark.parametrize("shape", ["doubled", "nan", "validation"])
def test_replay_reading_only_the_watched_metrics_finds_what_reading_all_does(tmp_path: Path, shape: str) -> None:
    """Replay without --csv reads only the metrics anomalies need (curves.Curves `only`): the same anomalies."""
    log = tmp_path / "train.log"
    if shape == "nan":
        log = CORPUS / "verl_grpo_nan_loss.log"
    else:
        verl_run(log, 400, every=10 if shape == "validation" else 0,
                 gen_at=lambda step, rng: rng.gauss(25.0 if step >= 300 else 10.0, 0.5))
    config = load_config(None)
    watched = [a.as_json() for a in replay([str(log)], config).anomalies]
    every = [a.as_json() for a in replay([str(log)], config, csv_path=str(tmp_path / "all.csv")).anomalies]
    assert watched == every and watched


def test_metrics_as_noisy_as_their_level_raise_nothing_at_60k_steps() -> None:
    """bench's dense log prints every metric uniform in 0..10: no window is a change, however many."""
    from gkdtop.analysis.anomalies import scan
    from gkdtop.analysis.steps import StepStats

    rng = random.Random(11)
    curves, stats = Curves(), StepStats()
    keys = ("critic/score/mean", "response_length/mean", "response_length/clip_ratio", "perf/throughput")
    for step in range(1, 60_001):
        curves.add(step, keys, [rng.uniform(0, 10) for _ in keys])
        stats.add(step, None, {"gen": rng.uniform(0, 10), "step": rng.uniform(10, 20)})
    assert scan(stats, curves, AnomalyLimits()) == []


def test_the_corpus_raises_anomalies_only_where_a_loss_went_nan() -> None:
    from tests.corpus_eval import held_out_names

    config = load_config(None)
    fired = {}
    blind = held_out_names(CORPUS / "posted")  # scored once, unseen: no test reads gkdtop's output on them
    for path in sorted([*CORPUS.glob("*.log"), *(CORPUS / "posted").glob("*.log")]):
        if path.stem in blind:
            continue
        report = replay([str(path)], config)
        if report.anomalies:
            fired[path.name] = [a.kind for a in report.anomalies]
    # (a LLaMA-Factory run and an HF Trainer run whose records have grad_norm nan: their anomaly is the finding the
    # thread is about)
    assert fired == {"verl_grpo_nan_loss.log": ["nonfinite"],
                     "llamafactory_glm4_loss_zero_grad_norm_nan_running.log": ["nonfinite"],
                     "hf_trainer_pink_stage1_loss_zero_grad_norm_nan.log": ["nonfinite"],
                     "llamafactory_npu_910b_loss_zero_grad_norm_nan_bars.log": ["nonfinite"]}


def test_score_collapse_and_thresholds_from_the_config(tmp_path: Path) -> None:
    rng = random.Random(5)
    lines, _ = startup(time.time() - 86400, steps=0)
    lines += [step_line(s, rng.gauss(10.0, 0.5), rng, score=0.7 if s < 150 else 0.1) for s in range(1, 301)]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    found = replay([str(log)], load_config(None)).anomalies
    assert [(a.kind, a.metric) for a in found] == [("score", "critic/score/mean")]
    assert 150 <= found[0].step <= 152 and "score collapsed 86% since step 15" in found[0].text
    config = tmp_path / "gkdtop.yaml"
    config.write_text("anomalies:\n  score_drop: 0.9\n")
    assert replay([str(log)], load_config(config)).anomalies == []
    assert load_config(config).anomalies == AnomalyLimits(score_drop=0.9)


# --- replay --csv ------------------------------------------------------------------------------------

def test_csv_has_one_row_per_step_and_every_metric_a_column(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    verl_run(log, 250, every=10)
    out = tmp_path / "steps.csv"
    proc = gkdtop("replay", "--csv", str(out), "--json", str(log))
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)["steps"]["count"]
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert steps == 250 and len(rows) == steps
    assert [int(r["step"]) for r in rows] == list(range(1, 251))
    assert rows[9]["val-core/acc/mean@1"] != "" and rows[10]["val-core/acc/mean@1"] == ""
    assert all(math.isfinite(float(r["timing_s/gen"])) for r in rows)
    bad = gkdtop("replay", "--csv", str(tmp_path / "no" / "such" / "dir.csv"), str(log))
    assert bad.returncode == 2 and bad.stderr.startswith("gkdtop replay: --csv") and "Traceback" not in bad.stderr


# --- the Metrics pane ----------------------------------------------------------------------------

async def test_metrics_pane_charts_the_run_and_pages_with_m(tmp_path: Path) -> None:
    from textual_plotext import PlotextPlot

    from gkdtop.tui.metrics_pane import MetricsPane
    from gkdtop.tui.phases_pane import PhasesPane
    from tests.test_app import make_app, pane_text, settle

    log_lines: list[str] = []
    app, log = make_app(tmp_path, log_lines)
    verl_run(log, 120, gen_at=lambda step, rng: rng.gauss(20.0 if step >= 60 else 10.0, 0.5))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(MetricsPane)
        assert not pane.display or pane.size.height == 0  # not in the layout until maximized
        await settle(pilot, lambda: "anomalies (1)" in pane_text(app, PhasesPane))
        assert "generation (timing_s/gen) 2.0x slower since step 6" in pane_text(app, PhasesPane)
        await pilot.press("6")
        assert app.screen.maximized is pane
        await settle(pilot, lambda: len(pane.query(PlotextPlot)) == 6 and "120 steps" in str(
            pane.query_one("#metrics-head").render()))
        await pilot.pause()
        plots = [p for p in pane.query(PlotextPlot) if p.display]
        assert len(plots) == 4 and all(p.size.width >= 30 and p.size.height >= 8 for p in plots)
        rendered = [str(p.render()) for p in plots]
        assert "step time (s), parts stacked" in rendered[0]
        assert "critic/score/mean" in rendered[1] and "response_length/mean" in rendered[2]
        assert "clip_ratio 0.0" in rendered[3]  # the name's head goes where the chart is narrow
        await pilot.press("m")
        await pilot.pause()
        rendered = [str(p.render()) for p in pane.query(PlotextPlot) if p.display]
        assert "actor/entropy" in rendered[1] and "perf/throughput" in rendered[2]
        assert "actor/pg_loss" in rendered[3]  # after the defaults, every other metric the run printed
        # A line that is not a step moves the pane's source: it is asked, and draws nothing.
        drawn = pane._drawn
        moved = app.store.versions.get("logs", 0)
        with log.open("a") as fh:
            fh.write(ray(*RUNNER, "INFO rollout: generated 1024 sequences", color=False) + "\n")
        await settle(pilot, lambda: app.store.versions.get("logs", 0) > moved and app._drawn.get(pane) == tuple(
            app.store.versions.get(s, 0) for s in pane.SOURCES))
        assert pane._drawn is drawn
        with log.open("a") as fh:  # a step: drawn again
            fh.write(step_line(121, 20.0, random.Random(1)) + "\n")
        await settle(pilot, lambda: "121 steps" in str(pane.query_one("#metrics-head").render()))
        await pilot.press("6")
        assert app.screen.maximized is None


@pytest.mark.tmux
@pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")
def test_metrics_pane_in_tmux_at_80x24(tmp_path: Path) -> None:
    """The real command in a real 80x24 terminal: 6 shows the charts, m the next metrics, 6 restores."""
    log = tmp_path / "train.log"
    verl_run(log, 200, gen_at=lambda step, rng: rng.gauss(20.0 if step >= 120 else 10.0, 0.5))
    env = {"XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path), "LD_LIBRARY_PATH": str(tmp_path)}
    tmux = Tmux(width=80, height=24)
    try:
        tmux.start([str(Path(sys.executable).with_name("gkdtop")), "--log", str(log)], env=env)
        tmux.wait_for("training loop", timeout=30)
        tmux.keys("6")
        screen = tmux.wait_for("parts stacked")
        assert "6 Metrics" in screen and "200 steps · 1/3 (m: next) · parts: gen reward update_actor step" in screen
        assert "1 Phases" not in screen
        assert "score/mean" in screen and sum(ch in screen for ch in "⣀⣤⠤⡇⢸⠉") >= 3  # braille curves
        assert max(len(row) for row in screen.splitlines()) <= 80
        tmux.keys("m")
        assert "entropy" in tmux.wait_for("2/3 (m: next)")
        tmux.keys("6")
        screen = tmux.wait_for("1 Phases")
        assert "6 Metrics" not in screen
    finally:
        tmux.kill()


def _hf_bar_log(path: Path, pace: Callable[[int], float], items: int = 300, seed: int = 4, sep: str = "\r") -> None:
    """An HF Trainer run written by tqdm to a file: no stamp on its steps, each item's redraw after a `\\r`,
    the bar's smoothed pace (EMA, tqdm's 0.3), an evaluation every 50 items that stalls the bar, a dict glued on."""
    rng = random.Random(seed)
    out = ["[INFO|trainer.py:2134] 2025-06-02 09:14:03,118 >> ***** Running training *****",
           "[INFO|trainer.py:2135] 2025-06-02 09:14:03,118 >>   Num examples = 9,600",
           f"[INFO|trainer.py:2140] 2025-06-02 09:14:03,119 >>   Total optimization steps = {items}"]
    bar, elapsed, ema = "", 0.0, None
    for item in range(1, items + 1):
        seconds = pace(item) * rng.uniform(0.85, 1.15) + (40.0 if item % 50 == 1 and item > 1 else 0.0)
        elapsed += seconds
        ema = seconds if ema is None else 0.3 * seconds + 0.7 * ema
        left = (items - item) * ema
        bar += (f"{sep}{100 * item // items:3d}%|{'█' * (10 * item // items):10s}| {item}/{items} "
                f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<{int(left) // 3600}:{int(left) // 60 % 60:02d}:"
                f"{int(left) % 60:02d}, {ema:.2f}s/it]")
        if item % 10 == 0:
            bar += f"{{'loss': {rng.uniform(0.8, 1.2):.4f}, 'grad_norm': {rng.uniform(0.2, 0.5):.3f}, " \
                   f"'learning_rate': 2e-05, 'epoch': {item / items:.2f}}}\n"
            out.append(bar)
            bar = ""
    path.write_text("\n".join(out) + "\n" + bar + "\n")


def test_a_bar_that_slows_is_a_change_point_and_a_noisy_one_is_not(tmp_path: Path) -> None:
    """HF's steps carry no time: the loop's bar's own pace says where they got slower (2 s/it, then 45)."""
    slow, fine = tmp_path / "slow.log", tmp_path / "fine.log"
    _hf_bar_log(slow, lambda item: 45.0 if item >= 120 else 2.0)
    _hf_bar_log(fine, lambda item: 2.0)
    pasted = tmp_path / "pasted.log"  # each redraw on its own line, as users paste them: every evaluation's stall seen
    _hf_bar_log(pasted, lambda item: 2.0, sep="\n")
    found = replay([str(slow)], load_config(None)).anomalies
    assert [(a.kind, a.metric) for a in found] == [("slower", "bar s/it")], found
    # A file keeps a `\r` line's last redraw (what a terminal shows): the bar is seen every 10 items.
    assert 120 <= found[0].step <= 130 and found[0].before == pytest.approx(2.0, rel=0.1)
    assert found[0].after == pytest.approx(45.0, rel=0.1)
    assert re.fullmatch(r"the loop's bar 2\d\.\dx slower since item 1[23]\d \(\d\.\d\d s/it → 4\d\.\d\d s/it\)",
                        found[0].text)
    assert replay([str(fine)], load_config(None)).anomalies == []
    assert replay([str(pasted)], load_config(None)).anomalies == []


def test_a_loops_own_step_print_is_a_step_and_the_part_that_grew_is_named(tmp_path: Path) -> None:
    """`2023-03-12 16:42:04 step 1: loss 3.05 | forward 920 ms | backward 2184 ms | engine.step() 116 ms`: a
    DeepSpeed loop's own print. Its steps count, its parts are timed under the log's names, and the optimizer
    step that grew from 0.1 s to 12 s (host memory filling under CPU offload) is the anomaly, named as printed."""
    rng = random.Random(11)
    t = time.mktime(time.strptime("2023-03-12 16:42:00", "%Y-%m-%d %H:%M:%S"))
    lines = ["[2023-03-12 16:40:33,300] [INFO] [logging.py:75:log_dist] [Rank 0] Creating ZeRO stage 3 optimizer",
             "[2023-03-12 16:41:58,650] [INFO] [logging.py:75:log_dist] [Rank 0] DeepSpeed Final Optimizer = "
             "DeepSpeedCPUAdam"]
    for step in range(1, 41):
        forward, backward = rng.uniform(900, 1100), rng.uniform(2100, 2500)
        optimizer = rng.uniform(100, 130) if step < 21 else rng.uniform(11000, 13000)
        t += (forward + backward + optimizer) / 1000
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        lines.append(f"{stamp} step {step}: loss {3.05 - step / 20:.4f} | forward {forward:.0f} ms | "
                     f"backward {backward:.0f} ms | engine.step() {optimizer:.0f} ms")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.steps["count"] == 40 and report.steps["last"] == 40
    assert set(report.steps["timing"]) == {"forward", "backward", "engine.step()"}
    found = {a.metric: a for a in report.anomalies}
    assert set(found) == {"timing_s/step", "engine.step()"}, report.anomalies
    grew = found["engine.step()"]
    assert 21 <= grew.step <= 22 and grew.before == pytest.approx(0.115, rel=0.1)
    assert re.fullmatch(r"engine\.step\(\) 1\d\d\.\dx slower since step 2\d \(0\.1 s → 1[12]\.\d s\)", grew.text)
    assert "forward" not in found and "backward" not in found


def test_a_step_print_with_a_nan_loss_or_a_whole_step_time_is_still_the_loops(tmp_path: Path) -> None:
    """Review of session 21: `step 7: loss nan | …` was no step (the pattern wanted a digit), and `| time 3.4 s |` was
    timed as a part named "time", beside the parts it is the sum of."""
    loss = {step: "nan" if step >= 7 else f"{2.5 - step / 10:.2f}" for step in range(1, 11)}
    lines = [f"2023-03-12 16:42:{10 + 4 * step:02d} step {step}: loss {loss[step]} | forward 1100 ms | backward "
             "2200 ms | time 3.4 s" for step in range(1, 11)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.steps["count"] == 10 and report.steps["last"] == 10
    timing = report.steps["timing"]
    assert set(timing) == {"forward", "backward", "step"} and timing["step"]["mean_s"] == 3.4, timing


def test_a_change_on_a_windows_edge_is_dated_where_it_began(tmp_path: Path) -> None:
    """Review of session 21: generation twice as slow from step 81 of 120 (on the edge of a 5-step window) read
    "since step 76": the boundary a window earlier scored the same, and its search ended before the change."""
    rng = random.Random(7)  # (a third of the seeds read "since step 76" before)
    gens = [rng.gauss(10.0 if step <= 80 else 20.0, 0.3) for step in range(1, 121)]
    log = tmp_path / "train.log"
    log.write_text("".join(f"step:{step} - timing_s/gen:{gen:.2f} - timing_s/step:{gen + 20:.2f}\n"
                           for step, gen in enumerate(gens, 1)))
    found = {a.metric: a for a in replay([str(log)], load_config(None)).anomalies}
    assert found["timing_s/gen"].step == 81, found


def _trl_records(n: int, zero_std: float, accuracy: object) -> str:
    """TRL GRPO's logged dicts behind the loop's bar, `n` of them."""
    out = []
    for k in range(1, n + 1):
        acc = accuracy(k) if callable(accuracy) else accuracy
        out.append(f" {k * 100 // 240:3d}%|          | {k}/240 [{k // 2:02d}:00<2:00:00, 40.00s/it]")
        out.append(f"{{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 2e-06, 'rewards/accuracy_reward/mean': {acc}, "
                   f"'rewards/accuracy_reward/std': 0.3, 'rewards/format_reward/mean': 1.0, 'reward': {acc + 1.0}, "
                   f"'reward_std': {0.0 if zero_std == 1.0 else 0.4}, 'frac_reward_zero_std': {zero_std}, "
                   f"'epoch': {k / 240:.4f}}}")
    return "\n".join(out) + "\n"


def test_grpo_groups_with_equal_rewards_are_no_learning_signal(tmp_path: Path) -> None:
    """Audit 15: TRL's GRPO with frac_reward_zero_std 1.0 and loss 0.0 in every record: every group's rewards equal,
    no advantage, nothing learnt; gkdtop said nothing. A loss of 0.0 alone is GRPO's normal (zero-mean advantages)."""
    log = tmp_path / "train.log"
    log.write_text(_trl_records(30, 1.0, 0.0))
    found = {a.kind: a for a in replay([str(log)], load_config(None)).anomalies}
    assert set(found) == {"no_signal"}, found
    assert found["no_signal"].step == 1 and "no learning signal since step 1" in found["no_signal"].text
    log.write_text(_trl_records(30, 0.25, 0.4))
    assert replay([str(log)], load_config(None)).anomalies == []


def test_one_reward_functions_collapse_is_named(tmp_path: Path) -> None:
    """Audit 15: the accuracy reward went to 0 while the format reward held the total up; only the total was read."""
    log = tmp_path / "train.log"
    log.write_text(_trl_records(60, 0.25, lambda k: 0.3 if k <= 30 else 0.0))
    found = {a.metric: a for a in replay([str(log)], load_config(None)).anomalies}
    part = found["rewards/accuracy_reward/mean"]
    assert part.kind == "score" and part.step == 31, part
    assert part.text == "rewards/accuracy_reward/mean: score collapsed 100% since step 31 (0.3 → 0)", part.text
    assert "rewards/accuracy_reward/std" not in found and "reward" not in found


def test_dpos_own_rewards_falling_is_no_collapse(tmp_path: Path) -> None:
    """Review of session 22: DPO's `rewards/chosen` and `rewards/rejected` decay as it trains (a falling rejected reward
    is what it optimises): read as GRPO reward functions, 'rewards/rejected: score collapsed 2897%'."""
    rng = random.Random(8)
    lines = []
    for k in range(1, 121):
        rejected = 0.05 if k < 40 else -0.5 - k / 100
        lines.append(f"{{'loss': {0.69 - k / 400:.4f}, 'grad_norm': {rng.uniform(5, 9):.3f}, 'learning_rate': 5e-07, "
                     f"'rewards/chosen': {0.05 if k < 40 else -0.25:.4f}, 'rewards/rejected': {rejected:.4f}, "
                     f"'rewards/accuracies': {0.5 if k < 40 else 0.8:.2f}, "
                     f"'rewards/margins': {0.0 if k < 40 else 0.6:.3f}, "
                     f"'epoch': {k / 120:.4f}}}")
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    assert replay([str(log)], load_config(None)).anomalies == []


def test_a_running_total_in_a_step_print_is_no_part_of_the_step(tmp_path: Path) -> None:
    """Review of session 22: `| elapsed: 600.0s` (the run's time so far) read as the step's own time: 'mean 301.50s,
    last tenth 18.14x the first' for 3 s steps (and, before, as a part that grew)."""
    lines = [f"2026-11-28 10:{3 * s // 60:02d}:{3 * s % 60:02d} step {s}: loss {2.5 - s / 1000:.3f} | lr 1e-4 | "
             f"elapsed: {3.0 * s:.1f}s" for s in range(1, 201)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.steps["mean_s"] == pytest.approx(3.0) and report.anomalies == [], report.steps
    assert "elapsed" not in report.steps.get("timing", {})


def test_two_bars_taken_in_turn_for_the_loops_are_no_slowdown(tmp_path: Path) -> None:
    """A fast bar, then a slow one of another description (a generation's after a training epoch's): two paces, not
    one level that changed."""
    lines = []
    for item in range(1, 41):
        lines.append(f" {item * 100 // 40:3d}%|{'█' * (item // 4):10s}| {item}/40 [00:{item // 2:02d}<00:10, 2.00it/s]")
    for item in range(1, 41):
        lines.append(f"Generating: {item * 100 // 40:3d}%|{'█' * (item // 4):10s}| {item}/40 [{item // 2:02d}:00<10:00,"
                     f" 30.00s/it]")
    log = tmp_path / "train.log"
    log.write_text("***** Running training *****\n" + "\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.steps["bar"]["s_per_it"] == 30.0, report.steps  # the second bar was read as the loop's
    assert report.anomalies == []


def test_an_evaluations_bar_with_no_words_is_no_slowdown_of_the_loops(tmp_path: Path) -> None:
    """HF's evaluation bar has no description either: told apart from the loop's by its total (review of session 21:
    '19.9x slower since item 51' on a healthy run, 63 eval items at 0.1 s/it among 2 s/it training items)."""
    lines = []
    for item in range(1, 201):
        lines.append(f" {item * 100 // 200:3d}%|{'█' * (item // 20):10s}| {item}/200 [{item * 2 // 60:02d}:"
                     f"{item * 2 % 60:02d}<05:00,  2.00s/it]")
        if item % 50 == 0:
            lines += [f" {k * 100 // 63:3d}%|{'█' * (k // 7):10s}| {k}/63 [00:0{k // 10}<00:05, 10.00it/s]"
                      for k in range(1, 64)]
            lines.append("{'eval_loss': 0.91, 'eval_runtime': 6.3, 'epoch': %.2f}" % (item / 200))
    log = tmp_path / "train.log"
    log.write_text("***** Running training *****\n" + "\n".join(lines) + "\n")
    assert replay([str(log)], load_config(None)).anomalies == []


def test_a_grad_norm_gone_nan_in_a_dense_run_is_read_though_the_bulk_path_skips_its_search(tmp_path: Path) -> None:
    """History's scan reports whether a chunk holds `nan`, `inf` or `'rewards/` (Matcher markers), so the bulk
    path searches no chunk for them again; a chunk that holds one still goes line by line, its NaN read."""
    w, r = "(WorkerDict pid=7790, ip=10.1.1.5) ", "(TaskRunner pid=7781) "
    rng = random.Random(5)
    out = [f"{w}INFO 03-02 09:00:00 [metrics.py:455] Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs"]
    for step in range(1, 3001):
        norm = "nan" if step == 2500 else f"{rng.uniform(0.1, 0.4):.6f}"  # (a NaN loss is a finding's line: careful)
        out.append(f"{w}Processed prompts: 100%|##| 8/8 [00:02<00:00, 4.0it/s]")
        out.append(f"{r}step:{step} - actor/grad_norm:{norm} - critic/score/mean:{rng.uniform(0.5, 0.6):.4f} - "
                   f"timing_s/gen:{rng.uniform(9, 11):.3f} - timing_s/step:{rng.uniform(30, 32):.3f} - "
                   f"perf/throughput:{rng.uniform(900, 1000):.1f}")
    log = tmp_path / "train.log"
    log.write_text("\n".join(out) + "\n")
    report = replay([str(log)], load_config(None))
    assert [(a.kind, a.metric, a.step) for a in report.anomalies] == [("nonfinite", "actor/grad_norm", 2500)]
