"""`gkdtop replay` on realistic finished logs: durations from the lines' own times, steps, errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gkdtop.config import load_config
from gkdtop.replay import replay
from tests.gkdlog import asctime, ray, startup


def write(tmp_path: Path, lines: list[str], name: str = "train.log") -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_finished_run_timeline_and_step_statistics(tmp_path: Path) -> None:
    t0 = 1_768_125_600.0
    lines, last = startup(t0, steps=4, step_s=30)
    lines.append(ray("TaskRunner", 1, f"{asctime(last + 1)} root INFO ✓ Training finished: 4 steps"))
    report = replay([write(tmp_path, lines)], load_config(None))
    spans = {s.name: s for s in report.status.timeline}
    assert [s.name for s in report.status.timeline][:6] == ["config", "dataset generation", "resource pool",
                                                           "actor init", "rollout init", "weight sync"]
    assert spans["dataset generation"].duration == pytest.approx(20.0)
    assert spans["actor init"].duration == pytest.approx(15.0)  # mixed ISO and asctime stamps
    assert spans["rollout init"].duration == pytest.approx(30.0)
    assert report.status.state == "done"
    assert report.steps["count"] == 4
    assert report.steps["mean_s"] == pytest.approx(30.0)
    assert report.steps["timing_mean_s"]["update_actor"] == pytest.approx(10.5)
    assert report.started == pytest.approx(t0 + 1, abs=0.01)
    assert report.ended == pytest.approx(last + 1, abs=0.01)
    assert report.method in ("hyperscan", "re2")


def test_run_that_ended_in_a_traceback(tmp_path: Path) -> None:
    lines, _ = startup(time.time() - 500, upto="rollout")
    crash = [
        ray("TaskRunner", 1, "Traceback (most recent call last):"),
        ray("TaskRunner", 1, '  File "verl/trainer/main_ppo.py", line 64, in run'),
        ray("TaskRunner", 1, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        ray("TaskRunner", 1, "\tclass_name: WorkerDict"),
    ]
    report = replay([write(tmp_path, lines + crash + crash)], load_config(None))
    assert report.status.state == "failed"
    assert report.status.current == "rollout init"
    assert report.status.failure.startswith("ray.exceptions.ActorDiedError")
    assert len(report.errors) == 1 and report.errors[0].count == 2
    assert report.errors[0].first_line == len(lines) + 1
    died = [f for f in report.findings if f.name == "ray-actor-died"]
    assert died and died[0].fields.get("actor_class") == "WorkerDict"


def test_run_that_stopped_mid_phase_points_at_the_phase_and_its_hint(tmp_path: Path) -> None:
    lines, last = startup(1_768_125_600.0, upto="sync")
    lines += [f"{asctime(last + 700)} root INFO heartbeat: still alive"]  # noise, not a phase line
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.current == "weight sync"
    assert report.status.state == "stalled"
    assert report.ended == pytest.approx(last + 700, abs=0.01)
    assert report.status.hint is not None and "NCCL_TIMEOUT is read by nothing" in " ".join(report.status.hint.actions)


def test_a_stalled_log_quotes_its_own_last_line_as_the_live_views_do(tmp_path: Path) -> None:
    """Stalled after lines no rule knows: replay's text quotes the log's last line, as the Phases pane and
    snapshot do (PhaseStatus.last_line); the JSON's `unrecognised.last` carries it."""
    from gkdtop.replay import report_json, report_text

    lines, last = startup(1_768_125_600.0, upto="sync")
    lines += [f"{asctime(last + 700)} root INFO heartbeat: still alive"]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "stalled" and report.open_end is None
    assert f"  last line: `{lines[-1]}`" in report_text(report).splitlines(), report_text(report)
    assert report_json(report)["unrecognised"]["last"] == lines[-1]


