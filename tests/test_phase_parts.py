"""Which part of a run a line names, read from what the lines say (issue 25, rows 98-123 of the posted corpus's
SOURCES.md): a step that timed its generation has a rollout, an engine's decode batches are generation, a bar
named Generate is generation, the weights pushed to the engines after an update are weight sync, the actor a
failing call names is the model it initialises. Each shape is written as users posted it, with invented values,
and read by replay's history reader and, where it matters, by the real follower live."""

from __future__ import annotations

from datetime import datetime
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
                                      lambda s: "ActorDiedError" in s.phase_status().recognised_last)
    for status in (history.status(1e12), store.phase_status()):
        assert (status.state, status.current, status.within) == ("failed", "old log-prob", "training loop")
    # The same watchdog after steps that time no generation (verl SFT) is still the update.
    sft = [line.replace("timing_s/gen:201.4 - ", "").replace("timing_s/gen:199.8 - ", "")
           for line in VERL_LOG_PROB_WATCHDOG[:3]]
    assert run(tmp_path, sft).status.current == "actor update"


def test_a_barrier_sized_collective_after_steps_is_no_update(tmp_path: Path) -> None:
    """Audit 17: HF Trainer on two nodes, a metric record, the bar at 400/1600, then the watchdog on a one-element
    ALLREDUCE (a barrier's size: a save's, an evaluation's, or a scalar metric's): 'FAILED in model update'. A
    collective that small says no update; the step underway is the loop's. A gradient-sized one still is."""
    watchdog = ("[E ProcessGroupNCCL.cpp:475] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL("
                "SeqNum=14001, OpType=ALLREDUCE, NumelIn={n}, NumelOut={n}, Timeout(ms)=1800000) ran for 1800377 "
                "milliseconds before timing out.")
    lines = ["{'loss': 1.2041, 'grad_norm': 0.41, 'learning_rate': 3.1e-05, 'epoch': 0.5}",
             " 25%|██▌       | 400/1600 [5:10:12<15:30:36, 46.53s/it]"]
    status = run(tmp_path, [*lines, watchdog.format(n=1)]).status
    assert (status.state, status.current, status.within) == ("failed", "training loop", None), status
    assert run(tmp_path, [*lines, watchdog.format(n=26214400)]).status.current == "model update"  # (its plain name)


def test_a_vllm_engine_choosing_its_executor_and_placement_group_is_its_start_up(tmp_path: Path) -> None:
    """Audit 17: an evaluation (lighteval) whose data-parallel vLLM engines hang making their Ray placement group: its
    bar's description named the phase, 'ended in Splits'; vLLM's own start-up lines say where it was."""
    lines = ["Splits:   0%|          | 0/2 [00:00<?, ?it/s]",
             "2026-05-06 08:02:11,004\tINFO worker.py:1852 -- Started a local Ray instance.",
             "(run_inference_one_model pid=5120) INFO 05-06 08:02:30 [config.py:1713] Defaulting to use ray for "
             "distributed inference",
             "(run_inference_one_model pid=5121) INFO 05-06 08:02:30 [ray_utils.py:288] No current placement group "
             "found. Creating a new placement group."]
    status = run(tmp_path, lines).status
    assert (status.current, status.state) == ("engine init", "running"), status
    assert status.recognised_last.endswith("Creating a new placement group."), status.recognised_last


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


RING_REFERENCE_HANG = [
    "(LLMRayActor pid=6120, ip=10.2.0.8) INFO 07-02 12:40:15 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 1810.2 tokens/s, Running: 48 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache "
    "usage: 33.0%, CPU KV cache usage: 0.0%.",
    "make_experience:   0%|          | 0/64 [00:00<?, ?it/s]",
    "(ReferenceModelRayActor pid=6408, ip=10.2.0.7) [rank2]:[E702 12:51:20.118204331 ProcessGroupNCCL.cpp:616] "
    "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=_ALLGATHER_BASE, "
    "NumelIn=65536, NumelOut=131072, Timeout(ms)=600000) ran for 600018 milliseconds before timing out.",
    "(ReferenceModelRayActor pid=6408, ip=10.2.0.7) [rank2]:[E702 12:51:20.119311872 ProcessGroupNCCL.cpp:1595] "
    "[PG ID 1 PG GUID 1 Rank 2] Process group watchdog thread terminated with exception: [Rank 2] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1, OpType=_ALLGATHER_BASE, NumelIn=65536, NumelOut=131072, "
    "Timeout(ms)=600000) ran for 600018 milliseconds before timing out.",
]


