"""Where a trainer's own traceback places its failure (issue 25; audit 12's logs, written in the shapes users posted
with invented values): the code line a frame ran names the part when its function does not (TRL's weight load inside
`_prepare_inputs`, a reference model wrapped in `__init__`), also behind torch's `[rank0]: ` prefix."""

from __future__ import annotations

from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import replay
from tests.test_phase_nesting import text_of
from tests.verlrun import live_and_history

SITE = "/opt/conda/lib/python3.11/site-packages"


def _frames(prefix: str, frames: list[tuple[str, str, str]], exception: str) -> list[str]:
    """A traceback, each frame (path, function, the code line it ran) behind `prefix` (torch's `[rank0]: `)."""
    out = [f"{prefix}Traceback (most recent call last):"]
    for k, (path, func, code) in enumerate(frames):
        out += [f'{prefix}  File "{path}", line {40 + 17 * k}, in {func}', f"{prefix}    {code}"]
    return [*out, f"{prefix}{exception}"]


def _verdicts(tmp_path: Path, lines: list[str]) -> list[tuple[str | None, str]]:
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    return [(s.current, s.state) for s in (history.status(1e12), store.phase_status())]


def test_trl_loading_the_policy_into_vllm_in_prepare_inputs_is_weight_sync(tmp_path: Path) -> None:
    """R1-V (TRL 0.14's GRPO with vLLM on its own GPU): vLLM refused the policy's weights in the first step. HF's
    `training_step` frame opened the update; before: "FAILED in model update"."""
    lines = [
        "INFO 02-14 11:21:09 model_runner.py:1110] Starting to load model /data/ckpt/qwen2-vl-2b...",
        "INFO 02-14 11:21:11 model_runner.py:1115] Loading model weights took 4.1523 GB",
        "INFO 02-14 11:21:31 llm_engine.py:431] init engine (profile, create kv cache, warmup model) took "
        "19.84 seconds",
        *_frames("", [
            ("/srv/r1v/src/open_r1/grpo.py", "<module>", "main(script_args, training_args, model_args)"),
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{SITE}/transformers/trainer.py", "training_step", "inputs = self._prepare_inputs(inputs)"),
            ("/srv/r1v/src/open_r1/trainer/vllm_grpo_trainer.py", "_prepare_inputs",
             "llm_model.load_weights(state_dict.items())"),
            (f"{SITE}/vllm/model_executor/models/qwen2_vl.py", "load_weights",
             "return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)"),
        ], "ValueError: There is no module or parameter named 'base_model' in Qwen2VLForConditionalGeneration"),
    ]
    assert _verdicts(tmp_path, lines) == [("weight sync", "failed")] * 2


def test_vllms_own_weight_load_at_start_up_stays_the_engines(tmp_path: Path) -> None:
    """The same vLLM `load_weights` frames under the engine's start-up (its loader's `model.load_weights(...)`):
    engine init, not weight sync (a guard of the rule above)."""
    lines = [
        "INFO 02-14 11:21:02 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: model='/m/q'",
        *_frames("", [
            ("/srv/r1v/src/open_r1/grpo.py", "<module>", "trainer = Qwen2VLGRPOVLLMTrainer("),
            ("/srv/r1v/src/open_r1/trainer/vllm_grpo_trainer.py", "__init__", "self.llm = LLM("),
            (f"{SITE}/vllm/model_executor/model_loader/loader.py", "load_model",
             "model.load_weights(self._get_all_weights(model_config, model))"),
            (f"{SITE}/vllm/model_executor/models/qwen2_vl.py", "load_weights",
             "return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)"),
        ], "KeyError: 'visual.merger.mlp.0.weight'"),
    ]
    # (the live store names it by its plain name: no RL trainer in this log)
    assert _verdicts(tmp_path, lines) == [("rollout init", "failed"), ("engine init", "failed")]


