"""Where a run without phase markers failed or stopped (issue 25): a collective timeout in an SFT or
pretraining step is its update; an undescribed trainer bar is its training loop; vLLM's own start-up lines
are the engine's start-up; OpenRLHF's actor loads after its engines; advice about memory needs a line
that said memory ran out; and a log with no stamps gives no span a time. Each shape is written as users
posted it (tests/corpus/posted/SOURCES.md) with invented values, read by replay's history reader and by
the real follower live where the verdict is the phase."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gkdtop.config import ConfigError, load_config
from gkdtop.replay import replay, report_json, report_text
from tests.verlrun import live_and_history

HF_STEPS = [
    "{'loss': 1.9312, 'grad_norm': 0.81, 'learning_rate': 9.9e-06, 'epoch': 0.04}",
    "{'loss': 1.8874, 'grad_norm': 0.77, 'learning_rate': 9.8e-06, 'epoch': 0.05}",
]
ALLGATHER_TIMEOUT = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=187342, "
    "OpType=_ALLGATHER_BASE, NumelIn=2621440, NumelOut=20971520, Timeout(ms)=1800000) ran for 1800417 milliseconds "
    "before timing out."
)
VLLM_ENGINE = [
    "(LLMRayActor pid=4411) INFO 05-22 14:06:58 [gpu_model_runner.py:1329] Model loading took 14.99 GiB and 6.2 s",
    "(LLMRayActor pid=4411) INFO 05-22 14:07:04 [backends.py:425] Dynamo bytecode transform time: 5.91 s",
    "(LLMRayActor pid=4411) INFO 05-22 14:07:40 [gpu_model_runner.py:1534] Graph capturing finished in 29 secs",
]


def run(tmp_path: Path, lines: list[str], name: str = "train.log"):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return replay([str(path)], load_config(None))


def said(report) -> str:  # type: ignore[no-untyped-def]
    """Everything the report states, as a user reads it."""
    return report_text(report, why=True)


def test_a_collective_timeout_in_an_sft_step_is_its_update(tmp_path: Path) -> None:
    """HF Trainer + DeepSpeed ZeRO-3: steps, then a parameter all-gather times out. Before: 'FAILED in training
    loop' with 'a step raised ... a failed assertion' (the watchdog's kill read as an error the step raised)."""
    text = "".join(line + "\n" for line in [*HF_STEPS, ALLGATHER_TIMEOUT])
    history, store = live_and_history(tmp_path, text, lambda s: s.phase_status().state == "failed")
    # The engine's name; the verdict's on an SFT log (no RL trainer) is its plain one (phases.yaml `plain`).
    for status, name in ((history.status(1e12), "actor update"), (store.phase_status(), "model update")):
        assert (status.state, status.current, status.within) == ("failed", name, "training loop")
    report = run(tmp_path, [*HF_STEPS, ALLGATHER_TIMEOUT])
    hint = report.status.hint
    assert hint is not None and "collective timed out" in hint.causes[0]
    text = said(report)
    assert "out of memory" not in text and "assertion" not in text
    assert "model update started: train.log:3" in text  # the watchdog line is the claim's evidence


def test_the_same_timeout_in_a_run_with_a_rollout_stays_in_the_training_loop(tmp_path: Path) -> None:
    """With a rollout engine the step has parts the watchdog line cannot tell apart (an FSDP all-gather runs in
    the log-prob pass too): the training loop, not a guessed part."""
    lines = ["(WorkerDict pid=7) INFO 05-22 14:00:00 [core.py:61] Initializing a V1 LLM engine (v0.9.1) with config: x",
             "(TaskRunner pid=3) step:1 - actor/loss:0.1 - timing_s/step:30.0",
             "(TaskRunner pid=3) step:2 - actor/loss:0.1 - timing_s/step:30.0", ALLGATHER_TIMEOUT]
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "training loop")


def test_a_gradient_sized_all_reduce_places_a_log_cut_to_its_last_lines(tmp_path: Path) -> None:
    """Only the end of the log was posted (with the editor's line numbers): 388M elements all-reduced after 2210
    collectives is a step's gradient sync. Before: 'FAILED in (before any phase)'. A start-up barrier (NumelIn=1)
    is not."""
    grads = ("[61241] [rank0]:[E402 17:20:48.520311908 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 0] Process group "
             "watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=2211, OpType=ALLREDUCE, NumelIn=388044800, NumelOut=388044800, Timeout(ms)=600000) "
             "ran for 600041 milliseconds before timing out.")
    report = run(tmp_path, ["[61238] [rank0]:[E402 17:20:48.519026411 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] "
                            "Timeout at NCCL work: 2211, last enqueued NCCL work: 2213, last completed NCCL work: "
                            "2210.", grads])
    assert (report.status.state, report.status.current) == ("failed", "model update")  # actor update, plain
    barrier = grads.replace("SeqNum=2211", "SeqNum=2").replace("NumelIn=388044800, NumelOut=388044800",
                                                               "NumelIn=1, NumelOut=1")
    assert run(tmp_path, [barrier], "barrier.log").status.current not in ("actor update", "model update")


def test_an_undescribed_trainer_bar_is_the_training_loop_and_a_dead_watchdog_ends_it(tmp_path: Path) -> None:
    """HF Trainer's bar has no description; NCCL's IB error kills the watchdog thread, which takes the process
    down. Before: 'ended in -', running."""
    lines = ["  1%|          | 37/4200 [06:21<11:53:40, 10.29s/it]",
             "h800-n2:20414:21877 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
             "10.40.9.21<47188> with status=12 opcode=0 len=0 vendor err 129 (Send)",
             "[rank11]:[E205 14:02:37.418220611 ProcessGroupNCCL.cpp:1423] [PG 0 Rank 11] Process group watchdog "
             "thread terminated with exception: NCCL error: remote process exited or there was a network error"]
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "training loop")


def test_vllm_start_up_lines_are_the_engine_start_and_openrlhf_loads_its_actor_after(tmp_path: Path) -> None:
    """OpenRLHF's engines print vLLM's start-up and then nothing. Before: no phase at all for the first lines,
    and 'next expected: critic init' with critic advice after the engine's init (no critic in the log)."""
    report = run(tmp_path, VLLM_ENGINE)
    assert report.status.current == "rollout init"
    done = [*VLLM_ENGINE, "(LLMRayActor pid=4411) INFO 05-22 14:07:40 [core.py:151] init engine (profile, create kv "
                          "cache, warmup model) took 41.62 seconds"]
    report = run(tmp_path, done, "done.log")
    assert (report.status.current, report.status.expected) == ("rollout init", "actor init")
    text = said(report)
    assert "ended after rollout init (next expected: actor init)" in text
    assert "critic" not in text and "enforce_eager" not in text


def test_memory_advice_only_with_a_line_that_says_memory_ran_out(tmp_path: Path) -> None:
    """A stall in the engine's start-up: 'lower gpu_memory_utilization' was advice with no evidence. It comes
    back once a line says memory ran short; SGLang's message, which ends nothing by itself, is one."""
    quiet = run(tmp_path, VLLM_ENGINE[:2])
    assert quiet.open_end is not None and quiet.open_end.hint is not None
    assert not any("memory" in a for a in quiet.open_end.hint.actions)
    short = run(tmp_path, [*VLLM_ENGINE[:2], "(LLMRayActor pid=4411) Not enough memory. Please try to increase "
                                             "--mem-fraction-static."], "short.log")
    assert short.open_end is not None and short.open_end.hint is not None
    assert any("gpu_memory_utilization" in a for a in short.open_end.hint.actions)


def test_a_log_with_no_stamps_gives_no_span_a_time(tmp_path: Path) -> None:
    """The file's mtime is the time of its last line, not of the phase that began 5 lines earlier. Before:
    the mtime was printed as config's start."""
    lines = ["INFO worker.py:1564 -- Connecting to existing Ray cluster at address: 10.21.0.5:6379...",
             "INFO worker.py:1740 -- Connected to Ray cluster. View the dashboard at 127.0.0.1:8265 ",
             "[INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda (auto detect)"]
    report = run(tmp_path, lines)
    assert report.started is None
    assert "--:--:--  config" in report_text(report)
    doc = report_json(report)
    assert doc["timeline"] and all(s["start"] is None and s["end"] is None for s in doc["timeline"])
    out = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(tmp_path / "train.log")],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["timeline"][0]["start"] is None