def test_cli_json_and_errors(tmp_path: Path) -> None:
    lines, _ = startup(1_768_125_600.0, steps=2)
    path = write(tmp_path, lines)
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", path], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 2 and doc["steps"]["count"] == 2 and doc["stopped_in"] == "training loop"
    assert {"name", "start", "end", "duration", "status"} <= doc["timeline"][0].keys()
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", path], capture_output=True, text=True,
                          timeout=60).stdout
    assert "steps: 2 (1..2)" in text and "timeline:" in text
    missing = subprocess.run([sys.executable, "-m", "gkdtop", "replay", str(tmp_path / "nope.log")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.log: No such file" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 22])
def test_chunk_size_changes_nothing(tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """History is read in chunks cut on newlines; where the cuts fall must not change the report."""
    import gkdtop.analysis.history as history

    lines, _ = startup(time.time() - 3600, steps=40, step_s=5)
    # Each holds words a rule needs but matches no rule: the scan must not take it for one.
    decoys = ["step:abc - no number", "ip: unknown", "Worker exit type: ?", "[Rank x] not a rank"]
    filler = decoys + [f"INFO noise line {i} with nothing to see" for i in range(300)]
    body = [x for i, line in enumerate(lines) for x in (line, *filler[: i % 7])]
    body += [ray("TaskRunner", 9, "Traceback (most recent call last):"), ray("TaskRunner", 9, "RuntimeError: boom")]
    log = tmp_path / "train.log"
    log.write_text("\n".join(body))  # no newline at the end: a finished file's last line still counts
    config = load_config(None)
    whole = replay([str(log)], config)
    monkeypatch.setattr(history, "CHUNK", chunk)
    report = replay([str(log)], config)
    assert report.lines_read == whole.lines_read == len(body)
    assert report.steps == whole.steps and report.steps["count"] == 40
    assert [(s.name, s.status) for s in report.status.timeline] == [(s.name, s.status) for s in whole.status.timeline]
    assert report.errors and report.errors[0].first_line == len(body) - 1
    assert report.status.failure.endswith("RuntimeError: boom")


def test_yearless_stamps_take_the_year_of_the_files_mtime(tmp_path: Path) -> None:
    """vLLM prints `INFO 03-27 14:02:11`: a log from March read in November is from this March."""
    import datetime
    import os

    log = tmp_path / "vllm.log"
    log.write_text("INFO 03-27 14:02:11 [engine.py:1] Initializing Rollout Worker\n"
                   "INFO 03-27 14:04:11 [engine.py:2] Rollout Worker initialized\n"
                   "(TaskRunner pid=1) step:1 - timing_s/step:2.0\n")
    mtime = datetime.datetime(2025, 11, 24, 10, 0).timestamp()
    os.utime(log, (mtime, mtime))
    report = replay([str(log)], load_config(None))
    started = datetime.datetime.fromtimestamp(report.started)
    assert (started.year, started.month, started.day) == (2025, 3, 27)
    assert report.ended - report.started == pytest.approx(120)
    os.utime(log, (mtime + 86400 * 90, mtime + 86400 * 90))  # read next February: still last March
    assert datetime.datetime.fromtimestamp(replay([str(log)], load_config(None)).started).year == 2025
    early = datetime.datetime(2026, 1, 2, 0, 0).timestamp()  # a December log whose file was touched Jan 2nd
    log.write_text("INFO 12-31 23:59:00 [engine.py:1] Initializing Rollout Worker\n")
    os.utime(log, (early, early))
    assert datetime.datetime.fromtimestamp(replay([str(log)], load_config(None)).started).year == 2025


def test_a_log_copied_long_after_its_run_keeps_its_year_less_stamps_in_the_runs_year(tmp_path: Path) -> None:
    """A verl log downloaded a year and a half later: the driver's dated lines say 2025, so vLLM's
    `INFO 06-07 …` lines are from June 2025 too, not from the June before the download (a phase of
    365 days between them otherwise)."""
    import datetime
    import os

    log = tmp_path / "copied.log"
    log.write_text("2025-06-07 18:18:06,047\tINFO worker.py:1852 -- Started a local Ray instance.\n"
                   "(TaskRunner pid=7) TaskRunner hostname: gpu-node-1, PID: 7\n"
                   "(vLLMHttpServer pid=9) INFO 06-07 18:19:59 [core.py:74] Initializing a V1 LLM engine\n"
                   "(vLLMHttpServer pid=9) INFO 06-07 18:20:55 [gpu_worker.py:232] Available KV cache memory: 3 GiB\n")
    copied = datetime.datetime(2026, 11, 24, 10, 0).timestamp()
    os.utime(log, (copied, copied))
    report = replay([str(log)], load_config(None))
    assert datetime.datetime.fromtimestamp(report.ended).year == 2025
    assert report.ended - report.started == pytest.approx(169, abs=1)
    assert [s.name for s in report.status.timeline] == ["config", "rollout init"]
    assert report.status.timeline[0].duration == pytest.approx(113, abs=1)


def test_a_copied_log_whose_only_full_date_is_at_its_start_keeps_its_year(tmp_path: Path) -> None:
    """Ray's start line is often a verl log's only full date; more than the tail read for dates
    follows it (vLLM's year-less lines, steps). Its head says the year too."""
    import datetime
    import os

    log = tmp_path / "copied.log"
    filler = [f"(TaskRunner pid=7) step:{k} - actor/pg_loss:0.01 - " + "x" * 60 for k in range(1, 1200)]
    log.write_text("\n".join(["2025-06-07 18:18:06,047\tINFO worker.py:1852 -- Started a local Ray instance.",
                              "(TaskRunner pid=7) TaskRunner hostname: gpu-node-1, PID: 7", *filler,
                              "(vLLMHttpServer pid=9) INFO 06-07 18:20:55 [gpu_worker.py:232] KV cache"]) + "\n")
    assert log.stat().st_size > 64 * 1024
    copied = datetime.datetime(2026, 11, 24, 10, 0).timestamp()
    os.utime(log, (copied, copied))
    report = replay([str(log)], load_config(None))
    assert report.ended - report.started == pytest.approx(169, abs=1)


def test_the_run_ends_at_the_logs_last_stamp_after_more_unstamped_lines_than_a_look_around(
        tmp_path: Path) -> None:
    """A log's last stamped lines often match no rule (vLLM's KV-cache sizes) and are followed by
    more unstamped lines than the few a nearby look-around reads (a traceback, a bar's redraws).
    The run was last heard of at the last stamp, not at the last line a rule dated."""
    log = tmp_path / "capture.log"
    lines = ["2025-06-07 18:18:06,047\tINFO worker.py:1852 -- Started a local Ray instance.",
             "(vLLMHttpServer pid=9) INFO 06-07 18:19:59 [core.py:74] Initializing a V1 LLM engine",
             "(vLLMHttpServer pid=9) INFO 06-07 18:20:54 [config.py:1472] Using max model len 3072",
             "(vLLMHttpServer pid=9) INFO 06-07 18:20:55 [config.py:2285] Chunked prefill is enabled with "
             "max_num_batched_tokens=8192."]
    lines += [f"(vLLMHttpServer pid=9)   warmup detail {k}" for k in range(40)]  # unstamped, known to no rule
    log.write_text("\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.ended - report.started == pytest.approx(169, abs=1)
    # vLLM's engine and worker processes print their own `(EngineCore_0 pid=N) ` before the stamp,
    # after Ray's prefix: the stamp behind both is read.
    lines.insert(4, "(vLLMHttpServer pid=9) (EngineCore_0 pid=10) INFO 06-07 18:21:30 [kv_cache_utils.py:716] "
                    "GPU KV cache size: 1,447,168 tokens")
    lines.insert(5, "(vLLMHttpServer pid=9) (VllmWorker rank=0 pid=11) INFO 06-07 18:21:40 [gpu_worker.py:81] "
                    "Sleep mode freed 47.26 GiB memory")
    log.write_text("\n".join(lines) + "\n")
    report = replay([str(log)], load_config(None))
    assert report.ended - report.started == pytest.approx(214, abs=1)


def test_a_log_that_stops_mid_phase_says_where_and_what_to_check(tmp_path: Path) -> None:
    """Replay has no clock: a log that ends in a CUDA-graph capture bar is `running`, but not with
    nothing said. It names the line it ended on and the phase's hint, as what to check if it hung."""
    from gkdtop.replay import report_json, report_text

    lines = ["(TaskRunner pid=7) TaskRunner hostname: gpu-node-1, PID: 7",
             "(vLLMHttpServer pid=9) INFO 06-07 18:19:59 [core.py:74] Initializing a V1 LLM engine",
             "(vLLMHttpServer pid=9) Capturing CUDA graph shapes:  13%|█  | 9/67 [00:03<00:24, 2.37it/s]",
             "(vLLMHttpServer pid=9) Capturing CUDA graph shapes:  46%|████  | 31/67 [00:13<00:15, 2.38it/s]"]
    report = replay([write(tmp_path, lines)], load_config(None))
    doc = report_json(report)
    assert (doc["state"], doc["stopped_in"], doc["hint"]) == ("running", "rollout init", None)
    assert doc["open_end"]["after"].startswith("Capturing CUDA graph shapes:  46%")
    assert "31/67" in doc["open_end"]["text"] and "cannot tell a hang" in doc["open_end"]["text"]
    assert any("enforce_eager" in a for a in doc["open_end"]["hint"]["actions"])
    text = report_text(report)
    assert "if it stopped there:" in text and "31/67" in text
    lines.append("(vLLMHttpServer pid=9) Capturing CUDA graph shapes: 100%|██████| 67/67 [00:28<00:00, 2.38it/s]")
    lines.append("(TaskRunner pid=7) Training Progress: 100%|██████| 15/15 [53:00<00:00, 212.00s/it]")
    assert report_json(replay([write(tmp_path, lines)], load_config(None)))["open_end"] is None  # done: nothing open


def test_a_log_that_starts_mid_run_spans_what_its_bar_and_its_timeout_say(tmp_path: Path) -> None:
    """A log copied from the middle of a run: an unstamped loss dict, the loop's bar at `[1:52:10<`, a watchdog
    line that ran 30 min, then the launcher's stamps two seconds apart. Before, replay said `2s of stamps` and
    the loop began `≤` the first stamp; the bar says the run went on ≥1h52m: a bound (≤, ≥), never a stamp."""
    lines = [
        "{'loss': 1.2043, 'learning_rate': 0.000871, 'epoch': 0.05}",
        "  5%|▍         | 211/4096 [1:52:10<34:28:09, 31.94s/it]",
        "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9120, "
        "OpType=_ALLGATHER_BASE, NumelIn=1310720, NumelOut=10485760, Timeout(ms)=1800000) ran for 1800233 "
        "milliseconds before timing out.",
        "[2026-02-11 08:40:12,101] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 5120",
        "[2026-02-11 08:40:14,640] [ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] "
        "exits with return code = -6",
    ]
    path = write(tmp_path, lines)
    doc = json.loads(subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", path], capture_output=True,
                                    text=True, timeout=60, check=True).stdout)
    bar_at = doc["ended"]  # the bar has no stamp: the first named stamp after it is no earlier than it
    assert doc["began_by"] == pytest.approx(bar_at - (3600 + 52 * 60 + 10), abs=3)
    assert doc["began_by"] < doc["started"]
    first = doc["timeline"][0]
    assert first["name"] == "training loop" and first["start_before"] is True
    assert first["start"] == pytest.approx(doc["began_by"], abs=3)
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--why", path], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    head = text.splitlines()[0]
    assert "≥1h52m, from ≤" in head and "stamps 08:40:12 to 08:40:14" in head, head
    assert "under way by then" in text and "[1:52:10<" in text  # --why cites the bar
    assert re.search(r"≤\d\d:\d\d:\d\d  training loop", text), text


def test_a_loop_bar_that_ran_longer_than_the_stamps_bounds_the_runs_length(tmp_path: Path) -> None:
    """VLM-R1 under DeepSpeed (audit 13): stamps only while it started (50 s), then the loop's bar drawn to
    `33/1000 [10:42<…`. Before: "50s from 09:02:11 to 09:03:01", a length the bar contradicts."""
    lines = [
        "[2025-07-18 09:02:11,402] [INFO] [real_accelerator.py:222:get_accelerator] Setting ds_accelerator to cuda",
        "[2025-07-18 09:03:01,771] [INFO] [config.py:1003:print]   zero_optimization_stage ...... 3",
        "  0%|          | 0/1000 [00:00<?, ?it/s]",
        *[f"  {n // 10}%|▎         | {n}/1000 [{n * 19 // 60:02d}:{n * 19 % 60:02d}<5:13:00, 19.28s/it]"
          for n in (1, 2, 32)],
        "  3%|▎         | 33/1000 [10:42<5:13:00, 19.28s/it]",
    ]
    path = write(tmp_path, lines)
    from gkdtop.replay import report_json, report_text

    report = replay([path], load_config(None))
    head = report_text(report, why=True).splitlines()[0]
    assert head.startswith(f"{path}: ≥10m42s (a line states something ran that long); stamps 09:02:11 to 09:03:01")
    cited = [e for e in report_json(report)["evidence"] if e["claim"].startswith("the run went on")]
    assert [(e["line"], e["text"].strip()[:9]) for e in cited] == [(7, "3%|▎     ")]


def test_one_stamped_moment_is_no_duration(tmp_path: Path) -> None:
    """A pasted excerpt whose only stamps are one moment (a crash's lines, written in the same second). Before, the
    header said `0s from 03:41:17 to 03:41:17`, a measured length the log cannot give."""
    path = write(tmp_path, ["Initializing Actor Worker...",
                            "2026-03-02 03:41:17,101 ERROR RuntimeError: CUDA error: an illegal memory access",
                            "2026-03-02 03:41:17,640 ERROR worker exited"])
    from gkdtop.replay import report_text

    head = report_text(replay([path], load_config(None))).splitlines()[0]
    assert "one stamped time, 03:41:17: duration unknown" in head and "0s" not in head, head


def test_a_start_up_setting_is_no_stated_wait(tmp_path: Path) -> None:
    """SGLang's start-up prints its settings, `watchdog_timeout=300` among them; a log that ends there did not say
    it waited 300 s (before: "the log itself states a wait of 5m00s there with no progress: it hung at least that
    long", on a 5-second log). The scheduler's own `Scheduler watchdog timeout (self.watchdog_timeout=300` does."""
    from gkdtop.replay import stated_wait

    args = ("[2026-03-01 10:00:05] server_args=ServerArgs(model_path='m', tp_size=2, watchdog_timeout=300, "
            "mem_fraction_static=0.8)")
    path = write(tmp_path, ["[2026-03-01 10:00:00] Init torch distributed begin.", args])
    from gkdtop.replay import report_json

    doc = report_json(replay([path], load_config(None)))
    assert doc["open_end"] is None or doc["open_end"]["waited_s"] is None, doc["open_end"]
    assert stated_wait(args) is None
    assert stated_wait("[2026-03-01 10:05:32 PP1 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                       "self.soft=False)") == 300


def test_a_child_commands_timeout_is_no_wait_of_the_job(tmp_path: Path) -> None:
    """Audit 17: a reward sandbox's `Command '[…]' timed out after 12 seconds` (subprocess.TimeoutExpired) read as
    "the log itself states a wait of 12s there with no progress: it hung at least that long", on engines that were
    generating (vLLM preempting sequences, a verl fork's `generate_sequence`: BS=N)."""
    from gkdtop.replay import report_json, stated_wait

    sandbox = ("(WorkerDict pid=4410, ip=10.2.0.7) Command '['bash', '-c', 'ulimit -v 4000000;"
               " python3 /tmp/tmpab12cd']' "
               "timed out after 9 seconds")
    assert stated_wait(sandbox) is None
    assert stated_wait("torch.distributed.DistStoreError: wait timed out after 300000ms") == 300
    path = write(tmp_path, [
        "(WorkerDict pid=4410, ip=10.2.0.7) Rank 3, TP rank 1 initialized vLLM rollout",
        "(WorkerDict pid=4410, ip=10.2.0.7) Rank 3, TP rank 1 `generate_sequence`: BS=16",
        "(WorkerDict pid=4412, ip=10.2.0.9) WARNING 03-04 08:10:02 scheduler.py:1560] Sequence group 9 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. total_num_cumulative_preemption=1",
        sandbox])
    doc = report_json(replay([path], load_config(None)))
    assert doc["stopped_in"] == "generation" and doc["state"] == "running", (doc["stopped_in"], doc["state"])
    assert doc["open_end"]["waited_s"] is None, doc["open_end"]


def test_a_trainers_engines_silent_for_minutes_in_generation_are_no_stall(tmp_path: Path) -> None:
    """Audit 17: 32K-token rollouts print nothing for minutes but vLLM's preemption warnings; with the phase unknown
    the watcher's 120 s said "STALLED for 2m01s" at a 3-minute gap. A trainer's generation with no step yet has the
    first step's allowance."""
    from gkdtop.alerts.paced import paced_events

    warn = ("(WorkerDict pid=4412, ip=10.2.0.9) WARNING 03-04 {} scheduler.py:1560] Sequence group {} is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.")
    path = write(tmp_path, ["(WorkerDict pid=4410, ip=10.2.0.7) Rank 3, TP rank 1 `generate_sequence`: BS=16",
                            warn.format("08:10:02", 9), warn.format("08:11:40", 9), warn.format("08:15:12", 31),
                            warn.format("08:17:30", 77)])
    assert [e.kind for e in paced_events(path, load_config(None))] == []


def test_torchruns_agent_waiting_in_its_rendezvous_is_waiting_for_nodes_not_nccl(tmp_path: Path) -> None:
    """Audit 17: torchrun's agent (old logger, `[INFO] <stamp> …`) hosting the rendezvous and waiting for min_nodes=2
    read "no timestamps: duration unknown", "ended, likely in nccl init" with NCCL's advice (NCCL_DEBUG,
    NCCL_P2P_DISABLE): NCCL had not started. Its rendezvous is the wait for resources."""
    from gkdtop.replay import report_json, report_text

    path = write(tmp_path, [
        "[INFO] 2026-04-02 16:20:11,500 run: Running torch.distributed.run with args: ['run.py', 'finetune.py']",
        "[INFO] 2026-04-02 16:20:11,530 api: Starting elastic_operator with launch configs:",
        "  min_nodes        : 3",
        "  nproc_per_node   : 8",
        "[INFO] 2026-04-02 16:20:11,601 api: [default] Rendezvous'ing worker group",
        "[INFO] 2026-04-02 16:20:11,604 dynamic_rendezvous: The node 'node-a_77_0' attempts to join the next round of "
        "the rendezvous 'ft-run-4'.",
        "[INFO] 2026-04-02 16:31:40,118 dynamic_rendezvous: The node 'node-a_77_0' attempts to join the next round of "
        "the rendezvous 'ft-run-4'."])
    report = replay([path], load_config(None))
    text, doc = report_text(report), report_json(report)
    assert report.started is not None and "no timestamps" not in text.splitlines()[0], text
    assert doc["stopped_in"] == "resource pool" and doc["phase_from"] == "rules", (doc["stopped_in"], text)
    assert "NCCL" not in text and "ray status" not in text, text
    assert "--rdzv-endpoint" in text, text


def test_no_timestamps_means_no_duration(tmp_path: Path) -> None:
    path = write(tmp_path, ["Initializing Actor Worker...", "Actor Worker initialized"])
    report = replay([path], load_config(None))
    from gkdtop.replay import report_text

    assert report.started is None and "duration unknown" in report_text(report).splitlines()[0]


# --- real jobs' lines (docs/real-logs.md): what the built-in phases make of them ---------------------

VERL_START = [
    "ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {'NCCL_DEBUG': 'WARN'}}}",
    "2025-06-12 10:31:02,123\tINFO worker.py:1852 -- Started a local Ray instance.",
    ray("TaskRunner", 7, "TaskRunner hostname: gpu-node-1, PID: 7"),
    ray("TaskRunner", 7, "[validate_config] All configuration checks passed successfully!"),
    ray("TaskRunner", 7, "Using dataset class: RLHFDataset"),
    ray("TaskRunner", 7, "dataset len: 7473"),
    ray("TaskRunner", 7, "Size of train dataloader: 100, Size of val dataloader: 1"),
    ray("TaskRunner", 7, "colocated worker base class <class 'verl.single_controller.base.worker.Worker'>"),
    ray("WorkerDict", 8, "Model config after override: Qwen2Config {"),
    ray("WorkerDict", 8, "Loading checkpoint shards: 100%|██████████| 4/4 [00:24<00:00, 6.10s/it]"),
    ray("WorkerDict", 8, "Qwen2ForCausalLM contains 7.62B parameters"),
]


def test_phases_keep_rl_names_only_on_an_rl_trainer_s_log(tmp_path: Path) -> None:
    """An HF Trainer + DeepSpeed run (no actor, no rollout) that hung loading its model, and a vLLM server's
    start-up: before, replay called them `actor init` and `rollout init`, RL words for jobs that have neither.
    Now their plain names (phases.yaml `plain`), with the phase's advice still found by that name; a verl log
    keeps `actor init`."""
    hf = [
        "[2026-02-03 09:00:01,120] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda",
        "[INFO|trainer.py:698] 2026-02-03 09:00:05,411 >> Using auto half precision backend",
        "[2026-02-03 09:00:06,002] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.4, "
        "git-hash=unknown, git-branch=unknown",
        "[2026-02-03 09:00:09,310] [INFO] [logging.py:96:log_dist] [Rank 0] Creating ZeRO stage 3 optimizer",
    ]
    doc = json.loads(subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", write(tmp_path, hf, "hf.log")],
                                    capture_output=True, text=True, timeout=60, check=True).stdout)
    assert doc["stopped_in"] == "model load" and [s["name"] for s in doc["timeline"]] == ["model load"], doc
    assert doc["open_end"]["hint"]["actions"], doc["open_end"]  # the phase's advice, found by its plain name
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--why", str(tmp_path / "hf.log")],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "actor" not in text.lower() and "model load started: hf.log:3" in text, text
    serve = [
        "INFO 02-03 09:10:00 [api_server.py:1043] vLLM API server version 0.9.1",
        "INFO 02-03 09:10:02 [core.py:69] Initializing a V1 LLM engine (v0.9.1) with config: model='/m/Qwen3-8B'",
        "INFO 02-03 09:10:40 [gpu_model_runner.py:1595] Model loading took 15.27 GiB and 31.12 seconds",
    ]
    from gkdtop.replay import report_text

    report = replay([write(tmp_path, serve, "serve.log")], load_config(None))
    assert report.status.current == "engine init" and "rollout" not in report_text(report)
    verl = [*VERL_START, ray("WorkerDict", 8, "Initializing Actor Worker...")]
    assert replay([write(tmp_path, verl, "verl.log")], load_config(None)).status.current == "actor init"


def test_sglang_rollout_init_crash_is_the_rollout_init(tmp_path: Path) -> None:
    """A segfault while SGLang captures CUDA graphs (verl runs SGLang at log_level=error: the bar
    and the crash are all it shows): failed in rollout init, no dataset hint, the signal named."""
    lines = [*VERL_START,
             ray("WorkerDict", 8, "Capturing batches (bs=160 avail_mem=19.88 GB):  30%|███       | 7/23 [00:05<00:11]"),
             ray("WorkerDict", 8, "Fatal Python error: Segmentation fault"),
             ray("WorkerDict", 8, ""),
             ray("WorkerDict", 8, "Thread 0x00007f1c2d3e4f50 (most recent call first):"),
             ray("WorkerDict", 8, '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/'
                 'cuda_graph_runner.py", line 412 in capture')]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "failed" and report.status.current == "rollout init"
    hint = " ".join(report.status.hint.causes + report.status.hint.actions) if report.status.hint else ""
    assert "data.train_files" not in hint and "dataset" not in hint.lower()
    assert "Segmentation fault" in report.status.failure
    assert "fatal-signal" in {f.name for f in report.findings}


def test_a_fatal_errors_dump_whose_first_line_was_cut_is_a_crash(tmp_path: Path) -> None:
    """faulthandler lists the extension modules only in a fatal error's dump: where a pasted log kept only that list
    (its `Fatal Python error` line cut away) and the loop's bar redrawn after it, the run crashed in native code.
    Before: "ended in training loop", running."""
    bar = "Running step 1:   0%|          | 5.00/2.71k [32:07<212:40:51, 283s/it]"
    lines = [ray("TaskRunner", 5812, "Running step 1:   0%|          | 4.00/2.71k [25:40<181:10:02, 240s/it]"),
             "Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, "
             "numpy.linalg._umath_linalg, torch._C, torch._C._fft, av._core, zmq.backend.cython._zmq,",
             "regex._regex, __triton_launcher (total: 231) " + ray("TaskRunner", 5812, bar),
             ray("WorkerDict", 6904, "/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: "
                                      "resource_tracker: There appear to be 1 leaked shared_memory objects"),
             ray("TaskRunner", 5812, bar.replace("32:07", "32:09"))]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "failed" and report.status.current == "training loop"
    assert report.status.failure.startswith("Extension modules: numpy.core")
    assert "native code" in " ".join(report.status.hint.causes)


def test_root_cause_is_the_last_exception_and_a_second_models_load_does_not_go_back(tmp_path: Path) -> None:
    """verl's crash: Hydra's banner, Ray's wrappers (the second names the worker method: reward
    init), then the real exception. The reference model's load bar after the reward model's start
    does not reopen the actor's model load."""
    lines = [*VERL_START,
             ray("WorkerDict", 8, "Critic overriding config {'bos_token_id': None}"),
             ray("WorkerDict", 8, "reference model: /mnt/models/Qwen2.5-7B-Instruct"),
             ray("WorkerDict", 8, "Loading checkpoint shards:  75%|███████   | 3/4 [00:33<00:11, 11.03s/it]"),
             "Error executing job with overrides: ['algorithm.adv_estimator=gae']",
             "Traceback (most recent call last):",
             "ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunner.run() (pid=7, ip=10.0.0.1)",
             "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.rm_init_model() (pid=8, ip=10.0.0.1)",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity "
             "of 79.11 GiB of which 1.02 GiB is free.",
             "",
             "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    report = replay([write(tmp_path, lines)], load_config(None))
    names = [s.name for s in report.status.timeline]
    assert names.count("actor init") == 1 and names[-1] == "reward init", names
    assert report.status.state == "failed" and report.status.current == "reward init"
    assert report.status.failure.startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_a_step_is_placed_in_its_part(tmp_path: Path) -> None:
    """verl prints `step:N` only after a step; within one, vLLM's wake-up and engine stats say where
    it is. Stats with requests running and no tokens are not progress."""
    t0 = time.time() - 3000
    stamp = lambda dt: time.strftime("%m-%d %H:%M:%S", time.localtime(t0 + dt))  # noqa: E731
    lines = [*VERL_START,
             ray("TaskRunner", 7, "step:1 - actor/pg_loss:0.01 - timing_s/gen:80.1 - timing_s/step:200.2"),
             ray("vLLMHttpServer", 9, f"INFO {stamp(0)} [executor_base.py:226] It took 0.8 seconds to wake up "
                 "tags ['weights']."),
             ray("vLLMHttpServer", 9, f"INFO {stamp(5)} [executor_base.py:226] It took 1.8 seconds to wake up "
                 "tags ['kv_cache']."),
             *[ray("vLLMHttpServer", 9, f"INFO {stamp(10 + 10 * i)} [loggers.py:118] Engine 000: Avg prompt "
                   "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 6 reqs, Waiting: "
                   "0 reqs") for i in range(60)]]
    report = replay([write(tmp_path, lines)], load_config(None))
    st = report.status
    assert (st.current, st.within, st.state) == ("generation", "training loop", "stalled"), (st.current, st.state)
    assert [s.name for s in st.timeline].count("training loop") == 1


NOISY = Path(__file__).resolve().parents[2] / "shared" / "bench" / "noisy_log.py"


def _verl_run(path: Path) -> None:
    """A dense verl-shaped run with what the fast path must get right: bars that start a sub-phase,
    a step line per step, steps without `timing_s/step` (spaced by time), a step two ranks print,
    a key set that changes, a phase change mid-run, a finding whose window spans step lines,
    untimed lines before any stamp, a line with a control byte, non-ASCII metrics."""
    w = "(WorkerDict pid=7790, ip=10.1.1.5) "
    r = "(TaskRunner pid=7781) "
    out = [f"{r}step:0 - timing_s/step:1.0 - note:before any stamp",
           f"{w}Processed prompts: 100%|##| 8/8 [00:01, 8.0it/s]"]
    t = time.time() - 7200
    for step in range(1, 400):
        t += 9
        out.append(f"{w}Processed prompts:  50%|#   | 4/8 [00:01<00:01, 4.0it/s]\r{w}Processed prompts: 100%|##| 8/8 "
                   "[00:02<00:00, 4.0it/s]\r")
        out.append(f"{w}INFO {time.strftime('%m-%d %H:%M:%S', time.localtime(t))} [metrics.py:455] Avg prompt "
                   "throughput: 1.0 tokens/s, Running: 1 reqs")
        timing = "" if step % 37 == 0 else f"timing_s/gen:{step % 5 + 1}.5 - timing_s/step:{step % 7 + 3}.25 - "
        extra = " - timing_s/testing:2.0" if 150 <= step < 160 else ""
        out.append(f"{r}step:{step} - actor/loss:{1 / step:.4f} - {timing}perf/mfu:0.4{extra}")
        if step == 200:
            out.append(f"{r}step:{step} - actor/loss:{1 / step:.4f} - {timing}perf/mfu:0.4")  # a second rank
        if step == 250:
            out.append(f"{asctime(t)} ray.exceptions.RayTaskError: ray::WorkerDict.actor_update_actor() "
                       "(pid=7790, ip=10.1.1.5)")
        if step == 300:
            out.append(f"{r}step:{step} - \x07bell - timing_s/step:3.5")
            out.append(f"{r}step:{step + 1000} - loss:\u00e9 - timing_s/step:3.5")
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("chunk", [4096, 1 << 22])
def test_fast_history_path_equals_the_careful_one(tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path (step and bar lines read from bytes, steps added in bulk) states exactly what
    feeding every line through the engines states, on verl-shaped runs and on the bench's log."""
    import gkdtop.analysis.history as history
    from gkdtop.replay import report_json

    logs = [tmp_path / "verl.log"]
    _verl_run(logs[0])
    if NOISY.exists():
        logs.append(tmp_path / "noisy.log")
        subprocess.run([sys.executable, str(NOISY), str(logs[1]), "300"], check=True)
    config = load_config(None)
    monkeypatch.setattr(history, "CHUNK", chunk)
    for log in logs:
        fast = report_json(replay([str(log)], config, ahead=False))
        ahead = report_json(replay([str(log)], config, ahead=True))  # (chunks scanned by a forked reader)
        monkeypatch.setattr(history, "FAST_HISTORY", False)
        careful = report_json(replay([str(log)], config, ahead=False))
        monkeypatch.setattr(history, "FAST_HISTORY", True)
        assert fast == careful, log.name
        assert ahead == careful, log.name
        assert fast["steps"]["count"] >= 300


def test_a_log_that_only_waits_for_resources_is_stalled_by_its_own_end(tmp_path: Path) -> None:
    """Replay has no clock: Ray's autoscaler warnings, dated by their `+XmYs` offsets, and raylet's
    stamped lines carry the log on past its last progress, so it ends stalled, not running."""
    demand = "{'CPU': 1.0, 'GPU': 8.0}"
    lines = ["2025-06-12 10:31:02,123\tINFO worker.py:1852 -- Started a local Ray instance.",
             ray("TaskRunner", 7, "TaskRunner hostname: gpu-node-7, PID: 7"),
             ray("TaskRunner", 7, "dataset len: 7473")]
    lines += [f"(autoscaler +{m}m5s) Error: No available node types can fulfill resource request "
              f"defaultdict(<class 'float'>, {demand}). Add suitable node types to this cluster to resolve this issue."
              for m in range(1, 12)]
    log = tmp_path / "pending.log"
    log.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(log)], capture_output=True,
                          text=True, timeout=120, check=True)
    doc = json.loads(proc.stdout)
    assert (doc["state"], doc["stopped_in"]) == ("stalled", "resource pool"), doc
    assert 590 <= doc["stalled_for"] <= 610, doc["stalled_for"]  # +1m5s .. +11m5s after the last progress
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", str(log)], capture_output=True, text=True,
                          timeout=120, check=True).stdout
    assert "no progress for 10m" in text and "before the log ended" in text, text

    raylet = log.with_name("raylet.log")
    raylet.write_text("\n".join(lines[:3] + [
        f"(raylet) [2025-06-12 10:{40 + m}:02,000 E 1877 1877] (raylet) worker_pool.cc:588: Some workers of the "
        f"worker process({4000 + m}) have not registered within the timeout. The process is still alive."
        for m in range(8)]) + "\n")
    doc = json.loads(subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(raylet)],
                                    capture_output=True, text=True, timeout=120, check=True).stdout)
    assert (doc["state"], doc["stopped_in"]) == ("stalled", "worker-group creation"), doc
    assert doc["ended"] - doc["started"] == pytest.approx(16 * 60, abs=1)  # raylet's stamps date its lines

    # Ray's scheduler events carry the same relative stamp (`(scheduler +5m5s)`): read the same way.
    scheduler = log.with_name("scheduler.log")
    scheduler.write_text("\n".join(line.replace("(autoscaler +", "(scheduler +") for line in lines) + "\n")
    doc = json.loads(subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(scheduler)],
                                    capture_output=True, text=True, timeout=120, check=True).stdout)
    assert (doc["state"], doc["stopped_in"]) == ("stalled", "resource pool"), doc
    assert 590 <= doc["stalled_for"] <= 610, doc["stalled_for"]


