"""Advice the log itself must support (issue 25, audit 2 of the posted corpus; logs written in those shapes with
invented values): a cause or try line a line of the log contradicts, or that nothing in it supports, is not shown."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from gkdtop.replay import report_text
from tests.test_phase_nesting import run, text_of
from tests.verlrun import live_and_history, step_line

if TYPE_CHECKING:
    from pathlib import Path


def said(status) -> str:  # type: ignore[no-untyped-def]
    assert status.hint is not None
    return "\n".join((*status.hint.causes, *status.hint.actions))


def stalled(tmp_path: Path, lines: list[str], phase: str = "") -> str:
    """The stall advice on `lines` (read by replay's reader, also followed live until its last line is known, or
    it is in `phase`), long after their last one."""
    def done(store) -> bool:  # type: ignore[no-untyped-def]
        if phase:
            return store.phase_status().current == phase
        return (store.phase_status().recognised_last or "").strip() == lines[-1].strip()

    history, _ = live_and_history(tmp_path, text_of(lines), done)
    text = said(history.status(1e12))
    assert history.status(1e12).state == "stalled"
    return text


def test_a_single_process_run_that_loaded_its_weights_is_not_told_of_dist_init_or_slow_storage(tmp_path: Path) -> None:
    """LLaMA-Factory, one GPU, silent after 'Using auto half precision backend'. Before: 'torch.distributed init waits
    for a rank …' on `world size: 1 … distributed training: False`, and 'Loading a large checkpoint from slow storage'
    after HF said every weight was in."""
    lines = [
        "[INFO|2026-01-05 09:12:01] llamafactory.hparams.parser:401 >> Process rank: 0, world size: 1, device: cuda:0, "
        "distributed training: False, compute dtype: torch.bfloat16",
        "[INFO|modeling_utils.py:1124] 2026-01-05 09:12:09,118 >> loading weights file /m/Qwen-0.5B/model.safetensors",
        "[INFO|modeling_utils.py:4930] 2026-01-05 09:12:11,402 >> All the weights of Qwen2ForCausalLM were initialized "
        "from the model checkpoint at /m/Qwen-0.5B.",
        "[INFO|2026-01-05 09:12:11] llamafactory.model.loader:143 >> trainable params: 540,672 || all params: "
        "494,573,440 || trainable%: 0.1093",
    ]
    text = stalled(tmp_path, lines)
    assert "torch.distributed init" not in text and "slow storage" not in text


def test_a_distributed_run_still_hears_of_dist_init(tmp_path: Path) -> None:
    """The same cause stays where the log shows a distributed run that never finished its init."""
    lines = [
        "[2026-01-05 09:12:01] torch.distributed: initializing, world_size=8, MASTER_ADDR=10.0.0.4",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:09<00:00,  2.31s/it]",
        "trainable params: 540,672 || all params: 494,573,440 || trainable%: 0.1093",
    ]
    assert "torch.distributed init waits" in stalled(tmp_path, lines)


def test_an_engine_past_graph_capture_is_not_slow_in_start_up(tmp_path: Path) -> None:
    """vLLM TP=2, silent for hours after both ranks finished graph capture. Before: 'start-up … takes minutes the
    first time; a capture bar that stops moving is a hang there'."""
    lines = [
        "INFO 03-02 10:01:11 [core.py:65] Initializing a V1 LLM engine (v0.9.1) with config: model='/m/Mixtral'",
        "(VllmWorker rank=0 pid=401) INFO 03-02 10:01:50 [default_loader.py:280] Loading weights took 31.20 seconds",
        "(VllmWorker rank=1 pid=402) INFO 03-02 10:02:40 [gpu_model_runner.py:1933] Graph capturing finished in 22 "
        "secs, took 1.90 GiB",
        "(VllmWorker rank=0 pid=401) INFO 03-02 10:02:40 [gpu_model_runner.py:1933] Graph capturing finished in 22 "
        "secs, took 1.90 GiB",
    ]
    text = stalled(tmp_path, lines)
    assert "take minutes the first time" not in text and "got past graph capture" in text


