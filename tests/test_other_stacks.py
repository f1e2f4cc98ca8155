"""Logs of stacks no framework profile knows (issue 25, audit 14: logs of fairseq, SGLang, old DeepSpeed, Lightning,
accelerate and torch distributed, written in the shapes users posted with invented values): their own lines for a
finished run, a validation, an old stamp, a server's start-up are read by their structure, and nothing false is said
where no rule knows them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gkdtop.replay import report_text
from tests.test_phase_nesting import run, text_of
from tests.verlrun import live_and_history


def _fairseq(epochs: int, done: bool) -> list[str]:
    """fairseq's hydra train: epochs, each validated, then `done training in N seconds`."""
    out = ["2021-01-05 21:03:12 | INFO | fairseq_cli.train | {'_name': None, 'common': {'log_format': 'json'}}"]
    for e in range(1, epochs + 1):
        m = 3 + 2 * e
        out += [
            f"2021-01-05 21:{m:02d}:19 | INFO | fairseq.trainer | begin training epoch {e}",
            f"2021-01-05 21:{m + 1:02d}:51 | INFO | fairseq_cli.train | begin validation on \"valid\" subset",
            f"2021-01-05 21:{m + 1:02d}:53 | INFO | valid | {{\"epoch\": {e}, \"valid_loss\": \"{700 - 20 * e}.000\", "
            f"\"valid_wer\": \"{90 - e}.500\", \"valid_num_updates\": \"{31 * e}\"}}",
            f"2021-01-05 21:{m + 1:02d}:53 | INFO | fairseq_cli.train | end of epoch {e} (average epoch stats below)",
            f"2021-01-05 21:{m + 1:02d}:53 | INFO | train | {{\"epoch\": {e}, \"train_loss\": \"{990 - 30 * e}.000\", "
            f"\"train_num_updates\": \"{31 * e}\", \"train_wall\": \"{100 * e}\"}}",
        ]
    if done:
        out.append(f"2021-01-05 21:{5 + 2 * epochs:02d}:13 | INFO | fairseq_cli.train | done training in 2550.4 "
                   "seconds")
    return out


def test_fairseqs_done_training_is_finished_not_a_stall(tmp_path: Path) -> None:
    """Audit 14: a fairseq fine-tune that finished, read 50 minutes later. Before: 'STALLED … a rank hangs in a
    collective' in a snapshot, and no timeline in replay."""
    lines = _fairseq(4, done=True)
    history, store = live_and_history(tmp_path, text_of(lines),
                                      lambda s: s.phase_status().current == "finished")
    for status in (history.status(1e12), store.phase_status()):
        assert (status.current, status.state) == ("finished", "done")
    assert [s.name for s in history.spans()] == ["training loop", "finished"]


def test_fairseqs_validation_is_a_part_of_its_epoch(tmp_path: Path) -> None:
    """The same run cut inside its third validation: the epoch's validation, not the loop alone."""
    lines = _fairseq(3, done=False)[:-3]
    report = run(tmp_path, lines)
    assert report.status.current == "validation" and report.status.within == "training loop"


def test_a_guess_from_the_tails_words_cites_the_file_it_read(tmp_path: Path) -> None:
    """Audit 14: where no rule knew a line of the log, the guess from its last lines' words cited ':143', a line
    number with no file."""
    lines = ["2021-01-05 21:45:11 | INFO | app | reading things",
             "2021-01-05 21:45:13 | INFO | app | end of epoch 25 (average epoch stats below)",
             "2021-01-05 21:45:14 | INFO | app | all quiet"]
    said = report_text(run(tmp_path, lines), why=True)
    assert "(a guess, 1 line before the end): train.log:2  `" in said


SGLANG_START = [
    "[2025-03-03 18:41:19 TP0] Init torch distributed begin.",
    "[2025-03-03 18:41:33 TP0] Init torch distributed ends. mem usage=0.31 GB",
    "[2025-03-03 18:41:33 TP0] Load weight begin. avail mem=78.12 GB",
    "Loading safetensors checkpoint shards:  50% Completed | 82/163 [02:11<02:10,  1.61s/it]",
    "Loading safetensors checkpoint shards: 100% Completed | 163/163 [04:22<00:00,  1.61s/it]",
    "[2025-03-03 18:45:58 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=37.04 GB",
    "[2025-03-03 18:46:01 TP0] Memory pool end. avail mem=9.87 GB",
    *(f"  0%|          | 0/23 [00:00<?, ?it/s][2025-03-03 18:46:44 TP{k}] Capture cuda graph begin. This can take "
      "up to several minutes." for k in range(4)),
    "2025-03-03 18:46:45,039 - INFO - flashinfer.jit: Loading JIT ops: batch_decode_with_kv_cache_dtype_q_f16",
]


def test_an_sglang_server_capturing_graphs_is_in_its_engine_start_not_a_checkpoint_load(tmp_path: Path) -> None:
    """Audit 14: SGLang (TP8) hung in CUDA graph capture. Before: 'ended, likely in checkpoint load' with advice about
    'Load from checkpoint folder' and an optimizer (the shards' `100%` was read as a metric and dropped, leaving
    'checkpoint' words), and 'the loop's bar is at 0/23' from the capture's bar glued before its line."""
    report = run(tmp_path, SGLANG_START)
    said = report_text(report)
    assert report.status.current == "engine init" and "checkpoint" not in said.split("\n\n")[1]
    assert "loop's bar" not in said and "enforce_eager" in said


def test_words_before_a_later_line_of_the_rules_phase_name_no_other(tmp_path: Path) -> None:
    """A line with a checkpoint's words inside vLLM's start-up, then the KV cache's size (a line of the engine's start):
    the engine was still starting after those words. Before: 'ended, likely in checkpoint load'."""
    lines = [
        "INFO 03-03 18:41:19 [core.py:65] Initializing a V1 LLM engine (v0.8.5) with config: model='/m/q7b'",
        "INFO 03-03 18:41:40 [gpu_model_runner.py:1329] Model loading took 14.2 GiB and 20.1 seconds",
        "INFO 03-03 18:41:42 [lora.py:10] resuming the adapter from checkpoint /ckpt/step_100",
        "INFO 03-03 18:41:50 [kv_cache_utils.py:634] GPU KV cache size: 512,336 tokens",
        "INFO 03-03 18:41:51 [lora.py:11] warm-up",
    ]
    assert run(tmp_path, lines).status.current == "engine init"
    assert run(tmp_path, lines[:3]).status.current == "checkpoint load"  # with nothing after them, the words stand


def test_old_deepspeeds_stamp_after_its_level_and_its_step_lines(tmp_path: Path) -> None:
    """Audit 14: DeepSpeed 0.1's `[INFO 2020-06-08 05:52:14] rank:0 step=40, skipped=0, …` lines. Before: 'no
    timestamps: duration unknown' and 'ended after model load (next expected: training loop)' on a run 40 steps in."""
    lines = ["[INFO 2020-06-08 05:51:40] DeepSpeed info: version=0.1.0, git-hash=4d7a2b1, git-branch=master",
             "[INFO 2020-06-08 05:51:49] Using DeepSpeed Optimizer param name adam as basic optimizer",
             "[INFO 2020-06-08 05:51:50] DeepSpeed Final Optimizer = FP16_Optimizer"]
    for step in range(10, 50, 10):
        lines += [f"time (ms) | forward_microstep: {180 + step / 10:.2f} | backward_microstep: 332.81 | "
                  "step_microstep: 0.03"] * 3
        lines.append(f"[INFO 2020-06-08 05:{51 + (50 + 6 * step // 10) // 60}:{(50 + 6 * step // 10) % 60:02d}] "
                     f"rank:0 step={step}, skipped=0, lr=[3e-05], mom=[[0.9, 0.999]]")
    report = run(tmp_path, lines)
    said = report_text(report)
    assert said.startswith(f"{tmp_path / 'train.log'}: 34s from 05:51:40 to 05:52:14")
    assert report.status.current == "training loop" and report.steps["last"] == 40