class _Scanned:
    """What a scan hands over: its chunk's bytes (through the ring) and what it found (pickled)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)


def test_a_forked_reader_hands_over_chunks_in_order_and_its_errors_and_stops_with_us() -> None:
    """replay's two-core history (analysis/ahead.py): results in order, through the shared ring or
    pickled when too large for a slot; an error in the reader is raised in the consumer; a consumer
    that stops early leaves no reader behind."""
    import multiprocessing

    from gkdtop.analysis import ahead

    def chunks(fail_after: int | None = None) -> Iterator[bytes]:
        for i in range(12):
            if fail_after is not None and i == fail_after:
                raise OSError(2, "No such file or directory", "/gone/train.log")
            yield (b"%d\n" % i) * (1 + i) if i != 5 else b"x" * (ahead.SLOT + 1)  # one too large for a slot

    got = [(item.data, item.size) for item in ahead.scan_ahead(chunks(), _Scanned)]
    assert got == [(c, len(c)) for c in chunks()]
    with pytest.raises(OSError, match=re.escape("No such file or directory: '/gone/train.log'")):
        for _ in ahead.scan_ahead(chunks(fail_after=7), _Scanned):
            pass
    reader = ahead.scan_ahead(chunks(), _Scanned)
    assert next(reader).data == b"0\n"
    reader.close()  # a consumer that stops: its reader goes too
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("death", [
    "(raylet) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL by the user or "
    "system OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other termination "
    "signals. Last 20 lines of the Raylet logs:",
    "(raylet, ip=10.9.3.7) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL",
    "[2026-03-02 07:41:19,204 E 40113 40190] gcs_rpc_client.h:179: Failed to connect to GCS at address "
    "10.9.3.1:6379 within 30 seconds.",
])
@pytest.mark.parametrize("upto", ["workers", "steps"])
def test_a_nodes_ray_dying_under_the_job_is_its_failure_not_a_silence(tmp_path: Path, death: str, upto: str) -> None:
    """Audit 20: the raylet's death and a lost GCS read as a log that stopped (hang hints: `ray status`, compare the
    steps' breakdowns); Ray is gone on that node, so its actors are, and the run with them."""
    if upto == "workers":
        lines = [ray("TaskRunner", 5120, "colocated worker base class <class 'verl.single_controller.base.Worker'>")]
    else:
        lines = [ray("TaskRunner", 5120, f"step:{n} - critic/score/mean:0.42 - timing_s/gen:61.0 - timing_s/step:120.5")
                 for n in (1, 2)]
    report = replay([write(tmp_path, [*lines, death])], load_config(None))
    assert report.status.state == "failed"
    assert report.status.current == ("worker-group creation" if upto == "workers" else "training loop")
    assert "ray-raylet-died" in [f.name for f in report.findings]
    hint = report.status.hint
    assert hint is None or not any("ray status" in action for action in hint.actions)


