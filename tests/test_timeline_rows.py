"""replay's timeline states what the lines support: a row for every phase the verdict names (a part of the step
too), and no start or length a phase's own lines do not carry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def timeline(tmp_path: Path, lines: list[str]) -> tuple[list[str], str]:
    """replay's timeline rows and its verdict line."""
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", str(log)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.splitlines()
    rows = text[text.index("timeline:") + 1 : text.index("", text.index("timeline:"))]
    verdict = next(line for line in text if line.startswith(("FAILED", "ended", "stalled", "finished")))
    return rows, verdict


def test_the_timeline_has_a_row_for_the_part_of_the_step_the_verdict_names(tmp_path: Path) -> None:
    """`FAILED in checkpoint save` beside a timeline of only `training loop (unfinished) failed`."""
    lines = [
        "[INFO|trainer.py:2414] 2026-05-19 16:40:00,101 >> ***** Running training *****",
        " 50%|█████     | 12/24 [01:10<01:10,  5.83s/it]",
        "{'loss': 0.5512, 'grad_norm': 1.41, 'learning_rate': 1.5e-06, 'epoch': 1.0}",
        "100%|██████████| 24/24 [02:20<00:00,  5.84s/it]",
        "[INFO|trainer.py:3984] 2026-05-19 16:42:21,930 >> Saving model checkpoint to ./out/checkpoint-24",
        "[rank0]:[E519 17:12:22.501934114 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=2210, OpType=_ALLGATHER_BASE, NumelIn=6291456, NumelOut=12582912, "
        "Timeout(ms)=1800000) ran for 1800044 milliseconds before timing out.",
    ]
    rows, verdict = timeline(tmp_path, lines)
    assert verdict == "FAILED in checkpoint save", (verdict, rows)
    named = [row.split()[1:3] for row in rows]
    assert ["checkpoint", "save"] in named, rows


def test_a_part_the_driver_s_traceback_names_after_a_timeout_began_by_the_wait_s_start(tmp_path: Path) -> None:
    """verl: a worker's watchdog says its _ALLGATHER_BASE ran 600 s, then the driver's traceback names
    compute_log_prob. Before: '≥03:51:47 old log-prob', a start at the file's end for a part under way 10 minutes."""
    lines = [
        "(TaskRunner pid=61) step:40 - actor/pg_loss:-0.0031 - timing_s/gen:311.48 - timing_s/old_log_prob:48.92 - "
        "timing_s/step:561.30",
        "(WorkerDict pid=68) [rank0]:[E217 03:51:47.904415262 ProcessGroupNCCL.cpp:683] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=284517, OpType=_ALLGATHER_BASE, NumelIn=1835008, "
        "NumelOut=7340032, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.",
        "Traceback (most recent call last):",
        '  File "/py/verl/trainer/ppo/ray_trainer.py", line 1118, in fit',
        "    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ]
    rows, verdict = timeline(tmp_path, lines)
    assert verdict == "FAILED in old log-prob", (verdict, rows)
    assert any(row.split()[:3] == ["≤03:41:47", "old", "log-prob"] for row in rows), rows


def test_a_phase_whose_lines_carry_no_stamp_has_no_length_and_a_bounded_start(tmp_path: Path) -> None:
    """`config 0s`, `dataset generation 0s` from lines without stamps that took the launcher's stamp before them;
    the training loop that began on an unstamped bar began at or after that stamp, not at it."""
    lines = [
        "W0921 07:45:30.118000 2217 torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable for "
        "each process to be 1 in default",
        "Using sequence parallel size: 1",
        "dataset len: 30512",
        "dataset len: 800",
        "Epoch 1/3: 100%|██████████| 120/120 [41:02<00:00, 20.52s/it]",
        "step:120 - train/loss:0.701 - train/lr(1e-3):0.0093",
        "Epoch 2/3:   0%|          | 0/120 [00:00<?, ?it/s]",
        "[rank3]:[E921 08:36:33.402118337 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1904, OpType=ALLTOALL, NumelIn=2048, NumelOut=2048, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.",
    ]
    rows, _ = timeline(tmp_path, lines)
    by_name = {" ".join(row.split()[1:-2]): row.split() for row in rows if "(unfinished)" not in row}
    assert by_name["dataset generation"][-2] == "?", rows  # no stamp among its lines: no length
    assert by_name["dataset generation"][0] == "≥07:45:30", rows  # its first line took the stamp before it
    assert not any(row.split()[-2] in ("0s", "≥0s") for row in rows), rows
    loop = next(row.split() for row in rows if "training loop" in row)
    assert loop[0] == "≥07:45:30", rows


def test_the_phases_pane_reads_a_replayed_timeline_as_replay_does(tmp_path: Path) -> None:
    """The Phases pane's table of a log read as history: `?`, not `0s`, for a phase with no stamp of its own."""
    from gkdtop.config import load_config
    from gkdtop.replay import replay
    from gkdtop.tui.phases_pane import render_phases

    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in [
        "W0921 07:45:30.118000 2217 torch/distributed/run.py:792] Setting OMP_NUM_THREADS to 1",
        "dataset len: 30512",
        "Epoch 1/3:  10%|█         | 12/120 [04:06<36:56, 20.52s/it]",
        "[rank3]:[E921 08:36:33.402118337 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1904, OpType=ALLTOALL, NumelIn=2048, NumelOut=2048, Timeout(ms)=600000) ran for "
        "600012 milliseconds before timing out.",
    ]))
    status = replay([str(log)], load_config(None)).status
    rows = [row.split() for row in render_phases(status, now=status.timeline[-1].start, table=True).plain.splitlines()
            if "dataset generation" in row]
    assert rows and rows[0][-1] == "?" and rows[0][-2].startswith("≥"), rows