def test_a_store_connect_timeout_gets_no_nccl_debug_advice(tmp_path: Path) -> None:
    """TRL: the trainer's TCPStore connect to the vLLM server timed out; no NCCL line anywhere. Before: 'Run once
    with NCCL_DEBUG=INFO; Init START without Init COMPLETE …'."""
    lines = [
        "INFO:trl.extras.vllm_client:Server is up!",
        "W305 11:20:02.118220431 TCPStore.cpp:330] [c10d] TCP client failed to connect/validate to host "
        "10.2.0.9:41002 - retrying (try=0, timeout=300000ms, delay=3121ms): The client socket has timed out after "
        "300000ms while trying to connect to (10.2.0.9, 41002).",
    ]
    text = stalled(tmp_path, lines)
    assert "NCCL_DEBUG" not in text and "MASTER_ADDR" in text
    end = run(tmp_path, lines).open_end
    assert end is not None and end.hint is not None and not any("NCCL_DEBUG" in a for a in end.hint.actions)


def test_step_breakdown_advice_needs_two_timed_steps(tmp_path: Path) -> None:
    """HF Trainer resuming on a streamed dataset, its bar at 0/800 for an hour. Before: 'compare the last step's
    breakdown with earlier steps' with no step in the log. A verl run that timed two steps still gets it."""
    bar = "  0%|          | 0/800 [00:00<?, ?it/s]"
    lines = ["***** Running training *****", "  Num examples = 51,200", bar]
    assert "step's breakdown" not in stalled(tmp_path, lines)
    assert "step's breakdown" not in report_text(run(tmp_path, lines))
    rng = random.Random(3)
    verl = [step_line(n, 40.0, rng) for n in (1, 2)]
    history, _ = live_and_history(tmp_path, text_of(verl), lambda s: s.phase_status().steps_done == 2)
    assert "step's breakdown" in said(history.status(1e12))


def test_a_save_waiting_in_a_collective_is_not_blamed_on_storage(tmp_path: Path) -> None:
    """DeepSpeed: every file of the checkpoint was written, then faulthandler's dump shows rank 0 in the tag check
    across ranks. Before: 'Writing the checkpoint to slow or full storage' first."""
    lines = [
        " 25%|██▌       | 10/40 [00:21<01:02,  2.08s/it]Saving model checkpoint to /out/checkpoint-10",
        "Model weights saved in /out/checkpoint-10/pytorch_model.bin",
        "Timeout (0:10:00)!",
        "Thread 0x00007f11aa2b1740 (most recent call first):",
        '  File "/py/deepspeed/runtime/engine.py", line 2210 in _checkpoint_tag_validation',
        '  File "/py/deepspeed/runtime/engine.py", line 2301 in save_checkpoint',
    ]
    text = stalled(tmp_path, lines, "checkpoint save")
    assert "slow or full storage" not in text and "A rank stuck in a collective of the save" in text


def test_a_hint_line_s_steps_must_be_a_count(tmp_path: Path) -> None:
    import pytest

    from gkdtop.config import load_config
    from gkdtop.yamlguard import ConfigError

    (tmp_path / "c.yaml").write_text("phases:\n  - name: x\n    start: 'go'\n    hint:\n      actions:\n"
                                     "        - text: compare steps\n          steps: two\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:7: .*steps: expected a whole number"):
        load_config(tmp_path / "c.yaml")


# --- [rootcause] the failure shown is the error that started it ------------------------------------------------

def failure_of(tmp_path: Path, lines: list[str]) -> str:
    status = run(tmp_path, lines).status
    assert status.state == "failed"
    return status.failure


def test_a_logged_traceback_s_failure_is_its_exception_not_its_header(tmp_path: Path) -> None:
    """vLLM's engine core logs its traceback with `ERROR date [core.py:N] ` on every line. Before: the failure shown
    was `ERROR … [core.py:459] Traceback (most recent call last):`."""
    who = "(LLMRayActor pid=5120) ERROR 04-11 09:02:17 [core.py:459] "
    lines = [
        who + "EngineCore encountered a fatal error.",
        who + "Traceback (most recent call last):",
        who + '  File "/py/vllm/v1/engine/core.py", line 450, in run_engine_core',
        who + "    engine_core.run_busy_loop()",
        who + "RuntimeError: CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:62",
        "(LLMRayActor pid=5120) CRITICAL 04-11 09:02:17 [core_client.py:361] Got fatal signal from worker processes, "
        "shutting down. See stack trace above for root cause issue.",
    ]
    assert "RuntimeError: CUDA Error: out of memory" in failure_of(tmp_path, lines)