def test_broadcasting_loaded_weights_before_any_rollout_engine_is_no_weight_sync(tmp_path: Path) -> None:
    """Audit 20: Megatron's rank 0 loads the HF weights and broadcasts them to its TP ranks at start-up; the words
    `broadcast … weights` then guessed weight sync (and its NCCL-hang hints) where no rollout engine existed yet."""
    lines = [ray("TaskRunner", 7001, "Total training steps: 120"),
             ray("WorkerDict", 7240, "Model config after override: Qwen2Config {"),
             ray("WorkerDict", 7240, "loading hf weights on rank 0"),
             ray("WorkerDict", 7240, "start broadcast weights from rank 0"),
             ray("WorkerDict", 7240, "broadcast layer 12/64 done")]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.current != "weight sync"
    assert "weight sync" not in [s.name for s in report.status.timeline]


def _ray_tqdm(x: int, total: int) -> str:
    state = {"__magic_token__": "__ray_tqdm_magic_token__", "x": x, "pos": 0, "desc": "Running step", "total": total,
             "unit": "it", "ip": "10.1.2.3", "pid": 5310, "uuid": "7f3e", "closed": False}
    return ray("Runner", 5310, json.dumps(state))


@pytest.mark.parametrize("fast", [True, False])
def test_rays_tqdm_json_is_the_loops_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """Audit 20: EasyR1's step bar is Ray's tqdm, which a kept log shows as JSON (`"__ray_tqdm_magic_token__"`, `"x":
    38, …, "desc": "Running step", "total": 335`); read as nothing, a run 38 steps in was "ended after validation"."""
    from gkdtop.analysis import history

    monkeypatch.setattr(history, "FAST_HISTORY", fast)
    lines = [f"{asctime(1_768_125_600.0)}\tINFO worker.py:1843 -- Started a local Ray instance.",
             ray("Runner", 5310, "Start validation..."), ray("Runner", 5310, "Finish validation.")]
    for x in (12, 13, 14):
        lines += [_ray_tqdm(x, 200), ray("WorkerDict", 5388, "After sync model weights in sharding manager: 9.1 GB"),
                  "Processed prompts:   0%|          | 0/64 [00:00<?, ?it/s, est. speed input: 0.00 toks/s]",
                  "Processed prompts: 100%|██████████| 64/64 [00:41<00:00,  1.55it/s, est. speed input: 988.20 toks/s]"]
    lines.append("Processed prompts:  19%|█▉        | 12/64 [00:09<00:40,  1.29it/s, est. speed input: 811.02 toks/s]")
    report = replay([write(tmp_path, lines)], load_config(None))
    assert (report.status.current, report.status.within) == ("generation", "training loop")
    assert report.steps["bar"]["n"] == 14 and report.steps["bar"]["total"] == 200


