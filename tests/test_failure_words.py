"""What a failure is called and what is advised on it (issue 25; an audit of the posted corpus's training logs,
written in SOURCES.md's shapes with invented values): a wait that timed out is a hang a timer ended, whatever phase it
came in; the NCCL watchdog's own stall is a hang and its abort the consequence; a traceback cut before its
exception says so instead of 'the error above'; a C++ backtrace's header is not the error; a rule's own bar
does not become a second phase."""

from __future__ import annotations

import time
from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import report_text
from tests.test_phase_nesting import run, text_of
from tests.verlrun import live_and_history

BAR = "(TaskRunner pid=2211) Training Progress:   2%|▏         | 10/480 [4:51:07<229:07:18, 1755.08s/it]"


def test_a_store_wait_timeout_in_a_step_is_a_wait_that_gave_up(tmp_path: Path) -> None:
    """TRL GRPO, 3 h in: the weight broadcast's barrier waited 300 s for the vLLM server. Before: 'A step raised:
    the error above is the root cause … a failed assertion' (the training loop's hint for an error)."""
    lines = [
        " 61%|██████    | 3702/6080 [3:05:14<1:54:31,  2.89s/it]",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/py/trl/trainer/grpo_trainer.py", line 940, in _move_model_to_vllm',
        "[rank0]: torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/417096",
    ]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    for status in (history.status(1e12), store.phase_status()):
        assert status.state == "failed" and status.hint is not None
        assert "A wait gave up" in status.hint.causes[0]
    said = report_text(run(tmp_path, lines))
    assert "not a hang" not in said and "assertion" not in said


def test_gloos_capitalised_timed_out_is_a_wait_that_gave_up(tmp_path: Path) -> None:
    """gloo writes `Timed out waiting …ms for recv`: a rank never reached the barrier, a hang its timer ended.
    Before: 'A step raised: the error above is the root cause' (only a lower-case 'timed out' was known)."""
    lines = [
        "(TaskRunner pid=4120) Training from scratch",
        "Traceback (most recent call last):",
        '  File "/src/verl/workers/rollout/sglang_rollout/sglang_rollout.py", line 903, in _req_level_generate',
        "    work.wait()",
        "RuntimeError: [/src/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 900000ms for recv operation"
        " to complete",
    ]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().state == "failed")
    for status in (history.status(1e12), store.phase_status()):
        assert status.state == "failed" and status.hint is not None
        assert "A wait gave up" in status.hint.causes[0]


