"""The phase read from the words of lines no rule knows (analysis/wordphase.py): through the real CLI (replay and
snapshot of a file), on logs written in the shapes of stacks no rule was written for, and the lines whose words
must not move the verdict (data preparation, a part that ended, metric records, frames, an earlier phase)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkdtop.analysis.wordphase import dump_words, frame_words, phase_of_words, read_words, stretch


def _replay(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    doc = json.loads(out)
    return {**doc, "current": doc["stopped_in"]}


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# A vLLM OpenAI server (no trainer): started, then serves; its stats lines with requests in flight are generation.
SERVER = [
    "INFO 03-11 14:02:05 api_server.py:212] args: Namespace(host='0.0.0.0', port=8011, model='/m/qwen-14b')",
    "INFO 03-11 14:02:09 llm_engine.py:161] Initializing an LLM engine (v0.6.1) with config: model='/m/qwen-14b'",
    "INFO 03-11 14:03:40 model_runner.py:1008] Loading model weights took 27.6 GiB",
    "INFO 03-11 14:03:52 gpu_executor.py:122] # GPU blocks: 8120, # CPU blocks: 1310",
    "INFO 03-11 14:04:11 model_runner.py:1523] Graph capturing finished in 19 secs.",
    "INFO:     Uvicorn running on http://0.0.0.0:8011 (Press CTRL+C to quit)",
    *[f"INFO 03-11 14:{10 + i}:00 metrics.py:351] Avg prompt throughput: {210 + i}.3 tokens/s, Avg generation "
      f"throughput: {88 + i}.1 tokens/s, Running: {17 + i} reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache "
      f"usage: 91.{i}%, CPU KV cache usage: 0.0%." for i in range(6)],
]

# A Ray Train job of a stack no rule knows: the driver connects, workers start, an epoch runs, then a worker's
# DataLoader times out (its traceback after the epoch's line).
RAY_TRAIN = [
    "2026-03-02 07:11:04,511\tINFO worker.py:1660 -- Connecting to existing Ray cluster at address: 10.4.0.2:6379...",
    "2026-03-02 07:11:04,530\tINFO worker.py:1843 -- Connected to Ray cluster.",
    "(TrainController pid=811) Started training worker group of size 2:",
    "(RayTrainWorker pid=902, ip=10.4.0.2) [epoch 0] images/s: 912.4",
    "(RayTrainWorker pid=902, ip=10.4.0.2) [epoch 1] starting train_epoch",
    "(TrainController pid=811) Training failed due to worker errors:",
    "[Rank 0]:",
    "Traceback (most recent call last):",
    '  File "/srv/job/train.py", line 88, in train_epoch',
    "    for batch in loader:",
    '  File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1256, in _try_get_data',
    '    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from e',
    "RuntimeError: DataLoader timed out after 300 seconds",
]

# A DeepSpeed job whose step never returns: the model was built, each rank says which part of the step it is in.
STEP_PARTS = [
    "[2026-05-04 09:00:01,100] [INFO] [comm.py:652:init_distributed] Initializing TorchBackend in DeepSpeed with "
    "backend nccl",
    "[2026-05-04 09:00:03,400] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Final Optimizer = AdamW",
    "rank0 it=0 fwd ok -> backward",
    "rank1 it=0 fwd ok -> backward",
    "rank0 it=0 waiting in backward (30 s)",
    "rank1 it=0 waiting in backward (30 s)",
]


def test_an_engine_serving_requests_is_in_generation(tmp_path: Path) -> None:
    """Old code: rollout (engine) init, 'after' its graph capture, though six stats lines count requests in flight."""
    ph = _replay(_write(tmp_path, "server.log", SERVER))
    assert ph["current"] == "generation"
    assert ph["phase_from"] == "words"
    assert "Running: 22 reqs" in ph["worded_note"]
    assert any("words" in e["claim"] and "Running: 22 reqs" in e["text"] for e in ph["evidence"])


def test_a_failure_after_an_epoch_line_failed_in_the_loop(tmp_path: Path) -> None:
    """Old code: FAILED in config (the Ray connection was the last line a rule knew). The epoch's line names the
    loop; the traceback's own lines (`for batch in loader`, the DataLoader frame) are not read as the run's."""
    path = _write(tmp_path, "raytrain.log", RAY_TRAIN)
    ph = _replay(path)
    assert ph["state"] == "failed" and ph["current"] == "training loop"
    # The frame the error was raised under names it (`in train_epoch`); the DataLoader's frames below it (a data
    # loader runs in every step) and the traceback's code lines (`for batch in loader`) do not.
    assert "in train_epoch" in ph["worded_note"] and "frame" in ph["worded_note"]
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", str(path)], capture_output=True, text=True,
                          timeout=120, check=True).stdout
    assert "FAILED, likely in training loop" in text and "a guess" in text


def test_the_part_of_a_step_a_rank_names(tmp_path: Path) -> None:
    """Old code: ended after model load (next expected: training loop); the ranks say they are in the backward."""
    ph = _replay(_write(tmp_path, "ds.log", STEP_PARTS))
    assert ph["current"] == "model update"  # no RL trainer: the update's plain name
    assert ph["phase_from"] == "words"


def test_snapshot_of_the_file_reads_the_same_words(tmp_path: Path) -> None:
    path = _write(tmp_path, "server.log", SERVER)
    old = time.time() - 7200
    os.utime(path, (old, old))
    out = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    ph = json.loads(out)["phases"]
    assert ph["current"] == "generation" and ph["phase_from"] == "words" and ph["state"] == "stalled"
    # Its text says the phase is a guess on the phase's own line, not only in the note under it.
    text = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--log", str(path)], capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert text.startswith("phase: generation (a guess)  state: stalled"), text


def test_words_never_take_back_what_the_rules_know(tmp_path: Path) -> None:
    """A verl run in its loop, whose last lines are a validation's end and a metric record full of timing names: the
    rules' place stands (phase_from rules), as on the old code."""
    lines = [
        "(TaskRunner pid=7001) TaskRunner hostname: node-3, PID: 7001",
        "(TaskRunner pid=7001) step:1 - actor/pg_loss:0.012 - timing_s/gen:41.2 - timing_s/update_actor:18.3 - "
        "timing_s/step:70.1",
        "(TaskRunner pid=7001) validation generation end",
        "(TaskRunner pid=7001) step:2 - actor/pg_loss:0.010 - timing_s/gen:40.8 - timing_s/update_actor:18.0 - "
        "timing_s/step:69.4",
    ]
    ph = _replay(_write(tmp_path, "verl.log", lines))
    assert ph["phase_from"] == "rules" and ph["worded_note"] is None
    assert ph["current"] == "training loop"


@pytest.mark.parametrize(("line", "phase"), [
    ("Generating train split from /data/math/train.jsonl", "dataset generation"),
    ("> building train, validation, and test datasets for GPT ...", "dataset generation"),
    ("(WorkerDict pid=3, ip=10.0.0.2) INFO 11-14 21:43:50 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, "
     "Avg generation throughput: 117.2 tokens/s, Running: 23 reqs, Swapped: 0 reqs", "generation"),
    ("/venv/lib/python3.11/site-packages/transformers/generation/utils.py:2479: UserWarning: The following "
     "generation flags are not valid and may be ignored: ['top_k'].", "generation"),
    ("> compiling and loading fused kernels ...", "actor init"),
    ("Loading checkpoint shards:   0%|          | 0/5 [00:00<?, ?it/s]", "actor init"),
    ("[epoch 3] starting train_epoch", "training loop"),
    ("Saving model checkpoint to /ckpt/run7/checkpoint-500", "checkpoint save"),
    ("Compute log probs:  71%|███████   | 227/320 [08:19<03:24,  2.20s/it]", "old log-prob"),
    ("(Worker pid=4) Rollout generation:  62%|██████▎   | 40/64 [03:10<01:54,  4.77s/it]", "generation"),
    # verl's agent loop (multi-turn rollouts with tools) and a fully async run's rollout worker group (audit 10).
    ("(AgentLoopWorker pid=5102) agent loop started for 64 samples", "generation"),
    ("(TaskRunner pid=3) create rollout worker group with 4 replicas", "rollout init"),
    # vLLM's prefix cache emptied once the new weights are in (TRL colocated, verl's sharding manager): it generates
    # next (audit 10: TRL's last line, glued behind the step bar, read as "training loop").
    ("INFO 06-30 11:57:37 [block_pool.py:264] Successfully reset prefix cache", "generation"),
    # vLLM's own weight load bar (HF's says `Loading checkpoint shards`): the engine's start-up (audit 11)
    ("(LLMActor pid=619) Loading safetensors checkpoint shards:  65% Completed | 11/17 [01:08<00:36,  6.13s/it]",
     "rollout init"),
    # advantages computed: before, no phase
    ("(TaskRunner pid=7) compute advantages for 512 responses", "advantage"),
    # a tool the model called, as the rollout logs it (audit 14: verl 0.2's tool calls after step 2; before, no phase)
    ("(WorkerDict pid=52871) [tool] calc(9*9*9) -> 729", "generation"),
    ("(AsyncRolloutWorker pid=8) Calling tool search with 3 queries", "generation"),
])
def test_words_of_one_line(line: str, phase: str) -> None:
    assert phase_of_words(line) == (phase, False)


@pytest.mark.parametrize("line", [
    "Total training steps: 105",  # a setting
    "Namespace(model='/m', max_steps=1000, do_eval=True)",
    "(TaskRunner pid=1) step:9 - actor/grad_norm:0.2 - timing_s/update_actor:20.1",  # a metric record
    "INFO 11-14 21:44:00 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
    "tokens/s, Running: 0 reqs, Swapped: 0 reqs",  # an idle engine
    '  File "/srv/x/rollout.py", line 12, in generate_sequences',  # a frame
    "    Variable._execution_engine.run_backward(  # runs the backward pass",  # a frame's code
    "RuntimeError: generation failed on rank 3",  # an error's line
    "[rank3]:     logps = selective_log_softmax(logits, ids)  # compute logprobs",  # a rank's traceback code
    "INFO:trl.generation.vllm_client:Server is up!",  # a logger's name is no activity
    "  0%|          | 0/934 [00:00<?, ?it/s]",  # a bar with no words
    "(WorkerDict pid=3) <tool_call>{\"name\": \"search\"}</tool_call>",  # the model's own text
    "2023-03-12 16:42:04 step 1: loss 3.0500 | forward 920 ms | backward 2184 ms",  # a loop's own step print
    "INFO 06-02 10:01:02 serving_chat.py:80] Tool call parser hermes registered",  # an engine's start-up (review)
])
def test_lines_whose_words_say_nothing_of_where_the_run_is(line: str) -> None:
    assert phase_of_words(line) is None


