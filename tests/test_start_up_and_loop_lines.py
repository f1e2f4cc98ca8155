"""Lines that say where a run is, read in the right phase: verl's loop start, ops JIT-built in the loop, data bars,
a Ray task error with no detail, an SGLang engine's own group (review of session 26, audit 24)."""

from __future__ import annotations

from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import replay


def run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.log"
    path.write_text("".join(line + "\n" for line in lines))
    return replay([str(path)], load_config(None))


def test_verls_training_from_scratch_opens_the_loop_where_no_bar_or_step_line_comes(tmp_path: Path) -> None:
    """verl's fit() prints it once every worker is up: a silence after it is step 1, not rollout init."""
    report = run(tmp_path, [
        "2025-03-02 08:01:10,120\tINFO worker.py:1918 -- Started a local Ray instance.",
        "(WorkerDict pid=5512) INFO 03-02 08:06:40 [core.py:193] init engine (profile, create kv cache, warmup model)"
        " took 21.40 seconds",
        "(TaskRunner pid=5101) Training from scratch",
        "(TaskRunner pid=5101) 2025-03-02 08:07:02.450 | INFO     | agents.base:run:181 - Running 32 trajectories",
    ])
    assert report.status.current == "training loop"


def test_an_op_built_during_the_loop_is_part_of_the_step_not_a_model_load(tmp_path: Path) -> None:
    """DeepSpeed JIT-builds an op at its first use: at start-up a model's load, once the loop ran part of a step."""
    report = run(tmp_path, [
        "[2026-04-11 09:00:00] INFO ***** Running training *****",
        "[2026-04-11 09:00:20] INFO {'loss': 1.71, 'learning_rate': 2e-05, 'epoch': 0.01}",
        "[2026-04-11 09:00:40] INFO {'loss': 1.65, 'learning_rate': 2e-05, 'epoch': 0.02}",
        "Using /home/u/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...",
        "Emitting ninja build file /home/u/.cache/torch_extensions/py311_cu124/inference_core_ops/build.ninja...",
        "Building extension module inference_core_ops...",
        "Loading extension module inference_core_ops...",
    ])
    assert [s.name for s in report.status.timeline] == ["training loop"]
    assert report.status.current == "training loop"
    assert not lock_advice(report)


def test_an_op_built_at_start_up_is_still_the_models_load(tmp_path: Path) -> None:
    report = run(tmp_path, [
        "[2026-04-11 09:00:00] INFO Setting ds_accelerator to cuda (auto detect)",
        "Using /home/u/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...",
        "Emitting ninja build file /home/u/.cache/torch_extensions/py311_cu124/cpu_adam/build.ninja...",
    ])
    assert report.status.current in ("actor init", "model load")


def test_an_undescribed_bar_in_examples_a_second_after_the_loop_began_is_the_loop(tmp_path: Path) -> None:
    """HF's `***** Running training *****` opened the loop: a bar counted in examples/s after it is the loop's."""
    lines = [
        "[2026-05-03 14:00:00] INFO loading weights file model.safetensors",
        "[2026-05-03 14:00:30] INFO ***** Running training *****",
    ]
    lines += [f" {p}%|          | {p * 800}/80000 [{p // 2:02d}:00<40:00, 26.7examples/s]" for p in range(1, 30, 4)]
    report = run(tmp_path, lines)
    assert report.status.current == "training loop"
    assert "dataset generation" not in [s.name for s in report.status.timeline]


def lock_advice(report) -> list[str]:  # type: ignore[no-untyped-def]
    """The stale-lock lines of the hint replay prints for a log that stops there."""
    hint = report.open_end.hint if report.open_end is not None else report.status.hint
    said = [] if hint is None else list(hint.causes) + list(hint.actions)
    return [s for s in said if "lock" in s]


def test_stale_build_lock_advice_only_where_the_op_was_not_built(tmp_path: Path) -> None:
    start = [
        "[2026-06-09 07:10:00] INFO loading weights file model.safetensors",
        "[2026-06-09 07:10:25] INFO DeepSpeed info: version=0.15.1, git-hash=unknown, git-branch=unknown",
        "Using /data/u/.cache/torch_extensions/py310_cu118 as PyTorch extensions root...",
        "Emitting ninja build file /data/u/.cache/torch_extensions/py310_cu118/fused_adam/build.ninja...",
        "Building extension module fused_adam...",
    ]
    assert lock_advice(run(tmp_path, start))  # the build never ended: its lock may be stale
    built = [*start, "Loading extension module fused_adam...",
             "[2026-06-09 07:10:52] INFO Time to load fused_adam op: 3.18 seconds"]
    assert not lock_advice(run(tmp_path, built))