def test_a_rollout_after_the_validation_before_the_loop_is_the_first_steps(tmp_path: Path) -> None:
    """val_before_train's validation done, then a rollout with no line of the loop yet: the first step's generation,
    not validation's (audit 20: EasyR1's `Start generating batch...` read as validation's)."""
    lines = [ray("Runner", 5310, "Start validation..."), ray("Runner", 5310, "Finish validation."),
             ray("Runner", 5310, "Initial validation metrics: {'val/reward_score': 0.31}"),
             ray("Runner", 5310, "Start generating batch...")]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert (report.status.current, report.status.within) == ("generation", "training loop")


@pytest.mark.parametrize("progress", ["lines", "bar"])
def test_steps_that_ran_without_timing_their_parts_are_past_the_first(tmp_path: Path, progress: str) -> None:
    """Audit 20: five steps whose lines hold no `timing_s/*` of their parts (wrapped over continuation lines), or
    only the loop's bar, and the hint still asked "which part of the first step"."""
    lines = [ray("TaskRunner", 8100, "Total training steps: 60")]
    for n in range(1, 6):
        lines.append(ray("TaskRunner", 8100, f"step:{n} - critic/score/mean:0.{n}3 - actor/pg_loss:0.01") if
                     progress == "lines" else
                     f"Training Progress:   {n}%|          | {n}/60 [0{n}:10<50:00, 70.10s/it]")
    lines.append(ray("WorkerDict", 8133, "dataloader worker 3 prefetching shard 17"))  # not a step: no "stepping"
    report = replay([write(tmp_path, lines)], load_config(None))
    actions = " ".join(report.open_end.hint.actions) if report.open_end and report.open_end.hint else ""
    assert "only the stacks say which part" in actions
    assert "first step" not in actions