def test_a_reference_model_wrapped_in_the_trainers_init_is_reference_init(tmp_path: Path) -> None:
    """Video-R1 (a copy of TRL's GRPO trainer under DeepSpeed ZeRO-3): the reference model ran out of memory while
    `prepare_deepspeed` moved it to the GPU, every frame behind torch's `[rank0]: `. Before: "FAILED after model
    load", and, once the code line was read, a leftover `after model load` row beside it."""
    lines = [
        "[2025-04-02 08:42:05,017] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.16.4",
        "[2025-04-02 08:42:31,904] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed Final Optimizer = "
        "DeepSpeedZeroOptimizer_Stage3",
        *_frames("[rank0]: ", [
            ("/srv/video-r1/src/open_r1/grpo.py", "main", "trainer = trainer_cls("),
            ("/srv/video-r1/src/open_r1/trainer/grpo_trainer.py", "__init__",
             "self.ref_model = prepare_deepspeed(self.ref_model, self.accelerator)"),
            (f"{SITE}/trl/models/utils.py", "prepare_deepspeed",
             "model, *_ = deepspeed.initialize(model=model, config=config_kwargs)"),
            (f"{SITE}/torch/nn/modules/module.py", "to", "return self._apply(convert)"),
        ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 260.00 MiB."),
    ]
    assert _verdicts(tmp_path, lines) == [("reference init", "failed")] * 2
    history, _ = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    assert [span.name for span in history.status(1e12).timeline] == ["actor init", "reference init"]


def test_the_code_line_that_started_a_part_bounds_the_frames_read_under_it(tmp_path: Path) -> None:
    """R1-V's newer trainer loads the weights under its `compute_loss` (audit 13): the rules' weight sync, started by
    the frame's code line, stands; the frame's own words (a loss: the update) are not read over it. Before: "FAILED,
    likely in model update"."""
    lines = [
        "  1%|          | 1/100 [00:41<1:07:52, 41.13s/it]",
        *_frames("[rank0]: ", [
            ("/srv/r1v/src/open_r1/trainer/vllm_grpo_trainer.py", "compute_loss",
             "llm_model.load_weights(state_dict.items())"),
            (f"{SITE}/vllm/model_executor/model_loader/weight_utils.py", "default_weight_loader",
             "assert param.size() == loaded_weight.size(), ("),
        ], "AssertionError: Attempted to load weight (torch.Size([0])) into parameter (torch.Size([1280, 3, 14]))"),
    ]
    assert _verdicts(tmp_path, lines) == [("weight sync", "failed")] * 2


def test_a_code_lines_receiver_names_the_call_an_optimizers_step(tmp_path: Path) -> None:
    """DeepSpeed's engine under a plain script (block 10's training half): the traceback runs `model_engine.step()` →
    `self.optimizer.step()` → ZeRO's gradient norm, and is cut before its exception. The call `self.optimizer.step()`
    is the update (before: its last word alone, `step`, named nothing: "FAILED, likely in training loop")."""
    lines = [
        "[2025-09-21 02:14:21,640] [INFO] [logging.py:107:log_dist] [Rank 0] DeepSpeed info: version=0.17.5",
        "step 0 loss 2.3061",
        *_frames("[rank0]: ", [
            ("/home/u/repro.py", "main", "model_engine.step()"),
            (f"{SITE}/deepspeed/runtime/engine.py", "_take_model_step", "self.optimizer.step()"),
            (f"{SITE}/deepspeed/runtime/zero/stage_1_and_2.py", "step",
             "scaled_global_grad_norm = self.scaled_global_norm()"),
        ], "")[:-1],
    ]
    (tmp_path / "r.log").write_text(text_of(lines))
    assert replay([str(tmp_path / "r.log")], load_config(None)).status.current == "model update"  # (no RL trainer)


def test_a_traceback_cut_at_the_trainers_step_call_is_the_update(tmp_path: Path) -> None:
    """LLaMA-Factory's SFT ran out of memory in step 128; the traceback a user pasted ends at `_inner_training_loop`
    calling `self.training_step(…)` (block 10's training half). Before: "FAILED in training loop"."""
    lines = [
        "{'loss': '0.3304', 'grad_norm': '0.1902', 'learning_rate': '0.000169', 'epoch': '0.1284'}",
        *_frames("[rank0]: ", [
            ("/srv/lf/src/llamafactory/train/sft/workflow.py", "run_sft",
             "train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)"),
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
        ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.88 GiB."),
    ]
    assert _verdicts(tmp_path, lines) == [("actor update", "failed"), ("model update", "failed")]


def test_the_call_a_frame_made_names_the_part_before_its_functions_words(tmp_path: Path) -> None:
    """R1-V's GRPO trainer generates inside its `compute_loss` (HELDOUT10, after it was scored): the error came from
    the frame's call `unwrapped_model.generate(…)`, more particular than the function's own words (a loss: the
    update). Before: "FAILED in model update"."""
    lines = [
        "  0%|          | 0/1744 [00:00<?, ?it/s]",
        *_frames("[rank0]: ", [
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{SITE}/transformers/trainer.py", "training_step",
             "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
            ("/srv/r1v/src/open_r1/trainer/grpo_trainer.py", "compute_loss",
             "prompt_completion_ids = unwrapped_model.generate(**prompt_inputs, generation_config=self.gen_config)"),
            (f"{SITE}/torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
        ], "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"),
    ]
    (tmp_path / "r.log").write_text(text_of(lines))
    assert replay([str(tmp_path / "r.log")], load_config(None)).status.current == "generation"


def _grpo_records(key: str) -> list[str]:
    """Two of HF Trainer's step records of a TRL GRPO run (its completions' length under `key`), then the loop's bar."""
    return [
        *(f"{{'loss': 0.0, 'grad_norm': {g}, 'learning_rate': 9.9e-07, '{key}': {n}, 'rewards/accuracy_reward': 0.5, "
          f"'reward': 1.25, 'reward_std': 0.38, 'kl': 0.0004, 'epoch': 0.0}}"
          for g, n in ((2.31, 305.5), (1.87, 288.0))),
        "  1%|▏         | 4/380 [03:31<5:29:07, 52.5s/it]",
    ]


def test_an_oom_in_a_grpo_forks_training_step_is_no_claim_of_the_update(tmp_path: Path) -> None:
    """Video-R1's GRPO (TRL 0.14's trainer: `compute_loss` generates, scores and computes the loss) ran out of memory
    in step 5; the traceback ends at `training_step` calling `compute_loss` (HELDOUT10's misses). The step records
    count completions and rewards, so HF's step is the whole RL step. Before: "FAILED in model update"."""
    lines = [
        *_grpo_records("completion_length"),
        *_frames("[rank0]: ", [
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{SITE}/transformers/trainer.py", "training_step",
             "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
        ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB."),
    ]
    assert _verdicts(tmp_path, lines) == [("training loop", "failed")] * 2


def test_a_newer_grpo_trainers_compute_loss_is_its_update(tmp_path: Path) -> None:
    """TRL 0.17 on (`completions/mean_length`) generates in `_prepare_inputs`: its `compute_loss` is the loss alone,
    so an OOM raised under it stays the update (a guard of the rule above); the loop's call of `training_step` alone is
    not."""
    lines = [
        *_grpo_records("completions/mean_length"),
        *_frames("[rank0]: ", [
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{SITE}/transformers/trainer.py", "training_step",
             "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
            (f"{SITE}/trl/trainer/grpo_trainer.py", "compute_loss", "return self._compute_loss(model, inputs)"),
        ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB."),
    ]
    (tmp_path / "r.log").write_text(text_of(lines))
    assert replay([str(tmp_path / "r.log")], load_config(None)).status.current == "actor update"
    cut = [*lines[:6], lines[-1]]  # the same traceback cut at the loop's call of `training_step`
    (tmp_path / "cut.log").write_text(text_of(cut))
    assert replay([str(tmp_path / "cut.log")], load_config(None)).status.current == "training loop"


def test_a_collective_timeout_in_a_grpo_step_is_the_loop_not_the_update(tmp_path: Path) -> None:
    """open-r1's GRPO with trl vllm-serve: an _ALLGATHER_BASE deep into the run timed out (the posted corpus's
    math_verify log). In SFT a step's collective is its update's; a GRPO step also generates and gathers
    completions, so the watchdog line names no part. Before: "FAILED in model update"."""
    lines = [
        *_grpo_records("completions/mean_length"),
        "[rank1]:[E516 06:41:08.518730945 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=38117, OpType=_ALLGATHER_BASE, NumelIn=256, NumelOut=768, Timeout(ms)=1800000) "
        "ran for 1800041 milliseconds before timing out.",
    ]
    assert [v[0] for v in _verdicts(tmp_path, lines)] == ["training loop"] * 2


def test_grpos_rewards_grouped_per_prompt_are_the_advantage(tmp_path: Path) -> None:
    """Video-R1's GRPO grouped the gathered rewards per prompt (`gathered_rewards.view(num_devices, …)`) for the
    advantages and the shape was wrong (the posted corpus). Before: "FAILED in model update"."""
    lines = [
        "  0%|          | 0/687 [00:00<?, ?it/s]",
        *_frames("[rank0]: ", [
            (f"{SITE}/transformers/trainer.py", "_inner_training_loop",
             "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
            (f"{SITE}/transformers/trainer.py", "training_step",
             "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
            ("/srv/vr1/src/open_r1/trainer/grpo_trainer.py", "compute_loss",
             "rewards_per_device = gathered_rewards.view(num_devices, self.num_generations)"),
        ], "RuntimeError: shape '[0, 8]' is invalid for input of size 2"),
    ]
    (tmp_path / "r.log").write_text(text_of(lines))
    assert replay([str(tmp_path / "r.log")], load_config(None)).status.current == "advantage"


def test_a_launchers_error_after_its_childs_traceback_is_placed_by_the_childs_frames(tmp_path: Path) -> None:
    """`accelerate launch` re-raises that its child exited (CalledProcessError) below the child's own traceback, which
    failed in its backward: the launcher's frames say only where the launcher was, the child's say where it failed.
    Before: 'FAILED, likely in generation', from a data bar's words above both."""
    child = _frames("", [("train_sd.py", "main", "accelerator.backward(loss)"),
                         (f"{SITE}/accelerate/accelerator.py", "backward", "loss.backward(**kwargs)"),
                         (f"{SITE}/torch/autograd/__init__.py", "backward", "_engine_run_backward(t)")],
                    "RuntimeError: CUDA error: an illegal memory access was encountered")
    launcher = _frames("", [("/usr/local/bin/accelerate", "<module>", "sys.exit(main())"),
                            (f"{SITE}/accelerate/commands/launch.py", "simple_launcher",
                             "raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)")],
                       "subprocess.CalledProcessError: Command '['python', 'train_sd.py']' returned non-zero exit "
                       "status 1.")
    # (as a notebook captures tqdm: no bar glyphs; the child's header glued to its bar, the bar drawn once more after)
    bar = "Steps:   0% 3/900 [00:12<1:01:10,  4.10s/it, loss=0.211, lr=1e-6]"
    lines = ["Generating class images: 100% 9/9 [01:12<00:00,  8.01s/it]", bar + child[0], *child[1:], bar, *launcher]
    path = tmp_path / "train.log"
    path.write_text(text_of(lines))
    status = replay([str(path)], load_config(None)).status
    assert status.state == "failed" and status.current in ("actor update", "model update")