def test_the_reference_model_s_collective_in_a_step_is_the_reference_pass(tmp_path: Path) -> None:
    """OpenRLHF with ring attention: generation ended, make_experience began, and the reference model's first
    collective in its ring group timed out. Before: 'FAILED in nccl init', a false statement (NCCL had connected
    long before; the first collective of that group came in the step). In a step the reference model only
    computes reference log-probs. At start-up, with no step underway, the same line is still nccl init."""
    history, store = live_and_history(tmp_path, text_of(RING_REFERENCE_HANG),
                                      lambda s: s.phase_status().state == "failed")
    for status in (history.status(1e12), store.phase_status()):
        assert (status.state, status.current) == ("failed", "reference log-prob")
    assert "nccl init" not in report_text(run(tmp_path, RING_REFERENCE_HANG))
    start_up = ["(ReferenceModelRayActor pid=6408) [2025-07-02 12:41:02,553] [INFO] [comm.py:637:init_distributed] "
                "cdb=None", *RING_REFERENCE_HANG[2:]]
    assert run(tmp_path, start_up).status.current == "nccl init"


def test_the_actor_a_failed_init_names_is_the_model_it_loads(tmp_path: Path) -> None:
    """OpenRLHF: the driver's ray.get raised a RayTaskError from ReferenceModelActor.init_model_from_pretrained.
    Before: 'FAILED in config' (the driver's first line)."""
    lines = [
        "2025-06-04 21:07:15,662\tINFO worker.py:1888 -- Started a local Ray instance.",
        "Traceback (most recent call last):",
        '  File "/py/openrlhf/cli/train_ppo_ray.py", line 171, in train',
        "    ray.get(refs)",
        "ray.exceptions.RayTaskError(DistBackendError): ray::ReferenceModelActor.init_model_from_pretrained() "
        "(pid=1305117, ip=192.168.31.20, actor_id=b7d3f1a9c5e0284e6a1c3e5b01000000)",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "unhandled cuda error, NCCL version 2.21.5",
    ]
    assert (run(tmp_path, lines).status.state, run(tmp_path, lines).status.current) == ("failed", "reference init")


def test_nccl_s_own_init_errors_are_nccl_init(tmp_path: Path) -> None:
    """A vendor NCCL build's WARN lines from init.cc, then the barrier's DistBackendError. Before: 'FAILED (phase
    unknown)'."""
    lines = [
        "(ActorModelRayActor pid=16101) [node-0][16101:17880][0][init.cc:1815] NCCL WARN init.cc:1815 -> 5",
        "(ActorModelRayActor pid=16101) [node-0][16101:16101][0][init.cc:2103] NCCL WARN init.cc:2103 -> 3",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
        "internal error - please report this issue to the NCCL developers, NCCL version 2.21.5",
    ]
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "nccl init")


def test_an_engine_decoding_or_a_generate_bar_is_generation(tmp_path: Path) -> None:
    """SGLang's scheduler printed decode batches, then raised; a batch-inference bar named Generate, behind an
    outer capture stamp, then a watchdog timeout. Before: 'FAILED (phase unknown)' for both."""
    sglang = [
        "[2025-09-14 09:11:02 TP0] Decode batch. #running-req: 4, #token: 9071, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 61.02, #queue-req: 0, ",
        "[2025-09-14 09:11:06 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`.",
    ]
    report = run(tmp_path, sglang)
    assert (report.status.state, report.status.current) == ("failed", "generation")
    batch = [
        "[2024-08-20 15:31:40] Generate:  41%|████      | 1178/2871 [2:11:05<3:03:22,  6.50s/it]",
        "[2024-08-21 03:38:02] [rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=46133, OpType=_ALLGATHER_BASE, NumelIn=116391936, NumelOut=931135488, "
        "Timeout(ms)=43200000) ran for 43200088 milliseconds before timing out.",
    ]
    report = run(tmp_path, batch)
    assert (report.status.state, report.status.current) == ("failed", "generation")
    # HF datasets' `Generating train split:` bar is the dataset's, not the model's.
    assert run(tmp_path, ["Generating train split: 100%|██████████| 7473/7473 [00:00<00:00, 9.1 examples/s]"]
               ).status.current != "generation"