def test_a_hint_line_may_ask_for_evidence_in_a_user_rule(tmp_path: Path) -> None:
    """`seen:` in a user's phase hint: shown once a line matched it; a line with neither a scope nor `seen` is
    one error naming file:line."""
    cfg = tmp_path / "gkdtop.yaml"
    cfg.write_text("phases:\n  - name: warmup\n    start: 'warming up'\n    hint:\n      actions:\n"
                   "        - 'Check the cache.'\n        - text: 'Clear the cache: it is full.'\n"
                   "          seen: 'cache is full'\n")
    config = load_config(str(cfg))
    log = tmp_path / "a.log"
    log.write_text("warming up\n")
    assert replay([str(log)], config).open_end.hint.actions == ["Check the cache."]  # type: ignore[union-attr]
    log.write_text("warming up\nWARNING the cache is full\n")
    assert replay([str(log)], config).open_end.hint.actions == ["Check the cache.",  # type: ignore[union-attr]
                                                                 "Clear the cache: it is full."]
    cfg.write_text("phases:\n  - name: warmup\n    start: 'warming up'\n    hint:\n      actions:\n"
                   "        - text: 'Clear the cache.'\n")
    with pytest.raises(ConfigError, match=r"gkdtop\.yaml:\d+.*needs `text` and one of"):
        load_config(str(cfg))