def test_a_dead_worker_is_the_failure_not_the_engine_errors_after_it(tmp_path: Path) -> None:
    """`vllm serve`: a worker process died, then the engine's traceback and EngineDeadError, each saying the root
    cause is above. Before: `ERROR … Traceback (most recent call last):`, the worker never named."""
    lines = [
        "INFO 05-02 10:11:02 [loggers.py:118] Engine 000: Avg prompt throughput: 410.2 tokens/s, Avg generation "
        "throughput: 22.5 tokens/s, Running: 3 reqs, Waiting: 40 reqs",
        "ERROR 05-02 10:11:09 [multiproc_executor.py:140] Worker proc VllmWorker-1 died unexpectedly, shutting down "
        "executor.",
        "ERROR 05-02 10:11:09 [core.py:586] EngineCore encountered a fatal error.",
        "ERROR 05-02 10:11:09 [core.py:586] Traceback (most recent call last):",
        'ERROR 05-02 10:11:09 [core.py:586]   File "/py/vllm/v1/engine/core.py", line 577, in run_engine_core',
        "ERROR 05-02 10:11:09 [core.py:586] RuntimeError: Worker failed with error 'Worker proc VllmWorker-1 died "
        "unexpectedly', please check the stack trace above for the root cause",
        "ERROR 05-02 10:11:09 [async_llm.py:420] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
        "issue. See stack trace (above) for the root cause.",
    ]
    assert "Worker proc VllmWorker-1 died unexpectedly" in failure_of(tmp_path, lines)
    died = [f for f in run(tmp_path, lines).findings if f.name == "vllm-worker-died"]
    assert died and died[0].fields == {"worker": "VllmWorker-1"} and "consequences" in died[0].cause


def test_an_ib_adapter_fault_is_the_failure_not_the_abort_after_it(tmp_path: Path) -> None:
    """MPI job: NCCL warns of the HCA's async fault on three ranks, then a fourth aborts. Before: the failure was
    `terminate called after throwing an instance of 'std::runtime_error'`."""
    lines = [
        "[1,0]<stdout>:iter 20100 | loss 1.8821 | 0.391 s/iter",
        "[1,5]<stdout>:node-3:811:840 [1] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local "
        "catastrophic error",
        "[1,6]<stderr>:terminate called after throwing an instance of 'std::runtime_error'",
        "[1,6]<stderr>:  what():  NCCL error in: ProcessGroupNCCL.cpp:272, unhandled system error",
    ]
    assert "local catastrophic error" in failure_of(tmp_path, lines)


def test_an_actor_that_raised_before_it_died_is_explained_by_its_error(tmp_path: Path) -> None:
    """verl: pid 7001 raised a CUDA error, then Ray reported it dead. Before: ray-actor-died said 'killed (the OOM
    killer, …)' and to look for an OOM kill."""
    who = "(WorkerDict pid=7001, ip=10.1.0.3) "
    lines = [
        who + "Traceback (most recent call last):",
        who + '  File "/py/verl/workers/fsdp_workers.py", line 582, in generate_sequences',
        who + "RuntimeError: CUDA error: an illegal memory access was encountered",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: WorkerDict",
        "\tpid: 7001",
    ]
    died = [f for f in run(tmp_path, lines).findings if f.name == "ray-actor-died"]
    assert died and "illegal memory access" in died[0].fields.get("raised", "")
    assert "OOM" not in died[0].cause and "consequence" in died[0].cause


def test_ray_s_actor_died_text_is_found_whatever_the_alias_and_class(tmp_path: Path) -> None:
    """OpenRLHF's driver: `ray.exceptions.RayActorError` (the older alias) for an ActorModelRayActor. Before: no
    finding (only `ActorDiedError` was matched)."""
    lines = [
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: ActorModelRayActor",
        "\tpid: 9120",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2.",
    ]
    died = [f for f in run(tmp_path, lines).findings if f.name == "ray-actor-died"]
    assert died and died[0].fields.get("actor_class") == "ActorModelRayActor" and died[0].fields.get("pid") == "9120"


# Ray's report of a dead actor, as a driver's traceback ends in it (its fields tab-indented).
ACTOR_DIED = [
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
    "\tpid: 8123",
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file.",
]
DRIVER_GET = ["Traceback (most recent call last):", '  File "/py/verl/trainer/main_ppo.py", line 96, in run_ppo',
              "    ray.get(runner.run.remote(config))"]