HF_OPTIMIZER_STEP = [
    " 48%|████▊     | 169/351 [41:52<44:37, 14.71s/it]",
    "{'loss': 1.1874, 'grad_norm': 0.3327, 'learning_rate': 5.3e-05, 'epoch': 1.44}",
    " 49%|████▉     | 172/351 [42:37<44:06, 14.78s/it]",
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/py/transformers/trainer.py", line 2534, in _inner_training_loop',
    "[rank0]:     self.optimizer.step()",
    '[rank0]:   File "/py/accelerate/optimizer.py", line 171, in step',
    "[rank0]:     self.optimizer.step(closure)",
    '[rank0]:   File "/py/torch/optim/adamw.py", line 376, in _single_tensor_adamw',
    "[rank0]: RuntimeError: expected dtype float for `end` but got dtype c10::BFloat16",
    " 49%|████▉     | 172/351 [42:51<44:35, 14.95s/it]",
]


def test_an_optimizer_step_in_the_traceback_is_the_update(tmp_path: Path) -> None:
    """HF Trainer under FSDP: the optimizer's step raised, then the loop's bar was redrawn as the process ended.
    Before: 'FAILED in training loop' (no frame named the update, and the redraw would have ended it anyway)."""
    history, store = live_and_history(tmp_path, text_of(HF_OPTIMIZER_STEP),
                                      lambda s: "BFloat16" in s.phase_status().failure
                                      and "14.95" in (s.phase_status().recognised_last or ""))
    # The engine names the rule; the store shows an HF Trainer log (no RL trainer) under the phase's plain name.
    for status, shown in ((history.status(1e12), "actor update"), (store.phase_status(), "model update")):
        assert (status.state, status.current, status.within) == ("failed", shown, "training loop")


VERL_ROLLOUT_BUILT = [
    "(TaskRunner pid=7720) Total training steps: 105",
    "(WorkerDict pid=3381) Qwen2ForCausalLM contains 32.76B parameters",
    "(WorkerDict pid=3381) Before building vllm rollout, memory allocated (GB): 1.06, memory reserved (GB): 1.42",
    "(WorkerDict pid=3381) INFO 11-14 21:41:52 model_runner.py:1025] Loading model weights took 15.4196 GB",
    "(WorkerDict pid=3381) INFO 11-14 21:42:11 distributed_gpu_executor.py:57] # GPU blocks: 9120, # CPU blocks: 4096",
    "(WorkerDict pid=3381) After building vllm rollout, memory allocated (GB): 31.72, memory reserved (GB): 33.05",
    "(WorkerDict pid=3381) After building sharding manager, memory allocated (GB): 31.72, memory reserved (GB): 33.05",
    "(WorkerDict pid=3381) INFO 11-14 21:43:40 metrics.py:406] Avg prompt throughput: 1391.7 tokens/s, Avg generation "
    "throughput: 52.4 tokens/s, Running: 64 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 6.1%",
    "(WorkerDict pid=3381) INFO 11-14 21:44:00 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 96.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 10.4%",
]


def test_verl_s_after_building_the_rollout_ends_the_engine_s_start_up(tmp_path: Path) -> None:
    """verl builds its rollout around the engine once, then says so: start-up was over, whatever the engine's
    per-step stats lines say after it. Before: 'ended in rollout init (running)', the engine's start-up hint
    (compile, capture) on a run that was generating. A trainer's engine serves no clients: not 'serving' next."""
    history, store = live_and_history(tmp_path, text_of(VERL_ROLLOUT_BUILT),
                                      lambda s: "rollout init" in [p.name for p in s.phase_status().timeline])
    for status in (history.status(1e12), store.phase_status()):
        span = [p for p in status.timeline if p.name == "rollout init"]
        assert span and span[-1].status == "done", status
    text = report_text(run(tmp_path, VERL_ROLLOUT_BUILT))
    # After it, the engine's stats lines count requests in flight: the words place it in generation, a guess it marks.
    assert "ended, likely in generation" in text and "a guess" in text and "in rollout init" not in text, text
    assert "serving" not in text and "compile, capture" not in text, text


