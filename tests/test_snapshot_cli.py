"""`gkdtop snapshot`: the real command, in a subprocess, on real files; no NVML and no Ray here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.gkdlog import ray, startup


def run(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
           "LD_LIBRARY_PATH": str(tmp_path)}  # no libnvidia-ml here: the GPU section says so
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=tmp_path)


def test_json_document_from_a_silent_log(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 1000, upto="sync")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))
    proc = run(tmp_path, "--json", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    phases = doc["phases"]
    assert phases["current"] == "weight sync"
    assert phases["state"] == "stalled"
    assert phases["stalled_for"] > 900
    assert [s["name"] for s in phases["timeline"]][:3] == ["config", "dataset generation", "resource pool"]
    assert all({"name", "start", "end", "duration"} <= s.keys() for s in phases["timeline"])
    assert phases["hint"]["actions"]
    assert doc["gpus"]["status"] == "unavailable"
    assert "NVML" in doc["gpus"]["reason"]
    assert doc["ray"]["status"] == "not connected"
    assert doc["logs"]["files"][0]["state"] == "following"
    assert any("[SYNC]" in ln["text"] for ln in doc["logs"]["lines"])
    assert isinstance(doc["processes"], list)
    assert doc["errors"] == []


def test_stall_after_option_and_text_output(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(ray("TaskRunner", 7, "Creating ResourcePool...") + "\n")
    os.utime(log, (time.time() - 50, time.time() - 50))
    doc = json.loads(run(tmp_path, "--json", "--log", str(log), "--stall-after", "30").stdout)
    assert doc["phases"]["state"] == "stalled"
    doc = json.loads(run(tmp_path, "--json", "--log", str(log), "--stall-after", "300").stdout)
    assert doc["phases"]["state"] == "running"
    text = run(tmp_path, "--log", str(log), "--stall-after", "30").stdout
    assert text.startswith("phase: resource pool  state: stalled")
    assert "gpus: unavailable" in text
    # Said on the command line, it holds for the slow phases too (actor init has 600 s of its own).
    log.write_text(ray("TaskRunner", 7, "Initializing Actor Worker...") + "\n")
    os.utime(log, (time.time() - 50, time.time() - 50))
    doc = json.loads(run(tmp_path, "--json", "--log", str(log), "--stall-after", "30").stdout)
    assert doc["phases"]["current"] == "actor init" and doc["phases"]["state"] == "stalled"
    assert doc["phases"]["stall_after"] == 30


def test_duration_follows_lines_written_meanwhile(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")

    def write_later() -> None:
        time.sleep(1.0)
        with log.open("a") as fh:
            for step in (1, 2):
                fh.write(ray("TaskRunner", 7, f"step:{step} - timing_s/step:1.5 - actor/kl_loss:{1 / step}") + "\n")

    writer = threading.Thread(target=write_later)
    writer.start()
    proc = run(tmp_path, "--json", "--log", str(log), "--duration", "3")
    writer.join()
    doc = json.loads(proc.stdout)
    assert doc["phases"]["current"] == "training loop"
    assert doc["phases"]["steps"]["done"] == 2
    assert doc["phases"]["steps"]["metrics"]["actor/kl_loss"] == 0.5


def test_missing_and_unreadable_sources_are_reported_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    proc = run(tmp_path, "--json", "--log", str(tmp_path / "not-yet.log"), "--log", str(tmp_path / "adir"))
    assert proc.returncode == 0, proc.stderr
    files = {Path(f["path"]).name: f for f in json.loads(proc.stdout)["logs"]["files"]}
    assert files["not-yet.log"]["state"] == "waiting"
    assert files["adir"]["state"] == "error"
    assert files["adir"]["error"]


def test_bad_filter_is_one_line(tmp_path: Path) -> None:
    proc = run(tmp_path, "--json", "--filter", "(")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "--filter: invalid regular expression" in proc.stderr


def test_a_log_stamped_hours_ahead_of_its_file_still_stalls(tmp_path: Path) -> None:
    """Stamps on a container's clock (UTC+8 under a host in UTC) lie hours past the file's mtime. Read
    as history, no progress in the file can be later than when it was last written: measured from
    the stamps, the silence would never begin and a hung job would read `running` for 8 hours."""
    shift = 8 * 3600
    lines, last = startup(time.time() - 900 + shift, upto="sync")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last - shift, last - shift))
    proc = run(tmp_path, "--json", "--log", str(log), "--stall-after", "300")
    assert proc.returncode == 0, proc.stderr
    phases = json.loads(proc.stdout)["phases"]
    assert (phases["current"], phases["state"]) == ("weight sync", "stalled"), phases
    assert phases["stalled_for"] >= 300


def test_an_old_log_copied_here_is_said_so_though_its_last_line_has_no_stamp(tmp_path: Path) -> None:
    """A log pasted from an issue, 8 days old, whose last line is Ray's unstamped tqdm JSON. Before: no clock line at
    all (only the last line's stamp was compared with the file's mtime); the same log ending on a stamped line had one.
    A silence of hours before an unstamped last line (a hang, then an error) is no clock offset: not said."""
    def vllm(t: float, text: str) -> str:
        return f"(WorkerDict pid=43641) INFO {time.strftime('%m-%d %H:%M:%S', time.localtime(t))} [core.py:58] {text}"

    t0 = time.time() - 8 * 86400
    lines = [vllm(t0, "Initializing a V1 LLM engine (v0.10.1) with config: model='/models/qwen-7b'"),
             vllm(t0 + 68, "init engine (profile, create kv cache, warmup model) took 51.20 seconds"),
             '{"__magic_token__": "__ray_tqdm_magic_token__", "x": 0, "pos": 0, "desc": "Running step", "total": 134}']
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = run(tmp_path, "--json", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["phases"]["clock_offset"] > 7 * 86400
    hung, _ = startup(time.time() - 3 * 3600, upto="sync")
    hung.append("RuntimeError: the rollout server went away")
    log.write_text("".join(line + "\n" for line in hung))
    proc = run(tmp_path, "--json", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["phases"]["clock_offset"] is None


def test_a_log_stamped_days_ahead_is_no_copy_of_an_older_one(tmp_path: Path) -> None:
    """Stamps 30 days ahead of this machine's clock: a clock set wrong, not "a copy of an older log" (audit 12)."""
    t0 = time.time() + 30 * 86400
    lines = [f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t0 + s))},100 INFO train.py:12 epoch 0 step {s}"
             for s in range(3)]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = run(tmp_path, "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    clock = next(line for line in proc.stdout.splitlines() if line.startswith("clock:"))
    assert "ahead of this machine" in clock and "older log" not in clock, clock


def test_a_running_job_shows_where_a_step_goes_and_its_latest_numbers(tmp_path: Path) -> None:
    """A slow run that steps (SGLang generation most of each step; Megatron's throughput per GPU): replay said
    where a step's time goes and quoted the last step line; a snapshot of the same log said neither."""
    now = time.time()
    steps = [ray("TaskRunner", 7, f"step:{n} - actor/pg_loss:0.01 - timing_s/gen:{78 + n % 3}.5 - "
                 f"timing_s/update_actor:20.1 - timing_s/step:{101 + n % 3}.2 - perf/throughput:{900 + n}.0")
             for n in range(1, 6)]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in steps))
    os.utime(log, (now - 5, now - 5))
    doc = json.loads(run(tmp_path, "--json", "--log", str(log)).stdout)
    assert doc["phases"]["state"] == "running"
    assert doc["phases"]["steps"]["pace"].startswith("timing_s/gen takes 78% of a step")
    text = run(tmp_path, "--log", str(log)).stdout
    assert "  timing_s/gen takes 78% of a step" in text
    assert "  latest: `step:5 - " in text and "perf/throughput:905.0`" in text


def test_a_job_stalled_after_a_finished_phase_is_not_said_to_be_in_it(tmp_path: Path) -> None:
    """OpenRLHF's engines finished their init and nothing came after. Before: 'phase: rollout init  state: stalled'
    (replay said 'after rollout init'); now the snapshot says the same as replay."""
    log = tmp_path / "train.log"
    log.write_text(
        "(LLMRayActor pid=18822) creating LLM with bundle_indices=[0, 1, 2, 3]\n"
        "(LLMRayActor pid=18822) INFO 04-14 20:32:31 [llm_engine.py:447] init engine (profile, create kv cache, "
        "warmup model) took 49.17 seconds\n")
    os.utime(log, (time.time() - 3600, time.time() - 3600))
    text = run(tmp_path, "--log", str(log)).stdout
    assert text.startswith("phase: after rollout init (next expected: actor init)  state: stalled"), text