NO_DETAIL_CRASH = [
    "Error executing job with overrides: ['trainer.n_gpus_per_node=4']",
    "Traceback (most recent call last):",
    '  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in run_ppo',
    "    ray.get(runner.run.remote(config))",
    "ray.exceptions.RayTaskError(ImportError): ray::TaskRunner.run() (pid=40711, ip=10.1.4.22)",
    '  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 702, in init_workers',
    "    self.actor_rollout_wg.init_model()",
    "ray.exceptions.RayTaskError(ImportError): <no detail available>",
]


def test_a_ray_task_error_with_no_detail_is_the_exception_and_names_its_type(tmp_path: Path) -> None:
    """The traceback is whole: Ray kept the wrapped type, not its message; no "the exception is not in the log"."""
    report = run(tmp_path, ["(WorkerDict pid=40902) Model config after override: Qwen2Config {",
                            "(WorkerDict pid=40902) }", *NO_DETAIL_CRASH])
    assert report.status.state == "failed"
    assert report.status.failure == "ray.exceptions.RayTaskError(ImportError): <no detail available>"
    hint = report.status.hint
    assert hint is None or not any("not in the log" in c for c in hint.causes)


def test_verls_actor_use_remove_padding_ends_the_actors_model_load(tmp_path: Path) -> None:
    report = run(tmp_path, ["(WorkerDict pid=40902) Model config after override: Qwen2Config {",
                            "(WorkerDict pid=40902) }",
                            "(WorkerDict pid=40902) Actor use_remove_padding=True", *NO_DETAIL_CRASH])
    spans = [(s.name, s.status) for s in report.status.timeline]
    assert spans[0][0] in ("actor init", "model load") and spans[0][1] == "done"
    assert report.status.current not in ("actor init", "model load")


def test_an_sglang_engines_own_group_after_the_actor_is_up_is_in_rollout_init(tmp_path: Path) -> None:
    """The trainer's groups were up (Megatron's parameter count): a TP group the engine's scheduler makes is the
    engine's start-up (verl's _build_rollout), not the trainer's nccl init."""
    report = run(tmp_path, [
        "2025-02-11 06:00:03,410\tINFO worker.py:1841 -- Connected to Ray cluster.",
        "(WorkerDict pid=7012, ip=10.8.0.5) > number of parameters on (tensor, pipeline) model parallel rank (0, 1):"
        " 4170021888",
        "(WorkerDict pid=7012, ip=10.8.0.5) [2025-02-11 06:12:40 TP0] Init torch distributed begin.",
        "(WorkerDict pid=7012, ip=10.8.0.5) [2025-02-11 06:22:41 TP0] Scheduler hit an exception: Traceback (most"
        " recent call last):",
        "(WorkerDict pid=7012, ip=10.8.0.5) torch.distributed.DistStoreError: Timed out after 600 seconds waiting for"
        " clients. 6/8 clients joined.",
    ])
    assert report.status.state == "failed"
    assert report.status.current == "rollout init"


def test_trls_labelled_data_bars_are_the_dataset_before_the_loop_and_the_loop_after(tmp_path: Path) -> None:
    before = [
        "Loading checkpoint shards: 100%|██████████| 2/2 [00:04<00:00,  2.10s/it]",
        "Tokenizing train dataset: 100%|██████████| 5120/5120 [00:03<00:00, 1650.22 examples/s]",
        "Extracting prompt in train dataset: 100%|██████████| 5120/5120 [00:02<00:00, 2400.91 examples/s]",
    ]
    report = run(tmp_path, before)
    assert report.status.current == "dataset generation"
    # A DPO run's data bar over its eval set once steps ran is part of the loop, not a dataset phase (block 17)
    during = [before[0], "  0%|          | 0/200 [00:00<?, ?it/s]",
              "{'loss': 0.6931, 'grad_norm': 3.2, 'learning_rate': 5e-07, 'epoch': 0.05}",
              "Tokenizing eval dataset: 100%|██████████| 500/500 [00:00<00:00, 3101.50 examples/s]"]
    report = run(tmp_path, during)
    assert report.status.current == "training loop"
    assert report.status.timeline[-1].name == "training loop"