def test_a_writer_hours_off_marks_the_span_it_falls_in_not_measured(tmp_path: Path) -> None:
    """A driver stamping in UTC and SGLang's workers in UTC+8: the model load 'took 8h02m'. Now the span says
    its stamps jumped 8 h between writers and its time is not measured; a 30-minute wait before a worker's
    watchdog line (one half-hour: a real timeout) is measured as before."""
    driver = "2025-06-03 14:26:02,015\tINFO worker.py:1852 -- Started a local Ray instance."
    lines = [driver,
             "(WorkerDict pid=43994) Model config after override: Qwen2Config {",
             "(WorkerDict pid=43994) [2025-06-03 22:28:52 TP0] Init torch distributed begin.",
             "(WorkerDict pid=43994) [2025-06-03 22:28:55 TP0] Load weight begin. avail mem=70.1 GB"]
    report = run(tmp_path, lines)
    spans = {s.name: s for s in report.status.timeline}
    assert spans["actor init"].clock_jump == 8 * 3600
    assert spans["nccl init"].clock_jump is None
    text = report_text(report)
    assert "? actor init: its stamps jump 8h00m" in text
    assert report_json(report)["timeline"][-3]["clock_jump_s"] == 8 * 3600
    timeout = [driver, "(WorkerDict pid=43994) Model config after override: Qwen2Config {",
               "(WorkerDict pid=43994) [2025-06-03 14:56:40 TP0] Init torch distributed begin."]
    spans = {s.name: s for s in run(tmp_path, timeout, "timeout.log").status.timeline}
    assert spans["actor init"].clock_jump is None and spans["actor init"].duration == pytest.approx(1837.985)


def test_a_phase_that_ran_is_not_opened_again_by_a_later_line(tmp_path: Path) -> None:
    """verl prints its worker-group line again after the dataset: one span each, in the order they ran."""
    lines = ["(TaskRunner pid=3) TaskRunner hostname: gpu-1, PID: 3",
             "(TaskRunner pid=3) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
             "(TaskRunner pid=3) Using dataset class: RLHFDataset",
             "(TaskRunner pid=3) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
             "(WorkerDict pid=7) Model config after override: Qwen2Config {"]
    names = [s.name for s in run(tmp_path, lines).status.timeline]
    assert len(names) == len(set(names)) and names[-1] == "model load"  # (the config print names no role)


