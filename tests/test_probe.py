"""gkdtop.probe in real processes: phase lines through the phase engine, identity, the faulthandler stacks
path and its safety checks, the Flight Recorder trigger pipe, and the bundle picking up a run's dumps."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gkdtop import probe
from gkdtop.actions.bundle import build_bundle
from gkdtop.actions.stacks import (
    dump_stacks,
    is_background,
    parse_faulthandler,
    significant_threads,
    trigger_nccl_traces,
)
from gkdtop.cli import main
from gkdtop.config import Config, builtin_phases
from gkdtop.model import ProcInfo
from gkdtop.store import Store

PHASES = textwrap.dedent("""
    import time
    from gkdtop import probe
    with probe.phase("rollout init"):
        time.sleep(0.4)
    try:
        with probe.phase("teacher"):
            time.sleep(0.2)
            raise ConnectionError("teacher at 10.0.0.9:8000 refused")
    except ConnectionError:
        pass
    probe.log_gpu_info()
""")

HANGS = textwrap.dedent("""
    import threading, time
    from gkdtop import probe

    def hang_here():
        print("ready", flush=True)
        time.sleep(60)

    threading.Thread(target=time.sleep, args=(60,), name="helper", daemon=True).start()
    hang_here()
""")

# What torch's watchdog does with TORCH_NCCL_DEBUG_INFO_PIPE_FILE: make `<prefix><rank>.pipe`, keep it open
# for reading, and write the Flight Recorder dump to `<temp file prefix><rank>` when something arrives.
WATCHDOG = textwrap.dedent("""
    import os, pickle, sys, time
    prefix, dump = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    rank = os.environ["RANK"]
    os.mkfifo(prefix + rank + ".pipe")
    fd = os.open(prefix + rank + ".pipe", os.O_RDONLY | os.O_NONBLOCK)
    print("ready", flush=True)
    for _ in range(600):
        try:
            got = os.read(fd, 128)
        except BlockingIOError:
            got = b""
        if got:
            with open(dump + rank, "wb") as f:
                f.write(pickle.dumps({"version": "2.10", "rank": int(rank), "entries": []}))
        time.sleep(0.1)