def test_a_row_a_timeout_line_opens_starts_at_or_before_what_it_says_ran(tmp_path: Path) -> None:
    """The watchdog line says its ALLREDUCE ran 600 s: the update was under way by 16:42:02, not since the line's
    own 16:52:02 (the row read `16:52:02 model update`, unmarked); a loop it opens, deep in its group, likewise."""
    watchdog = ("[rank0]:[E519 16:52:02.501934114 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=1291, OpType=ALLREDUCE, NumelIn=9437184, NumelOut=9437184, "
                "Timeout(ms)=600000) ran for 600078 milliseconds before timing out.")
    lines = [
        "[INFO|trainer.py:2414] 2026-05-19 16:40:00,101 >> ***** Running training *****",
        " 50%|█████     | 12/24 [01:10<01:10,  5.83s/it]",
        "{'loss': 0.5512, 'grad_norm': 1.41, 'learning_rate': 1.5e-06, 'epoch': 1.0}",
        watchdog,
    ]
    rows, verdict = timeline(tmp_path, lines)
    assert verdict == "FAILED in model update", (verdict, rows)
    update = next(row.split() for row in rows if "model update" in row)
    assert update[0] == "≤16:42:02", rows
    rows, _ = timeline(tmp_path, [watchdog])  # the log starts at the timeout: the loop, too, began by then
    assert [row.split()[0] for row in rows] == ["≤16:42:02", "≤16:42:02"], rows


def test_a_line_that_says_something_finished_in_n_seconds_bounds_its_phase_start(tmp_path: Path) -> None:
    """`Graph capturing finished in 16 secs` at 14:02:58 opened rollout init at 14:02:58, though the engine was
    capturing since 14:02:42 at the latest."""
    lines = [
        "(TaskRunner pid=915150) Total training steps: 58",
        "(WorkerDict pid=916702) INFO 06-27 14:02:41 [executor_base.py:112] # cuda blocks: 36521, # CPU blocks: 9362",
        "(WorkerDict pid=916702) INFO 06-27 14:02:58 [model_runner.py:1592] Graph capturing finished in 16 secs, "
        "took 0.41 GiB",
        "(TaskRunner pid=915150) Checkpoint tracker file does not exist: /ckpt/latest_checkpointed_iteration.txt",
    ]
    rows, _ = timeline(tmp_path, lines)
    init = next(row.split() for row in rows if "rollout init" in row)
    assert init[0] == "≤14:02:42", rows


def test_the_span_is_at_least_what_a_line_after_the_last_stamp_says_ran(tmp_path: Path) -> None:
    """Megatron's unstamped watchdog lines after its last stamp say the collectives ran 607 s: the header said
    `32s from 03:11:09 to 03:11:41`."""
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in [
        "[before the start of training step] datetime: 2024-09-20 03:11:09 ",
        " [2024-09-20 03:11:41] iteration        1/   20000 | consumed samples:           16 | elapsed time per "
        "iteration (ms): 32177.5 | lm loss: 1.098214E+01 |",
        "[iteration] datetime: 2024-09-20 03:11:41 ",
        "[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=262, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 607342 milliseconds before timing out.",
    ]))
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--why", str(log)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0]
    assert header.endswith(": ≥10m07s (a line states something ran that long); stamps 03:11:09 to 03:11:41"), header
    assert "the run went on at least this long (it states): train.log:4" in proc.stdout
    out = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(log)], capture_output=True,
                         text=True, timeout=120).stdout
    assert '"ran_for_s": 607.342' in out