def test_a_driver_that_says_its_engines_are_up_and_broadcasts_a_parameter_is_in_weight_sync(tmp_path: Path) -> None:
    """open-instruct (an OpenRLHF-style driver): vLLM 0.6's engine start-up, the driver's `vllm engines and actor models
    initialized`, then `broadcasting model.embed_tokens.weight` and silence: the first weight push hung. Before:
    'ended in engine init (unfinished)', which the driver's own line contradicts."""
    lines = [
        "2025-03-04 09:12:10 - INFO - __main__ - Loading policy model from /models/tulu-8b-sft",
        "INFO 03-04 09:12:41 llm_engine.py:234] Initializing an LLM engine (v0.6.6) with config: model='/models/tulu-"
        "8b-sft', tensor_parallel_size=1",
        "INFO 03-04 09:12:58 model_runner.py:1094] Loading model weights took 14.9889 GB",
        "INFO 03-04 09:13:19 model_runner.py:1535] Graph capturing finished in 16 secs, took 0.33 GiB",
        "2025-03-04 09:13:22 - INFO - __main__ - ======== ✅ vllm engines and actor models initialized =========",
        "2025-03-04 09:13:24 - INFO - __main__ - broadcasting model.embed_tokens.weight",
    ]
    last = datetime(2025, 3, 4, 9, 13, 24).timestamp()
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: (s.phases.last_activity or 0) >= last)
    for status in (history.status(1e12), store.phase_status()):
        (engine, up), sync = [(p.name, p.status) for p in status.timeline]
        assert engine in ("rollout init", "engine init") and up == "done" and sync == ("weight sync", "running")


def test_a_compose_service_s_prefix_is_peeled_like_ray_s(tmp_path: Path) -> None:
    """`docker compose logs` puts `vllm  | ` before every line of the service. Before: 'no timestamps', the failure
    `Traceback (most recent call last):` with 'the exception is not in the log' beside the RuntimeError's own line.
    Now the stamps, the server's phase, the engine's frames and its exception are read as without the prefix."""
    svc = "vllm-1  | "
    lines = [
        svc + "INFO 04-02 09:15:40 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000",
        svc + "INFO:     Application startup complete.",
        svc + "INFO 04-02 09:17:02 [engine.py:310] Added request cmpl-1f2e3d4c5b6a-0.",
        svc + "ERROR 04-02 09:17:03 [engine.py:160] RuntimeError('CUDA error: an illegal memory access was "
        "encountered')",
        svc + "ERROR 04-02 09:17:03 [engine.py:160] Traceback (most recent call last):",
        svc + 'ERROR 04-02 09:17:03 [engine.py:160]   File "/usr/lib/python3/dist-packages/vllm/engine/multiprocessing/'
        'engine.py", line 221, in run_engine_loop',
        svc + "ERROR 04-02 09:17:03 [engine.py:160]     request_outputs = self.engine_step()",
        svc + "ERROR 04-02 09:17:03 [engine.py:160] RuntimeError: CUDA error: an illegal memory access was encountered",
        svc + "CRITICAL 04-02 09:17:03 [launcher.py:116] MQLLMEngine is already dead, terminating server process",
    ]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    for status in (history.status(1e12), store.phase_status()):
        assert status.state == "failed" and status.failure.endswith(
            "RuntimeError: CUDA error: an illegal memory access was encountered")
        assert status.timeline[0].name == "serving" and status.timeline[0].start is not None
    assert store.phase_status().current == "generation"  # the words of the request it was serving: a guess
    text = report_text(run(tmp_path, lines))
    assert "no timestamps" not in text and "not in the log" not in text and "HYDRA" not in text, text


def loki(lines: list[tuple[int, str]]) -> list[str]:
    """Lines as Grafana's Loki exports a search: newest first, each behind its capture time with a zone offset."""
    return [f"2025-07-01T00:{56 + s // 60:02d}:{s % 60:02d}+08:00\t{text}" for s, text in reversed(lines)]