def test_a_timeout_error_is_a_wait_that_gave_up_and_an_unknown_phase_is_said_so(tmp_path: Path) -> None:
    """`TimeoutError` as the exception itself got 'It raised … not a hang', and a log that starts at its traceback
    said 'FAILED in -' under a span named '(before any phase)'."""
    lines = ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
             "    client.wait_for_server()", "TimeoutError: timed out waiting for the rollout server after 600s"]
    report = run(tmp_path, lines)
    hint = report.status.hint
    assert hint is not None and "wait gave up" in hint.causes[0] and "not a hang" not in " ".join(hint.causes)
    text = report_text(report)
    assert "FAILED (phase unknown)" in text and "before any phase" not in text


def test_advice_that_its_evidence_calls_for(tmp_path: Path) -> None:
    """DeepSpeed's save_checkpoint waiting in its tag check: every rank must call it. Ray Train's rank 0 on another
    node than MASTER_ADDR: the rendezvous never happens. Neither line is shown without its evidence."""
    save = ["{'loss': 2.8841, 'learning_rate': 4.5e-05, 'epoch': 0.5}",
            " 50%|#####     | 20/40 [00:31<00:29,  1.47s/it]Saving model checkpoint to /tmp/out/checkpoint-20",
            "Timeout (0:05:00)!", "Thread 0x00007f5a2e1f7740 (most recent call first):",
            '  File "/opt/ds/deepspeed/runtime/engine.py", line 1463 in _checkpoint_tag_validation']
    report = run(tmp_path, save)
    assert report.status.current == "checkpoint save"
    assert report.open_end is not None and any("all ranks must call it" in a for a in report.open_end.hint.actions)
    report = run(tmp_path, [*save[:-1], '  File "/opt/torch/serialization.py", line 651 in save'], "plain.log")
    assert report.status.current == "checkpoint save"
    assert not any("DeepSpeed" in a for a in report.open_end.hint.actions)  # type: ignore[union-attr]
    ray_train = ["(TorchTrainer pid=8) Started distributed worker processes: ",
                 "(TorchTrainer pid=8) - (node_id=3c1f, ip=10.60.0.2, pid=40221) world_rank=0, local_rank=0, "
                 "node_rank=0",
                 "(RayTrainWorker pid=40221, ip=10.60.0.2) Setting up process group for: env:// [rank=0, "
                 "world_size=88]"]
    report = run(tmp_path, ray_train, "ray.log")
    assert report.status.current == "nccl init"
    assert any("world_rank 0" in a for a in report.open_end.hint.actions)  # type: ignore[union-attr]


def test_a_log_stepping_to_its_end_says_where_a_step_s_time_goes(tmp_path: Path) -> None:
    """A slow run posted as 'why is it slow': the answer the log holds is its own timing keys."""
    lines = [f"(TaskRunner pid=3) step:{i} - timing_s/gen:{79 + i / 10:.2f} - timing_s/update_actor:14.70 - "
             f"timing_s/step:{102 + i / 10:.2f} - actor/loss:0.1" for i in range(1, 4)]
    report = run(tmp_path, lines)
    assert report.open_end is not None and report.open_end.stepping
    assert "timing_s/gen takes 77% of a step (79.2 s of 102.2 s, mean)" in report.open_end.text
    assert report_text(report).count("takes 77% of a step") == 1  # said in the verdict, not again under steps


def test_with_no_phase_known_a_bar_s_description_names_one(tmp_path: Path) -> None:
    """'(before any phase)' though the log shows a bar at 62%: the bar's own description is where the job is,
    live and read as history alike; a rule's phase takes over once one starts."""
    bar = "Rollout generation:  62%|######2   | 40/64 [03:10<01:54,  4.77s/it]"
    crash = ["Traceback (most recent call last):", '  File "loop.py", line 2, in <module>',
             "RuntimeError: CUDA error: an illegal memory access was encountered"]
    text = "".join(line + "\n" for line in ["INFO starting", bar, *crash])
    history, store = live_and_history(tmp_path, text, lambda s: s.phase_status().state == "failed")
    for status in (history.status(1e12), store.phase_status()):
        assert (status.state, status.current) == ("failed", "Rollout generation")
    later = run(tmp_path, [bar, "(WorkerDict pid=7) Model config after override: Qwen2Config {"], "later.log")
    assert [s.name for s in later.status.timeline] == ["Rollout generation", "model load"]  # (no role named)