def test_a_dead_actor_s_own_abort_after_the_report_is_what_ended_it(tmp_path: Path) -> None:
    """verl: the driver's ActorDiedError names pid 8123; Ray then flushes that process's own last lines, a CUDA
    library's missing symbol and its SIGABRT. Before: 'what ended it … is in that process's own output, not here' and
    'check dmesg … for an OOM kill', with its end right there."""
    worker = "(WorkerDict pid=8123) "
    lines = [LOOP, *DRIVER_GET, *ACTOR_DIED,
             worker + "Invalid handle. Cannot load symbol cublasLtGetVersion",
             worker + "*** SIGABRT received at time=1790001234 on cpu 5 ***",
             worker + "Fatal Python error: Aborted"]
    report = run(tmp_path, lines)
    assert report.status.failure.startswith("*** SIGABRT received")
    assert "not here" not in said(report.status) and "OOM" not in said(report.status)
    found = {f.name: f for f in report.findings}
    assert found["cuda-library-symbol"].fields["symbol"] == "cublasLtGetVersion"
    died = found["ray-actor-died"]
    assert "SIGABRT" in died.fields.get("raised", "") and "OOM" not in died.cause + died.fix
    # Another process's abort says nothing of this death: the report stays the failure.
    other = [line.replace("pid=8123", "pid=9000") for line in lines]
    assert run(tmp_path, other).status.failure.startswith("ray.exceptions.ActorDiedError")