def test_the_watchdog_stuck_is_a_hang_and_its_abort_a_consequence(tmp_path: Path) -> None:
    """OpenRLHF: the NCCL watchdog stopped making progress for 480 s, then the heartbeat monitor aborted the rank.
    Before: the failure was `*** SIGABRT received`, with 'the error above is the root cause, not a hang'."""
    lines = [
        "(ActorModelRayActor pid=7735, ip=10.88.14.22) [rank12]:[E1224 16:31:07.808386510 ProcessGroupNCCL.cpp:1484] "
        "[PG ID 0 PG GUID 0(default_pg) Rank 12] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
        "progress in monitoring enqueued collectives.",
        "(ActorModelRayActor pid=7735, ip=10.88.14.22) [rank12]:[F1224 16:39:07.935069338 ProcessGroupNCCL.cpp:1306] "
        "[PG ID 0 PG GUID 0(default_pg) Rank 12] Terminating the process after attempting to dump debug info",
        "(ActorModelRayActor pid=7735, ip=10.88.14.22) *** SIGABRT received at time=1735058347 on cpu 61 ***",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and "watchdog got stuck" in status.failure
    assert status.hint is not None and status.hint.causes[0].startswith("A hang")
    assert "not a hang" not in report_text(run(tmp_path, lines))


def test_a_traceback_cut_before_its_exception_says_the_error_is_not_in_the_log(tmp_path: Path) -> None:
    """verl under kubectl: Hydra's banner, then a traceback cut after `ray.get`. Before: the banner was 'the error
    above', 'the root cause', with advice about failed assertions."""
    lines = [
        "2025-03-02T11:04:31.118Z (TaskRunner pid=361) step:1 - actor/pg_loss:0.012 - timing_s/step:88.1",
        "2025-03-02T11:06:02.940Z Error executing job with overrides: ['algorithm.adv_estimator=grpo', "
        "'trainer.n_gpus_per_node=8']",
        "2025-03-02T11:06:02.941Z Traceback (most recent call last):",
        '2025-03-02T11:06:02.941Z   File "/app/verl/trainer/main_ppo.py", line 64, in run_ppo',
        "2025-03-02T11:06:02.941Z     ray.get(runner.run.remote(config))",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and status.hint is not None
    assert "the exception is not in the log" in status.hint.causes[0]
    assert "HYDRA_FULL_ERROR" in " ".join(status.hint.actions)
    said = report_text(run(tmp_path, lines))
    assert "root cause" not in said and "assertion" not in said


def test_a_cut_traceback_of_no_hydra_job_gets_no_hydra_advice(tmp_path: Path) -> None:
    """EasyR1 (no Hydra) died with its traceback cut after two frames (audit 13). Before: "Hydra's 'Error executing
    job' line only announces it" and HYDRA_FULL_ERROR=1, on a log with no Hydra line."""
    lines = [
        "2025-06-11 09:12:40,118\tINFO worker.py:1852 -- Started a local Ray instance.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
        "    return _run_code(code, main_globals, None,",
    ]
    status = run(tmp_path, lines).status
    assert status.state == "failed" and status.hint is not None
    assert "the exception is not in the log" in status.hint.causes[0]
    assert "Hydra" not in report_text(run(tmp_path, lines))


def test_a_cpp_backtrace_header_is_not_the_failure(tmp_path: Path) -> None:
    """c10's `Exception raised from checkTimeout at …` heads the backtrace of the watchdog's abort. Before: it was
    the failure shown, with 'It failed … not a hang' on a 30-minute collective timeout."""
    who = "(WorkerDict pid=915, ip=10.40.12.7) "
    lines = [
        BAR,
        who + "[rank3]:[E814 06:41:09.770512963 ProcessGroupNCCL.cpp:632] [PG ID 7 PG GUID 33 Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=52211, OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, "
        "Timeout(ms)=1800000) ran for 1800092 milliseconds before timing out.",
        who + "terminate called after throwing an instance of 'c10::DistBackendError'",
        who + "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 "
        "(most recent call first):",
        who + "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f31a8d6e1b8 in libc10.so)",
    ]
    status = run(tmp_path, lines).status
    assert "Watchdog caught collective operation timeout" in status.failure
    assert status.hint is not None and "A collective timed out" in status.hint.causes[0]


def test_a_rules_own_bar_is_not_a_second_phase(tmp_path: Path) -> None:
    """verl's `Training Progress` bar is the training loop's own start line. Before: with no phase known the bar's
    description was made a phase too ('Training Progress 0s done' above 'training loop')."""
    report = run(tmp_path, [BAR, "(TaskRunner pid=2211) step:11 - actor/pg_loss:0.01 - timing_s/step:1750.2"])
    assert [span.name for span in report.status.timeline] == ["training loop"]


def test_start_up_advice_needs_its_evidence_and_goes_when_a_line_contradicts_it(tmp_path: Path) -> None:
    """DeepSpeed on two GPUs stalled after both ranks built fused_adam. Before: 'Loading a large checkpoint' (no
    load line), 'init waits for a rank that never started' (both ranks were past init), 'offload for a model this
    size' (no size, no memory line). A user's line may be hidden by a later one the same way (`unless_seen`)."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.history import file_range

    lines = [
        "[2024-01-09 10:02:11,201] [INFO] [real_accelerator.py:161:get_accelerator] Setting ds_accelerator to cuda",
        "[2024-01-09 10:02:14,877] [INFO] [comm.py:637:init_distributed] cdb=None",
        "[2024-01-09 10:02:40,120] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.12.6",
        "Time to load fused_adam op: 31.52 seconds",
        "Time to load fused_adam op: 31.60 seconds",
    ]
    history, store = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().current == "model load")
    for hint in (history.status(history.last_progress + 3600).hint, store.phase_status(time.time() + 3600).hint):
        assert hint is not None
        said = " ".join([*hint.causes, *hint.actions])
        assert "never started" not in said and "large checkpoint" not in said and "offload" not in said
        assert "wrapper" in said  # what is left: building the wrapper or optimizer, compiling an extension

    (tmp_path / "c.yaml").write_text(
        "phases:\n  - name: export\n    start: 'export begins'\n    hint:\n      causes:\n"
        "        - text: 'the bucket is not mounted'\n          unless_seen: 'bucket mounted'\n")
    config = load_config(tmp_path / "c.yaml")
    log = tmp_path / "export.log"
    for tail, shown in ((["export begins"], True), (["bucket mounted at /b", "export begins"], False)):
        log.write_text(text_of(tail))
        analysis = Analysis(config.rules())
        analysis.read_history([file_range(str(log))])
        hint = analysis.phases.status(time.time() + 3600).hint
        assert (hint is not None and "the bucket is not mounted" in hint.causes) == shown


def test_time_the_log_cannot_give_is_not_given(tmp_path: Path) -> None:
    """TRL GRPO 3 h in: an unstamped bar at 3702/6080, one metric dict, then a stamped traceback. Before: 'training
    loop' started at the crash's stamp, '0s from 03:41:17 to 03:41:17', and 'steps: 1 (1..1)'. A log with no stamp
    at all said '0s' for each phase. Now: at or before the stamp, at least so long, the bar's count beside the
    records, and '?' where no two stamps exist."""
    lines = [
        " 61%|██████    | 3702/6080 [3:05:14<1:54:31,  2.89s/it]",
        "{'loss': 0.0123, 'grad_norm': 0.41, 'learning_rate': 4.2e-07, 'epoch': 0.61}",
        "[rank0]:[W1012 03:41:17.118204911 ProcessGroupNCCL.cpp:1250] Warning: destroy_process_group() was not called",
        "[rank0]:[E1012 03:41:17.502100000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=88211, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=300000) ran for 300117 "
        "milliseconds before timing out.",
    ]
    report = run(tmp_path, lines)
    loop = report.status.timeline[0]
    assert loop.name == "training loop" and loop.start_before and loop.as_json()["start_before"] is True
    said = report_text(report)
    # The bar's own elapsed time bounds the loop's start and the log's span (not the crash's stamp).
    assert "≤00:36:03  training loop" in said and "0s from" not in said
    assert "≥3h05m, from ≤00:36:03" in said
    assert "the loop's bar is at 3702/6080" in said and "steps: 1 (1..1)" not in said
    assert report.steps["bar"] == {"n": 3702, "total": 6080, "s_per_it": 2.89}  # the bar's own pace
    # No stamp anywhere: no phase is given a length.
    bare = run(tmp_path, ["(TaskRunner pid=7) TaskRunner hostname: n, PID: 7", "(TaskRunner pid=7) dataset len: 7473",
                          "(TaskRunner pid=7) Training Progress:   0%|          | 0/870 [00:00<?, ?it/s]"])
    rows = [row for row in report_text(bare).splitlines() if row.startswith("   --:--:--")]
    assert rows and all(" 0s " not in row for row in rows) and any(" ? " in row for row in rows)


def test_a_blank_line_is_never_cited(tmp_path: Path) -> None:
    """A log that ends in blank lines (a traceback's spacing). Before: `last progress: train.log:4  ``` cited one."""
    lines = ["[E1118 17:51:20.553504164 socket.cpp:1019] [c10d] The client socket has timed out after 300000ms while "
             "trying to connect to (127.0.0.1, 51216).",
             "Exception raised from throwTimeoutError at /pytorch/torch/csrc/distributed/c10d/socket.cpp:1021 (most "
             "recent call first):",
             "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f7efdb48b3f in libc10.so)", ""]
    cited = report_text(run(tmp_path, lines), why=True).split("why (the lines each statement stands on):")[1]
    assert "``" not in cited and "train.log:3" not in cited and "train.log:4" not in cited


def test_zero3s_own_consistency_check_is_no_config_assertion(tmp_path: Path) -> None:
    """DeepSpeed-Chat's RLHF step under ZeRO-3 (audit 13): ZeRO's parameter coordinator asserted a parameter was
    gathered (`'status': 'INFLIGHT'`). Before: "A failed assertion is a check on the config or the batch"."""
    lines = [
        "***** Running training *****",
        "Beginning of Epoch 1/1, Total Generation Batches 1200",
        "Traceback (most recent call last):",
        '  File "/opt/ds/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 304, in fetch_sub_module',
        "    assert param.ds_status == ZeroParamStatus.AVAILABLE, param.ds_summary()",
        "AssertionError: {'id': 4, 'status': 'INFLIGHT', 'numel': 0, 'ds_numel': 4096, 'shape': (0,)}",
    ]
    report = run(tmp_path, lines)
    assert report.status.state == "failed"
    assert "check on the config or the batch" not in report_text(report)
    # a plain assertion in a step keeps the advice
    plain = [*lines[:3], '  File "/srv/train.py", line 88, in step', "    assert n % mb == 0",
             "AssertionError: 512 is not divisible by 24"]
    assert "check on the config or the batch" in report_text(run(tmp_path, plain))


def test_a_shell_prompts_dirty_tree_mark_is_no_failure(tmp_path: Path) -> None:
    """Audit 18: oh-my-zsh's prompt (`➜  dir git:(branch) ✗`) pasted under a finished Lightning fit, or under a verl
    step line. Before: 'FAILED after training finished' and 'FAILED in training loop', the prompt as the error."""
    finished = [
        "Epoch 0: 100%|██████████| 40/40 [00:03<00:00, 12.50it/s, loss=0.118, v_num=3]",
        "`Trainer.fit` stopped: `max_epochs=1` reached.",
        "(venv) ➜  vae-toy git:(feature/x) ✗ ",
    ]
    status = run(tmp_path, finished).status
    assert status.state == "done" and not status.failure
    stepping = ["step:3 - actor/pg_loss:0.02 - timing_s/step:61.5", "dev@node-3 ~/proj git:(main) ✗ tail -f out.log"]
    assert run(tmp_path, stepping).status.state != "failed"
    # gkdtop's own probe line, and a tool's `✗` status mark, still end a run as failed
    for line in ("2025-06-01 10:00:00,120 [gkdtop] [rank 0/2] ✗ phase 'rollout init' FAILED after 3.100 s: OSError",
                 "✗ worker 3 failed: exit code 1"):
        assert run(tmp_path, [stepping[0], line]).status.state == "failed", line


def test_a_dead_actors_own_error_above_its_callers_report_is_the_failure(tmp_path: Path) -> None:
    """Ray prints the dying worker's last line (vLLM's cumem allocator out of GPU memory, in C, no traceback) just
    above the driver's ActorDiedError naming that pid. Before: 'What ended it … is in that process's own output, not
    here', though it was; another process's error is not taken for it."""
    lines = [
        "(TaskRunner pid=52001) Training from scratch",
        "(WorkerDict pid=52177) CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:71",
        "(WorkerDict pid=52190) CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:71",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
        "\tpid: 52177",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file.",
    ]
    result = run(tmp_path, lines)
    st = result.status
    assert st.state == "failed" and "cumem_allocator" in st.failure, report_text(result)
    assert st.hint is not None and "not here" not in " ".join(st.hint.causes), report_text(result)
    assert any(e.claim == "failed" and "pid=52177" in e.text for e in st.evidence), st.evidence
    assert any(f.name == "vllm-cumem-oom" for f in result.findings), report_text(result)