def replay_json(tmp_path: Path, lines: list[str]) -> dict:  # type: ignore[type-arg]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(log)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


VLLM_SERVER_OOM = [
    "INFO 11-28 02:01:00 llm_engine.py:237] Initializing an LLM engine (v0.5.0) with config: model='/m/l3-8b'",
    "INFO 11-28 02:01:20 model_runner.py:160] Loading model weights took 14.9595 GB",
    "INFO 11-28 02:01:22 gpu_executor.py:83] # GPU blocks: 27910, # CPU blocks: 2048",
    "INFO 11-28 02:01:40 model_runner.py:965] Graph capturing finished in 18 secs.",
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    "INFO 11-28 02:27:29 metrics.py:341] Avg prompt throughput: 5120.0 tokens/s, Avg generation throughput: 3.0 "
    "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] Engine background task failed",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] Traceback (most recent call last):",
    'ERROR 11-28 02:27:29 async_llm_engine.py:52]   File "/py/vllm/model_executor/layers/sampler.py", line 771, '
    "in _get_logprobs",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52]     logprobs = torch.log_softmax(logits, dim=-1)",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "7.83 GiB. GPU 0 has a total capacity of 79.15 GiB of which 3.01 GiB is free.",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] ",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] The above exception was the direct cause of the following exception:",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] ",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] Traceback (most recent call last):",
    'ERROR 11-28 02:27:29 async_llm_engine.py:52]   File "/py/vllm/engine/async_llm_engine.py", line 42, in '
    "_log_task_completion",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52]     raise AsyncEngineDeadError(",
    "ERROR 11-28 02:27:29 async_llm_engine.py:52] vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished "
    "unexpectedly. This should never happen! Please open an issue on Github.",
]


def test_words_that_move_the_verdict_move_the_timeline_too(tmp_path: Path) -> None:
    """A vLLM server up, serving, then an OOM in a request. Before: 'engine init (unfinished) failed' under
    'FAILED, likely in generation': the timeline said the engine's start-up failed. Now the phase the rules knew is
    passed (no line says when it ended) and the words' phase follows it, marked as a guess, in text and JSON."""
    rows, verdict = timeline(tmp_path, VLLM_SERVER_OOM)
    assert verdict == "FAILED, likely in generation", (verdict, rows)
    assert [row.split()[1] for row in rows] == ["engine", "serving", "generation"], rows
    assert rows[1].split()[-2:] == ["?", "passed"] and rows[2].endswith("failed (a guess)"), rows
    doc = replay_json(tmp_path, VLLM_SERVER_OOM)
    spans = [(s["name"], s["status"], s["guess"], s["end"]) for s in doc["timeline"]]
    assert spans[-2:] == [("serving", "passed", False, None), ("generation", "failed", True, None)], spans
    assert doc["timeline"][-1]["evidence"]["text"].startswith("INFO 11-28 02:27:29 metrics.py:341]")


def test_a_fault_stays_the_failure_over_the_error_it_directly_caused(tmp_path: Path) -> None:
    """vLLM's engine loop died of an OOM and raised AsyncEngineDeadError `from` it. Before: the failure shown was
    `AsyncEngineDeadError: Task finished unexpectedly`, which names nothing to fix."""
    doc = replay_json(tmp_path, VLLM_SERVER_OOM)
    assert "torch.cuda.OutOfMemoryError: CUDA out of memory" in doc["failure"], doc["failure"]


def test_sglang_s_uvicorn_line_before_its_warmup_is_not_serving(tmp_path: Path) -> None:
    """vLLM's `INFO:     Uvicorn running on …` comes once its engine is up: the engine's start-up ended there.
    SGLang's comes before its warmup request (behind its own stamp); only `fired up` says it is ready."""
    vllm = [*VLLM_SERVER_OOM[:5]]
    rows, _ = timeline(tmp_path, vllm)
    assert [row.split()[1] for row in rows] == ["engine", "serving"], rows
    sglang = [
        "[2026-02-03 08:19:36 TP0] Load weight begin. avail mem=70.1 GB",
        "[2026-02-03 08:20:31] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-02-03 08:20:32 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00",
    ]
    rows, _ = timeline(tmp_path, sglang)
    assert [row.split()[1] for row in rows] == ["engine"], rows