def test_hydra_s_banner_is_not_an_error_an_actor_death_follows(tmp_path: Path) -> None:
    """verl: Hydra's `Error executing job` line, then the driver's traceback ending in ActorDiedError. Before: Hydra's
    line stayed the failure and 'the exception is not in the log: the traceback is cut', with the exception there."""
    lines = [LOOP, "Error executing job with overrides: ['trainer.total_epochs=3']", *DRIVER_GET, *ACTOR_DIED,
             "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    status = run(tmp_path, lines).status
    assert status.failure.startswith("ray.exceptions.ActorDiedError")
    assert "not in the log" not in said(status)


def test_an_actor_death_after_a_collective_timeout_is_its_consequence(tmp_path: Path) -> None:
    """verl: a worker's watchdog says an _ALLGATHER_BASE ran 600 s, then the driver's ActorDiedError. Before: the
    ActorDiedError was the failure, with 'It failed with an error, not a hang'."""
    who = "(WorkerDict pid=8123) [rank0]:[E217 03:51:47.904415262 ProcessGroupNCCL.cpp:683] [Rank 0] "
    lines = [LOOP, who + "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9001, OpType=_ALLGATHER_BASE, "
             "NumelIn=1835008, NumelOut=7340032, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.",
             *DRIVER_GET, *ACTOR_DIED]
    status = run(tmp_path, lines).status
    assert "Watchdog caught collective operation timeout" in status.failure
    assert "not a hang" not in said(status) and "collective timed out" in said(status)


def test_a_worker_s_abort_before_its_actor_died_stays_the_failure(tmp_path: Path) -> None:
    """verl: a WorkerDict aborted on boost::thread_resource_error, then the driver's ActorDiedError. Before: the
    ActorDiedError was shown as the failure, 'the run's first error is usually the cause' beside it."""
    who = "(WorkerDict pid=8123) "
    lines = [LOOP, who + "terminate called after throwing an instance of "
             "'boost::wrapexcept<boost::thread_resource_error>'",
             who + "  what():  boost::thread_resource_error: Resource temporarily unavailable",
             who + "*** SIGABRT received at time=1741083195 on cpu 77 ***", *DRIVER_GET, *ACTOR_DIED]
    assert "thread_resource_error" in failure_of(tmp_path, lines)


# --- [erradvice] the advice on a failure fits its kind of error --------------------------------------------------

LOOP = " 12%|█▏        | 60/500 [05:02<36:58,  5.04s/it]"


def advice_on(tmp_path: Path, lines: list[str]) -> str:
    status = run(tmp_path, [LOOP, *lines]).status
    assert status.state == "failed"
    return said(status)


def test_an_async_cuda_error_gets_launch_blocking_and_xid_not_the_traceback_s_frames(tmp_path: Path) -> None:
    """OpenRLHF's fit: `CUDA error: unspecified launch failure`, which CUDA reports at a later call. Before: 'its
    traceback's last frames say which part of the step raised it' and 'read the assert line'."""
    text = advice_on(tmp_path, [
        "Traceback (most recent call last):",
        '  File "/py/openrlhf/trainer/ppo_trainer.py", line 211, in fit',
        "RuntimeError: CUDA error: unspecified launch failure",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
    ])
    assert "CUDA_LAUNCH_BLOCKING=1" in text and "Xid" in text
    assert "last frames say" not in text and "assert" not in text


def test_a_launcher_s_exit_report_names_the_rank_and_where_its_error_is(tmp_path: Path) -> None:
    """accelerate launch: torchelastic reports local rank 3 exited with code 1; rank 3's own error is not in the log.
    Before: 'A step raised: the error above is the root cause …' and the assert advice."""
    text = advice_on(tmp_path, [
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 40112) of "
        "binary: /env/bin/python",
        "Traceback (most recent call last):",
        '  File "/env/bin/accelerate", line 8, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ])
    assert "Rank 3 exited with code 1" in text and "own output" in text
    assert "A step raised" not in text and "assert" not in text


def test_a_connection_the_server_closed_sends_the_user_to_the_server_s_log(tmp_path: Path) -> None:
    """TRL GRPO: the trainer's request to its vLLM server ended in RemoteDisconnected. Before: 'the error above is
    the root cause' and the assert advice, on a client error whose cause is on the server."""
    text = advice_on(tmp_path, [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/py/trl/extras/vllm_client.py", line 180, in generate',
        "[rank0]: requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed "
        "connection without response'))",
    ])
    assert "closed the connection" in text and "server's own log" in text and "assert" not in text


def test_assert_advice_only_on_an_assertion(tmp_path: Path) -> None:
    """The training loop's failure advice spoke of 'a failed assertion … read the assert line' on any error."""
    value = ["Traceback (most recent call last):", '  File "/py/train.py", line 40, in step',
             "ValueError: expected a batch of 8, got 7"]
    assert "assert" not in advice_on(tmp_path, value)
    assertion = [*value[:2], "AssertionError: train_batch_size must divide by n_gpus"]
    assert "read the assert line" in advice_on(tmp_path, assertion)


def test_an_actor_s_death_points_at_that_process_not_at_the_step(tmp_path: Path) -> None:
    """OpenRLHF: the driver's ray.get ends in RayActorError (SYSTEM_ERROR: the process was killed). Before: 'A step
    raised: the error above is the root cause; its traceback's last frames say which part of the step raised it'."""
    died = ["ray.exceptions.RayActorError" + ACTOR_DIED[0][len("ray.exceptions.ActorDiedError"):], *ACTOR_DIED[1:]]
    text = advice_on(tmp_path, [*DRIVER_GET, *died])
    assert "own log" in text and "OOM" in text and "memory monitor" in text
    assert "A step raised" not in text and "root cause" not in text


# --- [witness] a timeout line states how long the job waited ---------------------------------------------------

def test_a_log_that_ends_on_a_stated_wait_says_it_hung_that_long(tmp_path: Path) -> None:
    """DeepSpeed's save: faulthandler's `Timeout (0:05:00)!` and the thread dump end the log. TRL: the store connect
    `timed out after 300000ms`. Before: 'replay cannot tell a hang there from a log copied mid-run' beside them."""
    from gkdtop.replay import report_json

    save = [
        " 50%|█████     | 20/40 [00:31<00:29,  1.47s/it]Saving model checkpoint to /out/checkpoint-20",
        "Timeout (0:05:00)!",
        "Thread 0x00007f5a2e1f7740 (most recent call first):",
        '  File "/py/deepspeed/runtime/engine.py", line 1463 in _checkpoint_tag_validation',
    ]
    store = [
        "INFO:trl.extras.vllm_client:Server is up!",
        "W305 11:20:02.118220431 TCPStore.cpp:330] [c10d] TCP client failed to connect/validate to host "
        "10.2.0.9:41002 - retrying (try=0, timeout=600000ms, delay=3121ms): The client socket has timed out after "
        "600000ms while trying to connect to (10.2.0.9, 41002).",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f6a40b6e1b8 in libc10.so)",
    ]
    for lines, wait, seconds in ((save, "5m00s", 300), (store, "10m00s", 600)):
        report = run(tmp_path, lines)
        text = report_text(report)
        assert "cannot tell a hang" not in text and f"states a wait of {wait}" in text, text
        assert report_json(report)["open_end"]["waited_s"] == seconds
    assert "slow or full storage" not in report_text(run(tmp_path, save))


def test_a_jobs_own_no_progress_watchdog_is_a_stated_wait_after_deepspeeds_finished_model(tmp_path: Path) -> None:
    """A DeepSpeed script: the engine built (`Final Optimizer`), step lines of its own, then its own watchdog's
    `no progress for 60s` and the launcher's exits. Before: 'ended in model load' and 'cannot tell a hang there from a
    log copied mid-run'. Not an RL trainer's log and no engine seen: the loop comes next, not an engine's start-up."""
    lines = [
        "[2026-02-11 10:02:20,478] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2",
        "[2026-02-11 10:02:22,063] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Final Optimizer = "
        "DeepSpeedZeroOptimizer_Stage3",
        "R0 STEP0 -> backward",
        "R0 STEP0 -> step_begin",
        "WATCHDOG: no progress for 60s in phase=step_begin (rank=0), exiting",
        "[2026-02-11 10:03:26,991] [INFO] [launch.py:351:main] Process 48212 exits successfully.",
    ]
    text = report_text(run(tmp_path, lines))
    # The rules end at model load; the ranks' own words (`-> backward`, `step_begin`) place it in the step's update,
    # a guess the verdict marks (analysis/wordphase.py).
    assert "ended, likely in model update" in text and "a guess" in text and "step_begin" in text, text
    assert "cannot tell a hang" not in text and "states a wait of 1m00s" in text, text
    assert "engine" not in text, text


def test_a_log_that_just_stops_still_cannot_tell(tmp_path: Path) -> None:
    """Without a stated wait the open end stays what it was: a hang and a copy taken mid-run read the same."""
    lines = ["INFO:trl.extras.vllm_client:Server is up!", "NCCL INFO Bootstrap : Using eth0:10.2.0.9<0>"]
    assert "cannot tell a hang" in report_text(run(tmp_path, lines))


def test_a_run_stopped_by_hand_is_a_hang_it_ended_not_an_error(tmp_path: Path) -> None:
    """A verl run stopped with Ctrl+C while it hung (users stop a hung job, then paste its log). Before: 'It failed
    with an error, not a hang' and 'A step raised: the error above is the root cause … Fix what the error names'."""
    ctrl_c = [
        "^CTraceback (most recent call last):",
        '  File "/srv/verl/verl/trainer/main_ppo.py", line 76, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        '  File "python/ray/_raylet.pyx", line 3189, in ray._raylet.CoreWorker.get_objects',
        "KeyboardInterrupt",
        "(TaskRunner pid=7120) *** SIGTERM received at time=1746012345 on cpu 12 ***",
    ]
    status = run(tmp_path, [LOOP, *ctrl_c]).status
    assert status.state == "failed" and status.interrupted and status.failure == "KeyboardInterrupt"
    text = said(status)
    assert text.startswith("Stopped from outside (Ctrl+C, SIGINT or SIGTERM")
    assert "not a hang" not in text and "root cause" not in text and "Fix what the error names" not in text
    assert "press s" in text  # the phase's own hang advice, for the next time
    assert "INTERRUPTED in training loop" in report_text(run(tmp_path, [LOOP, *ctrl_c]))
    # torchrun's agent stopped by the scheduler (SIGTERM): the same, with no Python traceback of the run's own.
    agent = ["Traceback (most recent call last):",
             '  File "/opt/venv/bin/torchrun", line 8, in <module>',
             "    sys.exit(main())",
             '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", '
             "line 64, in _terminate_process_handler",
             '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
             "torch.distributed.elastic.multiprocessing.api.SignalException: Process 41127 got signal: 15"]
    assert run(tmp_path, [LOOP, *agent]).status.interrupted
    # ... or its own warning as it starts to stop its workers (Ctrl+C at an axolotl run stuck in its trainer's start)
    closing = ["^C[2026-05-06 14:41:57,302] torch.distributed.elastic.agent.server.api: [WARNING] Received "
               "Signals.SIGINT death signal, shutting down workers",
               "[2026-05-06 14:41:57,303] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process "
               "3382410 closing signal SIGINT"]
    stopped = run(tmp_path, [LOOP, *closing]).status
    assert stopped.state == "failed" and stopped.interrupted
    # An error of the run's own is no interrupt.
    own = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert not run(tmp_path, [LOOP, own]).status.interrupted


def test_a_launcher_s_rendezvous_timeout_names_the_launcher_s_setting(tmp_path: Path) -> None:
    """torchrun on the second node gave up on the rendezvous store after 900 s (the first node was still installing
    packages). Before: 'give the wait longer: init_process_group(timeout=...)', which does not set this wait."""
    lines = [
        "W0108 19:49:31.102000 3117 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable",
        "[E108 20:04:34.467642512 socket.cpp:957] [c10d] The client socket has timed out after 900s while trying to "
        "connect to (10.40.2.7, 29500).",
        "Traceback (most recent call last):",
        '  File "/opt/venv/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 540, in '
        "_rendezvous",
        "    rdzv_info = spec.rdzv_handler.next_rendezvous()",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/'
        'static_tcp_rendezvous.py", line 67, in next_rendezvous',
        "    self._store = TCPStore(  # type: ignore[call-arg]",
        "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to "
        "(10.40.2.7, 29500).",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and status.current == "nccl init"
    text = said(status)
    assert "--rdzv-conf timeout=" in text and "init_process_group(timeout" not in text
    # A process group's own store wait (no launcher frames) keeps the process group's timeout.
    own = [lines[1], "Traceback (most recent call last):",
           '  File "/srv/job/train.py", line 40, in setup',
           "    dist.init_process_group('nccl', timeout=timedelta(minutes=15))",
           '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1520, in '
           "init_process_group", "    store, rank, world_size = next(rendezvous_iterator)", lines[-1]]
    assert "init_process_group(timeout" in said(run(tmp_path, own).status)


def test_a_span_the_failure_moved_from_is_not_cited_as_failed(tmp_path: Path) -> None:
    """Hydra's banner failed the phase after rollout init; the traceback's `_validate` frame moved the failure to
    validation. Before: the timeline said the first span was done while `--why` cited it as `… failed`."""
    lines = [
        "(WorkerDict pid=5187) INFO 03-24 11:02:49 gpu_executor.py:76] # GPU blocks: 41277, # CPU blocks: 9362",
        "(WorkerDict pid=5187) After building vllm rollout, memory allocated (GB): 48.13, memory reserved (GB): 48.62",
        "Error executing job with overrides: ['trainer.n_gpus_per_node=8']",
        "Traceback (most recent call last):",
        '  File "/srv/verl/verl/trainer/main_ppo.py", line 101, in main',
        "    ray.get(main_task.remote(config))",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=51230, ip=10.40.3.17)",
        '  File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 668, in fit',
        "    val_metrics = self._validate()",
        '  File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 517, in _validate',
        "    test_output_gen_batch = self.actor_rollout_wg.generate_sequences(test_gen_batch)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and status.current == "validation"
    for span in status.timeline:
        if span.status == "done" and span.evidence is not None:
            assert not span.evidence.claim.endswith(" failed"), (span.name, span.evidence.claim)
    assert sum(span.status == "failed" for span in status.timeline) == 1


def test_the_heartbeat_monitor_s_timeout_ends_the_run_as_a_hang(tmp_path: Path) -> None:
    """Newer torch: `Heartbeat monitor timed out! Process will be terminated …` on every rank, hours after the bar
    stopped at 0. Before: 'running' and no culprit: the line was no failure."""
    lines = [
        "[0]:  0%|          | 0/1847 [00:00<?, ?it/s]",
        "[3]:E0423 02:10:44.182842  8355 ProcessGroupNCCL.cpp:1329] [PG 0 (default_pg) Rank 3] Heartbeat monitor timed "
        "out! Process will be terminated after dumping debug info. workMetaList_.size()=0",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and "Heartbeat monitor timed out" in status.failure
    assert said(status).startswith("A hang: NCCL's watchdog itself stopped making progress")


def test_a_crash_after_training_finished_is_a_failure_not_done(tmp_path: Path) -> None:
    """HF Trainer ran out of memory loading the best checkpoint after its loop (load_best_model_at_end). Before: state
    'done' and no failure, though the run died with an exception."""
    lines = [
        "[INFO|trainer.py:2414] 2026-03-02 02:00:12,101 >> ***** Running training *****",
        "{'loss': 0.9833, 'grad_norm': 2.411, 'learning_rate': 4.1e-06, 'epoch': 1.0}",
        "[INFO|trainer.py:2681] 2026-03-02 02:40:41,220 >> ",
        "",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "",
        "[INFO|trainer.py:2690] 2026-03-02 02:40:41,221 >> Loading best model from /out/checkpoint-200 (score: 0.41).",
        "Traceback (most recent call last):",
        '  File "/work/sft.py", line 88, in <module>',
        "    trainer.train()",
        '  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2690, in _load_best_model',
        "    load_result = model.load_state_dict(state_dict, False)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 211.12 MiB is free.",
    ]
    report = run(tmp_path, lines)
    assert report.status.state == "failed" and report.status.current == "after training finished"
    assert report.status.failure.startswith("torch.OutOfMemoryError")
    assert "FAILED after training finished" in report_text(report)


def test_launchers_and_watchdogs_of_other_stacks(tmp_path: Path) -> None:
    """Audit 7's shapes. DeepSpeed's launcher reporting a rank killed by signal 9 was 'running'; SGLang's scheduler
    watchdog was 'It failed with an error, not a hang'; Ray Tune's `Error file: …/error.txt` was the failure."""
    deepspeed = [
        "[2026-11-28 01:02:11,100] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.15.4",
        "[2026-11-28 01:03:31,551] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4411",
        "[2026-11-28 01:03:31,990] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
        "'--local_rank=1', '--deepspeed', 'ds_z3.json'] exits with return code = -9",
    ]
    status = run(tmp_path, deepspeed).status
    assert status.state == "failed" and said(status).startswith("Rank 1 was ended by signal 9")
    sglang = [
        "[2026-11-28 03:01:02 TP0] Decode batch. #running-req: 12, #token: 40211, token usage: 0.31, gen throughput "
        "(token/s): 811.20, #queue-req: 0",
        "[2026-11-28 03:06:14 TP0] Watchdog timeout (self.watchdog_timeout=300)",
        "[2026-11-28 03:06:20] Received sigquit from a child process. It usually means the child failed.",
    ]
    status = run(tmp_path, sglang).status
    assert status.state == "failed" and "Watchdog timeout" in status.failure
    assert said(status).startswith("A wait gave up") and "not a hang" not in said(status)
    tune = [
        "(RayTrainWorker pid=43514) epoch 0 | batch 300/938 | loss 0.3902",
        "Traceback (most recent call last):",
        '  File "/srv/job/train_mnist.py", line 61, in <module>',
        "    result = trainer.fit()",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "Training errored after 0 iterations at 2026-11-28 01:14:40. Total running time: 4min 35s",
        "Error file: /tmp/ray/session_2026-11-28_01-10-01/artifacts/TorchTrainer_e82c1_00000_0/error.txt",
    ]
    assert run(tmp_path, tune).status.failure.startswith("ray.exceptions.ActorDiedError")


def test_verl_hung_before_its_first_step_is_not_told_of_validation_or_a_save(tmp_path: Path) -> None:
    """verl's loop bar at 0/233 and silence (block 11's training half: four single-GPU pods whose first rollout never
    returned). Validation and saves come at a step's end, val_before_train's before the bar: the stacks advice
    listed them ("… validation, a save …"), a claim the log contradicts. After a step's line it lists them."""
    runner = "(TaskRunner pid=3012) "
    lines = [
        f"{runner}Size of train dataloader: 233, Size of val dataloader: 1",
        "(WorkerDict pid=3590) INFO 06-03 15:42:55 [core.py:159] init engine (profile, create kv cache, warmup model) "
        "took 23.88 seconds",
        f"{runner}Training from scratch",
        f"{runner}Training Progress:   0%|          | 0/233 [00:00<?, ?it/s]",
    ]
    (tmp_path / "first").mkdir()
    (tmp_path / "later").mkdir()
    first = stalled(tmp_path / "first", lines, "training loop")
    assert "first step (weight sync, generation, old log-prob, reference log-prob, update)" in first
    assert "validation" not in first and "save" not in first
    later = stalled(tmp_path / "later", [*lines, step_line(1, 40.0, random.Random(5))], "training loop")
    assert "validation, a save" in later and "first step" not in later


def test_a_task_error_of_openrlhfs_ppo_trainer_fit_is_the_loop(tmp_path: Path) -> None:
    """lmm-r1 (OpenRLHF 0.8's PPOTrainer actor, whose `fit` runs the loop) raised ZeroDivisionError in it; the driver's
    traceback names only `ray::PPOTrainer.fit()` (block 11's training half). Before: "FAILED (phase unknown)"."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/lmm-r1/openrlhf/cli/train_ppo_ray.py", line 167, in train',
        "    ray.get(ppo_trainer.fit.remote())",
        "ray.exceptions.RayTaskError(ZeroDivisionError): ray::PPOTrainer.fit() (pid=5120, ip=10.0.3.7, "
        "actor_id=4be1c0d2a9f3e8b7c6d5a4f302000000, repr=<openrlhf.trainer.ppo_trainer.PPOTrainer object at 0x7f3d>)",
    ]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    assert [(s.current, s.state) for s in (history.status(1e12), store.phase_status())] == [
        ("training loop", "failed")] * 2