SGLANG_CRASH = [
    (41, "[2025-06-30 16:56:41 TP0] Decode batch. #running-req: 37, #token: 48211, token usage: 0.09, cuda graph: "
         "True, gen throughput (token/s): 1218.44, #queue-req: 0"),
    (44, '[2025-06-30 16:56:44] INFO:     10.80.41.9:60318 - "POST /v1/chat/completions HTTP/1.1" 200 OK'),
    (62, "[2025-06-30 16:57:02 TP3] Scheduler hit an exception: Traceback (most recent call last):"),
    (62, '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 661, in event_loop_overlap'),
    (62, "    self.process_batch_result(tmp_batch, tmp_result)"),
    (62, '  File "/sgl/python/sglang/srt/constrained/xgrammar_backend.py", line 88, in fill_vocab_mask'),
    (62, "    self.matcher.fill_next_token_bitmask(vocab_mask, idx)"),
    (62, "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (62, "[2025-06-30 16:57:02 TP1] Scheduler hit an exception: Traceback (most recent call last):"),
    (62, "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
         "[10.80.63.21]:48217"),
    (64, "[2025-06-30 16:57:04] Child process unexpectedly failed with an exit code 131. pid=547"),
]


def test_a_log_search_s_export_newest_line_first_is_read_bottom_up(tmp_path: Path) -> None:
    """An SGLang server's log as Loki exports it: newest first. Before: 'ended in generation (running)', the crash
    read before the decode lines that came before it. Now read bottom up, said so, each line cited by its number in
    the file; and the other rank's lost connection is a consequence of the fault, not the failure."""
    lines = loki(SGLANG_CRASH)
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "generation")
    assert report.status.failure.endswith("RuntimeError: CUDA error: an illegal memory access was encountered")
    failed = next(e for e in report.status.evidence if e.claim == "failed")
    assert lines[failed.line - 1].endswith("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert "read bottom up" in report_text(report)
    # The same log in the order it was written is read as written.
    forward = run(tmp_path, lines[::-1])
    assert forward.status.failure == report.status.failure and not forward.newest_first


def test_a_native_crash_in_a_step_is_named_by_its_what_line_and_not_said_to_have_a_traceback(tmp_path: Path) -> None:
    """A tool worker of a verl agent loop dies on an uncaught C++ exception. Before: the failure was `terminate called
    after throwing …` (its `what():` line, which names it, was read past) and the cause said 'a step raised … its
    traceback's last frames say which part', where no Python traceback exists."""
    tool = "(VisualExecutionWorker pid=57311) "
    lines = [
        "(TaskRunner pid=54410) step:52 - actor/pg_loss:0.013 - critic/score/mean:0.288 - timing_s/step:274.1",
        "(TaskRunner pid=54410) Training Progress:  17%|█▋        | 52/300 [3:58:51<18:55:40, 274.76s/it]",
        tool + "terminate called after throwing an instance of 'std::runtime_error'",
        tool + "  what():  cannot open display surface",
        tool + "Fatal Python error: Aborted",
    ]
    report = run(tmp_path, lines)
    assert report.status.state == "failed" and report.status.failure == "what():  cannot open display surface"
    causes = " ".join(report.status.hint.causes if report.status.hint else [])
    assert "died in native code" in causes and "traceback's last frames" not in causes, causes


def test_a_v0_server_that_gave_up_on_its_engine_failed(tmp_path: Path) -> None:
    """vLLM V0's front end got no heartbeat from its engine process and terminated the server. Before: 'ended, likely in
    generation' (running): neither line was a failure, and the workers' later shared-memory warnings read as a wait."""
    lines = [
        "INFO 10-12 22:20:11 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 26.1 "
        "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 18.5%",
        "ERROR 10-12 22:20:23 client.py:244] TimeoutError('No heartbeat received from MQLLMEngine')",
        "CRITICAL 10-12 22:20:26 launcher.py:99] MQLLMEngine is already dead, terminating server process",
        "(VllmWorkerProcess pid=4211) WARNING 10-12 22:21:14 shm_broadcast.py:396] No available block found in 60 "
        "second.",
    ]
    report = run(tmp_path, lines)
    assert report.status.state == "failed" and "No heartbeat received from MQLLMEngine" in report.status.failure
    assert any(f.name == "engine-dead" for f in report.findings)


def test_a_fast_undescribed_bar_before_any_step_was_data_not_the_loop(tmp_path: Path) -> None:
    """OpenRLHF maps its prompt dataset under a bar with no description (`0%| 0/80000`, then 9,500 it/s), then builds
    the actor's DeepSpeed engine, and hangs. Before: 'training loop', whose hang hint named generation, on a run that
    never reached a step. Now that bar was the dataset's, done; a slow undescribed bar stays the loop."""
    actor = "(ActorModelRayActor pid=85512) "
    fast = ["  0%|          | 0/80000 [00:00<?, ?it/s]",
            " 47%|████      | 38145/80000 [00:04<00:04, 9554.85it/s]",
            "100%|██████████| 80000/80000 [00:09<00:00, 9508.87it/s]",
            actor + "[2024-02-17 11:42:52,904] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: "
            "version=0.13.1, git-hash=unknown, git-branch=unknown",
            actor + "[2024-02-17 11:42:55,319] [INFO] [config.py:988:print]   zero_optimization_stage ........ 2"]
    names = [(span.name, span.status) for span in run(tmp_path, fast).status.timeline]
    assert names[0] == ("dataset generation", "done") and "training loop" not in [n for n, _ in names], names
    slow = [line.replace("9554.85it/s", "2.31s/it").replace("9508.87it/s", "2.30s/it") for line in fast]
    assert run(tmp_path, slow).status.timeline[0].name == "training loop"


def test_an_mpirun_tag_and_its_relay_time_are_peeled_like_ray_s_prefix(tmp_path: Path) -> None:
    """`mpirun --tag-output --timestamp-output` puts `Tue May 20 21:16:06 2025[1,0]<stdout>:` before every line.
    Before (audit 11, verl#1657's shape): 'no timestamps', and the failure shown was Hydra's banner, the RuntimeError
    under the tag unread. Now the relay times are the lines' times, and Ray's prefix and the exception are read."""
    def tag(second: int, text: str) -> str:
        return f"Tue May 20 21:{9 + second // 60:02d}:{second % 60:02d} 2025[1,0]<stdout>:{text}"

    lines = [
        tag(0, "(main_task pid=4410) step:19 - actor/pg_loss:0.011 - timing_s/gen:402.1 - timing_s/step:597.6"),
        tag(371, "(main_task pid=4410) step:20 - actor/pg_loss:0.009 - timing_s/gen:398.7 - timing_s/step:592.0"),
        tag(372, "(main_task pid=4410) local_global_step_folder: /workspace/ckpts/global_step_20"),
        tag(385, "Error executing job with overrides: ['trainer.save_freq=20']"),
        tag(385, "Traceback (most recent call last):"),
        tag(385, '  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1031, in _save_checkpoint'),
        tag(385, "    self.actor_rollout_wg.save_checkpoint(actor_local_path)"),
        tag(385, "RuntimeError: Parent directory /workspace/ckpts/global_step_20 does not exist."),
    ]
    report = run(tmp_path, lines)
    status = report.status
    assert status.state == "failed" and status.failure.startswith("RuntimeError: Parent directory"), status.failure
    assert status.timeline[0].start == datetime(2025, 5, 20, 21, 9, 0).timestamp(), status.timeline
    assert "no timestamps" not in report_text(report)


def test_sagemakers_mpi_tag_naming_the_rank_and_host_is_peeled_too(tmp_path: Path) -> None:
    """Audit 18 (its other observations): SageMaker's MPI runs tag every line `[1,mpirank:0,algo-1]<stdout>:`. Before:
    the tag stayed in the message, so no rule anchored at a message's start read the lines behind it (Lightning's
    epoch bar: 'likely in training loop', a guess from its words, and no bar)."""
    def tag(rank: int, text: str) -> str:
        return f"[1,mpirank:{rank},algo-2]<stdout>:{text}"

    lines = [tag(0, f"Epoch 0:  {n * 25}%|██▌     | {n * 10}/40 [00:{n * 21:02d}<01:03,  2.11s/it, loss=2.3, v_num=0]")
             for n in (1, 2)]
    status = run(tmp_path, lines).status
    assert status.current == "training loop" and status.worded is None, status


def test_the_evaluation_after_training_completed_is_not_the_loops_bar(tmp_path: Path) -> None:
    """HF Trainer's final evaluation draws its own bar once training completed: the loop's bar stays where training
    left it (audit 11, a resumed LLaMA-Factory run: "the loop's bar is at 1605/1605", the evaluation's, not 402/402)."""
    lines = [
        "[INFO|2025-10-22 11:00:42] trainer.py:2468 >>   Continuing training from global step 402",
        "100%|██████████| 402/402 [00:00<00:00, 41201.88it/s]",
        "[INFO|2025-10-22 11:00:43] trainer.py:2718 >> ",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "[INFO|2025-10-22 11:00:58] trainer.py:4643 >> ",
        "***** Running Evaluation *****",
        "100%|██████████| 1605/1605 [01:55<00:00, 13.90it/s]",
    ]
    text = report_text(run(tmp_path, lines))
    assert "the loop's bar is at 402/402" in text, text


def test_the_words_of_the_bar_that_named_a_row_rename_it_and_leave_no_row_passed(tmp_path: Path) -> None:
    """A bar no rule knows names the row (`Creating dataset split`); its words name the phase (data): one activity,
    one row. Before (audit 11, DeepSpeed-Chat's shape): `Creating dataset split ? passed` beside `dataset generation
    failed (a guess)`, though the bar never reached its total."""
    lines = [
        "[2024-02-11 08:30:05,120] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed with "
        "backend nccl",
        "Creating dataset split:  10%|█         | 100021/1000000 [01:40<15:00, 999.80it/s]",
        "Creating dataset split:  55%|█████▌    | 550107/1000000 [09:10<07:30, 999.70it/s]",
        "Creating dataset split:  97%|█████████▋| 970010/1000000 [16:10<00:30, 999.60it/s][E ProcessGroupNCCL.cpp:474] "
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=1800000) ran for 1800233 milliseconds before timing out.",
        "Traceback (most recent call last):",
        '  File "/srv/chat/utils/data/data_utils.py", line 397, in create_prompt_dataset',
        "    torch.distributed.barrier()",
        "RuntimeError: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800233 milliseconds before timing out.",
    ]
    rows = [(s.name, s.status) for s in run(tmp_path, lines).status.timeline]
    assert "passed" not in [status for _, status in rows] and rows[-1][1] == "failed", rows