def test_the_loop_s_first_collective_does_not_end_the_loop(tmp_path: Path) -> None:
    """HF Trainer at 0/1128 when its first collective (NCCL's lazy init, SeqNum=1) timed out. Before: 'training loop
    ? done' above 'nccl init failed', beside a bar at 0%. NCCL up to 2.11's `comm 0x… nranks 8 … Init COMPLETE` (no
    commId) is the communicator made (audit 16): its first collective then failed in the loop, as with a commId
    (test_a_loop_a_finished_communicator_interrupted_is_one_row)."""
    lines = [
        "[INFO|trainer.py:2048] 2026-11-28 03:02:11,415 >> ***** Running training *****",
        "  0%|          | 0/1128 [00:00<?, ?it/s]",
        "node7:41210:41210 [0] NCCL INFO Bootstrap : Using eth0:10.2.3.7<0>",
        "node7:41210:42011 [0] NCCL INFO comm 0x8e1c2a0 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
        "[E ProcessGroupNCCL.cpp:915] [Rank 3] NCCL watchdog thread terminated with exception: [Rank 3] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=1, NumelOut=8, "
        "Timeout(ms)=1800000) ran for 1800183 milliseconds before timing out.",
    ]
    rows, verdict = timeline(tmp_path, lines)
    assert verdict == "FAILED in training loop", (verdict, rows)
    assert [row.split()[1:] for row in rows] == [["nccl", "init", "?", "done"],
                                                 ["training", "loop", "(unfinished)", "failed"]], rows


def test_a_guess_from_the_frames_stays_inside_the_rules_phase(tmp_path: Path) -> None:
    """verl's workers died in `init_process_group` (the port was taken by a second job) under the driver's
    init_workers: the frames name nccl init, which runs inside worker-group creation. Before: 'worker-group creation
    ? passed' above the guess; the worker group was never created."""
    lines = [
        "(TaskRunner pid=5121) Total training steps: 75",
        "(TaskRunner pid=5121) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
        "Traceback (most recent call last):",
        '  File "/work/verl/verl/trainer/main_ppo.py", line 69, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=5121, ip=10.8.0.3)",
        '  File "/work/verl/verl/trainer/ppo/ray_trainer.py", line 877, in init_workers',
        "    wg_dict = self.ray_worker_group_cls(resource_pool=resource_pool, ray_cls_with_init=worker_dict_cls)",
        "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
        "ray::WorkerDict.__init__() (pid=5733, ip=10.8.0.3)",
        '  File "/work/verl/verl/single_controller/base/worker.py", line 161, in __init__',
        '    torch.distributed.init_process_group(backend="cpu:gloo,cuda:nccl")',
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29511, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    ]
    rows, verdict = timeline(tmp_path, lines)
    assert verdict == "FAILED, likely in nccl init", (verdict, rows)
    assert rows[-2].split()[1:] == ["worker-group", "creation", "(unfinished)", "failed"], rows
    assert rows[-1].endswith("failed (a guess)"), rows


def test_a_loop_a_finished_communicator_interrupted_is_one_row(tmp_path: Path) -> None:
    """NCCL's lazy init in verl's first step finished, then its first collective timed out. Before: 'training loop
    ? done', 'nccl init ? done', 'training loop failed', beside a bar at 0/58."""
    lines = [
        "(TaskRunner pid=7120) Training Progress:   0%|          | 0/58 [00:00<?, ?it/s]",
        "(WorkerDict pid=7811) node-3:7811:9102 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
        "(WorkerDict pid=7811) node-3:7811:9102 [0] NCCL INFO comm 0x55d1e0a0 rank 0 nranks 4 cudaDev 0 busId 18000 "
        "commId 0x3c1a2b - Init COMPLETE",
        "(WorkerDict pid=7812) [rank1]:[E402 10:42:55.118277201 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=1, NumelOut=4, "
        "Timeout(ms)=1800000) ran for 1800011 milliseconds before timing out.",
    ]
    rows, _ = timeline(tmp_path, lines)
    names = [" ".join(row.split()[1:3]) for row in rows]
    assert names.count("training loop") == 1 and rows[-1].split()[1:3] == ["training", "loop"], rows
    assert "done" not in rows[-1], rows