def test_a_failure_after_a_phase_finished_is_after_it_not_in_it(tmp_path: Path) -> None:
    """NCCL's init completes, then the proxy thread gets IB completion errors (status=12): before, 'running' in
    'nccl init' with 'set NCCL_SOCKET_IFNAME'. Now it failed after nccl init, and interface advice needs NCCL lines."""
    lines = ["node-a17:51277:51277 [0] NCCL INFO Bootstrap : Using bond0:10.33.8.17<0>",
             "node-a17:51277:51688 [0] NCCL INFO comm 0x55 rank 0 nranks 16 cudaDev 0 busId 18000 commId 0x3f1e - "
             "Init START",
             "node-a17:51277:51688 [0] NCCL INFO comm 0x55 rank 0 nranks 16 cudaDev 0 busId 18000 commId 0x3f1e - "
             "Init COMPLETE",
             "node-a17:51277:51713 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
             "10.33.8.22<45954> with status=12 opcode=32614 len=0 vendor err 129 (Send)",
             "node-a17:51277:51713 [0] NCCL INFO transport/net.cc:1302 -> 6"]
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "after nccl init")
    assert "FAILED after nccl init" in report_text(report)
    store = ["W721 14:50:31.804612297 TCPStore.cpp:330] [c10d] TCP client failed to connect/validate to host "
             "127.0.0.1:51216 - retrying (try=0, timeout=300000ms, delay=41870ms): The client socket has timed out "
             "after 300000ms while trying to connect to (127.0.0.1, 51216)."]
    report = run(tmp_path, store, "store.log")
    assert report.status.current == "nccl init" and report.open_end is not None
    assert not any("NCCL_SOCKET_IFNAME" in a for a in report.open_end.hint.actions)  # type: ignore[union-attr]