def test_a_plain_servers_uvicorn_start_up_opens_no_engine_row(tmp_path: Path) -> None:
    """uvicorn's `Application startup complete.` ends a trainer's engine start-up (verl's server-mode engines); a
    plain `vllm serve` prints it after `Starting vLLM API server`: no engine start-up row after serving began."""
    lines = ["INFO 03-25 15:58:02 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000",
             "INFO:     Started server process [1]",
             "INFO:     Application startup complete."]
    assert [s.name for s in run(tmp_path, lines).status.timeline] == ["serving"]


def test_nccls_banner_is_its_first_communicator_starting(tmp_path: Path) -> None:
    """verl's workers load the actor on 4 GPUs of one node and hang where NCCL prints its banner (audit 13, GPUs that
    could not talk peer to peer). Before: "ended in actor init", the banner among lines no rule knows; now in nccl
    init (nested in the actor's start-up), with the one-node advice."""
    lines = [
        "(TaskRunner pid=9301) Using dataset class: RLHFDataset",
        "(WorkerDict pid=9402) Model config after override: Qwen2Config {",
        '(WorkerDict pid=9402)   "vocab_size": 151936',
        "(WorkerDict pid=9402) }",
        "(WorkerDict pid=9402) NCCL version 2.21.5+cuda12.4",
    ]
    report = run(tmp_path, lines)
    assert report.status.current == "nccl init"
    assert "NCCL_P2P_DISABLE=1" in report_text(report)
    # a version printed in another shape (an environment report) starts nothing (verl's config print names no role:
    # a model's load, audit 23)
    assert run(tmp_path, [*lines[:2], "(WorkerDict pid=9402) NCCL version: 2.21.5"]).status.current == "model load"


