"""Claims a log does not back are not made (issue 25's false-statement classes): a hint names no
framework the log is not, and a run's span starts at its first stamp, not at the first line a rule knew."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gkdtop.config import Config, ConfigError, builtin_phases, load_config
from gkdtop.replay import replay

VERL_ONLY = ("ppo_micro_batch_size_per_gpu", "generate_sequences", "actor_rollout_ref", "verl")


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("[%Y-%m-%d %H:%M:%S,%f")[:-3] + "]"


def deepspeed_crash(tmp_path: Path) -> tuple[Path, float]:
    """An HF Trainer + DeepSpeed run, its bar at 62% with a traceback glued on, dead of an OOM."""
    t0 = time.time() - 3600
    lines = [
        f"{stamp(t0)} [INFO] [real_accelerator.py:222:get_accelerator] Setting ds_accelerator to cuda (auto detect)",
        f"{stamp(t0 + 4)} [INFO] [comm.py:683:init_distributed] Initializing TorchBackend in DeepSpeed with "
        "backend nccl",
        "{'loss': 1.2345, 'grad_norm': 3.21, 'learning_rate': 1e-05, 'epoch': 0.05}",
        " 62%|██████▏   | 311/500 [12:03<07:19,  2.32s/it]Traceback (most recent call last):",
        '  File "/workspace/train.py", line 88, in <module>',
        "    trainer.train()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 1.02 GiB is free.",
        f"{stamp(t0 + 790)} [INFO] [launch.py:351:main] Process 4242 exits successfully.",
    ]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (t0 + 791, t0 + 791))
    return log, t0


def test_a_crash_on_another_stack_gets_no_verl_hint(tmp_path: Path) -> None:
    log, _ = deepspeed_crash(tmp_path)
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.status.state == "failed"
    hint = report.status.hint
    assert hint is not None and (hint.causes or hint.actions)
    said = " ".join(hint.causes + hint.actions)
    assert not [word for word in VERL_ONLY if word in said], said


def test_a_verl_run_keeps_verl_s_own_lines(tmp_path: Path) -> None:
    from tests.gkdlog import asctime, ray, startup

    lines, last = startup(time.time() - 900, steps=2)
    lines.append(ray("WorkerDict", 2001, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."))
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines) + ray("TaskRunner", 1, asctime(last + 1) + " x") + "\n")
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.framework.name == "verl"
    said = " ".join(report.status.hint.causes + report.status.hint.actions) if report.status.hint else ""
    assert "generate_sequences" in said and "which part of the step raised it." not in said  # not the general line


def test_the_run_starts_at_its_first_stamp(tmp_path: Path) -> None:
    """It said '0s from 10:13:15 to 10:13:15': no rule knew the first lines, so the start was the end."""
    log, t0 = deepspeed_crash(tmp_path)
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.started == pytest.approx(t0, abs=1.0)
    assert report.ended == pytest.approx(t0 + 790, abs=1.0)


def test_a_scoped_hint_line_needs_its_scope(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("phases:\n  - name: x\n    start: 'go'\n    hint:\n      causes:\n        - text: 'only words'\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:6: phases\[0\]\.hint\.causes\[0\]: needs `text`"):
        load_config(cfg)


def test_the_first_collective_timing_out_is_not_the_actor_update(tmp_path: Path) -> None:
    """SeqNum=1 (last completed work -1) is the ranks never meeting, not a policy update with an OOM hint."""
    from tests.gkdlog import ray, startup

    lines, last = startup(time.time() - 2000, upto="actor-done")
    lines.append(ray("WorkerDict", 2001, "[rank1]:[E1122 10:05:02.301 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=600000) ran for 600031 milliseconds before timing out."))
    lines.append(ray("WorkerDict", 2001, "[rank1]:[E1122 10:05:02.302 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0 "
                     "Rank 1] last completed NCCL work: -1."))
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last + 700, last + 700))
    report = replay([str(log)], Config(phases=builtin_phases()))
    # where the ranks were to meet, or after the phase that finished: not an update
    assert report.status.current in ("nccl init", "actor init", "after actor init")
    said = " ".join(report.status.hint.causes + report.status.hint.actions) if report.status.hint else ""
    assert "OOM" not in said and "micro batch" not in said, said


def yearless_vllm_log(tmp_path: Path, days_behind: int) -> tuple[Path, float]:
    """vLLM's year-less stamps from a date `days_behind` days before the file was last written (a
    container clock, or stamps placed in the wrong year): the file itself was written a minute ago."""
    written = time.time() - 60
    then = datetime.fromtimestamp(written) - timedelta(days=days_behind)
    lines = [f"INFO {then + timedelta(seconds=30 * i):%m-%d %H:%M:%S} [loggers.py:118] Engine 000: Avg prompt "
             f"throughput: 588.0 tokens/s, Avg generation throughput: {12 + i}.0 tokens/s, Running: 6 reqs"
             for i in range(20)]
    log = tmp_path / "vllm.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (written, written))
    return log, written


def test_a_followed_file_s_mtime_is_its_last_line_s_time(tmp_path: Path) -> None:
    """It said 'stalled for 245 days' on a file written a minute ago: its last line was written at its mtime."""
    from gkdtop.store import Store, read_history

    log, written = yearless_vllm_log(tmp_path, 245)
    store = Store(Config(phases=builtin_phases()))
    read_history(store.analysis, [(str(log), log.stat().st_size, written, False)])
    status = store.phase_status()
    assert status.last_progress == pytest.approx(written, abs=5.0)
    assert status.clock_offset == pytest.approx(245 * 86400 + 570, abs=3600 * 2)  # shown: a measured offset


def test_replay_keeps_a_copied_log_s_own_times(tmp_path: Path) -> None:
    """A log copied long after its run: replay judges it at its own end, in its own times."""
    log, written = yearless_vllm_log(tmp_path, 245)
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.ended is not None and written - report.ended > 200 * 86400


def test_every_verdict_cites_its_lines(tmp_path: Path) -> None:
    """`evidence` in the JSON and `replay --why`: the failure and the phase's start, by file and line."""
    import json
    import subprocess
    import sys

    log, _ = deepspeed_crash(tmp_path)
    report = replay([str(log)], Config(phases=builtin_phases()))
    cited = {e.claim: e for e in report.status.evidence}
    assert cited["failed"].line == 7 and cited["failed"].text.startswith("torch.OutOfMemoryError")
    assert cited["training loop started"].source == str(log)
    run = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(log)], capture_output=True,
                         text=True, timeout=60, check=True)
    doc = json.loads(run.stdout)
    assert {"claim": "failed", "file": str(log), "line": 7, "text": cited["failed"].text} in doc["evidence"]
    assert doc["timeline"][-1]["evidence"]["claim"] == "training loop started"
    why = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--why", str(log)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "failed: train.log:7  `torch.OutOfMemoryError: CUDA out of memory." in why


def test_live_lines_cite_their_line_in_the_file(tmp_path: Path) -> None:
    """Lines read live are cited by their number in the file, as history's are (before: `"line": null`): after what
    the file held when following began (history counted it), and from the start of a file that took its place."""
    from gkdtop.collectors.logs import LogCollector
    from gkdtop.store import Store

    (tmp_path / "crash").mkdir()
    lines = deepspeed_crash(tmp_path / "crash")[0].read_text().splitlines()
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines[:3]) + lines[3][:20])  # a bar's line not finished yet
    store = Store(Config(phases=builtin_phases()))
    collector = LogCollector([str(log)], backlog=2)
    try:
        store.put("logs", collector.collect())  # the start-up: history reads the 3 lines
        with log.open("a") as fh:
            fh.write(lines[3][20:] + "\n" + "".join(line + "\n" for line in lines[4:]))
        store.put("logs", collector.collect())
        cited = {e.claim: e for e in store.phase_status().evidence}
        assert (cited["failed"].line, cited["failed"].text[:22]) == (7, "torch.OutOfMemoryError")
        # logrotate: the next run writes a new train.log, read from its start
        log.rename(tmp_path / "train.log.1")
        log.write_text("first of the new file\nsecond\n")
        while store.numbered_tail()[0][-1] != "second":  # (the old file drains first)
            store.put("logs", collector.collect())
        assert store.numbered_tail()[1][-3:] == [8, 1, 2]
    finally:
        collector.close()


def test_a_live_stall_cites_its_last_progress(tmp_path: Path) -> None:
    from tests.gkdlog import startup
    from tests.test_records import live

    lines, _ = startup(time.time() - 1200, upto="sync")
    status = live(tmp_path, lines).phase_status()
    assert status.state == "stalled"
    claims = {e.claim: e for e in status.evidence}
    assert claims["last progress"].line == len(lines) and claims["last progress"].text.endswith(lines[-1][-30:])
    assert claims[f"{status.current} started"].text


def test_a_crash_gets_no_guess_about_a_hang(tmp_path: Path) -> None:
    """A rollout engine that raised while capturing CUDA graphs was told 'vLLM out of memory at start-up
    ... enforce_eager': the hang's guesses. A crash's hint points at its error."""
    from tests.gkdlog import ray, startup

    lines, last = startup(time.time() - 900, upto="rollout")
    lines += [ray("WorkerDict", 2003, "Capturing batches (bs=16 avail_mem=21.4 GB):  40%|████      | 4/10"),
              ray("WorkerDict", 2003, "Traceback (most recent call last):"),
              ray("WorkerDict", 2003, "RuntimeError: custom allreduce failed: invalid argument")]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last + 5, last + 5))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.status.state == "failed" and report.status.current == "rollout init"
    said = " ".join(report.status.hint.causes + report.status.hint.actions) if report.status.hint else ""
    assert said and not [w for w in ("out of memory", "enforce_eager", "mem-fraction-static") if w in said], said


def test_a_traceback_whose_frames_name_a_phase_fails_it(tmp_path: Path) -> None:
    """A bare traceback through vLLM's wake_up was read as 'running in weight sync': the frame opened
    the phase and forgot the traceback it was part of."""
    t0 = time.time() - 600
    lines = [f"{stamp(t0)} [INFO] starting",
             "Traceback (most recent call last):",
             '  File "/usr/lib/python3.10/site-packages/vllm/worker/worker.py", line 140, in wake_up',
             "    allocator.wake_up()",
             '  File "/usr/lib/python3.10/site-packages/vllm/device_allocator/cumem.py", line 75, in create_and_map',
             "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert (report.status.state, report.status.current) == ("failed", "weight sync")
    assert report.status.failure.startswith("RuntimeError: CUDA Error: out of memory")
    assert [s.name for s in report.status.timeline] == ["weight sync"]


def test_kubectl_timestamps_are_a_layer_not_the_message(tmp_path: Path) -> None:
    """With `kubectl logs --timestamps` every line starts with its capture time, Ray's prefix after it:
    the failure shown was `…Z Traceback (most recent call last):`."""
    t0 = time.time() - 600

    def kube(t: float, text: str) -> str:
        return datetime.utcfromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z " + text

    lines = [kube(t0, "(LLMRayActor pid=31544) INFO 07-16 03:22:09 llm_engine.py:100] Initializing an LLM engine"),
             kube(t0 + 8, "(LLMRayActor pid=31544) Traceback (most recent call last):"),
             kube(t0 + 8, '(LLMRayActor pid=31544)   File "/usr/lib/python3.10/site-packages/vllm/worker.py", '
                          "line 12, in determine_num_available_blocks"),
             kube(t0 + 8, "(LLMRayActor pid=31544) ValueError: The model's max seq len (8192) is larger than the "
                          "maximum number of tokens that can be stored in KV cache (6432).")]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.status.state == "failed"
    assert report.status.failure.startswith("ValueError: The model's max seq len (8192)")
    assert report.started == pytest.approx(t0, abs=1.0) and report.ended == pytest.approx(t0 + 8, abs=1.0)


def test_trl_s_weight_push_is_weight_sync(tmp_path: Path) -> None:
    """TRL pushes weights to its vLLM server in _move_model_to_vllm: a failure there is in weight sync."""
    t0 = time.time() - 600
    lines = [f"{stamp(t0)} [INFO] trl: starting", "{'loss': 0.01, 'grad_norm': 0.5, 'epoch': 0.1}",
             "[rank0]: Traceback (most recent call last):",
             '[rank0]:   File "/usr/lib/python3.10/site-packages/trl/trainer/grpo_trainer.py", line 697, in '
             "_move_model_to_vllm",
             "[rank0]:     self.vllm_client.update_named_param(name, param.data)",
             "[rank0]: torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving "
             "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert (report.status.state, report.status.current) == ("failed", "weight sync")
    assert report.status.failure.startswith("[rank0]: torch.distributed.DistBackendError")


def test_stamps_ahead_of_the_clock_do_not_delay_a_stall(tmp_path: Path) -> None:
    """A job whose clock runs ahead of ours: its last line cannot be later than its file, so a stall
    is declared when the file has been quiet for stall_after, not up to a minute later."""
    from gkdtop.store import Store, read_history

    written = time.time() - 630  # rollout init stalls after 600 s quiet
    ahead = written + 50  # its clock is 50 s ahead of ours
    lines = [f"{stamp(ahead - 30)} [INFO] Initializing Rollout Worker...", f"{stamp(ahead)} [INFO] loading"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (written, written))
    store = Store(Config(phases=builtin_phases()))
    read_history(store.analysis, [(str(log), log.stat().st_size, written, False)])
    status = store.phase_status()
    assert status.state == "stalled" and status.last_progress == pytest.approx(written, abs=1.0)


def test_a_run_of_unstamped_steps_after_a_line_no_rule_knows_replays(tmp_path: Path) -> None:
    """A stamped line no rule knew, then verl step lines without stamps, then a stamped traceback: replay
    raised a TypeError (the look-back found a stamp before the chunk's last mark and dropped it)."""
    lines = [f"{stamp(time.time() - 600)} INFO hello, a line no rule knows"]
    lines += [f"(TaskRunner pid=1) step:{i} - timing_s/step:1.0 - loss:0.5" for i in range(1, 21)]
    lines += [f"{stamp(time.time() - 300)} ERROR Traceback (most recent call last):", "RuntimeError: boom"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert (report.status.state, report.status.steps_done) == ("failed", 20)


def test_several_followed_files_are_capped_by_the_newest_mtime(tmp_path: Path) -> None:
    """Read one by one, the last file read capped the progress at its own, older mtime: a step a minute
    ago in one file read as 'stalled for two hours' because of another file."""
    from gkdtop.store import Store, read_history

    recent, old = tmp_path / "recent.log", tmp_path / "old.log"
    now = time.time()
    recent.write_text(f"{stamp(now - 120)} [INFO] Initializing Rollout Worker...\n{stamp(now - 60)} step:3 - x:1\n")
    os.utime(recent, (now - 60, now - 60))
    old.write_text(f"{stamp(now - 7200)} [INFO] raylet started\n")
    os.utime(old, (now - 7200, now - 7200))
    store = Store(Config(phases=builtin_phases()))
    read_history(store.analysis, [(str(p), p.stat().st_size, p.stat().st_mtime, False) for p in (recent, old)])
    assert store.phase_status().last_progress == pytest.approx(now - 60, abs=1.0)


@pytest.mark.parametrize("prefix", ["kubectl", "pdsh", "line number"])
def test_fast_and_careful_reading_agree_behind_a_capture_stamp_or_a_host(tmp_path: Path, prefix: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import gkdtop.analysis.history as history
    from gkdtop.replay import report_json

    t0 = time.time() - 3000

    def line(t: float, text: str) -> str:
        if prefix == "kubectl":
            return datetime.utcfromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ ") + f"(TaskRunner pid=7) {text}"
        if prefix == "pdsh":
            return f"node07: {stamp(t)} {text}"
        return f"[{int(t - t0) + 100}] {stamp(t)} {text}"  # pasted from an editor with its line numbers

    lines = [line(t0, "Initializing Rollout Worker...")]
    lines += [line(t0 + 60 * i, f"step:{i} - timing_s/step:{60 + i}.0 - loss:0.5") for i in range(1, 40)]
    log = tmp_path / "train.log"
    log.write_text("".join(x + "\n" for x in lines))
    fast = report_json(replay([str(log)], Config(phases=builtin_phases())))
    monkeypatch.setattr(history, "FAST_HISTORY", False)
    careful = report_json(replay([str(log)], Config(phases=builtin_phases())))
    assert fast == careful
    assert fast["steps"]["first_time"] == pytest.approx(t0 + 60, abs=1.0)


def test_a_failure_after_a_finished_phase_cites_the_failure_not_a_start(tmp_path: Path) -> None:
    from tests.gkdlog import ray, startup

    lines, _ = startup(time.time() - 900, upto="actor-done")
    lines.append(ray("WorkerDict", 2001, "Traceback (most recent call last):"))
    lines.append(ray("WorkerDict", 2001, "RuntimeError: boom"))
    log = tmp_path / "train.log"
    log.write_text("".join(x + "\n" for x in lines))
    report = replay([str(log)], Config(phases=builtin_phases()))
    claims = [e.claim for e in report.status.evidence]
    span = report.status.timeline[-1]
    assert span.evidence is not None and span.evidence.claim == f"{span.name} failed", span.evidence
    assert "failed" in claims


def test_a_healthy_day_long_log_stamped_with_the_time_alone_is_not_stalled(tmp_path: Path) -> None:
    """14 hours of `HH:MM:SS` stamps: lines written more than 12 hours before the file's mtime were
    dated after it, and a healthy run read as 'stalled for 11.8 hours'."""
    end = time.time() - 60
    lines = [f"{datetime.fromtimestamp(end - 600 * k):%H:%M:%S}.123 [INFO:swift] Step {84 - k} | 600.0s | loss: 0.2"
             for k in range(84, -1, -1)]
    log = tmp_path / "train.log"
    log.write_text("".join(x + "\n" for x in lines))
    os.utime(log, (end, end))
    report = replay([str(log)], Config(phases=builtin_phases()))
    assert report.status.state == "running", (report.status.state, report.status.stalled_for)
    assert report.ended == pytest.approx(end, abs=1.0)


def megatron_run(tmp_path: Path, iterations: int = 12) -> Path:
    """Megatron's iteration lines, each stamped after a leading space, to the file's end (a copy taken
    mid-run, long after: the mtime is today's)."""
    t0 = datetime(2024, 3, 30, 14, 13, 38).timestamp()
    began = datetime.fromtimestamp(t0)
    lines = ["training ...", f"[before the start of training step] datetime: {began:%Y-%m-%d %H:%M:%S} "]
    for i in range(1, iterations + 1):
        at = datetime.fromtimestamp(t0 + 30 + 9.7 * i)
        lines.append(f" [{at:%Y-%m-%d %H:%M:%S}] iteration {i:8d}/     400 | consumed samples: {128 * i:12d} | "
                     f"elapsed time per iteration (ms): 9700.0 | lm loss: {2.4 - i / 100:.6E} | grad norm: 1.2 |")
    log = tmp_path / "pretrain.log"
    log.write_text("".join(line + "\n" for line in lines))
    return log


def test_a_log_stepping_to_its_end_gets_no_hang_guess(tmp_path: Path) -> None:
    report = replay([str(megatron_run(tmp_path))], load_config(None))
    from gkdtop.replay import report_text

    text = report_text(report)
    assert report.open_end is not None and report.open_end.stepping, text
    assert "nothing in the file says it stopped" in text
    assert "if it stopped there" not in text and "stacks" not in text and "collective" not in text, text
    # Its last line's own stamp is its time, not the copy's mtime (the tail was read as undated before).
    assert report.status.last_progress == pytest.approx(report.ended)


def test_a_log_ending_mid_phase_says_what_to_check_not_why_it_stopped(tmp_path: Path) -> None:
    """After vLLM's engines came up nothing followed: no line says the job stopped, let alone that the
    next model ran out of memory; replay says where to look."""
    t0 = time.time() - 7200
    lines = ["(LLMRayActor pid=4242) creating LLM with bundle_indices=[0, 1]",
             f"(LLMRayActor pid=4242) INFO {datetime.fromtimestamp(t0):%m-%d %H:%M:%S} [core.py:151] init engine "
             "(profile, create kv cache, warmup model) took 41.62 seconds"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    from gkdtop.replay import report_text

    text = report_text(replay([str(log)], load_config(None)))
    assert "out of memory" not in text and "cause:" not in text, text