def test_lightnings_validation_bar_is_the_epochs_validation_and_its_elapsed_bounds_an_unstamped_run(
        tmp_path: Path) -> None:
    """Audit 14: PyTorch Lightning's `Validating:  96%|…` bars inside epoch 54 (its epoch bar goes on counting), no
    stamps. Before: no validation, and 'no timestamps: duration unknown' though its bars state 1h13m."""
    lines = [
        "Epoch 54:  97%|█████████▋| 2780/2864 [58:20<01:45,  1.26s/it, loss=0.527, v_num=3]",
        "Validating:  88%|████████▊ | 261/296 [13:21<01:47,  3.07s/it]",
        "Validating:  96%|█████████▌| 285/296 [14:35<00:33,  3.07s/it]",
    ]
    report = run(tmp_path, lines)
    assert (report.status.current, report.status.within) == ("validation", "training loop")
    assert report_text(report).startswith(
        f"{tmp_path / 'train.log'}: no timestamps; ≥58m20s (a line states something ran that long)")
    after = run(tmp_path, [*lines, "Epoch 54: 100%|██████████| 2864/2864 [1:13:28<00:00,  1.41s/it, loss=0.527]"])
    assert after.status.current == "training loop" and after.ran_for == 4408.0


def test_a_timeout_after_a_finished_phase_began_when_its_wait_did(tmp_path: Path) -> None:
    """Audit 14 (open-r1 with vLLM on its own GPU): the first broadcast after the engine started timed out 30 minutes
    later. Before: '10:34:21  after engine init … failed', the wait's start put at the failure's stamp."""
    lines = [
        "INFO 04-22 10:03:41 [core.py:65] Initializing a V1 LLM engine (v0.8.3) with config: model='/m/q1.5b'",
        "INFO 04-22 10:04:13 [core.py:159] init engine (profile, create kv cache, warmup model) took 31.80 seconds",
        "[rank2]:[E422 10:34:21.911482604 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for "
        "1800027 milliseconds before timing out.",
    ]
    said = report_text(run(tmp_path, lines))
    assert "≤10:04:21  after engine init    (unfinished)  failed" in said and "  32s  done" in said


def test_steps_that_time_themselves_bound_a_run_stamped_only_at_start_up(tmp_path: Path) -> None:
    """Audit 14 (verl, a slow update): vLLM's stamps end at start-up, then two steps of `timing_s/step:7554.6` and
    `7479.3`. Before: '7m35s from 20:41:05 to 20:48:41'."""
    runner = "(TaskRunner pid=31020) "
    lines = [
        "(WorkerDict pid=31177) INFO 03-06 20:41:05 config.py:1020] Defaulting to use external_launcher",
        "(WorkerDict pid=31177) INFO 03-06 20:48:41 model_runner.py:1115] Loading model weights took 7.6519 GB",
        *(f"{runner}step:{n} - actor/pg_loss:0.002 - timing_s/gen:{g} - timing_s/update_actor:{u} - "
          f"timing_s/step:{g + u + 3.1:.3f}" for n, g, u in ((1, 1211.2, 6340.3), (2, 1190.6, 6285.6))),
    ]
    report = run(tmp_path, lines)
    assert report.ran_for is not None and abs(report.ran_for - 15033.9) < 0.01
    assert report_text(report).startswith(f"{tmp_path / 'train.log'}: ≥4h10m (its steps' own times add up to that)")


def test_a_nccl_init_hang_with_nccls_debug_output_is_not_told_to_turn_it_on(tmp_path: Path) -> None:
    """Audit 14 (accelerate, `NCCL_DEBUG=INFO accelerate launch …`, NCCL 2.10: no Init START lines): hung in the first
    collective. Before: 'Run once with NCCL_DEBUG=INFO' on a log full of its output."""
    lines = [
        "[2021-06-02 11:20:03,118] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable",
        *(f"gpu-a1:{2210 + r}:{2210 + r} [{r}] NCCL INFO Bootstrap : Using eth0:10.2.0.11<0>" for r in range(2)),
        "gpu-a1:2210:2210 [0] NCCL INFO NET/Socket : Using [0]eth0:10.2.0.11<0>",
        "NCCL version 2.10.3+cuda11.1",
    ]
    said = "\n".join(stalled_hint(tmp_path, lines))
    assert "Run once with NCCL_DEBUG=INFO" not in said and "NCCL_DEBUG=INFO is on: compare the ranks'" in said
    plain = "\n".join(stalled_hint(tmp_path / "plain", [lines[0], lines[-1]]))
    assert "Run once with NCCL_DEBUG=INFO" in plain and "NCCL_DEBUG=INFO is on" not in plain


def stalled_hint(tmp_path: Path, lines: list[str]) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    report = run(tmp_path, lines)  # a log that ends in nccl init: what to check if the job stopped there
    assert report.status.current == "nccl init" and report.open_end is not None and report.open_end.hint is not None
    return report.open_end.hint.actions


def test_an_evaluations_undescribed_bars_do_not_take_its_words_back(tmp_path: Path) -> None:
    """A guard of the rule above (the posted corpus's ZeRO-3 evaluation hang): HF's `***** Running Evaluation *****`,
    then the evaluation's undescribed bars, which match the loop's start too; the words stand."""
    lines = [
        "[INFO|trainer.py:1683] 2023-02-10 19:14:34,107 >> ***** Running training *****",
        "[INFO|trainer.py:2964] 2023-02-10 19:15:37,822 >> ***** Running Evaluation *****",
        "[INFO|trainer.py:2966] 2023-02-10 19:15:37,822 >>   Num examples = 339",
        "  0%|          | 0/170 [00:00<?, ?it/s]",
        "  7%|▋         | 12/170 [00:01<00:21,  7.25it/s]",
    ]
    assert run(tmp_path, lines).status.current == "validation"


def test_a_pdsh_hosts_exception_line_and_the_store_based_barrier(tmp_path: Path) -> None:
    """HELDOUT11 after it was scored (DeepSpeed with the HF Trainer, 128 ranks under pdsh): ranks waited in torch's
    store based barrier, then a broadcast raised an NCCL internal error. Before: 'FAILED in dataset generation' and 'the
    exception is not in the log: the traceback is cut', the host before the exception line hiding it."""
    host = "compute-dy-p4d24xl-41: "
    lines = [
        f"{host}Running tokenizer on dataset:  92%|█████████▏| 33000/35871 [00:41<00:03, 802.11ex/s]",
        *(f"{host}INFO:root:Waiting in store based barrier to initialize process group for rank: {r}, key: "
          "store_based_barrier_key:2 (world_size=128, worker_count=127, timeout=0:30:00)" for r in (208, 211)),
        f"{host}Traceback (most recent call last):",
        f'{host}  File "/fsx/conda/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", line 1076, in '
        "broadcast",
        f"{host}    work = group.broadcast([tensor], opts)",
        f"{host}RuntimeError: NCCL error in: /opt/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:911, internal error",
    ]
    report = run(tmp_path, lines)
    assert (report.status.current, report.status.state) == ("nccl init", "failed")
    assert report.status.failure.startswith(f"{host}RuntimeError: NCCL error in:")
    assert "traceback is cut" not in report_text(report)