def test_kohyas_model_saved_after_the_loop_is_the_end_and_zero_steps_are_said(tmp_path: Path) -> None:
    """sd-scripts and musubi-tuner log `model saved.` once, after their loop, from the last model's save: the run
    finished (before: 'running, likely in checkpoint save'). One that counted zero optimization steps saved without
    training: a finding says so."""
    lines = [
        "running training / 学習開始",
        "  num epochs / epoch数: 0",
        "  total optimization steps / 学習ステップ数: 0",
        "steps: 0it [00:00, ?it/s]",
        "saving checkpoint: /data/out/style_v2.safetensors",
        "2025-01-07 10:21:44 INFO     model saved.                                           train_network.py:1012",
    ]
    report = run(tmp_path, lines)
    assert (report.status.current, report.status.state) == ("finished", "done")
    assert [f.name for f in report.findings] == ["zero-training-steps"]
    musubi = ["[11:02:40] [STDERR] steps: 100%|██████████| 40/40 [18:02<00:00, 27.05s/it, avr_loss=0.0811]",
              "[11:02:43] [STDOUT] saving checkpoint: /w/out/wan_lora.safetensors", "[11:02:47] [STDOUT] model saved."]
    report = run(tmp_path, musubi)
    assert (report.status.current, report.status.state) == ("finished", "done") and not report.findings
    # a line that only mentions a model being saved (an epoch's `Best model saved.`) is no end
    assert run(tmp_path, [*musubi[:2], "[11:02:47] [STDOUT] Best model saved."]).status.state != "done"
    # a script that says `model saved.` after each epoch went on: the next epoch's bar takes the loop back (the review
    # of session 27: "finished" at epoch 1 of 3, and a snapshot hours later still said done)
    epochs = ["Epoch 1/3: 100%|██████████| 500/500 [50:00<00:00,  6.00s/it, loss=1.20]", "model saved.",
              "Epoch 2/3:  40%|████      | 200/500 [20:00<30:00,  6.00s/it, loss=1.10]"]
    report = run(tmp_path, epochs)
    assert report.status.state != "done" and report.status.current == "training loop", report.status


def test_verls_resume_in_fit_opens_the_loop_and_its_load_is_the_loops_first_part(tmp_path: Path) -> None:
    """verl's fit() resumes first (`Load from checkpoint folder:`, like `Training from scratch` where there is nothing
    to resume): every worker is up and the loop began; the load is its first part, and a step's allowance, not a
    start-up phase's, holds for the silence after it. Before: checkpoint load with no loop (a start-up phase)."""
    report = run(tmp_path, [
        "2025-04-11 09:00:02,410\tINFO worker.py:1918 -- Started a local Ray instance.",
        "(WorkerDict pid=8812) INFO 04-11 09:04:40 [core.py:193] init engine (profile, create kv cache, warmup model)"
        " took 19.20 seconds",
        "(TaskRunner pid=8701) Load from checkpoint folder: /ckpt/run7/global_step_120",
        "(TaskRunner pid=8701) Setting global step to 120",
        "(TaskRunner pid=8701) Resuming from /ckpt/run7/global_step_120",
    ])
    assert (report.status.current, report.status.within) == ("checkpoint load", "training loop")
    # another stack's load at its start-up (fairseq's) is no loop's
    report = run(tmp_path, ["| model transformer_lm, criterion CrossEntropyCriterion",
                            "| loaded checkpoint /ckpt/checkpoint_last.pt (epoch 8 @ 66480 updates)"])
    assert report.status.within is None


def test_hf_trainers_resume_lines_are_in_its_loop(tmp_path: Path) -> None:
    """HF Trainer prints its resume (`Continuing training from checkpoint …`, `… from global step N`) inside its loop
    function: a log cut to begin there is in the loop by a rule, not by a guess from words."""
    report = run(tmp_path, [
        "[INFO|trainer.py:2128] 2025-02-01 10:00:01,100 >>   Continuing training from checkpoint, will skip to "
        "saved global_step",
        "[INFO|trainer.py:2130] 2025-02-01 10:00:01,101 >>   Continuing training from global step 500",
    ])
    assert report.status.current == "training loop" and report.status.worded is None


def test_a_wait_that_counts_against_its_own_limit_is_no_stall_within_it(tmp_path: Path) -> None:
    """verl's RayWorkerGroup waits for its register center and says so every 30 s (`Elapsed time: N seconds out of M
    seconds`): within M the wait is verl's own, no stall; past it, a stall. Before: stalled after 5 minutes whatever M
    said."""
    def waits(limit: int, elapsed: list[int]) -> list[str]:
        return ["2026-03-04 08:00:00,100\tINFO worker.py:2003 -- Started a local Ray instance.",
                "(TaskRunner pid=5150) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
                *[f"(TaskRunner pid=5150) WARNING:2026-03-04 08:{2 + n // 60:02d}:{n % 60:02d},500:Waiting for "
                  f"register center actor Qx7_register_center to be ready. Elapsed time: {n} seconds out of {limit} "
                  "seconds."
                  for n in elapsed]]
    assert run(tmp_path, waits(900, [0, 120, 420])).status.state != "stalled"
    assert run(tmp_path, waits(300, [0, 120, 420])).status.state == "stalled"