def test_an_agent_loop_run_that_stops_in_generation_points_at_its_cpu_side_workers_too(tmp_path: Path) -> None:
    """Audit 20: verl's AgentLoopWorker was reading a video (CPU side) when the run stopped; the advice named only the
    engines (max_tokens, stop tokens)."""
    lines = [f"{asctime(1_768_125_600.0)}\tINFO worker.py:1843 -- Started a local Ray instance.",
             ray("AgentLoopWorker", 4477, "Initialized tools: {}")]  # (the word in Ray's prefix is no evidence)
    lines += [ray("TaskRunner", 4410, f"step:{n} - critic/score/mean:0.2{n} - timing_s/agent_loop/generate_sequences/"
                                      f"mean:97.5 - timing_s/gen:97.9 - timing_s/step:260.1") for n in (1, 2)]
    lines += ["Training Progress:   1%|          | 2/150 [08:40<10:40:00, 260.10s/it]",
              ray("AgentLoopWorker", 4477, "qwen-vl-utils using torchvision to read video."),
              ray("AgentLoopWorker", 4477, "  warnings.warn(")]
    report = replay([write(tmp_path, lines)], load_config(None))
    actions = " ".join(report.open_end.hint.actions) if report.open_end and report.open_end.hint else ""
    assert "AgentLoopWorker" in actions, actions