def test_a_fatal_errors_dump_of_the_failing_thread_alone_is_read(tmp_path: Path) -> None:
    """HELDOUT11 after it was scored (Search-R1 on verl): a WorkerDict died of SIGFPE; faulthandler dumped the failing
    thread alone (`Stack (most recent call first):`, frames `line 40 in apply`) in vLLM's logits processor. Before:
    'FAILED (phase unknown)': only the all-threads form (`Current thread 0x…`) was read."""
    worker = "(WorkerDict pid=402266) "
    site = "/envs/sr1/lib/python3.9/site-packages"
    lines = [
        f"{worker}[2026-07-11 19:37:54,707 E 402266 402266] logging.cc:496: *** SIGFPE received at time=1783798674 "
        "on cpu 63 ***",
        f"{worker}Fatal Python error: Floating point exception",
        f"{worker}",
        f"{worker}Stack (most recent call first):",
        f'{worker}  File "{site}/vllm/model_executor/layers/vocab_parallel_embedding.py", line 40 in apply',
        f'{worker}  File "{site}/vllm/model_executor/layers/logits_processor.py", line 83 in _get_logits',
        f'{worker}  File "{site}/vllm/model_executor/layers/logits_processor.py", line 61 in forward',
        f'{worker}  File "{site}/torch/nn/modules/module.py", line 1562 in _call_impl',
    ]
    assert run(tmp_path, lines).status.current == "generation"
    profiled = [*lines, f'{worker}  File "{site}/vllm/worker/model_runner.py", line 1291 in profile_run']
    assert run(tmp_path, profiled).status.current == "rollout init"  # the engine's start-up runs a forward too


def test_ray_trains_workers_started_is_its_loop_and_training_failed_points_back(tmp_path: Path) -> None:
    """Ray Train prints `Started distributed worker processes:` once every worker's process group is up, just before
    the train function runs; its closing `TrainingFailedError` only points at the errors before it. Before: 'FAILED
    in nccl init' an hour into a run reading Ray Data rows, on `TrainingFailedError` with a step's advice."""
    lines = ["(pid=7781) Running: 0/32.0 CPU, 0/0.0 GPU, 1.2 GB/30.4 GB object_store_memory:   0%|          | 0 "
             "[00:00<?, ? row/s]",
             "(RayTrainWorker pid=40211, ip=10.8.3.17) Setting up process group for: env:// [rank=0, world_size=2]",
             "(TorchTrainer pid=40150) Started distributed worker processes: ",
             "(TorchTrainer pid=40150) - (ip=10.8.3.17, pid=40211) world_rank=0, local_rank=0, node_rank=0",
             "(TorchTrainer pid=40150) - (ip=10.8.3.17, pid=40212) world_rank=1, local_rank=1, node_rank=0",
             "(pid=7781) Running. Resources: 32/32 CPU, 0/0 GPU, 18.2GB/30.4GB object_store_memory (pending: 0 CPU, "
             "0 GPU): : 1.73k row [33:20, 0.87 row/s]",
             "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
             "troubleshoot the problem, check the logs for the dead worker. RayTask ID: "
             "ffffffffffffffff81b2c3d4e5f60718293a4b5c02000000 Worker ID: "
             "5d4c3b2a1908f7e6d5c4b3a2918273645a6b7c8d9e0f1a2b3c4d5e6f Node ID: "
             "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5 Worker IP address: 10.8.3.17 Worker port: 10043 "
             "Worker PID: 40211 Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
             "connection error code 2. End of file.",
             "(TorchTrainer pid=40150) Worker 0 has failed.",
             "2025-02-11 04:51:02,118\tERROR tune_controller.py:1331 -- Trial task failed for trial "
             "TorchTrainer_3c9e1_00000",
             "Traceback (most recent call last):",
             '  File "/opt/conda/lib/python3.10/site-packages/ray/air/execution/_internal/event_manager.py", line 110, '
             "in resolve_future",
             "    result = ray.get(future)",
             "ray.exceptions.RayTaskError(ActorDiedError): ray::_Inner.train() (pid=40150, ip=10.8.3.17, "
             "actor_id=5f1e2d3c4b5a69788796a5b401000000, repr=TorchTrainer)",
             "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error "
             "messages for a cause."]
    report = run(tmp_path, lines)
    assert [s.name for s in report.status.timeline] == ["nccl init", "training loop"]
    assert report.status.state == "failed" and report.status.current == "training loop"
    assert report.status.failure.startswith("ray.exceptions.RayTaskError(ActorDiedError): ray::_Inner.train()")
    assert "A Ray actor's or worker's process died" in report_text(report)


def test_a_loops_own_step_print_starts_the_loop(tmp_path: Path) -> None:
    """`step 3: loss 2.95 | …`: a loop's own print. Before: the loop was named from the words of a line no rule knew
    ('likely in model update'), with no loop started."""
    lines = ["[2023-03-12 16:41:58,650] [INFO] [logging.py:75:log_dist] [Rank 0] DeepSpeed Final Optimizer = "
             "DeepSpeedCPUAdam"]
    lines += [f"2023-03-12 16:42:{4 * s:02d} step {s}: loss {3.0 - s / 20:.4f} | forward 950 ms | backward 2200 ms"
              for s in range(1, 6)]
    report = run(tmp_path, lines)
    assert report.status.current == "training loop" and report.status.worded is None
    assert report.steps["last"] == 5 and report.status.timeline[-1].start == report.steps["first_time"]


# --- Audit 15: what an inference server prints between requests is no stall -------------------------------------

def _live(lines: list[tuple[float, str]]):  # type: ignore[no-untyped-def]
    """Lines fed as a live store sees them, each arriving at its own time (seconds after t0): the phase engine."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.lines import parse_line
    from gkdtop.config import Config, builtin_phases

    analysis = Analysis(Config(phases=builtin_phases()).rules())
    t0 = 1_790_000_000.0
    for at, raw in lines:
        analysis.feed([parse_line(raw, "serve.log", t0 + at)])
    return analysis, t0


VLLM_UP = "INFO 10-06 11:04:05 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000"


def _vllm_stats(running: int, tokens: float) -> str:
    return (f"INFO 10-06 11:08:15 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            f"throughput: {tokens} tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 3.5%")


def test_a_server_whose_requests_were_all_answered_is_serving_not_stalled_in_generation(tmp_path: Path) -> None:
    """Audit 15: vLLM's last stats line says `Running: 0 reqs, Waiting: 0 reqs`; SGLang's `#running-req: 0, #token:
    0`; uvicorn's access line says a request was answered. Before: 'STALLED in generation' 20 minutes later."""
    sglang = ["[23:48:45] The server is fired up and ready to roll!",
              "[23:53:05 TP0] Decode batch. #running-req: 2, #token: 4101, token usage: 0.00, gen throughput "
              "(token/s): 396.85, #queue-req: 0",
              "[23:53:09 TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, gen throughput "
              "(token/s): 12.10, #queue-req: 0"]
    answered = [VLLM_UP, 'INFO:     10.0.0.5:41860 - "POST /v1/chat/completions HTTP/1.1" 200 OK']
    for lines in ([VLLM_UP, _vllm_stats(1, 142.4), _vllm_stats(0, 0.0)], sglang, answered):
        history, _ = live_and_history(tmp_path, text_of(lines), lambda s: True)
        status = history.status(history.status(1e12).last_progress + 1200)  # quiet for 20 minutes since
        assert (status.current, status.state) == ("serving", "running"), (lines[-1], status.current, status.state)
    # An answered request's line is generation's word (a guess), but says no request is in flight: serving's allowance.
    log = tmp_path / "serve.log"
    log.write_text(text_of(answered))
    os.utime(log, (time.time() - 1200, time.time() - 1200))
    status = _followed(log).phase_status()
    assert (status.current, status.state) == ("generation", "running"), (status.current, status.state)
    assert status.worded is not None and "200 OK" in status.worded.text