def test_a_driver_traceback_after_a_worker_abort_places_the_failure(tmp_path: Path) -> None:
    """A WorkerDict aborts (thread_resource_error) while the driver, its dataset read, creates the worker group;
    the driver's traceback names _init_with_resource_pool. Before: 'FAILED in dataset generation'."""
    lines = ["(main_task pid=4) original dataset len: 7473", "(main_task pid=4) Total training steps: 105",
             "(WorkerDict pid=9) terminate called after throwing an instance of "
             "'boost::wrapexcept<boost::thread_resource_error>'",
             "(WorkerDict pid=9) *** SIGABRT received at time=1741083195 on cpu 77 ***",
             "Traceback (most recent call last):",
             '  File "/opt/verl/verl/single_controller/ray/base.py", line 264, in _init_with_resource_pool',
             "    rank_zero_info = ray.get(worker.get_register_center_info.remote())",
             "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    report = run(tmp_path, lines)
    assert [(s.name, s.status) for s in report.status.timeline] == [("dataset generation", "done"),
                                                                    ("worker-group creation", "failed")]


def test_a_stamp_days_before_the_run_does_not_start_it(tmp_path: Path) -> None:
    """A library's year-less glog stamp (`W1122 …`) read as fifty days before the run's own ISO stamps: the run's
    length is its own, not 50 days."""
    lines = ["2026-01-11 10:00:01,000 INFO Started a local Ray instance.",
             "I1122 10:00:00.123456 4242 init.cc:12] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
             "2026-01-11 10:05:01,000 INFO Training finished"]
    report = run(tmp_path, lines)
    assert report.ended is not None and report.started is not None
    assert report.ended - report.started == pytest.approx(300.0)


def test_weak_collective_evidence_names_no_part_of_the_step(tmp_path: Path) -> None:
    """verl + SGLang, the second rollout hangs; the watchdog names a one-element all-reduce (a barrier, a metric,
    or clip_grad_norm_'s total: it cannot say which). Before: 'FAILED in actor update'."""
    lines = ["(WorkerDict pid=7) [2025-10-17 02:16:14 TP0] Capture cuda graph begin. This can take up to several "
             "minutes. avail mem=2.31 GB",
             "Training Progress:   0%|          | 0/69 [00:00<?, ?it/s]",
             "(TaskRunner pid=3) step:1 - timing_s/gen:874.6 - timing_s/step:1601.1",
             "(WorkerDict pid=7) [rank0]:[E1017 03:23:06.870844782 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught "
             "collective operation timeout: WorkNCCL(SeqNum=4127, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
             "Timeout(ms)=1800000) ran for 1800543 milliseconds before timing out."]
    report = run(tmp_path, lines)
    assert (report.status.state, report.status.current) == ("failed", "training loop")


def test_a_ray_connect_inside_the_engine_start_does_not_go_back_to_config(tmp_path: Path) -> None:
    """vLLM's Ray executor connects to the cluster while the engine initialises: the job is still in its start-up,
    not back in 'config'."""
    lines = ["INFO 04-24 07:51:27 [llm_engine.py:243] Initializing a V0 LLM engine (v0.8.4) with config: model='m'",
             "2025-04-24 07:51:28,114\tINFO worker.py:1660 -- Connecting to existing Ray cluster at address: "
             "10.140.0.11:6379...",
             "(RayWorkerWrapper pid=21133, ip=10.140.0.12) Capturing CUDA graph shapes:   6%|6         | 2/35 "
             "[00:02<00:38,  1.17s/it]"]
    assert [s.name for s in run(tmp_path, lines).status.timeline] == ["engine init"]  # rollout init, plain


def test_each_rank_s_start_and_end_of_a_phase_is_one_span(tmp_path: Path) -> None:
    """Four ranks each print NCCL's Init START and Init COMPLETE: one nccl init span, not four."""
    lines = ["2024-03-06 09:31:40,118\tINFO worker.py:1540 -- Connecting to existing Ray cluster at address: x:6379..."]
    for rank in range(4):
        comm = f"(RayTrainWorker pid={100 + rank}) h:1:1 [0] NCCL INFO comm 0x5{rank} rank {rank} nranks 4 busId 1"
        lines += [f"(RayTrainWorker pid={100 + rank}) h:1:1 [0] NCCL INFO Bootstrap : Using ens32:172.31.9.2{rank}<0>",
                  f"{comm} commId 0x3f1e - Init START", f"{comm} commId 0x3f1e - Init COMPLETE"]
    assert [s.name for s in run(tmp_path, lines).status.timeline] == ["config", "nccl init"]


def test_openrlhf_s_experience_bar_is_generation_and_megatron_s_dataset_build_is_the_dataset(tmp_path: Path) -> None:
    lines = ["(LLMRayActor pid=4) INFO 12-24 15:58:44 llm_engine.py:249] Initializing an LLM engine (v0.6.4) with x",
             "(ActorModelRayActor pid=7) Episode [1/1]:   0%|          | 0/19 [00:00<?, ?it/s]",
             "make_experience:  28%|##2       | 9/32 [10:33<03:27, 9.45s/it]",
             "(ActorModelRayActor pid=7) *** SIGABRT received at time=1735058347 on cpu 61 ***"]
    status = run(tmp_path, lines).status
    assert (status.state, status.current, status.within) == ("failed", "generation", "training loop")
    megatron = [" > number of parameters on (tensor, pipeline) model parallel rank (1, 0): 1750220800",
                "> building train, validation, and test datasets ...",
                "[E ProcessGroupNCCL.cpp:737] [Rank 7] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=612, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800258 milliseconds."]
    assert run(tmp_path, megatron, "megatron.log").status.current == "dataset generation"


def test_a_collective_glued_after_a_bar_is_still_the_update(tmp_path: Path) -> None:
    """The trainer's bar redraws with the watchdog line glued on: the bar's restart of the loop does not undo it."""
    glued = ("  2%|1         | 12/655 [00:59<52:44,  4.92s/it][rank0]:[E402 17:20:48.51 ProcessGroupNCCL.cpp:1515] "
             "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1604, OpType=ALLREDUCE, "
             "NumelIn=27262976, NumelOut=27262976, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")
    status = run(tmp_path, [HF_STEPS[0], glued]).status
    assert (status.state, status.current) == ("failed", "model update")  # actor update, plain: an SFT log


def test_a_timeout_while_the_data_is_tokenized_says_what_waited_on_what(tmp_path: Path) -> None:
    """Rank 0 tokenizes for two hours while the others wait in a barrier: the phase's own timeout hint, not the
    generic one. No framework named in the log: no framework's option is named either."""
    lines = ["Running tokenizer on dataset:  23%|##2       | 343734/1483920 [1:59:48<6:47:03, 46.68 examples/s]"
             "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
             "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=7200000) ran for 7200417 milliseconds."]
    status = run(tmp_path, lines).status
    assert (status.state, status.current) == ("failed", "dataset generation")
    said = " ".join([*status.hint.causes, *status.hint.actions])  # type: ignore[union-attr]
    assert "tokenized" in said and "num_proc" in said and "preprocessing_num_workers" not in said


def test_a_first_collective_timing_out_under_an_unfinished_dataset_bar_is_the_dataset(tmp_path: Path) -> None:
    """The main-process-first barrier is the job's first collective: its watchdog line (SeqNum=1) would start nccl
    init, but rank 0's tokenizer bar stopped at 61%: the run died in the dataset phase, never done, with that phase's
    timeout advice. LLaMA-Factory's older `- INFO - llmtuner.` logger names the framework (its ddp_timeout)."""
    lines = ["05/14/2024 10:11:02 - INFO - llmtuner.data.loader - Loading dataset corpus_a.json...",
             "Running tokenizer on dataset (num_proc=16):  61%|######    | 61000/100000 [25:10<16:05, 40.4 examples/s]",
             "[rank2]:[E ProcessGroupNCCL.cpp:523] [Rank 2] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800212 "
             "milliseconds before timing out.",
             "[rank3]:[E ProcessGroupNCCL.cpp:523] [Rank 3] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800212 "
             "milliseconds before timing out."]
    report = run(tmp_path, lines)
    status = report.status
    assert (status.state, status.current) == ("failed", "dataset generation")
    assert [(span.name, span.status) for span in status.timeline] == [("dataset generation", "failed")]
    assert report.framework.name == "llamafactory"
    said = " ".join([*status.hint.causes, *status.hint.actions])  # type: ignore[union-attr]
    assert "tokenized" in said and "preprocessing_num_workers" in said and "ddp_timeout" in said
    # The same line once the bar reached its total: the dataset was done, the wait is nccl init's.
    lines[1] = "Running tokenizer on dataset (num_proc=16): 100%|##########| 100000/100000 [41:15<00:00, 40.4 ex/s]"
    assert run(tmp_path, lines, "done.log").status.current == "nccl init"


def test_a_map_worker_that_died_while_tokenizing_is_no_missing_path(tmp_path: Path) -> None:
    """datasets' map with many processes: one died (killed for memory) and map raised `One of the subprocesses has
    abruptly died`. The file had loaded: the dataset phase's failure advice is not 'a path is missing'."""
    lines = ["08/21/2024 09:12:40 - INFO - llamafactory.data.loader - Loading dataset pics_train.json...",
             "Converting format of dataset (num_proc=64): 100%|##########| 9120/9120 [00:02<00:00, 4101.3 ex/s]",
             "Running tokenizer on dataset (num_proc=64):   3%|3         | 288/9120 [21:13<9:01:02, 3.68s/ex]",
             "Traceback (most recent call last):",
             '  File "/opt/lf/src/llamafactory/data/loader.py", line 201, in _get_preprocessed_dataset',
             "    dataset = dataset.map(preprocess_func, batched=True, **kwargs)",
             "RuntimeError: One of the subprocesses has abruptly died during map operation.To debug the error, "
             "disable multiprocessing."]
    report = run(tmp_path, lines)
    status = report.status
    assert (status.state, status.current) == ("failed", "dataset generation")
    said = " ".join([*status.hint.causes, *status.hint.actions])  # type: ignore[union-attr]
    assert "missing" not in said and "ls -lah" not in said
    assert "preprocessing_num_workers" in said and "OOM" in said
    assert "map-worker-died" in {f.name for f in report.findings}


def test_a_log_ending_in_lines_no_rule_knows_shows_its_last_line(tmp_path: Path) -> None:
    """Ray Train over EFA: NCCL's init completes, then only the backward pass's warning: the open end names the
    last line no rule knows (what the job printed last), counted; JSON `last_line`."""
    lines = ["(RayTrainWorker pid=1312) h:1:1 [0] NCCL INFO comm 0x70 rank 3 nranks 4 busId 2e000 commId 0x8f - "
             "Init COMPLETE",
             "(RayTrainWorker pid=1312) /opt/torch/autograd/__init__.py:266: UserWarning: Grad strides do not match",
             "(RayTrainWorker pid=1312)   Variable._execution_engine.run_backward(  # Calls into the C++ engine"]
    report = run(tmp_path, lines)
    end = report.open_end
    assert end is not None and end.unknown == 2 and "run_backward(" in end.last_line
    assert "2 lines no rule knows follow; the last: `(RayTrainWorker pid=1312)   Variable._execution_engine" in \
        report_text(report)
    assert "run_backward(" in report_json(report)["open_end"]["last_line"]


def test_a_snapshot_quotes_the_last_line_no_rule_knows(tmp_path: Path) -> None:
    """The live verdict says the same as replay's open end: the job's own last line, where no rule knows it."""
    log = tmp_path / "train.log"
    log.write_text("(RayTrainWorker pid=1) h:1:1 [0] NCCL INFO comm 0x70 rank 3 nranks 4 commId 0x8f - Init COMPLETE\n"
                   "(RayTrainWorker pid=1)   Variable._execution_engine.run_backward(  # the backward pass\n")
    out = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(log), "--ray-address",
                          "127.0.0.1:9"], capture_output=True, text=True, check=True, timeout=120).stdout
    assert "run_backward(" in json.loads(out)["phases"]["unrecognised"]["last"]