def test_verls_chat_scheduler_rounds_are_generation(tmp_path: Path) -> None:
    """HELDOUT15 (read after it was retired): verl's async multi-turn rollout prints `[NaiveChatCompletionScheduler]
    generate_sequences sampling params: …` per round and `… generate_sequences done`; an engine that died in round 10
    read 'FAILED (phase unknown)'."""
    lines = []
    for k in range(1, 4):
        lines += [f"Round {k}", "[NaiveChatCompletionScheduler] generate_sequences sampling params: {'n': 1, "
                  "'max_completion_tokens': 2048, 'temperature': 1.0}"]
        if k < 3:
            lines.append("[NaiveChatCompletionScheduler] generate_sequences done")
    lines.append("ERROR 03-14 09:12:33 [core.py:390] ray.exceptions.ActorDiedError: The actor died unexpectedly "
                 "before finishing this task.")
    log = tmp_path / "rollout.log"
    log.write_text("".join(line + "\n" for line in lines))
    report = replay([str(log)], load_config(None))
    assert (report.status.current, report.status.state) == ("generation", "failed")
    assert "FAILED in generation" in report_text(report)


def test_lightnings_process_group_init_line_is_nccl_init(tmp_path: Path) -> None:
    """HELDOUT15 (read after it was retired): Lightning's `Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/8`, then
    nothing, read 'ended (phase unknown)'."""
    lines = ["[NeMo I 2026-02-09 16:07:34 megatron_base_model:205] Padded vocab_size: 50304",
             "0: Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
             "1: Initializing distributed: GLOBAL_RANK: 4, MEMBER: 5/8"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    assert replay([str(log)], load_config(None)).status.current == "nccl init"


def test_lightnings_sanity_check_is_validation(tmp_path: Path) -> None:
    """A Lightning run stuck in its sanity check (`Sanity Checking: 0it [00:00, ?it/s]` last) is in validation, not in
    the process group's init before it."""
    lines = ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
             "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2", "59.8 K    Total params",
             "Sanity Checking: 0it [00:00, ?it/s]"]
    log = tmp_path / "fit.log"
    log.write_text("".join(line + "\n" for line in lines))
    assert replay([str(log)], load_config(None)).status.current == "validation"