def test_a_checkpoint_saves_gpu_oom_is_told_what_a_save_can_change(tmp_path: Path) -> None:
    """Audit 20: a CUDA OOM in dist_checkpointing's save (an all_gather under save_checkpoint) was told to lower the
    batch and turn on gradient checkpointing, which a save does not use."""
    lines = [ray("TaskRunner", 6200, f"step:{n} - critic/score/mean:0.4{n} - timing_s/step:88.0") for n in (9, 10)]
    lines += [ray("TaskRunner", 6200, "local_global_step_folder: /ckpt/run7/global_step_10"),
              ray("WorkerDict", 6288, "Traceback (most recent call last):"),
              ray("WorkerDict", 6288, '  File "/opt/verl/verl/workers/fsdp_workers.py", line 911, in save_checkpoint'),
              ray("WorkerDict", 6288, '  File "/opt/torch/distributed/distributed_c10d.py", line 2702, in '
                                      "all_gather_object"),
              ray("WorkerDict", 6288, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.10 GiB. GPU 2 "
                                      "has a total capacity of 79.10 GiB of which 2.02 GiB is free.")]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert (report.status.state, report.status.current) == ("failed", "checkpoint save")
    said = " ".join([*report.status.hint.causes, *report.status.hint.actions]) if report.status.hint else ""
    assert "gathers" in said and "save_contents" in said
    assert "micro batch" not in said and "gradient checkpointing" not in said


def test_a_model_load_no_line_gives_a_role_is_not_called_the_actor_s(tmp_path: Path) -> None:
    """verl builds the reference's model (and the critic's) before the actor's, each with the same `Model config after
    override` print: a run that stops after it was loading some model, not surely the actor (audit 23: 'ended in actor
    init' while 8 workers hung in ref_init_model). A line that names the actor gives its name back."""
    from gkdtop.replay import report_text

    lines = [*VERL_START[:8], ray("WorkerDict", 8, "Model config after override: Qwen2Config {"),
             ray("WorkerDict", 8, "loading state dict done, time: 38.20s")]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.current == "model load" and "actor init" not in report_text(report)
    named = [*lines, ray("WorkerDict", 8, "Initializing Actor Worker...")]
    assert replay([write(tmp_path, named, "named.log")], load_config(None)).status.current == "actor init"


def test_torchtitans_own_exit_lines_finish_the_run(tmp_path: Path) -> None:
    """Audit 26 #1: torchtitan ends train() with a bare `Training completed`, then `Process group destroyed` (logged
    only once train() returned): a finished run read 'ended in training loop', and a snapshot said STALLED."""
    head = "[rank0]:[titan] 2026-03-04 09:10:{:02d},{:03d} - root - INFO - "
    lines = [head.format(1, 200) + "Training starts at step 1",
             head.format(2, 300) + "step:  1  loss:  8.1000  grad_norm:  2.1000  memory:  3.10GiB(20.00%)  tps: 901",
             head.format(3, 400) + "step:  2  loss:  7.9000  grad_norm:  2.0000  memory:  3.10GiB(20.00%)  tps: 905",
             head.format(3, 500) + "Sleeping 2 seconds for other ranks to complete"]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state != "done"
    for tail in (["Training completed"], ["Training completed", "Process group destroyed"],
                 ["Process group destroyed"]):
        ends = [head.format(5 + i, 600) + text for i, text in enumerate(tail)]
        report = replay([write(tmp_path, lines + ends)], load_config(None))
        assert (report.status.current, report.status.state) == ("finished", "done"), tail


def test_lightnings_training_bar_renamed_epoch_is_the_loops_bar_and_its_sanity_check_is_validation(
        tmp_path: Path) -> None:
    """Audit 26 #6: Lightning 1.x draws `Training: 0/N`, then renames the bar `Epoch 0` as it counts; the renamed bar
    was taken for an inner one ('the loop's bar is at 0/6' at 3/6), and its `Validation sanity check` bar made a
    timeline row of its own name."""
    lines = ["Validation sanity check:   0%|          | 0/3 [00:00<?, ?it/s]",
             "Validation sanity check: 100%|██████████| 3/3 [00:00<00:00, 12.50it/s]",
             "Training:   0%|          | 0/6 [00:00<00:00, 6100.20it/s]",
             "Epoch 0:  50%|█████     | 3/6 [00:00<00:00, 14.20it/s, loss=1.87, v_num=7]",
             "Validating:   0%|          | 0/3 [00:00<?, ?it/s]Traceback (most recent call last):",
             '  File "/venv/pytorch_lightning/loops/epoch/training_epoch_loop.py", line 219, in advance',
             "KeyError: 'mask'"]
    from gkdtop.replay import report_text

    report = replay([write(tmp_path, lines)], load_config(None))
    assert [s.name for s in report.status.timeline] == ["validation", "training loop"]
    text = report_text(report)
    assert "the loop's bar is at 3/6" in text and "\nFAILED in validation\n" in text, text


def test_an_engine_loop_that_timed_out_then_killed_its_requests_is_a_wait_that_gave_up(tmp_path: Path) -> None:
    """Audit 26 #7: vLLM's engine loop at 0 tokens/s with requests running hits its iteration timeout; the chain goes
    CancelledError, TimeoutError, then AsyncEngineDeadError in each request. The last exception was read as 'It failed
    with an error, not a hang'; the chain began with a wait giving up."""
    stats = ("INFO 03-02 11:2{}:{}0 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
             "0.0 tokens/s, Running: 9 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.1%")
    err = "ERROR 03-02 11:22:10 async_llm_engine.py:56] "
    lines = ["INFO 03-02 11:20:01 llm_engine.py:174] Initializing an LLM engine (v0.5.3) with config: model='m'",
             "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
             *(stats.format(m, s) for m in (1, 2) for s in range(6) if (m, s) <= (2, 1)),
             "ERROR 03-02 11:22:10 async_llm_engine.py:658] Engine iteration timed out. This should never happen!",
             err + "Engine background task failed", err + "Traceback (most recent call last):",
             err + '  File "/venv/vllm/engine/async_llm_engine.py", line 631, in run_engine_loop',
             err + "asyncio.exceptions.CancelledError", err,
             err + "During handling of the above exception, another exception occurred:", err,
             err + "Traceback (most recent call last):",
             err + '  File "/venv/vllm/engine/async_timeout.py", line 95, in __aexit__',
             err + "asyncio.exceptions.TimeoutError",
             "", "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):",
             '  File "/venv/vllm/engine/async_llm_engine.py", line 1064, in generate',
             "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly."]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "failed" and report.status.hint is not None
    assert "not a hang" not in " ".join(report.status.hint.causes)
    assert "A wait gave up" in " ".join(report.status.hint.causes)


