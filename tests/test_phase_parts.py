"""Which part of a run a line names, read from what the lines say (issue 25, rows 98-123 of the posted corpus's
SOURCES.md): a step that timed its generation has a rollout, an engine's decode batches are generation, a bar
named Generate is generation, the weights pushed to the engines after an update are weight sync, the actor a
failing call names is the model it initialises. Each shape is written as users posted it, with invented values,
and read by replay's history reader and, where it matters, by the real follower live."""

from __future__ import annotations

from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import replay, report_text
from tests.verlrun import live_and_history


def run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.log"
    path.write_text(text_of(lines))
    return replay([str(path)], load_config(None))


def text_of(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


VERL_LOG_PROB_WATCHDOG = [
    "(TaskRunner pid=5110) step:17 - actor/pg_loss:-0.004 - timing_s/gen:201.4 - timing_s/old_log_prob:31.2 - "
    "timing_s/update_actor:97.5 - timing_s/step:341.0",
    "(TaskRunner pid=5110) step:18 - actor/pg_loss:0.002 - timing_s/gen:199.8 - timing_s/old_log_prob:30.9 - "
    "timing_s/update_actor:98.1 - timing_s/step:338.2",
    "(WorkerDict pid=5533) [rank0]:[E301 11:20:05.114210337 ProcessGroupNCCL.cpp:683] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=90211, OpType=_ALLGATHER_BASE, NumelIn=52428800, "
    "NumelOut=209715200, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "Error executing job with overrides: ['trainer.n_gpus_per_node=4']",
    "Traceback (most recent call last):",
    '  File "/w/verl/verl/trainer/ppo/ray_trainer.py", line 1090, in fit',
    "    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)",
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
]


def test_a_step_that_timed_its_generation_has_a_rollout(tmp_path: Path) -> None:
    """verl PPO: its step lines time `gen`, then a parameter all-gather timed out and the driver's traceback named
    compute_log_prob. Before: 'FAILED in actor update' (a run with no rollout line seen was taken for SFT, whose
    every all-gather is the update); the step lines said a rollout runs in each step."""
    history, store = live_and_history(tmp_path, text_of(VERL_LOG_PROB_WATCHDOG),
                                      lambda s: "ActorDiedError" in s.phase_status().failure)
    for status in (history.status(1e12), store.phase_status()):
        assert (status.state, status.current, status.within) == ("failed", "old log-prob", "training loop")
    # The same watchdog after steps that time no generation (verl SFT) is still the update.
    sft = [line.replace("timing_s/gen:201.4 - ", "").replace("timing_s/gen:199.8 - ", "")
           for line in VERL_LOG_PROB_WATCHDOG[:3]]
    assert run(tmp_path, sft).status.current == "actor update"


OPENRLHF_BROADCAST = [
    "Train epoch [1/1]:  99%|█████████▉| 95/96 [17:02<00:10, 10.71s/it, pg=0.011, rm=-0.25, kl=0, act_lr=3e-7]",
    "Train epoch [1/1]: 100%|██████████| 96/96 [17:12<00:00, 10.73s/it, pg=0.009, rm=-0.25, kl=0, act_lr=3e-7]",
    "(LLMRayActor pid=40211, ip=10.8.1.5) update weight: model.embed_tokens.weight, dtype: torch.bfloat16, shape: "
    "torch.Size([151936, 3584])",
    "(LLMRayActor pid=40211, ip=10.8.1.5) update weight: model.layers.0.mlp.up_proj.weight, dtype: torch.bfloat16, "
    "shape: torch.Size([18944, 3584])",
    "(LLMRayActor pid=40377, ip=10.8.1.6) ERROR 05-02 09:14:51 worker_base.py:467] Error executing method "
    "update_weight. This might cause deadlock in distributed execution.",
    '(LLMRayActor pid=40377, ip=10.8.1.6) ERROR 05-02 09:14:51 worker_base.py:467]   File "/w/openrlhf/trainer/ray/'
    'vllm_worker_wrap.py", line 36, in update_weight',
    "(LLMRayActor pid=40377, ip=10.8.1.6) ERROR 05-02 09:14:51 worker_base.py:467] torch.distributed.DistBackendError: "
    "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network "
    "error, NCCL version 2.21.5",
]


def test_the_weights_pushed_after_the_update_are_weight_sync(tmp_path: Path) -> None:
    """OpenRLHF: the train epoch ended, the vLLM engines received the new weights one tensor at a time, and the
    broadcast failed. Before: 'FAILED in actor update', a false statement (the update had finished; weight sync,
    listed before the update, was taken for going back)."""
    history, store = live_and_history(tmp_path, text_of(OPENRLHF_BROADCAST),
                                      lambda s: "DistBackendError" in s.phase_status().failure)
    for status in (history.status(1e12), store.phase_status()):
        assert (status.state, status.current) == ("failed", "weight sync")
    said = report_text(run(tmp_path, OPENRLHF_BROADCAST), why=True)
    assert "FAILED in weight sync" in said and "weight sync started: train.log:3" in said


OPENRLHF_WAKE_UP_OOM = [
    "Train epoch [1/1]: 100%|██████████| 8/8 [00:19<00:00,  2.41s/it, act_loss=0.021, reward=0.38, kl=0, act_lr=2e-7]",
    "(LLMRayActor pid=77120) ERROR 03-14 08:02:11 [core.py:459] EngineCore encountered a fatal error.",
    "(LLMRayActor pid=77120) ERROR 03-14 08:02:11 [core.py:459] Traceback (most recent call last):",
    '(LLMRayActor pid=77120) ERROR 03-14 08:02:11 [core.py:459]   File "/py/vllm/v1/engine/core.py", line 236, '
    "in wake_up",
    "(LLMRayActor pid=77120) ERROR 03-14 08:02:11 [core.py:459] RuntimeError: CUDA Error: out of memory at "
    "/workspace/csrc/cumem_allocator.cpp:62",
]


def test_an_engine_traceback_behind_vllm_s_logger_names_the_part_that_failed(tmp_path: Path) -> None:
    """OpenRLHF with vLLM sleep mode: after the train epoch the engine failed waking up, its traceback printed
    line by line through vLLM's logger. With weight sync no longer taken for going back, its `in wake_up` frame
    must still carry the failure there (before this it opened a running weight sync: 'ended in weight sync')."""
    report = run(tmp_path, OPENRLHF_WAKE_UP_OOM)
    assert (report.status.state, report.status.current) == ("failed", "weight sync")
    assert report.status.failure and "FAILED in weight sync" in report_text(report)