def test_a_death_after_two_parts_of_a_step_with_no_loop_line_is_in_the_loop(tmp_path: Path) -> None:
    """A hybrid-engine RL log cut to its last step: the engines took new weights, generated and went to sleep, then
    the raylet reported a worker's death; no line of the loop's own (a bar, a step record) is in the text. Two parts
    of a step ran, so the loop ran them and the death came in it. Before: 'FAILED after generation'. A generation
    alone (an offline script) still fails after it."""
    parts = [
        "(LLMRayActor pid=4101) update weight: model.layers.0.mlp.up_proj.weight, dtype: torch.bfloat16, shape: "
        "torch.Size([8192, 2048])",
        "(LLMRayActor pid=4101) INFO 05-14 09:12:40 executor_base.py:219] It took 2.4 seconds to wake up.",
        "Processed prompts: 100%|██████████| 32/32 [00:14<00:00,  2.21it/s, est. speed input: 811.20 toks/s, "
        "output: 96.40 toks/s]",
        "(LLMRayActor pid=4101) INFO 05-14 09:13:02 executor_base.py:208] It took 1.1 seconds to fall asleep.",
    ]
    death = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
             "troubleshoot the problem, check the logs for the dead worker. Worker PID: 4190 Worker exit type: "
             "SYSTEM_ERROR")
    status = run(tmp_path, [*parts, death]).status
    assert (status.state, status.current) == ("failed", "training loop")
    status = run(tmp_path, [*parts[2:], death]).status
    assert status.state == "failed" and status.current != "training loop"


def test_an_engines_dump_of_a_failed_model_execution_in_the_loop_is_generation(tmp_path: Path) -> None:
    """vLLM's model runner writes the input of an execute_model that raised (`Writing input of failed execution`)
    before the worker's watchdog aborts: after the loop's steps, the engine was generating. Before: 'FAILED in
    training loop'. At the engine's start-up its profile run executes the model too: no generation there."""
    dump = [
        "(WorkerDict pid=7301) INFO 03-02 08:15:40 model_runner_base.py:120] Writing input of failed execution to "
        "/tmp/err_execute_model_input_20250302-081540.pkl...",
        "(WorkerDict pid=7301) [rank2]:[E302 08:15:40.112233445 ProcessGroupNCCL.cpp:1515] [PG 3 Rank 2] Process "
        "group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
    ]
    steps = [f"(main_task pid=7100) step:{n} - actor/pg_loss:0.01{n} - timing_s/gen:120.{n} - timing_s/step:300.{n}"
             for n in (1, 2)]
    status = run(tmp_path, [*steps, *dump]).status
    assert (status.state, status.current) == ("failed", "generation")
    start_up = ["(WorkerDict pid=7301) INFO 03-02 08:12:01 llm_engine.py:232] Initializing an LLM engine (v0.6.3) "
                "with config: model='/m/q7b'"]
    status = run(tmp_path, [*start_up, *dump]).status
    assert status.state == "failed" and status.current != "generation"


def test_a_datasets_map_or_filter_bar_names_no_phase(tmp_path: Path) -> None:
    """HF datasets' `Map:` / `Filter:` bars (counted in examples/s) prepare the data: before, with no phase known,
    the timeline got rows named `Map` and `Filter`, and a crash there would read 'FAILED in Filter'."""
    lines = [
        "Map (num_proc=8): 100%|██████████| 52310/52310 [00:14<00:00, 3702.55 examples/s]",
        "Filter: 100%|██████████| 52310/52310 [00:01<00:00, 40211.70 examples/s]",
        "Filter:  40%|████      | 20000/50000 [00:02<00:03, 9000.00 ex/s]",
    ]
    result = run(tmp_path, lines)
    names = [s.name for s in result.status.timeline]
    assert "Map" not in names and "Filter" not in names and result.status.current not in ("Map", "Filter"), names