def test_a_resume_that_fails_before_any_step_is_no_step_that_raised(tmp_path: Path) -> None:
    """Audit 26 #10: a PPO actor loads its checkpoint, then its `fit` task fails restoring the data position, before
    any step: the task error's own line (`ray::ActorModelRayActor.fit()`) opened the training loop and the verdict
    said 'FAILED in training loop', 'A step raised'. The loop did not run; the resume failed."""
    actor = "(ActorModelRayActor pid=4410) "
    lines = ["2025-07-02 09:00:02,118\tINFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.0.0.2",
             actor + "[2025-07-02 09:02:10,231] [INFO] [engine.py:3134:_load_zero_checkpoint] loading 4 zero "
                     "partition checkpoints for rank 0",
             actor + "Loaded the checkpoint: /ckpt/run3/_actor, consumed_samples: 2048",
             "Traceback (most recent call last):",
             '  File "/src/train_ppo_ray.py", line 210, in <module>',
             "ray.exceptions.RayTaskError(TypeError): ray::ActorModelRayActor.fit() (pid=4410, ip=10.0.0.2)",
             '  File "/src/openrlhf/trainer/ppo_trainer.py", line 231, in fit',
             "    self.prompts_dataloader.sampler.set_epoch(",
             "TypeError: DistributedSampler.set_epoch() got an unexpected keyword argument 'consumed_samples'"]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "failed"
    spans = report.status.timeline
    failed = next(s.name for s in spans if s.status == "failed")
    assert failed == "checkpoint load", [(s.name, s.status) for s in spans]
    assert report.status.hint is not None and "A step raised" not in " ".join(report.status.hint.causes)


@pytest.mark.parametrize(("hooked", "wandb"), [(False, False), (True, False), (True, True)])
def test_a_ray_worker_stopped_by_sigterm_is_stopped_from_outside_not_a_step_that_raised(
        tmp_path: Path, hooked: bool, wandb: bool) -> None:
    """Audit 26 #5: Ray's sigterm_handler raises `SystemExit: Signals.SIGTERM` in a worker as its job ends; printed
    through the unraisable hook it was read as a late error of a run that went on (a snapshot said STALLED), and glued
    to a bar it was 'A step raised … Fix what the error names'. The process was stopped from outside."""
    lines = ["2025-08-03 10:00:01,100\tINFO worker.py:1852 -- Started a local Ray instance.",
             "(Runner pid=5101) Total training steps: 12",
             "(pid=5101) Epoch 0:   0%|          | 0.00/12.0 [00:00<?, ?it/s]"]
    bar = "(pid=5101) Epoch 0:   8%|▊         | 1.00/12.0 [05:02<55:22, 302s/it]"
    if wandb:  # wandb's end-of-run block as the process exits, the bar's last redraw flushed after it: not finished
        lines += ["(Runner pid=5101) wandb: 🚀 View run geo-4 at: https://wandb.ai/lab/proj/runs/ab12cd",
                  "(Runner pid=5101) wandb: Synced 3 W&B file(s), 0 media file(s), 1 artifact file(s) and 0 other "
                  "file(s)",
                  "(Runner pid=5101) wandb: Find logs at: ./wandb/run-20250803_100420-ab12cd/logs"]
    if hooked:
        lines += [bar, "Exception ignored in sys.unraisablehook: <built-in function unraisablehook>"]
    else:
        lines += [bar + "Exception ignored in: Exception ignored in sys.unraisablehook"]
    lines += ["Traceback (most recent call last):",
              '  File "/venv/lib/python3.10/site-packages/ray/_private/worker.py", line 1542, in sigterm_handler',
              "    sys.exit(signal.SIGTERM)",
              "SystemExit: Signals.SIGTERM"]
    report = replay([write(tmp_path, lines)], load_config(None))
    assert report.status.state == "failed", report.status
    causes = " ".join(report.status.hint.causes if report.status.hint else [])
    assert "Stopped from outside" in causes and "A step raised" not in causes and "stuck" not in causes, causes
    names = [s.name for s in report.status.timeline]
    assert names[-1] == "training loop" and "finished" not in names, names


def test_wandbs_end_of_run_block_is_the_process_ending(tmp_path: Path) -> None:
    """wandb.finish() prints `Synced N W&B file(s)`, `Find logs at:` and `View run NAME at:` as the process exits:
    the run finished (here short of its bar's total, which is said), never a stall after it; after an error it ended
    nothing. Before: 'ended in training loop', and a snapshot of the quiet file read 'stalled'."""
    from gkdtop.replay import report_text
    from tests.test_phase_nesting import text_of
    from tests.verlrun import live_and_history

    lines = [
        " 31%|███       | 620/2000 [1:02:00<2:18:00,  6.00s/it]",
        "wandb: 🚀 View run ppo-small-7 at: https://wandb.ai/team-q/proj/runs/x1y2z3",
        "wandb: Synced 4 W&B file(s), 0 media file(s), 1 artifact file(s) and 0 other file(s)",
        "wandb: Find logs at: ./wandb/run-20250301_101010-x1y2z3/logs",
    ]
    result = replay([write(tmp_path, lines)], load_config(None))
    assert result.status.state == "done" and result.status.current == "finished", report_text(result)
    # (audit 26: only the process's end is known, short of the bar's total: not "finished")
    assert "ended at 620/2000 of the loop's bar, not finished" in report_text(result)
    from gkdtop.alerts.paced import paced_events  # nor does its alert say "finished" (the review of session 27)
    told = [e for e in paced_events(write(tmp_path, lines), load_config(None)) if e.kind == "finished"]
    assert told and "ended at 620/2000 of the loop's bar, not finished" in told[0].title, [e.title for e in told]
    history, _ = live_and_history(tmp_path, text_of(lines), lambda s: s.phase_status().current == "finished")
    assert history.status(1e12).state == "done"
    crashed = ["Traceback (most recent call last):", '  File "/w/train.py", line 88, in <module>',
               "ValueError: bad shape (4, 7)", *lines[1:]]
    failed = replay([write(tmp_path, crashed, "crashed.log")], load_config(None)).status
    assert failed.state == "failed" and "ValueError" in failed.failure
    # A Ray actor's wandb finishes as it dies, above its caller's traceback: the run failed where it was.
    died = [*lines, "Traceback (most recent call last):", '  File "/w/main.py", line 40, in main',
            "ray.exceptions.RayTaskError(ValueError): ray::run() (pid=8812, ip=10.0.0.5)",
            "ValueError: bad shape (4, 7)"]
    status = replay([write(tmp_path, died, "died.log")], load_config(None)).status
    assert status.state == "failed" and status.current == "training loop", status


def test_a_phase_that_begins_after_wandbs_end_block_says_the_run_went_on(tmp_path: Path) -> None:
    """Audit 26 #5: wandb's end-of-run block from one process (an actor's run ending), then the job's next phase: the
    block was no end of the job, so no `finished` row stands before the phase that followed it."""
    lines = ["(Runner pid=5101) Total training steps: 10",
             "(Runner pid=5101) Epoch 0:  30%|███       | 3/10 [03:00<07:00, 60.0s/it]",
             "(Helper pid=5200) wandb: 🚀 View run aux-2 at: https://wandb.ai/lab/proj/runs/zz11yy",
             "(Helper pid=5200) wandb: Find logs at: ./wandb/run-20250803_100420-zz11yy/logs",
             "(Runner pid=5101) Start validation..."]
    report = replay([write(tmp_path, lines)], load_config(None))
    names = [s.name for s in report.status.timeline]
    assert "finished" not in names and report.status.state != "done", (names, report.status.state)