def test_a_zone_jump_onto_a_line_no_rule_names_still_marks_the_span(tmp_path: Path) -> None:
    """verl's driver stamps in UTC, vLLM's engine in UTC+8; the only vLLM stamps are on lines no rule names
    (`Reducing Torch parallelism`): history dated the rollout's bars by them and said 'rollout init ~8h03m' with
    no word of two zones (it checked only the stamps of named lines)."""
    lines = ["2025-06-01 21:51:57,213\tINFO worker.py:1852 -- Started a local Ray instance.",
             "(TaskRunner pid=85956) TaskRunner hostname: gpu-node-169, PID: 85956",
             "(WorkerDict pid=38858) Qwen2ForCausalLM contains 7.62B parameters",
             "(vLLMHttpServer pid=50000) enable_sleep_mode: True",
             "(vLLMHttpServer pid=50000) (EngineCore_0 pid=472686) WARNING 06-02 05:54:35 "
             "[multiproc_worker_utils.py:307] Reducing Torch parallelism from 24 threads to 1.",
             "(vLLMHttpServer pid=50000) Capturing CUDA graph shapes: 100%|██████████| 67/67 [00:28<00:00, 2.38it/s]",
             "(TaskRunner pid=85956) Checkpoint tracker file does not exist: /ckpt/latest_checkpointed_iteration.txt"]
    report = run(tmp_path, lines)
    jumped = [s for s in report.status.timeline if s.clock_jump is not None]
    assert [s.clock_jump for s in jumped] == [8 * 3600], report_text(report)
    assert "two clock zones, likely" in report_text(report)
    lines[4] = lines[4].replace("(EngineCore_0 pid=472686) ", "").replace("(vLLMHttpServer pid=50000) ",
                                                                          "(TaskRunner pid=85956) ")
    lines[0] = "(TaskRunner pid=85956) 2025-06-01 21:51:57,213\tINFO worker.py:1852 -- Started a local Ray instance."
    same = run(tmp_path, lines, "one_writer.log")  # one writer's 8 h: a wait it measured, not two zones
    assert all(s.clock_jump is None for s in same.status.timeline), report_text(same)