def test_an_upload_that_finished_is_over() -> None:
    """Ray Train's worker uploads its model, says the upload finished, returns: the save is over, not running."""
    assert phase_of_words("[Worker:0] [INFO] Uploading final model to object store") == ("checkpoint save", False)
    assert read_words(["[Worker:0] [INFO] Uploading final model to object store", "[Worker:0] [INFO] Upload "
                       "finished (4 files)", "[Worker:0] [INFO] Returning from train func!!"]).over


def test_a_bar_at_its_total_is_over() -> None:
    assert phase_of_words("Compute log probs: 100%|██████████| 320/320 [11:40<00:00,  2.19s/it]") == (
        "old log-prob", True)
    found = read_words(["Loading checkpoint shards: 100%|██████████| 5/5 [00:01<00:00,  4.1it/s]"])
    assert found is not None and (found.phase, found.over) == ("actor init", True)


def test_a_later_part_of_the_step_after_the_one_the_rules_named(tmp_path: Path) -> None:
    """EasyR1's shape: the rules named validation (`Start validation...`); after it the policy update's bar finished
    and the log-prob bar stopped at 243/320 when Ray's memory monitor killed a worker. Old code: FAILED in
    validation. The failure's own lines (raylet's report, the driver's traceback) are not read."""
    lines = [
        "(Runner pid=5100) Start validation...",
        "(Runner pid=5100) Finish validation.",
        "Update policy:  100%|██████████| 40/40 [05:41<00:00,  8.53s/it]",
        "Compute log probs:  50%|█████     | 160/320 [05:51<05:51,  2.20s/it]",
        "Compute log probs:  76%|███████▋  | 243/320 [08:54<02:49,  2.20s/it]",
        "(raylet) [2026-04-02 16:47:12,604 E 130412 130412] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
        "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 4b1e9a7c)",
        "Traceback (most recent call last):",
        '  File "/srv/easyr1/verl/trainer/main.py", line 100, in main',
        "    ray.get(runner.run.remote(ppo_config))",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ]
    ph = _replay(_write(tmp_path, "easyr1.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "old log-prob" and ph["phase_from"] == "words"
    assert "243/320" in ph["worded_note"]


def test_a_part_that_says_it_ended_stops_the_words() -> None:
    """`validation generation end` is the newest line with a phase's words: it is over (what runs after it, the
    words do not say; test_words_never_take_back_what_the_rules_know keeps the loop there)."""
    found = read_words(["[epoch 2] starting train_epoch", "validation generation end"])
    assert found is not None and (found.phase, found.over) == ("generation", True)
    found = read_words(["validation generation end", "rank0 backward 3/8"])
    assert found is not None and (found.phase, found.back, found.over) == ("actor update", 0, False)


def test_a_finished_start_up_part_says_the_run_got_that_far(tmp_path: Path) -> None:
    """LLaMA-Factory's shape: the dataset was tokenized, DeepSpeed built the model (`finished initializing model`),
    then the adapter lines and silence. Old code: 'ended in dataset generation' with the dataset's advice."""
    lines = [
        "[INFO|2026-01-05 09:12:01] llamafactory.data.loader:143 >> Loading dataset train_sql.json...",
        "Running tokenizer on dataset (num_proc=8): 100%|██████████| 9000/9000 [00:12<00:00, 741.20 examples/s]",
        "[INFO|2026-01-05 09:12:20] llamafactory.model.model_utils.kv_cache:143 >> KV cache is disabled during "
        "training.",
        "[2026-01-05 09:13:02,511] [INFO] [partition_parameters.py:348:__exit__] finished initializing model - "
        "num_params = 5120, num_elems = 32.76B",
        "[INFO|2026-01-05 09:25:40] llamafactory.model.adapter:143 >> Fine-tuning method: LoRA",
    ]
    path = _write(tmp_path, "lf.log", lines)
    ph = _replay(path)
    assert ph["current"] == "model load" and ph["phase_from"] == "words"
    assert "got at least that far" in ph["worded_note"] and "finished initializing model" in ph["worded_note"]
    assert "rollout" not in json.dumps(ph) and "engine" not in ph["current"]  # `KV cache is disabled`: no engine


def test_stretch_is_after_the_phase_start_and_before_the_failure() -> None:
    tail = ["Loading checkpoint shards: 100%", "rank0 backward", "phase start line", "[epoch 1] begins",
            "Traceback (most recent call last):", '  File "x.py", line 1, in f', "RuntimeError: boom"]
    assert stretch(tail, "phase start line", "RuntimeError: boom") == ["[epoch 1] begins"]
    assert stretch(tail, "not in the tail", "") == tail


def _traceback(frames: list[tuple[str, str]], exception: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, func in frames:
        out += [f'  File "{path}", line {10 + len(out)}, in {func}', "    call()"]
    return [*out, exception]


def test_the_frame_the_error_was_raised_under_names_the_part(tmp_path: Path) -> None:
    """TRL GRPO's shape: HF Trainer's training_step (the rules: the update) calls the rollout under it. Old code:
    FAILED in actor update."""
    lines = ["INFO 06-23 10:02:59 [core.py:171] init engine (profile, create kv cache, warmup model) took 15.1 seconds",
             "  0%|          | 0/1868 [00:00<?, ?it/s]" + _traceback([
                 ("/srv/grpo/train.py", "<module>"),
                 ("/venv/lib/python3.11/site-packages/transformers/trainer.py", "_inner_training_loop"),
                 ("/venv/lib/python3.11/site-packages/transformers/trainer.py", "training_step"),
                 ("/venv/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", "_prepare_inputs"),
                 ("/venv/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", "_generate_and_score_completions"),
             ], "TypeError: 'NoneType' object is not iterable")[0],
             *_traceback([
                 ("/srv/grpo/train.py", "<module>"),
                 ("/venv/lib/python3.11/site-packages/transformers/trainer.py", "_inner_training_loop"),
                 ("/venv/lib/python3.11/site-packages/transformers/trainer.py", "training_step"),
                 ("/venv/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", "_prepare_inputs"),
                 ("/venv/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", "_generate_and_score_completions"),
             ], "TypeError: 'NoneType' object is not iterable")[1:]]
    ph = _replay(_write(tmp_path, "grpo.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "generation"
    assert "_generate_and_score_completions" in ph["worded_note"] and "frame" in ph["worded_note"]


def test_a_trainers_loss_frames_are_the_update_and_under_an_evaluation_stay_it(tmp_path: Path) -> None:
    """TRL's DPO step as LLaMA-Factory runs it: its loss's forward (`get_batch_loss_metrics`) ran out of memory, in the
    update (before: "FAILED in training loop"). The same loss computed by an evaluation's prediction step stays the
    evaluation's."""
    bar = "  0%|          | 0/852 [00:00<?, ?it/s]"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.58 GiB."
    update = [("/srv/LLaMA-Factory/src/llamafactory/train/dpo/workflow.py", "run_dpo"),
              ("/venv/lib/python3.10/site-packages/trl/trainer/dpo_trainer.py", "get_batch_loss_metrics"),
              ("/venv/lib/python3.10/site-packages/torch/nn/functional.py", "cross_entropy")]
    ph = _replay(_write(tmp_path, "dpo.log", [bar, *_traceback(update, oom)]))
    assert ph["state"] == "failed" and ph["current"] == "model update", ph["current"]  # (no trainer named: plain)
    evaluation = [("/venv/lib/python3.10/site-packages/transformers/trainer.py", "_inner_training_loop"),
                  ("/venv/lib/python3.10/site-packages/transformers/trainer.py", "evaluation_loop"),
                  ("/venv/lib/python3.10/site-packages/transformers/trainer.py", "prediction_step"),
                  ("/venv/lib/python3.10/site-packages/trl/trainer/dpo_trainer.py", "get_batch_loss_metrics")]
    ph = _replay(_write(tmp_path, "eval.log", [bar, *_traceback(evaluation, oom)]))
    assert ph["current"] == "validation", ph["current"]


def test_a_wrapper_that_names_nothing_leaves_the_error_it_was_raised_from(tmp_path: Path) -> None:
    """HF datasets' `DatasetGenerationError: An error occurred while generating the dataset`, raised from pyarrow's
    `ArrowInvalid: JSON parse error …` (an exception whose name ends in neither Error nor Exception): the cause is the
    failure, and the loader's `_generate_tables` frame is no generation (before: the wrapper, naming nothing)."""
    lines = ["Generating train split: 0 examples [00:00, ? examples/s]",
             *_traceback([("/venv/lib/python3.11/site-packages/datasets/packaged_modules/json/json.py",
                           "_generate_tables"), ("pyarrow/_json.pyx", "pyarrow._json.read_json")],
                         "pyarrow.lib.ArrowInvalid: JSON parse error: Column(/messages/[]/content) changed from string "
                         "to array in row 0"),
             "", "The above exception was the direct cause of the following exception:", "",
             *_traceback([("/srv/LLaMA-Factory/src/llamafactory/data/loader.py", "_load_single_dataset"),
                          ("/venv/lib/python3.11/site-packages/datasets/builder.py", "_prepare_split_single")],
                         "datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset")]
    ph = _replay(_write(tmp_path, "data.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "dataset generation", ph["current"]
    assert ph["failure"].startswith("pyarrow.lib.ArrowInvalid: JSON parse error"), ph["failure"]


def test_a_part_of_the_step_after_a_finished_validation_is_read_from_the_failure(tmp_path: Path) -> None:
    """EasyR1: validation finished, no loop line, then a failure whose task is the log-prob pass. The words name a part
    of the step after the validation's placeholder (before: "FAILED after validation", the log-prob pass taken for a
    phase the run had passed, validation being listed after it)."""
    lines = ["(Runner pid=51846) Start validation...", "(Runner pid=51846) Finish validation.",
             "(pid=52488) Update policy 1: 100%|██████████| 5.00/5.00 [11:51<00:00, 142.29s/it]"
             "ray.exceptions.RayTaskError(IndexError): ray::Runner.run() (pid=51846, ip=172.17.0.2)",
             '  File "/srv/EasyR1/verl/trainer/ray_trainer.py", line 607, in fit',
             "    old_log_probs = self.actor_rollout_ref_wg.compute_log_probs(batch)",
             "ray.exceptions.RayTaskError(IndexError): ray::WorkerDict.actor_rollout_ref_compute_log_probs() "
             "(pid=52231, ip=172.17.0.2)",
             '  File "/srv/EasyR1/verl/workers/actor/dp_actor.py", line 178, in compute_log_prob',
             "    log_probs = self._forward_micro_batch(model_inputs, temperature=temperature)",
             "IndexError: list index out of range"]
    ph = _replay(_write(tmp_path, "easyr1.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "old log-prob", ph["current"]


def test_a_role_actors_start_up_task_in_the_failures_header_names_its_init(tmp_path: Path) -> None:
    """SkyRL's driver: `RayTaskError(DistBackendError): ray::RefRayActorBase.init_model()` above the NCCL error: the
    reference model's start-up (before, audit 12: "FAILED in model load", the policy's bar before it)."""
    lines = ["(PolicyRayActorBase pid=278733) Loading checkpoint shards: 100%|██████████| 2/2 [00:02<00:00,  1.13s/it]",
             "(skyrl_entrypoint pid=277057) Traceback (most recent call last):",
             '(skyrl_entrypoint pid=277057)   File "/srv/skyrl_train/trainer.py", line 412, in build_models',
             "(skyrl_entrypoint pid=277057)     ray.get(ref_model.async_init_model(cfg.trainer.ref.model.path))",
             "(skyrl_entrypoint pid=277057) ray.exceptions.RayTaskError(DistBackendError): ray::RefRayActorBase."
             "init_model() (pid=278901, ip=10.1.2.3)",
             '(skyrl_entrypoint pid=277057)   File "/srv/skyrl_train/workers/fsdp/fsdp_worker.py", line 301, in '
             "init_model",
             "(skyrl_entrypoint pid=277057)     fsdp_module = self._fsdp_init_model(model, is_train=False)",
             "(skyrl_entrypoint pid=277057) torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
             "distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error, NCCL version 2.21.5"]
    ph = _replay(_write(tmp_path, "skyrl.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "reference init", ph["current"]


def test_a_frame_a_part_calls_itself_does_not_move_it(tmp_path: Path) -> None:
    """The reference pass calls the actor's compute_log_prob: still the reference pass (the rules' part), not the
    old log-prob pass its callee's name says."""
    lines = ["(TaskRunner pid=9) step:3 - actor/pg_loss:0.01 - timing_s/step:50.2",
             *_traceback([("/srv/verl/verl/trainer/ppo/ray_trainer.py", "fit"),
                          ("/srv/verl/verl/workers/fsdp_workers.py", "compute_ref_log_prob"),
                          ("/srv/verl/verl/workers/actor/dp_actor.py", "compute_log_prob"),
                          ("/srv/verl/verl/workers/actor/dp_actor.py", "_forward_micro_batch")],
                         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.28 GiB.")]
    ph = _replay(_write(tmp_path, "ref.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "reference log-prob"


def test_a_collective_timeout_stays_the_failure_over_the_abort_it_causes(tmp_path: Path) -> None:
    """accelerate's shape (an old torch: no SeqNum): the watchdog lines, then the traceback of the backward whose
    all-reduce it aborted. Old code: the failure was `NCCL communicator was aborted` in the training loop."""
    lines = ["Epoch 2: 100%|█████████▉| 9711/9712 [2:01:07<00:00,  1.34it/s, loss=2.1]",
             "[E ProcessGroupNCCL.cpp:566] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType="
             "ALLREDUCE, Timeout(ms)=1800000) ran for 1801244 milliseconds before timing out.",
             "[E ProcessGroupNCCL.cpp:566] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType="
             "BROADCAST, Timeout(ms)=1800000) ran for 1801307 milliseconds before timing out.",
             *_traceback([("train.py", "<module>"), ("train.py", "train"),
                          ("/opt/conda/lib/python3.7/site-packages/accelerate/accelerator.py", "backward"),
                          ("/opt/conda/lib/python3.7/site-packages/torch/autograd/__init__.py", "backward")],
                         "RuntimeError: NCCL communicator was aborted.")]
    ph = _replay(_write(tmp_path, "acc.log", lines))
    assert ph["state"] == "failed" and "Watchdog caught collective operation timeout" in ph["failure"]
    assert ph["current"] == "model update" and "in backward" in ph["worded_note"]


def test_a_rendezvous_module_names_the_start_up(tmp_path: Path) -> None:
    """torchrun's c10d rendezvous failing to reach its store, no rule's line before it. Old code: FAILED (phase
    unknown). A data loader's frame never names the phase (it runs in every step)."""
    lines = ["[INFO] 2026-09-13 22:40:02,120 api: Starting elastic_operator with launch configs:",
             *_traceback([("/venv/lib/python3.10/site-packages/torch/distributed/run.py", "main"),
                          ("/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/"
                           "c10d_rendezvous_backend.py", "_create_tcp_store")],
                         "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
                         "C10d store has failed.")]
    ph = _replay(_write(tmp_path, "rdzv.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "nccl init"
    assert frame_words([
        ('  File "/srv/job/train.py", line 88, in train_epoch', ""),
        ('  File "/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1256, in _try_get_data', ""),
    ]).phase == "training loop"


def test_frames_after_rays_unhandled_error_behind_a_capture_stamp(tmp_path: Path) -> None:
    """A collector's `[YYYY-MM-DD HH:MM:SS] ` before every line, then Ray's `Unhandled error … ray::Worker.method()`
    followed by its frames (no `Traceback` header): the frames name where the worker raised (the rollout)."""
    stamp = "[2026-03-12 11:50:36] (TaskRunner pid=3518)"
    lines = ["[2026-03-12 11:35:52] (TaskRunner pid=3518) Training Progress:   0%|          | 0/233 [00:00<?, ?it/s]",
             f"{stamp} Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
             "ray::AgentLoopWorker.generate_sequences() (pid=3524, ip=10.1.2.3)",
             f'{stamp}   File "/srv/verl/verl/experimental/agent_loop/agent_loop.py", line 512, in generate_sequences',
             f"{stamp}     outputs = await asyncio.gather(*tasks)",
             f'{stamp}   File "/srv/verl/verl/experimental/agent_loop/agent_loop.py", line 349, in generate',
             f"{stamp}     output = await self.server_manager.generate(request_id=request_id)",
             f"{stamp} ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    ph = _replay(_write(tmp_path, "agent.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "generation" and "frame" in ph["worded_note"]


def test_a_launchers_own_traceback_names_no_phase(tmp_path: Path) -> None:
    """torchrun's agent raising RendezvousClosedError after the epochs ran: its frames (rendezvous) are the
    launcher's, not a worker's; the run's own last lines say where it was."""
    lines = ["For gpu:0. Running epoch: 3", "Better model found at epoch 2 with valid_loss value: 0.93",
             *_traceback([("/venv/bin/torchrun", "<module>"),
                          ("/venv/lib/python3.10/site-packages/torch/distributed/run.py", "main"),
                          ("/venv/lib/python3.10/site-packages/torch/distributed/elastic/agent/server/api.py",
                           "_rendezvous"),
                          ("/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/"
                           "dynamic_rendezvous.py", "sync")],
                         "torch.distributed.elastic.rendezvous.api.RendezvousClosedError")]
    ph = _replay(_write(tmp_path, "launcher.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "training loop"


# Shapes from the audit of the reader (logs written to trick it): each said something false before its fix.
@pytest.mark.parametrize(("line", "said"), [
    ("/venv/lib/python3.11/site-packages/transformers/generation/configuration_utils.py:628: UserWarning: do_sample "
     "is set to False. However, temperature is set to 0.6", None),  # a module's path: where the code lives
    ("06/23/2025 10:02:37 - INFO - trl.generation.vllm_client - Server is not up yet. Retrying...", None),
    ("will save a checkpoint every 1000 steps and evaluate every 500", None),  # a setting
    # a command echoed by `set -x` (HELDOUT12: 'likely in dataset generation' from data.train_files=)
    ("+ python -m verl.trainer.main_ppo data.train_files=/d/train.parquet actor_rollout_ref.rollout.name=vllm", None),
    ("torchrun --nproc_per_node 8 train.py --do_eval --eval_steps=50", None),
    # an earlier sentence's end is not the named part's (audit 15: a save under way read as over)
    ("Training Completed!!! Saving pre-trained model to ./out", ("checkpoint save", False)),
    ("Saving pre-trained model to ./out. Done.", ("checkpoint save", True)),
    ("Restoring from checkpoint /ckpt/run3 (saved after epoch 4)", ("checkpoint load", False)),
    ("Resuming from checkpoint at step 500", ("checkpoint load", False)),
    ("re-creating train dataloader for epoch 1", ("training loop", False)),  # a new epoch's loader
    ("Saving the optimizer state at the end of the training epoch", ("checkpoint save", False)),  # not 'over'
])
def test_audited_lines(line: str, said: tuple[str, bool] | None) -> None:
    assert phase_of_words(line) == said


def test_an_evaluation_long_past_is_over() -> None:
    """HF Trainer: `***** Running Evaluation *****`, then 300 loss records: the evaluation's words are stale."""
    lines = ["***** Running Evaluation *****", "  Num examples = 2000"] + [
        f"{{'loss': 0.{i % 9 + 1}, 'grad_norm': 1.{i % 7}, 'learning_rate': 2e-05, 'epoch': 0.{i % 9}}}"
        for i in range(300)]
    assert read_words(lines) is None


def test_a_dispatcher_frame_names_no_phase() -> None:
    """HF's `_maybe_log_save_evaluate` logs, saves or evaluates: a collective under it says none of them."""
    frames = ['  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2412, in _inner_training_loop',
              '  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2891, in '
              '_maybe_log_save_evaluate',
              '  File "/venv/lib/python3.11/site-packages/transformers/trainer_pt_utils.py", line 130, in '
              '_nested_gather']
    assert frame_words([(frame, "") for frame in frames]) is None


def test_a_guess_never_brings_a_stall_sooner(tmp_path: Path) -> None:
    """A vLLM engine's start-up (the rules: engine init, 600 s before a stall) whose last line no rule knows speaks of
    generating: five minutes of silence later it is still no stall, as without the words."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 300))
    path = _write(tmp_path, "engine.log", [
        f"INFO {stamp} llm_engine.py:161] Initializing an LLM engine (v0.6.1) with config: model='/m/q'",
        f"INFO {stamp} worker.py:12] warming up: generating dummy sequences"])
    old = time.time() - 300
    os.utime(path, (old, old))
    out = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    ph = json.loads(out)["phases"]
    assert ph["phase_from"] == "words" and ph["current"] == "generation"
    assert ph["state"] == "running" and ph["stall_after"] >= 600


# A verl GRPO run in its third step: Ray's memory monitor kills the driver task; its table of the node's processes
# says what the workers were running (invented pids, sizes, paths).
RAY_OOM_TABLE = [
    "2026-04-02 10:01:07,553\tINFO worker.py:1832 -- Started a local Ray instance.",
    "(TaskRunner pid=41093) Total training steps: 300",
    "(WorkerDict pid=41117) After building vllm rollout, memory allocated (GB): 11.62, memory reserved (GB): 12.04",
    "(TaskRunner pid=41093) step:1 - critic/score/mean:0.31 - timing_s/gen:88.2 - timing_s/update_actor:40.5 - "
    "timing_s/step:147.0",
    "(TaskRunner pid=41093) step:2 - critic/score/mean:0.35 - timing_s/gen:91.6 - timing_s/update_actor:40.1 - "
    "timing_s/step:149.7",
    "(raylet) [2026-04-02 10:10:52,117 E 40810 40810] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
    "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node",
    "Traceback (most recent call last):",
    '  File "/srv/verl/verl/trainer/main_ppo.py", line 33, in run_ppo',
    "    ray.get(runner.run.remote(config))",
    '  File "/opt/venv/lib/python3.10/site-packages/ray/_private/worker.py", line 921, in get_objects',
    "    raise value",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "Memory on the node (IP: 10.8.0.3) where the task (name=TaskRunner.run, pid=41093, memory used=2.6GB) was running "
    "was 470.1GB / 491.9GB (0.955), which exceeds the memory usage threshold of 0.95.",
    "The top 10 memory consumers are:",
    "PID\tMEM(GB)\tCOMMAND",
    "41117\t27.93\tray::WorkerDict.actor_rollout_generate_sequences",
    "41118\t27.81\tray::WorkerDict.actor_rollout_generate_sequences",
    "41093\t2.61\tray::TaskRunner.run",
]


def test_the_ray_tasks_a_memory_kill_names_say_the_part(tmp_path: Path) -> None:
    """Old code: 'training loop' (verl prints nothing inside a step), though the memory monitor's table lists the
    workers' generation tasks as the memory's holders."""
    ph = _replay(_write(tmp_path, "oom.log", RAY_OOM_TABLE))
    assert ph["state"] == "failed" and ph["current"] == "generation"
    assert "a Ray task the failure names" in ph["worded_note"]
    assert "actor_rollout_generate_sequences" in ph["worded_note"]
    assert ph["failure"].startswith("ray.exceptions.OutOfMemoryError")
    # A task whose method's words say nothing (OpenRLHF's engines take requests): the task table's rules know it.
    openrlhf = [line.replace("WorkerDict.actor_rollout_generate_sequences", "LLMRayActor.add_requests")
                for line in RAY_OOM_TABLE]
    ph = _replay(_write(tmp_path, "oom_openrlhf.log", openrlhf))
    assert ph["current"] == "generation" and "LLMRayActor.add_requests" in ph["worded_note"]


def test_the_user_s_task_table_names_a_failure_s_ray_task(tmp_path: Path) -> None:
    """A stack of the user's own: its engines' task `ray::Sampler.serve_batch` says nothing in words; the user's config
    `task_phases:` names it generation. Before: the failure's tasks were read by the built-in table only (the review's
    point), so the verdict stayed in the training loop."""
    lines = [line.replace("WorkerDict.actor_rollout_generate_sequences", "Sampler.serve_batch")
             for line in RAY_OOM_TABLE]
    log = _write(tmp_path, "oom_own.log", lines)
    assert _replay(log)["current"] == "training loop"
    config = tmp_path / "c.yaml"
    config.write_text("task_phases:\n  - phase: generation\n    tasks: '^Sampler\\.serve_batch$'\n")
    out = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", "--config", str(config), str(log)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    doc = json.loads(out)
    assert doc["stopped_in"] == "generation" and "Sampler.serve_batch" in doc["worded_note"], doc["worded_note"]


def _actor_died(class_name: str) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/srv/rlhf/trainer/ppo_actor.py", line 115, in ppo_train',
        "    status.update(ray.get(critic_status_ref))",
        '  File "/opt/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 861, in get_objects',
        "    raise value.as_instanceof_cause()",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        f"\tclass_name: {class_name}",
        "\tactor_id: 4c81d07e93a2f5b6c1e8d43a03000000",
        "\tpid: 375881",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR",
    ]


def test_the_dead_actors_model_names_its_part_of_the_step(tmp_path: Path) -> None:
    """Old code: 'training loop': an OpenRLHF critic died while its update ran beside the actor's (the driver's
    frames wait on both)."""
    loop = [
        "(ActorModelRayActor pid=376114) Episode [1/1]:   4%|▍         | 3/64 [11:42<2:43:10, 205.31s/it]",
        "(CriticModelRayActor pid=375881) Train epoch [1/1]: 100%|██████████| 8/8 [00:41<00:00,  5.13s/it, "
        "critic_loss=0.0381, values=0.332]",
        "(ActorModelRayActor pid=376114) Episode [1/1]:   6%|▍         | 4/64 [15:06<2:43:10, 205.41s/it]",
    ]
    ph = _replay(_write(tmp_path, "critic.log", loop + _actor_died("CriticModelRayActor")))
    assert ph["state"] == "failed" and ph["current"] == "critic update"
    assert "the class of the actor that died" in ph["worded_note"]
    # The same death before any step: the critic's start-up, not its update.
    start = ["2026-01-05 08:00:01,000\tINFO worker.py:1740 -- Connected to Ray cluster.",
             "(ActorModelRayActor pid=376114) [2026-01-05 08:02:02,660] [INFO] [comm.py:637:init_distributed] cdb=None"]
    ph = _replay(_write(tmp_path, "critic_start.log", start + _actor_died("CriticModelRayActor")))
    assert ph["current"] == "critic init"
    # Where the rules name the part (the actor makes experience; the critic computes values for it), the class says
    # which model died, not which part ran: the part stands.
    making = [*loop, "(ActorModelRayActor pid=376114) make_experience:  50%|█████     | 2/4 [01:10<01:10, 35.0s/it]"]
    ph = _replay(_write(tmp_path, "critic_in_generation.log", making + _actor_died("CriticModelRayActor")))
    assert ph["current"] == "generation" and ph["phase_from"] == "rules"
    # A plain Ray job's class that only begins with the word (`CriticBatchLoader`) holds no critic model.
    ph = _replay(_write(tmp_path, "loader.log", start + _actor_died("CriticBatchLoader")))
    assert ph["current"] != "critic init" and ph["phase_from"] == "rules"
    # An actor that holds no one model (the trainer's own) names nothing.
    ph = _replay(_write(tmp_path, "policy.log", loop + _actor_died("PPORayActorGroup")))
    assert ph["current"] != "critic update" and ph["phase_from"] == "rules"


def test_a_printed_model_config_is_the_model_load(tmp_path: Path) -> None:
    """Old code: 'config': a worker printed the model's config (HF prints it as it loads the model), then its owner
    died."""
    lines = [
        "2026-08-14 09:12:41,027 INFO worker.py:1812 -- Started a local Ray instance.",
        "(WorkerDict pid=52917) actor will use global batch size 512.",
        "(WorkerDict pid=52917) Model config: Qwen2_5_VLConfig {",
        '(WorkerDict pid=52917)   "hidden_size": 2048,',
        '(WorkerDict pid=52917)   "model_type": "qwen2_5_vl",',
        "(WorkerDict pid=52917) }",
        "Traceback (most recent call last):",
        '  File "/srv/easyr1/verl/trainer/main.py", line 124, in main',
        "    ray.get(runner.run.remote(ppo_config))",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: Runner",
    ]
    ph = _replay(_write(tmp_path, "config.log", lines))
    assert ph["current"] in ("actor init", "model load") and "Model config:" in ph["worded_note"]


HF_END = [
    "[INFO|trainer.py:2314] 2026-11-20 10:00:01,112 >> ***** Running training *****",
    "{'loss': 1.2841, 'grad_norm': 3.112, 'learning_rate': 1.9e-05, 'epoch': 0.5}",
    "{'loss': 0.9833, 'grad_norm': 2.411, 'learning_rate': 4.1e-06, 'epoch': 1.0}",
    "{'train_runtime': 4359.39, 'train_samples_per_second': 2.753, 'train_loss': 1.1229, 'epoch': 1.0}",
    "[INFO|trainer.py:3812] 2026-11-20 11:12:41,003 >> Saving model checkpoint to /data/out/qwen-sft",
]


@pytest.mark.parametrize(("after", "note"), [
    ([], True),  # the save's line is the last: it may still be saving
    (["[INFO|modeling_utils.py:3020] 2026-11-20 11:13:02,117 >> Model weights saved in /data/out/model.safetensors"],
     False),
    (["[WARNING|ploting.py:148] 2026-11-20 11:13:02,201 >> No metric eval_loss to plot."], False),
])
def test_a_finished_run_whose_last_line_is_its_final_save(tmp_path: Path, after: list[str], note: bool) -> None:
    """Old code: 'finished' and nothing more, though the job may hang in its final save (a ZeRO-3 gather): the verdict
    stays 'finished' (training did), and says the save may still run only where its line is the log's last."""
    ph = _replay(_write(tmp_path, "end.log", HF_END + after))
    assert ph["state"] == "done" and ph["current"] == "finished" and ph["phase_from"] == "rules"
    assert ("it is still saving" in (ph["worded_note"] or "")) is note
    if note:
        assert "Saving model checkpoint to" in ph["worded_note"]


def _chained(first: list[str], handler: list[str]) -> list[str]:
    return [*first, "", "During handling of the above exception, another exception occurred:", "", *handler]


def test_a_fault_whose_handler_failed_stays_the_failure(tmp_path: Path) -> None:
    """Old code: the emergency save's write error was the failure and named the phase (checkpoint save), though
    the GPU ran out of memory in the backward pass first and the save ran in that error's handler."""
    oom = _traceback([("/srv/job/pretrain.py", "main"), ("/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/"
                                                          "engine.py", "backward"),
                      ("/opt/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", "backward")],
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total "
                     "capacity of 79.15 GiB of which 0.92 GiB is free.")
    save = _traceback([("/srv/job/pretrain.py", "<module>"), ("/srv/job/pretrain.py", "main"),
                       ("/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py", "save_checkpoint"),
                       ("/opt/venv/lib/python3.11/site-packages/torch/serialization.py", "save")],
                      "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 8813312 vs 8813248")
    start = ["[2026-02-11 04:00:05,001] [INFO] [comm.py:683:init_distributed] Initializing TorchBackend in DeepSpeed "
             "with backend nccl", "iter 10 loss 2.113", "iter 20 loss 2.004"]
    ph = _replay(_write(tmp_path, "chained.log", start + _chained(oom, save)))
    assert ph["state"] == "failed" and ph["failure"].startswith("torch.OutOfMemoryError")
    assert ph["current"] in ("actor update", "model update") and "backward" in ph["worded_note"]
    # A handler's error after an ordinary one (a lookup's KeyError, then the error the library reports): the last is
    # what went wrong, as before.
    lookup = _traceback([("/opt/venv/lib/python3.11/site-packages/transformers/models/auto/auto_factory.py",
                          "from_pretrained")], "KeyError: 'qwen9'")
    report = _traceback([("/srv/job/train.py", "<module>")],
                        "ValueError: The checkpoint you are trying to load has model type `qwen9` but Transformers "
                        "does not recognize this architecture.")
    ph = _replay(_write(tmp_path, "lookup.log", start[:1] + _chained(lookup, report)))
    assert ph["failure"].startswith("ValueError: The checkpoint you are trying to load")


def test_a_models_own_text_names_no_phase(tmp_path: Path) -> None:
    """A reward function prints each sample it scores (TinyZero's and Logic-RL's shapes): the model's text and the
    score's checks. Old code: 'generation' from `<think> … generate …` and 'validation' from `Format validation:
    PASS`, though the run was scoring rewards after its step."""
    record = ("(main_task pid=3617) step:41 - critic/score/mean:0.41 - actor/pg_loss:-0.01 - timing_s/gen:18.7 - "
              "timing_s/update_actor:9.8 - timing_s/step:31.2")
    samples = [
        "(main_task pid=3617) --------------------------------",
        "(main_task pid=3617) Target: 52 | Numbers: [7, 19, 26]",
        "(main_task pid=3617) Solution string: <|im_start|>assistant",
        "(main_task pid=3617) Let me work through it.",
        "(main_task pid=3617) <think> I should generate 52 from 7, 19 and 26: 26 + 19 + 7 = 52. </think>",
        "(main_task pid=3617) <answer> 26 + 19 + 7 </answer><|im_end|>",
        "(main_task pid=3617) --------------------------------",
        "(main_task pid=3617) Format validation: PASS",
        "(main_task pid=3617) Model Output: <think> Validate each clue, then generate the answer. </think>",
        "(main_task pid=3617) Content validation: FULL MATCH",
    ]
    ph = _replay(_write(tmp_path, "reward.log", [record, *samples]))
    assert ph["current"] == "training loop" and ph["phase_from"] == "rules", ph["worded_note"]
    # A line in the run's own shape after a sample still speaks.
    ph = _replay(_write(tmp_path, "reward_then_eval.log", [record, *samples, "(main_task pid=3617) INFO 11-02 "
                                                           "10:41:07 [trainer.py:911] Running evaluation on 500 "
                                                           "prompts"]))
    assert ph["current"] == "validation" and "Running evaluation" in ph["worded_note"]


def test_the_call_a_frame_makes_names_the_part(tmp_path: Path) -> None:
    """A verl fork renamed the rollout call (`generate_sequences_loop`): no frame's function says generation and the
    rules know only `generate_sequences(`. Old code: 'training loop'. The code line under the driver's frame says it."""
    lines = [
        "(TaskRunner pid=5120) step:3 - critic/score/mean:0.28 - timing_s/gen:61.0 - timing_s/update_actor:22.4 - "
        "timing_s/step:96.3",
        "Traceback (most recent call last):",
        '  File "/srv/fork/verl/trainer/main_ppo.py", line 88, in run',
        "    trainer.fit()",
        '  File "/srv/fork/verl/trainer/ppo/ray_trainer.py", line 961, in fit',
        "    gen_batch_output = self.actor_rollout_wg.generate_sequences_loop(gen_batch)",
        '  File "/opt/venv/lib/python3.10/site-packages/ray/_private/worker.py", line 921, in get_objects',
        "    raise value",
        "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_generate_sequences_loop() (pid=5311)",
        "RuntimeError: tool server at http://10.2.0.7:8001 refused the connection",
    ]
    ph = _replay(_write(tmp_path, "fork.log", lines))
    assert ph["current"] == "generation" and "generate_sequences_loop(gen_batch)" in ph["worded_note"]
    # A call with no phase's words (`ray.get(refs)`) names nothing.
    plain = [line.replace("self.actor_rollout_wg.generate_sequences_loop(gen_batch)", "ray.get(refs)")
             .replace("actor_rollout_generate_sequences_loop", "run_batch") for line in lines]
    assert _replay(_write(tmp_path, "plain.log", plain))["current"] == "training loop"


VERL_SILENT_AFTER_DATA = [
    "2026-02-23 10:05:12,774\tINFO worker.py:1832 -- Started a local Ray instance.",
    "(main_task pid=5847) {'actor_rollout_ref': {'rollout': {'name': 'vllm', 'tensor_model_parallel_size': 2}},",
    "(main_task pid=5847)  'trainer': {'n_gpus_per_node': 8, 'nnodes': 1, 'total_epochs': 15}}",
    "(main_task pid=5847) original dataset len: 7473",
    "(main_task pid=5847) filter dataset len: 7473",
    "(main_task pid=5847) Size of train dataloader: 7",
    "(main_task pid=5847) Total training steps: 105",
]


def test_verl_s_step_count_ends_its_data_preparation(tmp_path: Path) -> None:
    """verl asked for more GPUs than the node had and waited for its placement groups without a line. Old code: 'ended
    in dataset generation' with stale-lock advice, framework 'Ray'. verl prints its step count once its loaders are
    built: the worker group comes next, and its advice is `ray status`."""
    ph = _replay(_write(tmp_path, "silent.log", VERL_SILENT_AFTER_DATA))
    assert ph["current"] == "dataset generation" and ph["expected"] == "worker-group creation"
    assert ph["framework"]["name"] == "verl"
    advice = " ".join(ph["open_end"]["hint"]["actions"])
    assert "ray status" in advice and "lock" not in advice
    # Then the driver's task fails in init_workers (Ray's task header, then the task's own frames, cut).
    failed = [*VERL_SILENT_AFTER_DATA,
              "Traceback (most recent call last):",
              '  File "/srv/verl/verl/trainer/main_ppo.py", line 33, in run_ppo',
              "    ray.get(main_task.remote(config))",
              "ray.exceptions.RayTaskError(RaySystemError): ray::main_task() (pid=5847, ip=10.0.0.4)",
              '  File "/srv/verl/verl/trainer/main_ppo.py", line 126, in main_task',
              "    trainer.init_workers()",
              '  File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 511, in init_workers']
    ph = _replay(_write(tmp_path, "init_workers.log", failed))
    assert ph["state"] == "failed" and ph["current"] == "worker-group creation", ph["worded_note"]


def test_a_pasted_py_spy_dump_names_the_phase(tmp_path: Path) -> None:
    """A vLLM batch job hung with no progress bar; the user ran py-spy and pasted its dump into the log. Old code:
    'ended in rollout init' (the engine's start-up lines were the last a rule knew). The main thread's stack is in
    vLLM's generate (the stack rules, data/stack_phases.yaml)."""
    lines = [
        "INFO 05-12 10:02:11 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='/m/judge-9b'",
        "INFO 05-12 10:03:40 model_runner.py:1067] Loading model weights took 17.2 GiB",
        "INFO 05-12 10:03:52 gpu_executor.py:122] # GPU blocks: 9310, # CPU blocks: 1638",
        "$ py-spy dump --pid 81177",
        "Process 81177: python score_pairs.py --model /m/judge-9b",
        "Python v3.10.14 (/usr/bin/python3.10)",
        "",
        'Thread 81177 (active): "MainThread"',
        "    deepcopy (copy.py:146)",
        "    clone (vllm/sampling_params.py:498)",
        "    add_request (vllm/engine/llm_engine.py:771)",
        "    _validate_and_add_requests (vllm/entrypoints/llm.py:1102)",
        "    generate (vllm/entrypoints/llm.py:390)",
        "    main (score_pairs.py:88)",
        "    <module> (score_pairs.py:120)",
        'Thread 81342 (idle): "Thread-1"',
        "    wait (threading.py:324)",
        "    run (tqdm/_monitor.py:60)",
    ]
    ph = _replay(_write(tmp_path, "dump.log", lines))
    assert ph["current"] == "generation" and ph["phase_from"] == "words"
    note = ph["worded_note"]
    assert "a py-spy dump in the log" in note and "generate (vllm/entrypoints/llm.py:390)" in note
    # A dump of a thread no stack rule knows says nothing.
    idle = [*lines[:8], "    wait (threading.py:324)", "    main (score_pairs.py:88)"]
    assert _replay(_write(tmp_path, "idle.log", idle))["phase_from"] == "rules"


def test_a_vision_model_s_load_and_the_reference_s_start_up(tmp_path: Path) -> None:
    """EasyR1 on a vision-language model: its workers built the actor and the reference model, then the engines'
    processes started and nothing came. Old code: 'ended after dataset generation (next expected: worker-group
    creation)', 16 lines stale, with `ray status` advice: a VL model's `…ForConditionalGeneration contains 3.75B
    parameters` was no model load, and `After Ref FSDP init` said nothing."""
    lines = [
        "2026-02-24 16:17:58,913\tINFO worker.py:1832 -- Started a local Ray instance.",
        "(main_task pid=41102) Total training steps: 60",
        "(WorkerDict pid=41588) Qwen2_5_VLForConditionalGeneration contains 3.75B parameters",
        "(WorkerDict pid=41588) After Actor FSDP init, memory allocated (GB): 2.09, memory reserved (GB): 2.52.",
        "(WorkerDict pid=41588) After Ref FSDP init, memory allocated (GB): 2.13, memory reserved (GB): 2.55.",
        "(pid=42060) INFO 02-24 16:21:44 __init__.py:183] Automatically detected platform cuda.",
    ]
    ph = _replay(_write(tmp_path, "vl.log", lines))
    # The rules' last phase, the model load, was passed; the words' phase follows it in the timeline as a guess.
    assert [(s["name"], s["status"], s["guess"]) for s in ph["timeline"]][-2:] == [
        ("actor init", "passed", False), ("reference init", "running", True)]
    assert ph["current"] == "reference init" and "got at least that far" in ph["worded_note"]


def test_only_verl_s_after_init_lines_say_a_part_ended() -> None:
    """`After Ref FSDP init, …` says the reference model's start-up ended; a line that merely begins with 'after' does
    not say its part is over (the review: `^After` matched case-insensitively)."""
    assert phase_of_words("(WorkerDict pid=4) After Ref FSDP init, memory allocated (GB): 2.13") == (
        "reference init", True)
    assert phase_of_words("after 3 retries, generating the batch again") == ("generation", False)


def test_a_dump_of_two_processes_cites_the_thread_that_matched(tmp_path: Path) -> None:
    """Two processes' dumps pasted one after the other, both with a MainThread: the note's innermost frame is the
    matching thread's, not the first MainThread's (the review: it looked the thread up by name)."""
    lines = [
        "INFO 05-12 10:02:11 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='/m/j'",
        "Process 81100: python helper.py",
        'Thread 81100 (idle): "MainThread"',
        "    select (selectors.py:468)",
        "    serve_forever (helper.py:40)",
        "Process 81177: python score_pairs.py",
        'Thread 81177 (active): "MainThread"',
        "    clone (vllm/sampling_params.py:498)",
        "    generate (vllm/entrypoints/llm.py:390)",
        "    main (score_pairs.py:88)",
    ]
    note = _replay(_write(tmp_path, "two.log", lines))["worded_note"]
    assert "clone (vllm/sampling_params.py:498) … in generate" in note and "select" not in note


def test_an_accelerate_script_s_evaluation_gather_is_validation(tmp_path: Path) -> None:
    """accelerate's no_trainer loop at 500/2346 raised in `accelerator.gather_for_metrics(...)` (its evaluation).
    Before: 'FAILED in training loop', with the framework named 'HF Trainer' from the script's own banner."""
    lines = [
        "11/28/2026 03:00:09 - INFO - __main__ - ***** Running training *****",
        "11/28/2026 03:00:09 - INFO - __main__ -   Num examples = 75000",
        " 21%|██▏       | 500/2346 [03:10<11:41,  0.38s/it]",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/work/train_no_trainer.py", line 262, in main',
        '[rank0]:     predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))',
        '[rank0]:   File "/usr/lib/python3/dist-packages/accelerate/accelerator.py", line 2242, in gather_for_metrics',
        "[rank0]:     data = self.gather(input_data)",
        "[rank0]: accelerate.utils.operations.DistributedOperationException: Cannot apply desired operation due to "
        "shape mismatches. All shapes across devices must be valid.",
    ]
    ph = _replay(_write(tmp_path, "acc.log", lines))
    assert (ph["current"], ph["phase_from"], ph["state"]) == ("validation", "words", "failed"), ph["worded_note"]
    assert ph["framework"]["name"] is None


def test_ray_s_worker_death_line_is_no_step_s_record(tmp_path: Path) -> None:
    """Ray's `A worker died or was killed …` holds `Worker port: 10016 Worker PID: 1942 …`: three `name: number`
    pairs. Before, it read as a step's record after every line before it, so the epoch line named nothing and the
    verdict was 'FAILED in config'."""
    lines = [
        "2026-11-28 02:00:01,001\tINFO worker.py:1636 -- Connecting to existing Ray cluster at address: "
        "10.0.0.4:6379",
        "(RayTrainWorker pid=1942, ip=10.0.0.4) 28-Nov-26 02:05:11 [Worker:0] [INFO] epoch 9 step 4400 lr 1e-5 "
        "loss 0.211",
        "(RayTrainWorker pid=1942, ip=10.0.0.4) 28-Nov-26 02:20:19 [Worker:0] [INFO] Final Sync to HDFS completed!",
        "2026-11-28 02:20:35,472\tWARNING worker.py:1829 -- A worker died or was killed while executing a task by an "
        "unexpected system error. RayTask ID: ffffffffffff686c Worker ID: 0c62b78d Node ID: 38300cef Worker IP "
        "address: 10.0.0.4 Worker port: 10016 Worker PID: 1942 Worker exit type: SYSTEM_ERROR",
        "2026-11-28 02:20:35,509\tERROR trial_runner.py:980 -- Trial TorchTrainer_b13e7_00000: Error processing event.",
        "ray.exceptions.RayTaskError(RuntimeError): ray::TrainTrainable.train() (pid=1876, ip=10.0.0.4, "
        "repr=TorchTrainer)",
        '  File "/venv/lib/python3.8/site-packages/ray/train/_internal/utils.py", line 54, in check_for_failure',
        "    ray.get(object_ref)",
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: RayTrainWorker",
        "\tpid: 1942",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "ray::TrainTrainable.train() (pid=1876, ip=10.0.0.4, repr=TorchTrainer)",
        '  File "/venv/lib/python3.8/site-packages/ray/train/_internal/backend_executor.py", line 528, in '
        "get_with_failure_handling",
        "    success = check_for_failure(remote_values)",
        "RuntimeError: Training has failed after 1 worker failure.",
    ]
    ph = _replay(_write(tmp_path, "raytrain.log", lines))
    assert (ph["current"], ph["phase_from"]) == ("training loop", "words"), ph


def test_an_actor_s_death_stays_the_failure_over_the_trainer_s_summary(tmp_path: Path) -> None:
    """`RuntimeError: Training has failed after 1 worker failure.`, raised while handling the actor's death, names
    nothing to act on: the death (and its exit detail) is the failure."""
    lines = [
        "(RayTrainWorker pid=1942, ip=10.0.0.4) epoch 9 step 4400 loss 0.211",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.8/site-packages/ray/train/_internal/utils.py", line 54, in check_for_failure',
        "    ray.get(object_ref)",
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.8/site-packages/ray/train/_internal/backend_executor.py", line 528, in '
        "get_with_failure_handling",
        "    success = check_for_failure(remote_values)",
        "RuntimeError: Training has failed after 1 worker failure.",
    ]
    ph = _replay(_write(tmp_path, "raytrain.log", lines))
    assert ph["failure"].startswith("ray.exceptions.RayActorError"), ph["failure"]


def test_a_gloo_barrier_s_errors_are_a_wait_not_a_crash(tmp_path: Path) -> None:
    """torchtitan's save: rank 0 reached gloo's monitoredBarrier and got errors waiting for rank 3. Before: 'It failed
    with an error, not a hang', which sent the user away from rank 3."""
    lines = [
        "[rank0]:2026-11-28 03:04:18,017 - root - INFO - step:  30  loss:  7.9012  memory: 61.22GiB(77.31%)",
        "[rank0]:2026-11-28 03:04:18,220 - root - INFO - Saving a full checkpoint at last step, step 30.",
        "[rank0]:[E1128 03:14:18.510551021 ProcessGroupGloo.cpp:143] Rank 0 successfully reached monitoredBarrier, but "
        "received errors while waiting for send/recv from rank 3.",
    ]
    ph = _replay(_write(tmp_path, "titan.log", lines))
    assert (ph["current"], ph["state"]) == ("checkpoint save", "failed"), ph
    causes = " ".join(ph["hint"]["causes"])
    assert "not a hang" not in causes and "A wait gave up" in causes, causes


def test_a_frame_that_pushes_weights_to_the_engines_is_weight_sync(tmp_path: Path) -> None:
    """OpenRLHF's actor died in `_broadcast_to_vllm` (an engine on another node died): the frames name weight sync.
    Before: 'likely in actor update', from the `fit` task the header names; no words named weight sync at all."""
    lines = [
        "(ActorModelRayActor pid=93310) Train epoch [1/1]: 100%|██████████| 64/64 [02:51<00:00,  2.68s/it]",
        "Traceback (most recent call last):",
        '  File "/work/examples/train_ppo_ray.py", line 143, in train',
        "    ray.get(refs)",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::ActorModelRayActor.fit() (pid=93310, ip=10.0.1.12)",
        '  File "/work/openrlhf/trainer/ppo_trainer.py", line 210, in fit',
        "    status = self.ppo_train()",
        '  File "/work/openrlhf/trainer/ray/ppo_actor.py", line 124, in ppo_train',
        "    self._broadcast_to_vllm()",
        '  File "/work/openrlhf/trainer/ray/ppo_actor.py", line 159, in _broadcast_to_vllm',
        "    ray.get(refs)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: LLMRayActor",
    ]
    ph = _replay(_write(tmp_path, "openrlhf.log", lines))
    assert (ph["current"], ph["phase_from"]) == ("weight sync", "words"), ph["worded_note"]
    assert phase_of_words("INFO 02-06 16:39:07 llm_engine.py:96] load_weights took 12.1 s") != ("weight sync", False)
    assert phase_of_words("(ActorModelRayActor pid=9) Broadcast actor weights to vllm engines") == (
        "weight sync", False)


def test_a_faulthandler_dump_in_the_log_names_the_phase(tmp_path: Path) -> None:
    """SGLang's scheduler watchdog gave up and Python's faulthandler printed the scheduler's threads: the main one was
    in `process_batch_result_prefill`, a batch's prefill. Before: 'FAILED in serving' (the dump was not read)."""
    lines = [
        "[2026-11-28 01:01:50] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-11-28 01:01:51] The server is fired up and ready to roll!",
        "[2026-11-28 03:30:12 TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.41",
        "[2026-11-28 03:35:12 TP0] Watchdog timeout (self.watchdog_timeout=300)",
        "Fatal Python error: Aborted",
        "",
        "Thread 0x00007fcd11fff640 (most recent call first):",
        '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
        '  File "/usr/lib/python3.10/threading.py", line 1016 in _bootstrap',
        "",
        "Thread 0x00007fce47ae1480 (most recent call first):",
        '  File "/usr/lib/python3.10/threading.py", line 320 in wait',
        '  File "/sgl/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 167 in resolve_batch_result',
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1147 in process_batch_result_prefill',
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 519 in event_loop_overlap',
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1796 in run_scheduler_process',
        '  File "<string>", line 1 in <module>',
        "[2026-11-28 03:35:13] Received sigquit from a child process. It usually means the child failed.",
    ]
    ph = _replay(_write(tmp_path, "sglang.log", lines))
    assert (ph["current"], ph["phase_from"]) == ("generation", "words"), ph
    assert "faulthandler" in ph["worded_note"] and "resolve_batch_result" in ph["worded_note"]
    # Behind a pod's stamp and a rank's prefix (kubectl logs --timestamps of a torchrun job) the dump is read too.
    stamped = [f"2026-11-28T03:35:1{i % 10}.000000Z [rank0]:{line}" for i, line in enumerate(lines[4:])]
    assert dump_words(stamped) is not None and dump_words(stamped).phase == "generation"


def test_a_bar_the_traceback_was_glued_to_names_the_part(tmp_path: Path) -> None:
    """EasyR1 died as step 2's `Compute log probs 2:   0%|…|` bar began; the driver's traceback was glued to that bar
    and cut before its exception. Before: 'likely in weight sync', from `After sync model weights in sharding
    manager: …` two lines up (a verl memory line that says a part finished, not that it runs)."""
    lines = [
        "(pid=39432) Running step:   0%|          | 1/220 [09:12<33:35:48, 552.27s/it]",
        "(WorkerDict pid=39617) After sync model weights in sharding manager: 36.42 GB / 79.11 GB.",
        "(WorkerDict pid=39617) After vllm offload in sharding manager: 19.83 GB / 79.11 GB.",
        "(pid=39432) Compute log probs 2:   0%|          | 0.00/40.0 [00:00<?, ?it/s]Traceback (most recent call "
        "last):",
        '  File "/workspace/EasyR1/verl/trainer/main.py", line 109, in main',
        "    ray.get(runner.run.remote(ppo_config))",
    ]
    ph = _replay(_write(tmp_path, "easyr1.log", lines))
    assert (ph["current"], ph["phase_from"]) == ("old log-prob", "words"), ph["worded_note"]
    assert "Compute log probs 2" in ph["worded_note"]
    assert phase_of_words("(WorkerDict pid=4) After sync model weights in sharding manager: 36.42 GB / 79.11 GB.") == (
        "weight sync", True)


def test_waking_the_engine_and_pushing_a_lora_adapter_is_weight_sync() -> None:
    """rLLM on verl with LoRA, step 2: the driver's frame is the trajectory generation, but it called `wake_up()`, and
    the worker's frame below it pushes the adapter (`add_lora`) into the engine. Before: 'likely in generation'."""
    frames = [
        ('  File "/srv/rllm/trainer/agent_ppo_trainer.py", line 212, in fit_agent',
         "final_gen_batch_output, metrics = self.generate_agent_trajectory(timing_raw=timing_raw)"),
        ('  File "/srv/rllm/trainer/agent_ppo_trainer.py", line 488, in generate_agent_trajectory',
         "self.actor_rollout_wg.wake_up()"),
        ('  File "/srv/verl/single_controller/ray/base.py", line 49, in __call__', "output = ray.get(output)"),
        ('  File "/srv/verl/workers/sharding_manager/fsdp_vllm.py", line 187, in __enter__',
         "self.inference_engine.llm_engine.model_executor.driver_worker.add_lora(lora_request)"),
    ]
    assert frame_words(frames).phase == "weight sync"
    woken = [*frames[:3], ('  File "/srv/verl/workers/fsdp_workers.py", line 610, in wake_up', "")]
    assert frame_words(woken).phase == "weight sync"


def test_a_pasted_ray_task_summary_names_the_part_still_running(tmp_path: Path) -> None:
    """A verl run hangs after step 57's record; the user pastes `ray summary tasks`: every part of the step finished 58
    times but the update, whose 58th call is running on 8 workers. Before: 'training loop', the table unread. A table
    where only the driver's own task runs names nothing."""
    head = ["(TaskRunner pid=8120) step:57 - actor/pg_loss:0.02 - critic/score/mean:0.41 - timing_s/gen:96.2 - "
            "timing_s/update_actor:40.3 - timing_s/step:171.9",
            "======== Tasks Summary: 2026-04-02 03:11:09.118204 ========",
            "Stats:",
            "------------------------------------",
            "total_actor_tasks: 1490",
            "",
            "Table (group by func_name):",
            "------------------------------------",
            "    FUNC_OR_CLASS_NAME                               STATE_COUNTS    TYPE"]
    rows = ["0   WorkerDict.actor_rollout_generate_sequences      FINISHED: 58    ACTOR_TASK",
            "1   WorkerDict.actor_rollout_compute_log_prob        FINISHED: 58    ACTOR_TASK",
            "2   WorkerDict.actor_rollout_update_actor            FINISHED: 57    ACTOR_TASK",
            "                                                     RUNNING: 8",
            "3   TaskRunner.run                                   RUNNING: 1      ACTOR_TASK"]
    ph = _replay(_write(tmp_path, "summary.log", head + rows))
    assert ph["current"] == "actor update" and "ray summary tasks" in ph["worded_note"]
    done = [row for row in rows if "RUNNING: 8" not in row]
    assert _replay(_write(tmp_path, "idle.log", head + done))["current"] == "training loop"


@pytest.mark.parametrize("ending", ["\n", ""])
def test_a_guess_cites_the_number_of_the_line_it_stands_on(tmp_path: Path, ending: str) -> None:
    """Every claim cites its line: a guess from a failure's frame too (before: `"line": null`). Blank lines count, and
    a last line with no newline."""
    lines = ["(TaskRunner pid=5120) step:3 - critic/score/mean:0.28 - timing_s/gen:61.0 - timing_s/step:96.3", "",
             "Traceback (most recent call last):",
             '  File "/srv/fork/verl/trainer/ppo/ray_trainer.py", line 961, in fit', "",
             "    gen_batch_output = self.actor_rollout_wg.generate_sequences_loop(gen_batch)",
             "RuntimeError: tool server at http://10.2.0.7:8001 refused the connection"]
    path = tmp_path / "fork.log"
    path.write_text("\n".join(lines) + ending)
    doc = _replay(path)
    guess = [e for e in doc["evidence"] if "(a guess" in e["claim"]]
    assert [(e["line"], e["text"].startswith('File "/srv/fork/verl/trainer/ppo/ray_trainer.py"')) for e in guess] == [
        (4, True)]


@pytest.mark.parametrize("ending", ["\n", ""])
def test_snapshot_cites_the_number_of_the_line_a_guess_stands_on(tmp_path: Path, ending: str) -> None:
    """snapshot reads the file's last lines as the Logs pane holds them (the follower's backlog): their numbers are
    counted from the file's end against history's count (before: `"line": null`). Blank lines count, and a last line
    with no newline (the file idle, so history counts it)."""
    lines = ["(TaskRunner pid=5120) step:3 - critic/score/mean:0.28 - timing_s/gen:61.0 - timing_s/step:96.3", "",
             "(TaskRunner pid=5120) epoch 0, step 4", "",
             "(AgentLoopWorker pid=5230) agent loop started for 64 samples", "(TaskRunner pid=5120) waiting"]
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + ending)
    os.utime(path, (time.time() - 600, time.time() - 600))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
           "LD_LIBRARY_PATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(path)],
                         capture_output=True, text=True, timeout=120, check=True, env=env, cwd=tmp_path).stdout
    guess = [e for e in json.loads(out)["phases"]["evidence"] if "(a guess" in e["claim"]]
    assert [(e["line"], "agent loop started" in e["text"]) for e in guess] == [(5, True)], guess


def test_the_words_before_a_failure_no_phase_rule_placed(tmp_path: Path) -> None:
    """A verl fork's worker prints `Step = N` (a counter alone), then the raylet kills it for memory. Before: 'FAILED
    (phase unknown)': the failure's own placeholder row began at the raylet's line, so only the lines after it were
    read, and `Step = 120` was taken for a metric."""
    lines = [f"(WorkerDict pid=40716) Step = {n}" for n in range(64, 128, 8)] + [
        "(raylet) [2025-12-07 09:57:19,206 E 39346 39346] (raylet) node_manager.cc:3277: 2 Workers (tasks / actors) "
        "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5c9e1f0a3b7d, IP: "
        "172.24.3.118) over the last time period.",
        "Traceback (most recent call last):",
        '  File "/srv/fork/verl/trainer/main_ppo.py", line 73, in main',
        "    ray.get(main_task.remote(config))",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::main_task() (pid=40198, ip=172.24.3.118)",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    ]
    ph = _replay(_write(tmp_path, "oom.log", lines))
    assert ph["current"] == "training loop" and ph["phase_from"] == "words" and "Step = 120" in ph["worded_note"]


def test_a_with_statement_under_a_frame_names_the_context_it_entered() -> None:
    """verl with LoRA: `generate_sequences` raised entering `with self.rollout_sharding_manager:`, the hand-over of the
    trainer's weights to the engine. Before: 'likely in generation', from the function around it."""
    frames = [('  File "/srv/verl/workers/fsdp_workers.py", line 662, in generate_sequences',
               "with self.rollout_sharding_manager:"),
              ('  File "/srv/verl/utils/debug/performance.py", line 78, in f', "return self.log(decorated_function)")]
    found = frame_words(frames)
    assert found is not None and found.phase == "weight sync" and "rollout_sharding_manager" in found.text
    # A call inside that context names its own part: the function's words stand where the code is no `with`.
    assert frame_words([(frames[0][0], "output = self.rollout.generate_sequences(prompts=prompts)")]).phase == (
        "generation")


def test_a_log_prob_pass_through_megatron_s_forward_backward_is_the_log_prob_pass(tmp_path: Path) -> None:
    """verl's Megatron actor computes log-probs with Megatron's forward_backward_func, forward only: a frame under the
    driver's `compute_log_prob(batch)` call that says `forward_backward_…` is inside that pass, not an update."""
    frames = [
        ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 1042, in fit',
         "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)"),
        ('  File "/opt/verl/verl/workers/actor/megatron_actor.py", line 655, in forward_backward_batch',
         "losses_reduced = forward_backward_func("),
        ('  File "/opt/py/megatron/core/pipeline_parallel/schedules.py", line 1990, in '
         "forward_backward_pipelining_without_interleaving", "output_tensor, num_tokens = forward_step("),
    ]
    assert frame_words(frames).phase == "old log-prob"  # type: ignore[union-attr]
    lines = ["(TaskRunner pid=31) Training Progress:   0%|          | 0/12 [00:00<?, ?it/s]",
             "ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid=31, ip=10.1.2.3, actor_id=ab)",
             *[row for frame in frames for row in (frame[0], "    " + frame[1])],
             "RuntimeError: shape '[4096, 1, -1, 128]' is invalid for input of size 1048576"]
    doc = _replay(_write(tmp_path, "logprob.log", lines))
    assert (doc["state"], doc["current"]) == ("failed", "old log-prob")


def test_a_constructor_under_init_workers_is_start_up_whatever_its_module_says(tmp_path: Path) -> None:
    """verl's `init_workers` builds the agent loop's manager, whose `__init__` (in agent_loop/agent_loop.py) starts
    the rollout servers: an error raised there is the rollout's start-up, not generation (the module's words), and a
    step's words under an initializer name what is being built."""
    frames = [
        ('  File "/opt/verl/verl/trainer/main_ppo.py", line 298, in run', "trainer.init_workers()"),
        ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 812, in init_workers',
         "self.async_rollout_manager = AgentLoopManager(config=self.config, worker_group=wg)"),
        ('  File "/opt/verl/verl/experimental/agent_loop/agent_loop.py", line 690, in __init__',
         "self._initialize_llm_servers()"),
    ]
    found = frame_words(frames)
    assert found is None or found.phase != "generation"
    # Ray's decorator around ray.get (`auto_init_wrapper`) builds nothing: a step's call under it stays that part.
    step = [('  File "/opt/py/ray/_private/auto_init_hook.py", line 21, in auto_init_wrapper', "return fn(*a, **kw)"),
            ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 990, in fit',
             "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)")]
    assert frame_words(step).phase == "generation"  # type: ignore[union-attr]
    assert frame_words([*frames, ('  File "/opt/verl/verl/workers/rollout/vllm_rollout/server.py", line 88, in '
                                  "generate_sequences", "")]).phase == "rollout init"  # type: ignore[union-attr]
    lines = ["(TaskRunner pid=41) TaskRunner hostname: gpu-b2, PID: 41",
             "ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid=41, ip=10.1.0.9, actor_id=cd)",
             *[row for frame in frames for row in (frame[0], "    " + frame[1])],
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    doc = _replay(_write(tmp_path, "init.log", lines))
    assert (doc["state"], doc["current"]) == ("failed", "rollout init")


def test_an_engine_s_idle_stats_lines_are_no_step_that_ends_the_words(tmp_path: Path) -> None:
    """A vLLM server generated a guided-JSON request, then printed idle stats (`Running: 0 reqs`) for minutes before its
    engine loop died. Before: 'FAILED (phase unknown)': each stats line was taken for a step's record, after which
    no older line's words count."""
    stats = ("INFO 12-09 05:{m:02d}:{s:02d} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation "
             "throughput: {g} tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.2%")
    lines = ["INFO 12-09 05:24:31 engine.py:267] Added request chat-4e1b9c0d27a3.",
             stats.format(m=24, s=39, g=6.4, r=1)] + [stats.format(m=25, s=s, g=0.0, r=0) for s in range(0, 60, 10)] + [
        "ERROR 12-09 05:28:00 async_llm_engine.py:65] Engine iteration timed out. This should never happen!",
        "ERROR 12-09 05:28:00 async_llm_engine.py:65] Traceback (most recent call last):",
        "ERROR 12-09 05:28:00 async_llm_engine.py:65] asyncio.exceptions.TimeoutError"]
    ph = _replay(_write(tmp_path, "idle.log", lines))
    assert ph["current"] == "generation" and ph["phase_from"] == "words", ph["worded_note"]


def test_an_actor_that_runs_only_in_one_part_names_it_by_its_class(tmp_path: Path) -> None:
    """verl's agent loop after its third step: only `AgentLoopWorker` lines follow (tool calls it could not decode),
    which name no part in their words; that actor runs only in a step's rollout. Before: "ended in training loop".
    Not a step's record or a frame printed by it."""
    lines = [
        "(TaskRunner pid=3310) step:43 - actor/pg_loss:0.0074 - critic/score/mean:0.439 - timing_s/gen:241.2 - "
        "timing_s/update_actor:88.0 - timing_s/step:371.5",
        "(TaskRunner pid=3310) Training Progress:  14%|▍         | 44/300 [4:32:10<26:23:30, 371.21s/it]",
        "(AgentLoopWorker pid=3391) ERROR:2026-03-02 10:56:04,692:Failed to decode tool call: 'arguments'",
    ]
    ph = _replay(_write(tmp_path, "agent.log", lines))
    assert (ph["state"], ph["current"]) == ("running", "generation")
    assert "AgentLoopWorker" in ph["worded_note"] and "Ray actor" in ph["worded_note"]
    assert read_words(['(AgentLoopWorker pid=3391)   File "/srv/verl/agent_loop.py", line 88, in run']) is None
    assert read_words(["(AgentLoopWorker pid=3391) {'loss': 0.41, 'grad_norm': 1.2, 'lr': 1e-06}"]) is None


def test_a_task_error_cut_at_the_trainers_fit_was_in_the_loop(tmp_path: Path) -> None:
    """A worker on another node aborts and the driver's `ray::main_task()` error shows only `trainer.fit()` above the
    exception (block 18's training half: "FAILED (phase unknown)"): verl's main_task starts the workers, then runs the
    loop in fit, so the failure was in the loop, a guess from that frame. A frame deeper in fit still names its part."""
    driver = [("/opt/verl/verl/trainer/main_ppo.py", "main"), ("/opt/verl/verl/trainer/main_ppo.py", "run_ppo"),
              ("/env/lib/python3.10/site-packages/ray/_private/worker.py", "get_objects")]
    lines = ["\x1b[36m(WorkerDict pid=418207, ip=10.8.3.22)\x1b[0m Fatal Python error: Aborted",
             *_traceback(driver, "ray.exceptions.RayTaskError(RuntimeError): ray::main_task() (pid=417730, "
                                 "ip=10.8.3.20)"),
             '  File "/opt/verl/verl/trainer/main_ppo.py", line 211, in main_task',
             "    trainer.fit()",
             "RuntimeError: CUDA error: an illegal memory access was encountered"]
    ph = _replay(_write(tmp_path, "fit.log", lines))
    assert ph["state"] == "failed" and ph["current"] == "training loop"
    assert "trainer.fit()" in ph["worded_note"] and "guess" in ph["worded_note"]
    assert frame_words([('  File "/opt/verl/verl/trainer/main_ppo.py", line 211, in main_task', "trainer.fit()"),
                        ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 988, in fit',
                         "val_metrics = self._validate()"),
                        ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 610, in _validate', "")
                        ]).phase == "validation"
    # Lightning's fit sets up DDP first (its first collective checks the ranks' parameters): not the loop there.
    lightning = ["Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2",
                 *_traceback([("/home/u/esm/finetune.py", "main"),
                              ("/env/lib/python3.9/site-packages/pytorch_lightning/trainer/trainer.py", "fit"),
                              ("/env/lib/python3.9/site-packages/pytorch_lightning/trainer/trainer.py", "_fit_impl"),
                              ("/env/lib/python3.9/site-packages/pytorch_lightning/strategies/ddp.py", "setup"),
                              ("/env/lib/python3.9/site-packages/torch/distributed/utils.py",
                               "_verify_param_shape_across_processes")],
                             "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
                             "unhandled system error, NCCL version 2.14.3")]
    assert _replay(_write(tmp_path, "lightning.log", lightning))["current"] == "nccl init"
    # fit setting up before its loop (wandb's Tracking.__init__ under verl's fit) names no step (review of session 26)
    assert frame_words([('  File "/opt/verl/verl/trainer/main_ppo.py", line 211, in main_task', "trainer.fit()"),
                        ('  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 862, in fit',
                         "logger = Tracking(project_name=p, experiment_name=e)"),
                        ('  File "/opt/verl/verl/utils/tracking.py", line 64, in __init__', "wandb.init(project=p)"),
                        ]) is None
    # and a script named fit.py is no trainer's fit: its loop's frame stands on a log of no RL trainer
    script = _traceback([("/home/u/proj/fit.py", "main"), ("/home/u/proj/fit.py", "train_epoch")],
                        "RuntimeError: CUDA error: device-side assert triggered")
    assert _replay(_write(tmp_path, "script.log", script))["current"] == "training loop"


def test_a_with_line_whose_context_was_leaving_names_the_work_inside_it() -> None:
    """verl's sharding manager: entering it hands the weights to the engine (weight sync); an error in its `__exit__`
    (an asynchronous CUDA error surfacing at empty_cache) came after the generation it wrapped (HELDOUT18, read after
    it was retired: two such logs read "likely in weight sync")."""
    outer = [('  File "/srv/verl/verl/workers/fsdp_workers.py", line 446, in generate_sequences',
              "with self.rollout_sharding_manager:")]
    leaving = [('  File "/srv/verl/verl/workers/sharding_manager/fsdp_vllm.py", line 105, in __exit__',
                "torch.cuda.empty_cache()"),
               ('  File "/env/lib/python3.10/site-packages/torch/cuda/memory.py", line 170, in empty_cache', "")]
    entering = [('  File "/srv/verl/verl/workers/sharding_manager/fsdp_vllm.py", line 88, in __enter__',
                 "params = self.module.state_dict()")]
    assert frame_words(outer + leaving).phase == "generation"
    assert frame_words(outer + entering).phase == "weight sync"


def test_a_worker_idle_until_asked_names_no_phase(tmp_path: Path) -> None:
    """Audit 26 #3: torchtitan's async checkpoint process says `Waiting for checkpoint save request...` while it
    idles; a run at step 70 read 'ended, likely in checkpoint save' with storage advice. A save under way still
    names its phase."""
    for idle in ("[rank0]:[0] 2026-01-07 10:02:03,551 - root - INFO - Waiting for checkpoint save request...",
                 "INFO 01-07 10:02:03 worker.py:88] Waiting for new generation requests",
                 "Listening for incoming eval jobs"):
        assert phase_of_words(idle) is None, idle
    assert phase_of_words("Waiting for the checkpoint save to finish") == ("checkpoint save", False)
    head = "[rank0]:[titan] 2026-01-07 10:0{}:{:02d},100 - root - INFO - "
    lines = [head.format(1, 50) + "step: 30  loss:  6.1000  memory: 20.10GiB(40.00%)  tps: 4,100",
             head.format(2, 2) + "step: 40  loss:  6.0000  memory: 20.10GiB(40.00%)  tps: 4,120",
             "[rank0]:[0] 2026-01-07 10:02:03,551 - root - INFO - Waiting for checkpoint save request..."]
    assert _replay(_write(tmp_path, "train.log", lines))["current"] == "training loop"


def test_rollouts_being_collected_are_generation_inside_the_loop(tmp_path: Path) -> None:
    """Audit 26 #8: a PPO trainer's loop bar (its losses as the description) glued to `[RANK 0] Collecting rollouts`,
    then a `[rollout 40 / 64]` bar, then a traceback through `make_experience` into the reward function: 'FAILED in
    training loop'; the structure says rollout collection, generation inside the loop."""
    assert phase_of_words("[rollout 40 / 64]:  62%|██████▎   | 40/64 [03:10<01:54,  4.75s/it]") == ("generation",
                                                                                                   False)
    assert phase_of_words("[RANK 0] Collecting rollouts") == ("generation", False)
    bar = "[losses/total_loss: 0.41 | losses/policy_loss: 0.05]:  30%|███       | 300/1000 [1:02:11<2:25:06, 12.44s/it]"
    lines = [bar.replace("300/1000", "100/1000") + "[RANK 0] Collecting rollouts",
             "[rollout 64 / 64]: 100%|██████████| 64/64 [04:58<00:00,  4.66s/it]",
             bar + "[RANK 0] Collecting rollouts",
             "[rollout 40 / 64]:  62%|██████▎   | 40/64 [03:10<01:54,  4.75s/it]", "",
             "Traceback (most recent call last):",
             '  File "/src/ppo/trainer/ppo_trainer.py", line 301, in make_experience',
             "    scores = self.reward_fn(samples=texts)",
             '  File "/src/ppo/train_summaries.py", line 61, in reward_fn',
             "    refs = [lookup[t] for t in texts]",
             "KeyError: 'POST: something'"]
    doc = _replay(_write(tmp_path, "train.log", lines))
    assert doc["current"] == "generation", doc["current"]


def test_a_log_that_ends_inside_a_tracebacks_frames_failed_where_they_say(tmp_path: Path) -> None:
    """A user pasted a traceback's frames alone (no header, no exception line): a log that ends inside them failed, in
    the phase its frames name (a rollout engine sizing its KV cache under the worker's init), and the headline says
    the frames were cut. Old code: running, phase unknown."""
    frames = [("/opt/rl/workers/fsdp_workers.py", "init_model", "self._build_rollout()"),
              ("/opt/rl/workers/fsdp_workers.py", "_build_rollout", "self.rollout = EngineRollout("),
              ("/py/site-packages/vllm/engine/llm_engine.py", "_initialize_kv_caches",
               "self.model_executor.determine_num_available_blocks())"),
              ("/py/site-packages/torch/distributed/distributed_c10d.py", "broadcast", "work = group.broadcast(x)")]
    lines = [line for path, func, code in frames for line in (f'  File "{path}", line 77, in {func}', f"    {code}")]
    ph = _replay(_write(tmp_path, "frames.log", lines))
    assert ph["state"] == "failed" and ph["current"] in ("rollout init", "engine init")
    assert "cut" in ph["failure"] and "broadcast" in ph["failure"]
    # the same frames printed by a process that went on (a stack dump, `Stack (most recent call last):`) are no failure
    ph = _replay(_write(tmp_path, "stack.log", ["Stack (most recent call last):", *lines]))
    assert ph["state"] != "failed"
    # nor are the frames above an exception line a cut traceback (the rules read that one)
    ph = _replay(_write(tmp_path, "whole.log", ["Traceback (most recent call last):", *lines, "RuntimeError: x"]))
    assert ph["state"] == "failed" and "cut" not in ph["failure"]
    # nor a stack a live process printed of itself, header-less (`traceback.print_stack()` in a signal handler: the
    # review of session 27 saw a SIGUSR1 handler's dump read as a crash)
    ph = _replay(_write(tmp_path, "printed.log", [*lines, '  File "/w/data.py", line 88, in on_signal',
                                                  "    traceback.print_stack()"]))
    assert ph["state"] != "failed"