""")


def spawn(script: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", script, *args], env={**os.environ, **env}, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for proc in made:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_phase_lines_are_the_builtin_phases(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    log = tmp_path / "job.log"
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "4", "GKDTOP_ROLE": "rollout", "CUDA_VISIBLE_DEVICES": "2,3"}
    with open(log, "wb") as out:
        subprocess.run([sys.executable, "-c", PHASES], stderr=out, env=env, check=True)
    text = log.read_text()
    assert "[gkdtop] [rank 1/4 rollout] phase 'rollout init' START" in text
    assert "✗ phase 'teacher' FAILED after 0.2" in text and "ConnectionError: teacher at 10.0.0.9:8000" in text
    assert "gpu: device ?, torch not imported, CUDA_VISIBLE_DEVICES=2,3" in text  # torch never imported for it
    assert main(["replay", str(log), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    spans = report["timeline"]
    assert [(s["name"], s["status"]) for s in spans] == [("rollout init", "done"), ("teacher", "failed")]
    assert 0.35 <= spans[0]["duration"] < 30
    assert report["state"] == "failed" and "FAILED" in report["failure"]


def test_without_the_probe_a_process_is_never_signalled(procs: list[subprocess.Popen[bytes]],
                                                        tmp_path: Path) -> None:
    procs.append(spawn(HANGS, {"GKDTOP_RUN_DIR": str(tmp_path)}))  # probe imported, not enabled
    report = dump_stacks([procs[0].pid], search=[tmp_path / "none"])
    assert not report.dumps[0].ok and report.dumps[0].method == ""
    assert "faulthandler: no gkdtop.probe stack file" in report.dumps[0].error
    time.sleep(0.2)
    assert procs[0].poll() is None  # SIGUSR1's default action would have killed it


def test_a_recycled_pid_is_not_signalled(procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    procs.append(spawn(HANGS, {"GKDTOP_RUN_DIR": str(tmp_path)}))
    pid = procs[0].pid
    path = probe.stack_file(pid, {"GKDTOP_RUN_DIR": str(tmp_path)})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{probe.HEADER} pid={pid} start=1 signal=10 main=0x0000000000000001\n")  # an older process's
    report = dump_stacks([pid], search=[tmp_path / "none"])
    assert "left by an earlier process with the same PID" in report.dumps[0].error
    time.sleep(0.2)
    assert procs[0].poll() is None


def test_enabled_probe_dumps_all_threads_with_names(procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    procs.append(spawn(HANGS, {"GKDTOP_PROBE": "1", "GKDTOP_RUN_DIR": str(tmp_path)}))
    pid = procs[0].pid
    assert (tmp_path / "probe" / f"faulthandler-{pid}.txt").is_file()
    # `ready` is printed on the line before the sleep: on a busy machine the first dump can still find the main thread
    # there (CI saw line 6 once). Dump until it sleeps; the reads below are then of a process that stays put.
    deadline = time.monotonic() + 30
    while not any(t.name == "MainThread" and t.frames and t.frames[0].line == 7
                  for t in dump_stacks([pid], search=[tmp_path / "none"]).dumps[0].threads):
        assert time.monotonic() < deadline, "the main thread never reached its sleep"
        time.sleep(0.1)
    for _ in range(2):  # the file accumulates dumps: each read takes only the new one
        dump = dump_stacks([pid], search=[tmp_path / "none"]).dumps[0]
        assert dump.ok and dump.method == "faulthandler", dump.error
        by_name = {t.name: t for t in dump.threads}
        assert len(dump.threads) == 3 and "MainThread" in by_name  # the helper, and the probe's own thread
        main_thread = by_name.pop("MainThread")
        assert [f.function for f in main_thread.frames] == ["hang_here", "<module>"]
        assert main_thread.frames[0].file == "<string>" and main_thread.frames[0].line == 7
        assert all(name.startswith("Thread 0x") for name in by_name)
        ours = [t for t in by_name.values() if any(f.function == "_fr_loop" for f in t.frames)]
        assert len(ours) == 1 and is_background(ours[0])  # the probe's thread, waiting for a request
        assert significant_threads(dump) == [main_thread]
    assert procs[0].poll() is None


def test_parse_faulthandler_reads_a_real_dump(tmp_path: Path) -> None:
    with open(tmp_path / "dump.txt", "w+") as out:
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.seek(0)
        text = out.read()
    threads = parse_faulthandler(text)
    current = [t for t in threads if not t.idle]
    assert len(current) == 1
    frame = current[0].frames[0]
    assert frame.function == "test_parse_faulthandler_reads_a_real_dump" and frame.file == "test_probe.py"
    assert frame.path == __file__
    assert any(f.file.startswith("_pytest/") for f in current[0].frames)  # short names below site-packages
    with pytest.raises(ValueError):
        parse_faulthandler("nothing here\n")


def test_install_leaves_a_signal_the_job_uses_alone(tmp_path: Path) -> None:
    script = ("import signal, sys\nsignal.signal(signal.SIGUSR1, lambda *a: None)\n"
              "from gkdtop import probe\nprint(probe.install(), probe.installed_file())")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "GKDTOP_RUN_DIR": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["None", "None"]


def test_flight_recorder_dump_through_the_trigger_pipe_and_into_the_bundle(
        procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(run / "nccl_trace_pipe_rank_"),
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(run / "nccl_trace_rank_"), "RANK": "1"}
    procs.append(spawn(WATCHDOG, env))
    info = ProcInfo(procs[0].pid, os.getpid(), "python", "python -c ...", "worker", "", "sleeping", 0.0, 0,
                    time.time())
    traces = trigger_nccl_traces([info], wait=10)
    assert [(t.rank, t.ok, t.error) for t in traces] == [(1, True, "")]
    assert traces[0].pipe == str(run / "nccl_trace_pipe_rank_1.pipe")
    assert traces[0].file == str(run / "nccl_trace_rank_1") and traces[0].bytes > 0

    # The bundle finds the run's dumps through the job's own environment (gkdtop's has another prefix).
    store = Store(Config(phases=builtin_phases()))
    store.processes = [info]
    out = build_bundle(store, tmp_path / "b.tar.gz", stacks_dir=tmp_path / "no-stacks",
                       trace_prefix=str(tmp_path / "elsewhere" / "nccl_trace_rank_"), ray_tmp=tmp_path / "no-ray")
    with tarfile.open(out) as tar:
        names = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
        assert "flight-recorder/nccl_trace_rank_1.json" in names  # the pickle, read as plain data, redacted
        member = tar.extractfile(names["flight-recorder/nccl_trace_rank_1.json"])
        assert member is not None and json.loads(member.read())["rank"] == 1
    assert not any(".pipe" in n for n in names)  # the FIFO is never read


def test_probe_dir_follows_the_targets_environment() -> None:
    """The probe's stack directory follows the target's environment, the way the stacks action reads it."""
    assert probe.probe_dir({"GKDTOP_RUN_DIR": "/r"}) == Path("/r/probe")
    assert probe.probe_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/gkdtop/probe")
    assert probe.probe_dir({"HOME": "/h"}) == Path("/h/.cache/gkdtop/probe")