def test_a_vllm_server_known_by_its_routes_is_serving_and_names_no_trainers_next_phase(tmp_path: Path) -> None:
    """Audit 19: a vLLM server that lists its routes (`[launcher.py:44] Route: /v1/completions`) but prints no `Starting
    vLLM API server`, idle after its requests, read 'ended after generation (next expected: old log-prob)' with
    collective advice. (Its version line comes first, before the engine starts: no sign that it serves.)"""
    from gkdtop.config import load_config
    from gkdtop.replay import replay, report_text

    lines = ["(APIServer pid=3211) INFO 10-06 11:02:11 [api_server.py:1896] vLLM API server version 0.11.1",
             "(EngineCore pid=3302) INFO 10-06 11:02:40 [core.py:92] Initializing a V1 LLM engine (v0.11.1)",
             "(APIServer pid=3211) INFO 10-06 11:03:15 [launcher.py:44] Route: /v1/completions, Methods: POST",
             "(APIServer pid=3211) " + _vllm_stats(1, 204.7), "(APIServer pid=3211) " + _vllm_stats(0, 0.0)]
    log = tmp_path / "serve.log"
    log.write_text(text_of(lines))
    report = replay([str(log)], load_config(None))
    assert report.status.current == "serving"
    assert "next expected" not in report_text(report) and "collective" not in report_text(report)


def test_a_hung_servers_tail_stalls_at_its_own_allowance_and_v0_s_empty_engine_is_serving(tmp_path: Path) -> None:
    """Review of session 23: a trainer's generation waits up to a step's allowance (32K-token answers print nothing
    for minutes), but the tail of a vLLM or SGLang server's log (no start-up lines: the framework is the engine's)
    keeps the engine's 120 s: it read 'running' five minutes after its busy engines stopped printing. vLLM V0's empty
    engine (`Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs`) after a preemption line is serving, not a stall."""
    sglang = [f"[2026-05-02 10:{m:02d}:00 TP0] Decode batch. #running-req: 12, #token: 9000, token usage: 0.45, gen "
              "throughput (token/s): 800.00, #queue-req: 3" for m in range(10)]
    vllm = [f"INFO 05-02 10:{m:02d}:00 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
            "generation throughput: 812.4 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 30.1%"
            for m in range(10)]
    for lines in (sglang, vllm):
        analysis = _read(tmp_path, lines)
        status = analysis.status(analysis.phases.last_progress + 300)
        assert (status.current, status.state) == ("generation", "stalled"), (lines[-1], status.state)
    v0 = ["INFO 05-02 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m'",
          "INFO 05-02 10:00:20 launcher.py:19] Available routes are:",
          "INFO:     Application startup complete.",
          "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
          "INFO 05-02 10:01:00 metrics.py:349] Avg prompt throughput: 500.0 tokens/s, Avg generation throughput: 900.0 "
          "tokens/s, Running: 64 reqs, Swapped: 0 reqs, Pending: 12 reqs, GPU KV cache usage: 99.0%",
          "WARNING 05-02 10:01:05 scheduler.py:1439] Sequence group cmpl-5-0 is preempted by PreemptionMode.RECOMPUTE "
          "mode because there is not enough KV cache space.",
          "INFO 05-02 10:03:00 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
          "tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%"]
    analysis = _read(tmp_path, v0)
    status = analysis.status(analysis.phases.last_progress + 1200)
    assert (status.current, status.state) == ("serving", "running"), (status.current, status.state)


def _read(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    """The lines read as replay reads a file: an Analysis (its framework's own verdict, Analysis.status)."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.history import file_range
    from gkdtop.config import Config, builtin_phases

    log = tmp_path / "read.log"
    log.write_text(text_of(lines))
    analysis = Analysis(Config(phases=builtin_phases()).rules())
    analysis.read_history([file_range(str(log))])
    return analysis


def _followed(log: Path):  # type: ignore[no-untyped-def]
    """The dashboard's store after it opened `log` (its history read, as snapshot --log reads it)."""
    from gkdtop.collectors.logs import LogCollector
    from gkdtop.config import Config, builtin_phases
    from gkdtop.store import Store

    store = Store(Config(phases=builtin_phases()))
    collector = LogCollector([str(log)], backlog=50)
    try:
        for _ in range(3):
            store.put("logs", collector.collect())
    finally:
        collector.close()
    return store


def test_a_trainers_engine_going_idle_between_rollouts_is_not_serving(tmp_path: Path) -> None:
    """The same empty engine inside a trainer's step (verl's server-mode rollout) ends the generation; the run is no
    server waiting for clients."""
    lines = ["(TaskRunner pid=11) Training Progress:   0%|          | 0/100 [00:00<?, ?it/s]",
             "(TaskRunner pid=11) step:1 - actor/pg_loss:0.1 - timing_s/gen:10.1 - timing_s/step:30.2",
             _vllm_stats(4, 800.0), _vllm_stats(0, 0.0)]
    status = run(tmp_path, lines).status
    assert status.current != "serving" and "serving" not in [s.name for s in status.timeline]


def test_health_probes_and_a_store_barrier_wait_are_no_progress() -> None:
    """Audit 15: a hung server's `GET /health … 200` every 10 s, c10d's `Waiting in store based barrier` every minute:
    the run made no progress while they printed. Before: each one was progress, so no stall was ever declared."""
    probes = [(0, VLLM_UP), (10, _vllm_stats(1, 0.0))] + [
        (20 + 10 * i, f'INFO:     127.0.0.1:{5000 + i} - "GET /health HTTP/1.1" 200 OK') for i in range(120)]
    barrier = [(60 * i, "I0510 07:20:04.417845 1398 distributed_c10d.py:337] Waiting in store based barrier to "
                "initialize process group for rank: 2, key: store_based_barrier_key:2 (world_size=8, worker_count=7, "
                "timeout=0:30:00)") for i in range(1, 25)]
    for lines in (probes, barrier):
        analysis, t0 = _live(lines)
        status = analysis.status(t0 + lines[-1][0])
        assert status.last_progress is None or status.last_progress <= t0 + lines[1][0], lines[-1][1]


def test_a_run_hung_in_its_final_save_is_not_simply_finished(tmp_path: Path) -> None:
    """Audit 15: axolotl's `Training Completed!!! Saving pre-trained model to …`, then a peft UserWarning, then
    nothing. Before: 'finished', with no word of the save: "Completed" was read as the save's end, and the warning
    after it hid the save line."""
    lines = ["{'train_runtime': 2340.1, 'train_samples_per_second': 16.7, 'train_loss': 0.09, 'epoch': 2.0}",
             "[2024-05-13 14:47:28,053] [INFO] [axolotl.train.log:61] [PID:1234] [RANK:0] Training Completed!!! "
             "Saving pre-trained model to ./qlora-out",
             "/opt/env/lib/python3.10/site-packages/peft/utils/save_and_load.py:154: UserWarning: Could not find a "
             "config file in /models/base - will assume that the vocabulary was not modified.",
             "  warnings.warn("]
    status = run(tmp_path, lines).status
    assert status.current == "finished" and status.final_save is not None
    assert "Saving pre-trained model" in status.final_save.text


def test_the_generation_advice_names_the_engine_the_log_is(tmp_path: Path) -> None:
    """Audit 15: an SGLang server's hang was told to compare vLLM's 'Avg generation throughput'."""
    lines = ["[23:48:45] The server is fired up and ready to roll!",
             "[23:53:05 TP0] Decode batch. #running-req: 2, #token: 4101, token usage: 0.00, gen throughput "
             "(token/s): 396.85, #queue-req: 0"]
    said = report_text(run(tmp_path, lines))
    assert "vLLM" not in said and "SGLang's 'gen throughput (token/s)'" in said
    said = report_text(run(tmp_path, [VLLM_UP, _vllm_stats(2, 300.0)]))
    assert "vLLM's 'Avg generation throughput'" in said and "SGLang" not in said


def test_open_clips_stamps_and_epochs_are_read(tmp_path: Path) -> None:
    """Audit 15: open_clip stamps `2025-11-04,02:00:00 |` (a comma between date and time) and prints `Start epoch N`,
    `Train Epoch: N [ 8192/2916352 (0%)] …`. Before: 'no timestamps', no training loop, the evaluation's crash alone."""
    lines = ["2025-11-04,02:00:00 | INFO | Loaded ViT-B-16 model config.",
             "2025-11-04,02:00:20 | INFO | Start epoch 0",
             "2025-11-04,02:00:23 | INFO | Train Epoch: 0 [   8192/2916352 (0%)] Data (t): 2.483 Batch (t): 3.019, "
             "2713.79/s LR: 0.000002 Logit Scale: 88.598 Loss: 0.046415 (0.046415)",
             "2025-11-04,02:05:58 | INFO | Eval Epoch: 1 image_to_text_mean_rank: 29.5593\tclip_val_loss: 1.4164",
             "Traceback (most recent call last):",
             '  File "/opt/open_clip/src/open_clip_train/main.py", line 466, in main',
             "    evaluate(model, data, completed_epoch, args, tb_writer=writer, tokenizer=tokenizer)",
             '  File "/opt/open_clip/src/open_clip_train/train.py", line 275, in evaluate',
             "    model_out = model(images, texts)",
             "RuntimeError: ProcessGroupWrapper: Monitored Barrier encountered error running collective"]
    report = run(tmp_path, lines)
    assert report.started is not None and report.ended - report.started == 358
    assert [s.name for s in report.status.timeline][:1] == ["training loop"]
    assert report.status.state == "failed" and report.status.current == "validation"


def test_axolotl_behind_skypilot_starts_its_trainer_and_steps(tmp_path: Path) -> None:
    """HELDOUT14's misses, read after its score: axolotl's `Starting trainer...` is the loop (a run stuck there with
    FSDP was 'ended in model load'); SkyPilot's `(task, pid=N)` before every line hid its `{'loss': …}` records and
    bars from the rules (a watchdog at step 4 was 'FAILED in model load')."""
    pre = "(hi-moe-lora, pid=21873) "
    lines = [pre + "[2026-04-17 06:12:44,902] [INFO] [axolotl.load_model:734] [PID:211] [RANK:0] GPU memory usage "
             "after model load: 8.912GB (+0.381GB cache, +1.207GB misc)",
             pre + "[2026-04-17 06:12:47,601] [INFO] [axolotl.train.train:141] [PID:211] [RANK:0] Starting trainer...",
             pre + "  0%|          | 1/1920 [09:31<304:48:11, 571.79s/it]",
             pre + "{'loss': 2.0413, 'grad_norm': 0.7311, 'learning_rate': 2e-06, 'epoch': 0.0}",
             pre + "  0%|          | 2/1920 [19:03<304:36:50, 571.81s/it]",
             pre + "{'loss': 1.9877, 'grad_norm': 0.6928, 'learning_rate': 4e-06, 'epoch': 0.0}"]
    status = run(tmp_path, lines).status
    assert [s.name for s in status.timeline][-1] == "training loop" and status.steps_done == 2
    assert run(tmp_path, lines[:2]).status.current == "training loop"


def test_a_bar_behind_a_wrapper_s_stamp_and_tag_names_its_phase(tmp_path: Path) -> None:
    """HELDOUT14's misses: a GUI's `[08:21:19] [STDERR] steps:  95%|…` (musubi-tuner's bar behind the wrapper's stamp
    and stream tag) named no phase at all ('ended (phase unknown)'); a bar over the run's `steps` is its loop."""
    lines = ["[07:41:02] [STDOUT] running training / total optimization steps: 96",
             "[07:41:29] [STDERR] steps:   1%|          | 1/96 [00:26<41:10, 26.01s/it, avr_loss=0.112]",
             "[07:41:55] [STDERR] steps:   2%|▏         | 2/96 [00:52<40:44, 26.00s/it, avr_loss=0.108]"]
    report = run(tmp_path, lines)
    assert report.status.current == "training loop" and "the loop's bar is at 2/96" in report_text(report)
    tagged = ["[2026-04-17 06:12:44,902] [INFO] Rollout generation:  62%|██████    | 40/64 [01:02<00:37, 1.55s/it]"]
    assert run(tmp_path, tagged).status.current is not None


def test_loops_known_by_their_own_record_shapes(tmp_path: Path) -> None:
    """Training-set misses of session 22, read by their shape: Composer's `[batch=22/3200]:` record header; trlx's bar
    whose description is the loop's losses (its signs flip: `-0.11`, `0.09`, one bar all along); before, 'phase
    unknown', and the bar's count stuck at its first redraw with a positive loss."""
    composer = ["[batch=22/3200]:", "\t Train time/batch: 21", "\t Train loss/train/total: 2.3104",
                "[batch=23/3200]:", "\t Train time/batch: 22", "\t Train loss/train/total: 2.2991"]
    status = run(tmp_path, composer).status
    assert [s.name for s in status.timeline] == ["training loop"]
    losses = ((61, -0.11), (68, 0.09), (75, 0.70), (80, -0.3))
    trlx = [f"[losses/total_loss: {loss:.2f} | losses/policy_loss: {loss - 0.1:.2f}]:   2%|  | {n}/3200 "
            f"[{n // 4:02d}:00<9:00:00, 9.{n % 10}0s/it]" for n, loss in losses]
    report = run(tmp_path, trlx)
    assert [s.name for s in report.status.timeline] == ["training loop"]
    assert report.steps["bar"]["n"] == 80, report.steps


def test_metric_loggers_epoch_lines_are_steps_and_fsdps_optimizer_gather_is_a_save(tmp_path: Path) -> None:
    """Audit 17: LLaMA2-Accessory's MetricLogger lines (`[stamp] Epoch: [0]  [2210/2400]  lr: …  time: 0.9512 …`, as
    DeiT's and MAE's) were no steps: the watchdog line was the loop's first evidence (`≥09:41:12 training loop`). And
    FSDP's `full_optim_state_dict` warning before the hang (only a save gathers the whole optimizer state) was
    ignored: 'FAILED in model update' once the steps are read."""
    logger = ("[09:{m:02d}:{s:02d}.300000] Epoch: [1]  [{i}/2400]  lr: 0.000012  closs: 0.4410 (0.5120)  "
              "grad_norm: 1.9021 (2.0113)  time: 0.9512  data: 0.0002  max mem: 38117")
    lines = [logger.format(m=40 + k // 6, s=(k * 10) % 60, i=2200 + 10 * k) for k in range(8)]
    lines += ["/venv/lib/python3.10/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py:1110: "
              "UserWarning: ``FullyShardedDataParallel.full_optim_state_dict``is being deprecated and is replaced by "
              "``FullyShardedDataParallel.optim_state_dict``.",
              "  warnings.warn(",
              "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
              "402211, OpType=_ALLGATHER_BASE, NumelIn=41943040, NumelOut=335544320, Timeout(ms)=1800000) ran for "
              "1800312 milliseconds before timing out."]
    report = run(tmp_path, lines)
    assert report.steps["count"] == 8 and report.steps["mean_s"] == 0.9512, report.steps
    assert report.status.timeline[0].name == "training loop" and report.status.timeline[0].start == report.started
    assert (report.status.state, report.status.current) == ("failed", "checkpoint save"), report_text(report)
    # the next epoch's lines count on from the last: 2400 steps an epoch
    assert run(tmp_path, [lines[0].replace("[1]  [2200", "[2]  [10")]).steps["last"] == 2 * 2400 + 10


def test_records_printed_every_nth_step_stand_for_the_steps_they_span(tmp_path: Path) -> None:
    """Review of session 23: DeiT's MetricLogger prints every 10th iteration with that iteration's time; a run's
    length from its steps' own times counted one step a record (a 12-minute run 'went on at least 1m15s'). PyTorch's
    ImageNet example writes the same header without a space (`Epoch: [0][  10/5005]`): no phase at all before."""
    lines = [f"Epoch: [0]  [{i:4d}/1851]  eta: 0:12:00  lr: 0.000500  loss: 6.9 (6.9)  time: 0.4000  data: 0.0010"
             for i in range(0, 1851, 10)]
    report = run(tmp_path, lines)
    said = report_text(report)
    assert "≥12m" in said.splitlines()[0], said.splitlines()[0]
    imagenet = [f"Epoch: [0][{i:5d}/5005]\tTime  0.250 ( 0.300)\tData  0.001 ( 0.010)\tLoss 6.9e+00 (6.9e+00)"
                for i in range(0, 200, 10)]
    assert run(tmp_path, imagenet).status.current == "training loop"


def test_a_worker_group_torchrun_restarted_is_training_again_not_failed(tmp_path: Path) -> None:
    """Review of session 23: torchrun's agent restarts its workers after one died (`--max-restarts`); the restarted
    run's rendezvous and steps follow. Before: 'FAILED in training loop' on a run training again."""
    agent = "[INFO] 2026-02-19 07:{m}:{s},{ms:03d} api: [default] {what}"
    start = [agent.format(m=41, s="03", ms=220, what="Rendezvous'ing worker group"),
             agent.format(m=41, s="03", ms=230, what="Rendezvous complete for workers. Result:"),
             agent.format(m=41, s="03", ms=231, what="Starting worker group")]
    steps = ["epoch 0 step 0 loss 2.31", "epoch 0 step 10 loss 2.11"]
    died = ["[ERROR] 2026-02-19 07:45:10,100 api: failed (exitcode: -9) local_rank: 1 (pid: 4321) of binary: "
            "/usr/bin/python",
            agent.format(m=45, s=10, ms=101, what="Worker group FAILED. 3/3 attempts left; will restart worker group"),
            agent.format(m=45, s=10, ms=102, what="Stopping worker group")]
    again = [line.replace("07:41:03", "07:45:12") for line in start]
    status = run(tmp_path, [*start, *steps, *died, *again, *steps]).status
    assert (status.current, status.state) == ("training loop", "running"), (status.current, status.state)
    assert [s.status for s in status.timeline if s.name == "training loop"] == ["failed", "running"]
    assert run(tmp_path, [*start, *steps, *died]).status.state == "failed"  # no restart line: it failed


def test_a_verl_run_that_printed_its_config_or_its_command_is_in_config(tmp_path: Path) -> None:
    """verl's TaskRunner pretty-prints its config first; a launch script's `set -x` echoes the trainer's command. A
    run silent after either is starting up: before, 'phase unknown' (and from the command's words, 'dataset')."""
    printed = ["(TaskRunner pid=41963) {'actor_rollout_ref': {'actor': {'checkpoint': {'contents': ['model',",
               "(TaskRunner pid=41963)                                  'clip_ratio': 0.2,",
               "(TaskRunner pid=41963)              'val_before_train': True}}"]
    echoed = ["Ray head node started successfully",
              "+ python3 -m verl.trainer.main_ppo data.train_files=/d/train.parquet data.val_files=/d/test.parquet "
              "actor_rollout_ref.rollout.name=vllm"]
    for lines in (printed, echoed):
        status = run(tmp_path, lines).status
        assert (status.current, [s.name for s in status.timeline]) == ("config", ["config"]), lines[-1]


def test_a_models_printout_is_its_load(tmp_path: Path) -> None:
    """fairseq (and HF scripts) print the built model, `GuidedTransformerModel(` then its modules: a run silent after
    it is loading or placing its model. Before: 'phase unknown'."""
    lines = ["2026-04-02 22:08:17 | INFO | fairseq.tasks.translation | [de] dictionary: 8848 types",
             "2026-04-02 22:08:18 | INFO | fairseq_cli.train | GuidedTransformerModel(",
             "  (encoder): TransformerEncoder(", "    (dropout_module): FairseqDropout()", "  )", ")"]
    status = run(tmp_path, lines).status
    assert (status.current, [s.name for s in status.timeline]) == ("model load", ["model load"])


def test_a_failure_after_the_loops_last_epoch_is_after_training(tmp_path: Path) -> None:
    """OpenRLHF SFT ran its three epochs (`Train epoch: 100%| 3/3`), then a collective of the final save timed out.
    Before: 'FAILED in training loop', a loop that had ended; its steps' bar was no loop either."""
    lines = ["Train step of epoch 2:  50%|█████     | 586/1172 [1:36:22<1:36:22,  9.87s/it, gpt_loss=0.41]",
             "Train step of epoch 2: 100%|██████████| 1172/1172 [3:12:44<00:00,  9.87s/it, gpt_loss=0.41]",
             "Train epoch: 100%|██████████| 3/3 [9:38:51<00:00, 11577.05s/it]",
             "[rank12]:[E ProcessGroupNCCL.cpp:550] [Rank 12] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=4821977, OpType=_ALLGATHER_BASE, NumelIn=13107200, NumelOut=209715200, "
             "Timeout(ms)=1800000) ran for 1800211 milliseconds before timing out."]
    status = run(tmp_path, lines).status
    assert [s.name for s in status.timeline][:2] == ["training loop", "finished"]
    assert status.state == "failed" and status.current != "training loop", status.current


def test_pretty_printed_metric_dicts_are_a_step_each(tmp_path: Path) -> None:
    """Audit 15: a notebook pretty-printed each of the Trainer's dicts over lines (`{'loss': 0.0,` then ` 'reward':
    0.0,` …): with the loss the same in every record, the first lines were alike and read as one step repeated
    (each node's rank 0 prints the same dict): 'steps: 1' for 19 records."""
    lines = []
    for k in range(1, 7):
        lines += [f"  {k}%|          | {5 * k}/1000 [{6 * k:02d}:20<20:59:10, 76.0s/it]",
                  "{'loss': 0.0,", f" 'grad_norm': 1.{k}2,", " 'reward': 0.0,", f" 'epoch': 0.0{k}}}"]
    report = run(tmp_path, lines)
    assert report.steps["count"] == 6, report.steps


def test_a_train_functions_model_load_bar_is_not_the_loops(tmp_path: Path) -> None:
    """Review of session 21: Ray Train's loop starts at `Started distributed worker processes:`, before the train
    function loads its model; `Loading checkpoint shards: 1/2` was then read as the loop's bar ('the loop's bar is at
    1/2, 3.10 s/it')."""
    lines = ["(TorchTrainer pid=4011) Started distributed worker processes:",
             "(TorchTrainer pid=4011) - (node_id=ab12, ip=10.0.0.5, pid=4121) world_rank=0, local_rank=0, node_rank=0",
             "(RayTrainWorker pid=4121) Loading checkpoint shards:  50%|#####     | 1/2 [00:03<00:03,  3.10s/it]"]
    report = run(tmp_path, lines)
    assert report.status.current == "model load" and "bar" not in report.steps, report.steps


def test_skyrls_setup_trainer_is_worker_group_creation(tmp_path: Path) -> None:
    """SkyRL raised an ImportError in `_setup_trainer` (importing its FSDP workers) after loading its datasets. Before:
    'likely in dataset generation', from the dataset lines above the traceback."""
    lines = ["(skyrl_entrypoint pid=2291) 2025-09-14 21:08:19.277 | INFO     | skyrl_train.entrypoints.main_base:"
             "get_eval_dataset:139 - Loading eval dataset from ['/data/validation.parquet']",
             "ray.exceptions.RayTaskError(ImportError): ray::skyrl_entrypoint() (pid=2291, ip=10.0.4.7)",
             '  File "/srv/SkyRL/skyrl-train/skyrl_train/entrypoints/main_base.py", line 287, in run',
             "    trainer = self._setup_trainer()",
             '  File "/srv/SkyRL/skyrl-train/skyrl_train/entrypoints/main_base.py", line 251, in _setup_trainer',
             "    from skyrl_train.workers.fsdp.fsdp_worker import PolicyWorker, CriticWorker, RefWorker",
             "ImportError: cannot import name 'PolicyWorker' from 'skyrl_train.workers.fsdp.fsdp_worker'"]
    status = run(tmp_path, lines).status
    assert (status.state, status.current) == ("failed", "worker-group creation"), status.current


def test_the_bar_that_finishes_the_run_is_the_loops_last(tmp_path: Path) -> None:
    """Review of session 22: a bar that starts a phase outside the loop is not the loop's, but the one that finishes
    the run (`Training Progress: 100%| 10/10`) is: the count had stopped at 9/10."""
    lines = [f"(TaskRunner pid=11) Training Progress: {n * 10:3d}%|{'█' * n}{' ' * (10 - n)}| {n}/10 "
             f"[{n // 6:02d}:{n * 10 % 60:02d}<00:10, 10.00s/it]" for n in range(1, 11)]
    report = run(tmp_path, lines)
    assert report.status.current == "finished" and report.steps["bar"]["n"] == 10, report.steps


def test_a_per_epoch_bar_at_its_total_is_no_end_of_training(tmp_path: Path) -> None:
    """Review of session 22: a custom loop's `tqdm(desc="Train epoch")` each epoch reached 100% after epoch 1 of
    several and read 'finished'; only OpenRLHF's bar over the epochs (beside its `Train step of epoch` bar) says so."""
    lines = [f"Train epoch: {p:3d}%|{'█' * (p // 10)}{' ' * (10 - p // 10)}| {5 * p}/500 [00:{p // 2:02d}<00:50, "
             "10.00it/s]" for p in (20, 60, 100)] + [
        "Train epoch:  40%|████      | 200/500 [00:20<00:30, 10.00it/s]"]
    status = run(tmp_path, lines).status
    assert status.current != "finished" and "finished" not in [s.name for s in status.timeline]


def test_one_idle_engine_of_two_does_not_end_generation(tmp_path: Path) -> None:
    """Review of session 22: a data-parallel vLLM server's Engine 001 emptied while Engine 000 still ran 30 requests;
    the server read 'serving' (and in a trainer's step, the generation span ended early)."""
    stats = ("INFO 10-06 11:00:{s:02d} [loggers.py:127] Engine 00{e}: Avg prompt throughput: 0.0 tokens/s, Avg "
             "generation throughput: {g}.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 3.5%")
    lines = [VLLM_UP, stats.format(s=10, e=0, g=900, r=64), stats.format(s=10, e=1, g=900, r=64),
             stats.format(s=20, e=0, g=300, r=30), stats.format(s=20, e=1, g=10, r=0)]
    assert run(tmp_path, lines).status.current == "generation"
    lines += [stats.format(s=30, e=0, g=40, r=0)]  # both idle now
    assert run(tmp_path, lines).status.current == "serving"


def test_a_server_busy_again_after_idling_is_generating_again(tmp_path: Path) -> None:
    """Review of session 22: after its engine emptied (serving again), the next requests' stats lines opened no
    generation: 'ended, likely in generation (a guess)', from the words alone."""
    lines = [VLLM_UP, _vllm_stats(3, 300.0), _vllm_stats(0, 0.0), _vllm_stats(5, 420.0)]
    status = run(tmp_path, lines).status
    assert [s.name for s in status.timeline] == ["serving", "generation", "serving", "generation"]
    assert status.current == "generation" and status.worded is None


def test_older_stacks_shapes(tmp_path: Path) -> None:
    """Audit 16: NCCL up to 2.11 prints `comm 0x… rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE` (no
    commId): every such log stayed 'in nccl init', with NCCL advice, on runs that trained; detectron2's loop lines,
    fairseq's before 0.10, its `distributed init (rank N)`, and Lightning's end of fit were no phase."""
    def phases(lines: list[str]) -> tuple[list[str], str | None]:
        status = run(tmp_path, lines).status
        return [s.name for s in status.timeline], status.current

    nccl = ["lab-node-a:51002:51002 [0] NCCL INFO Bootstrap : Using enp65s0f0:10.11.0.51<0>",
            "lab-node-a:51002:51140 [0] NCCL INFO comm 0x7f2c40002f70 rank 0 nranks 8 cudaDev 0 busId 1000 - Init "
            "COMPLETE"]
    d2 = ["[04/02 11:21:02 d2.engine.train_loop]: Starting training from iteration 0",
          "[04/02 11:22:32 d2.utils.events]:  eta: 2 days, 15:19:11  iter: 19  total_loss: 1.33  loss_cls: 0.41  "
          "time: 2.671  data_time: 0.041  lr: 0.0009  max_mem: 491M"]
    assert phases(nccl + d2) == (["nccl init", "training loop"], "training loop")
    fairseq = ["| distributed init (rank 0): tcp://localhost:23117",
               "| loaded checkpoint checkpoints/fconv/checkpoint_last.pt (epoch 8)",
               "| epoch 008  1000 / 8310 loss=1.31 (1.41), wps=955, wpb=911, bsz=31, lr=0.001, clip=100%, gnorm=2.131"]
    names, current = phases(fairseq)
    assert names[0] == "nccl init" and "checkpoint load" in names and current == "training loop", names
    lightning = ["Epoch 2: 100%|██████████| 120/120 [00:00<00:00, 310.44it/s, loss=0.0619, v_num=7]",
                 "`Trainer.fit` stopped: `max_epochs=3` reached."]
    assert phases(lightning)[1] == "finished"


def test_a_long_wait_between_two_writers_whose_clocks_agreed_is_no_zone(tmp_path: Path) -> None:
    """Audit 16: the driver stamped 02:10:03, an engine 02:11:40, then four hours of untimed bars, then the driver
    06:16:02: read 'two clock zones, likely', its time not measured, though the driver's own clock had agreed with the
    engine's and the bar says 4:05:31 went by."""
    lines = ["2025-02-12 02:10:03,551\tINFO worker.py:1832 -- Started a local Ray instance.",
             "(LLMRayActor pid=4412) INFO 02-12 02:11:40 model_runner.py:1562] Graph capturing finished in 22 secs",
             "Episode [1/1]:  75%|███████▌  | 3/4 [3:04:10<1:01:01, 3682.10s/it]",
             "Episode [1/1]: 100%|██████████| 4/4 [4:05:31<00:00, 3682.91s/it]",
             "2025-02-12 06:16:02,207\tSUCC cli.py:61 -- Job 'raysubmit_x' succeeded"]
    report = run(tmp_path, lines)
    assert all(span.clock_jump is None for span in report.status.timeline)
    assert "clock zones" not in report_text(report)


def test_a_writer_s_stamp_the_steps_between_account_for_is_no_zone(tmp_path: Path) -> None:
    """Audit 20: the driver stamped 08:30, 24 unstamped verl steps of 216 s each, then a worker's vLLM line
    stamped 09:56:31, 1h26m later: read 'two clock zones, likely, so its time is not measured', though the steps' own
    times fill the gap. A driver in UTC beside workers in UTC+8 with nothing between still reads as zones
    (test_step_parts)."""
    lines = ["2025-12-29 08:30:00,112\tINFO worker.py:1879 -- Connected to Ray cluster.",
             *(f"(TaskRunner pid=7033) step:{k} - critic/score/mean:0.4 - timing_s/gen:101.0 - timing_s/step:216.0"
               for k in range(1, 25)),
             "(WorkerDict pid=5123, ip=10.4.0.3) INFO 12-29 09:56:31 [block_pool.py:292] Successfully reset prefix "
             "cache",
             *(f"(TaskRunner pid=7033) step:{k} - critic/score/mean:0.4 - timing_s/gen:101.0 - timing_s/step:216.0"
               for k in range(25, 28))]
    report = run(tmp_path, lines)
    assert all(span.clock_jump is None for span in report.status.timeline), report_text(report)
    assert "clock zones" not in report_text(report)


def test_a_zone_is_still_told_where_the_steps_between_fill_only_part_of_the_jump(tmp_path: Path) -> None:
    """Review of session 25: 20 steps of 180 s (1 h) between a driver's stamp and a worker's stamped in a zone an hour
    ahead, 2h03m later: what the steps do not fill is still whole hours, a zone."""
    lines = ["2026-11-20 09:00:03,123\tINFO worker.py:1841 -- Started a local Ray instance.",
             *(f"(TaskRunner pid=7711) step:{k} - critic/score/mean:0.5 - timing_s/gen:90.0 - timing_s/step:180.0"
               for k in range(1, 21)),
             "(WorkerDict pid=7801) INFO 11-20 11:03:05 [loggers.py:116] Avg prompt throughput: 512.0 tokens/s, Avg "
             "generation throughput: 2048.0 tokens/s",
             "(TaskRunner pid=7711) step:21 - critic/score/mean:0.5 - timing_s/gen:90.0 - timing_s/step:180.0"]
    report = run(tmp_path, lines)
    assert any(span.clock_jump == 3600 for span in report.status.timeline), report_text(report)


def _megatron_iteration(stamp: str, it: int, total: int, ms: float) -> str:
    return (f" [{stamp}] iteration {it:>8d}/{total:>8d} | consumed samples: {it * 16:>12d} | elapsed time per "
            f"iteration (ms): {ms:.1f} | learning rate: 2.500000E-05 | global batch size:    16 | lm loss: "
            "4.118207E+00 | loss scale: 1.0 | grad norm: 3.902 | number of skipped iterations:   0 |")


def test_megatrons_save_and_end_of_training_finish_the_run(tmp_path: Path) -> None:
    """Audit 18: Megatron-LM's last iteration, its save (`saving checkpoint at iteration N to DIR` … `successfully saved
    checkpoint from iteration N`) and `[after training is done]`, then a resumed run 3 minutes later. Before: 'ended,
    likely in checkpoint save' (a guess from the save's words) and 'STALLED … for 2m01s' between the two runs."""
    from gkdtop.alerts.paced import paced_events
    from gkdtop.config import load_config

    lines = [
        _megatron_iteration("2025-07-02 14:40:11", 19, 20, 2870.4),
        _megatron_iteration("2025-07-02 14:40:14", 20, 20, 2911.0),
        "saving checkpoint at iteration      20 to /scratch/ckpt/gpt_small in torch_dist format",
        "  successfully saved checkpoint from iteration      20 to /scratch/ckpt/gpt_small [ t 1/2, p 1/1 ]",
        "[after training is done] datetime: 2025-07-02 14:40:25 ",
    ]
    said = report_text(run(tmp_path, lines))
    assert run(tmp_path, lines).status.state == "done" and "checkpoint save" not in said, said
    # a save that never reports back is still the save
    status = run(tmp_path, lines[:3]).status
    assert status.current == "checkpoint save" and status.worded is None
    resumed = [*lines, "[after megatron is initialized] datetime: 2025-07-02 14:43:40 ",
               _megatron_iteration("2025-07-02 14:44:02", 11, 20, 21500.2)]
    (tmp_path / "two.log").write_text(text_of(resumed))
    assert "stalled" not in [e.kind for e in paced_events(str(tmp_path / "two.log"), load_config(None))]


def test_an_evaluation_harness_run_alone_is_validation_then_finished(tmp_path: Path) -> None:
    """Audit 18: lm-evaluation-harness alone (no training): its requests to the model, their bar, then the `lm_eval`
    command's summary and results table. Before: 'training loop (unfinished)', 'ended in training loop' with the
    loop's advice, and 'one stamped time' on a log whose lines carry `YYYY-MM-DD:hh:mm:ss,mmm` stamps."""
    lines = [
        "2025-09-03:16:20:41,204 INFO     [__main__.py:379] Selected Tasks: ['hellaswag']",
        "2025-09-03:16:20:44,870 INFO     [evaluator.py:206] Initializing hf model, with arguments: {'pretrained': "
        "'/models/small-lm'}",
        "2025-09-03:16:21:02,311 INFO     [evaluator.py:461] Running loglikelihood requests",
        "Running loglikelihood requests:  41%|████      | 16400/40168 [02:13<03:11, 124.02it/s]",
        "Running loglikelihood requests: 100%|██████████| 40168/40168 [05:20<00:00, 125.33it/s]",
        "hf (pretrained=/models/small-lm), gen_kwargs: (None), limit: None, num_fewshot: None, batch_size: 16",
        "|  Tasks  |Version|Filter|n-shot| Metric |   |Value |   |Stderr|",
        "|---------|------:|------|-----:|--------|---|-----:|---|-----:|",
        "|hellaswag|      1|none  |     0|acc     |↑  |0.4821|±  |0.0050|",
    ]
    result = run(tmp_path, lines)
    said = report_text(result)
    assert result.status.state == "done" and "training loop" not in said, said
    assert [s.name for s in result.status.timeline] == ["validation", "finished"], said
    # its stamps span 21 s; the requests' bar after them ran 5m20s: the run went on at least that long
    assert "one stamped time" not in said and "≥5m20s" in said and "16:20:41 to 16:21:02" in said, said
    # cut during its requests: in validation, not a training loop
    assert run(tmp_path, lines[:4]).status.current == "validation"


def test_srun_s_task_label_before_ray_s_prefix_is_peeled(tmp_path: Path) -> None:
    """verl under `srun --label`: `0: ` before every line, Ray's prefix after it. The engine worker's own error
    (behind `(vLLMHttpServer …) (Worker_TP1 …) ERROR …`) is the failure, as without the label; before, the label hid
    Ray's prefix and the TaskRunner's wrapper was named instead."""
    from gkdtop.analysis.lines import message_start, parse_line, split_prefix

    server = "0: (vLLMHttpServer pid=5120) (Worker_TP1 pid=5188) ERROR 07-02 09:14:40 [multiproc_executor.py:702] "
    line = parse_line(server + "RuntimeError: kernel image missing", "x.log", 0.0)
    assert (line.worker, line.pid, line.text[:11]) == ("vLLMHttpServer", 5120, "(Worker_TP1")
    assert split_prefix(server)[0] == ("vLLMHttpServer", 5120, "")
    assert message_start(server.encode()) == len("0: (vLLMHttpServer pid=5120) ")
    assert split_prefix(" 7: (TaskRunner pid=9) hello") == (("TaskRunner", 9, ""), "hello")  # padded (16 tasks)
    assert split_prefix("12: (not a prefix) text")[1] == "12: (not a prefix) text"  # no Ray prefix: kept
    lines = [
        "0: (TaskRunner pid=5001) TaskRunner hostname: gpu-a3, PID: 5001",
        "0: (WorkerDict pid=5050) Model config after override: Qwen3Config {",
        "0: (vLLMHttpServer pid=5120) (Worker_TP1 pid=5188) INFO 07-02 09:14:02 [gpu_model_runner.py:2100] Model "
        "loading took 7.1 GiB and 6.2 seconds",
        f"{server}Traceback (most recent call last):",
        f'{server}  File "/opt/vllm/v1/worker/gpu_worker.py", line 301, in determine_available_memory',
        f"{server}    self.model_runner.profile_run()",
        f"{server}RuntimeError: no kernel image is available for this device (sm_120)",
        "0: (vLLMHttpServer pid=5120) (EngineCore_DP0 pid=5150) ERROR 07-02 09:14:40 [core.py:708] EngineCore failed "
        "to start.",
        "0: (vLLMHttpServer pid=5120) (EngineCore_DP0 pid=5150) ERROR 07-02 09:14:40 [core.py:708] RuntimeError: "
        "Worker failed with error 'no kernel image is available', please check the stack trace above for the root "
        "cause",
        "0: ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid=5001, ip=10.3.0.7, actor_id=01)",
        '0:   File "/opt/verl/verl/trainer/main_ppo.py", line 298, in run',
        "0:     trainer.init_workers()",
        "0: RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    status = run(tmp_path, lines).status
    assert (status.state, status.current) == ("failed", "rollout init")
    assert status.failure.startswith("(Worker_TP1 pid=5188) ERROR") and "sm_120" in status.failure
