"""`gkdtop run`: a real torch gloo job under it (exit status, log, phases, faulthandler stacks), signals, --dry-run,
and the run-mode dashboard (Pilot)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gkdtop import jobrun
from gkdtop.actions.stacks import dump_stacks, report_json, report_text
from gkdtop.cli import main
from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp, JobBar
from gkdtop.tui.quit_screen import QuitScreen

JOB = textwrap.dedent("""
    import os, socket, sys, time

    mode = sys.argv[1]
    if mode == "env":
        import json
        with open(sys.argv[2], "w") as f:
            json.dump(dict(os.environ), f)
    elif mode == "exit":
        print("exiting", flush=True)
        sys.exit(int(sys.argv[2]))
    elif mode == "sleep":
        print("sleeping", flush=True)
        time.sleep(600)  # the test stops it; it must outlast a slow test on a loaded machine
    elif mode == "deaf":
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ignoring ctrl-c", flush=True)
        time.sleep(600)
    elif mode == "kill":
        import signal
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    elif mode == "interrupt":
        import signal
        got = []
        signal.signal(signal.SIGINT, lambda n, f: got.append(n))
        print("ready", flush=True)
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # a second, duplicated SIGINT would arrive in here
        print(f"SIGINTs: {len(got)}", flush=True)
        sys.exit(10 + len(got))
    elif mode == "gloo":
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from gkdtop import probe

        release = sys.argv[2]

        def wait_for_release():
            while not os.path.exists(release):
                time.sleep(0.05)

        def worker(rank, world, port):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
            with probe.phase("actor init"):
                time.sleep(0.6)
            with probe.phase("weight sync"):
                dist.all_reduce(torch.ones(4))
                time.sleep(0.3)
            probe.log_gpu_info()
            probe.log("waiting for release")
            wait_for_release()
            dist.destroy_process_group()

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(worker, args=(2, port), nprocs=2, start_method="fork")
        print("all done", flush=True)
        sys.exit(3)
""")


@pytest.fixture
def job_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def gkdtop_run(*args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gkdtop", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]


def wait_for(predicate: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_gloo_job_exit_code_log_phases_and_faulthandler_stacks(job_script: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    log, release = tmp_path / "run.log", tmp_path / "release"
    proc = gkdtop_run("--no-ui", "--log-file", str(log), "--", sys.executable, str(job_script), "gloo", str(release))
    try:
        wait_for(lambda: read(log).count("waiting for release") == 2 or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        info = json.loads(next((tmp_path / "cache").glob("gkdtop/runs/run-*/run.json")).read_text())
        ranks = [p.pid for p in psutil.Process(info["pid"]).children()]
        assert len(ranks) == 2
        # py-spy "missing": the ranks run gkdtop.probe (enabled by gkdtop run, re-armed after fork).
        report = dump_stacks(ranks, timeout=10, search=[tmp_path / "no-py-spy"])
        assert [d.method for d in report.dumps] == ["faulthandler", "faulthandler"]
        assert all(d.ok and d.note.startswith("py-spy not found") for d in report.dumps)
        main_frames = [[f.function for t in d.threads if t.name == "MainThread" for f in t.frames]
                       for d in report.dumps]
        assert all(frames[:1] == ["wait_for_release"] and "worker" in frames for frames in main_frames)
        assert len(report.groups) == 1 and report.groups[0].pids == sorted(ranks)  # same place: one group
        assert [d["method"] for d in report_json(report)["dumps"]] == ["faulthandler", "faulthandler"]
        assert "[faulthandler; py-spy: py-spy not found" in report_text(report)
        # Flight Recorder is on, but gloo creates no trigger pipe: said cleanly, per rank.
        assert [t.pid for t in report.nccl_traces] == ranks
        assert all(not t.ok and t.error.startswith("no trigger pipe") for t in report.nccl_traces)
        assert all(psutil.pid_exists(pid) for pid in ranks)  # the signal dumped, it did not kill
        release.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3
    assert "all done" in out  # passed through to our stdout ...
    text = log.read_text()
    assert "all done" in text and text.count("✓ phase 'weight sync' DONE") == 2  # ... and into the log
    assert "gpu: device cpu, no CUDA device, CUDA_VISIBLE_DEVICES=" in text
    assert "job exited with code 3" in err
    run_info = json.loads(Path(info["run_dir"], "run.json").read_text())
    assert run_info["exit_status"] == 3 and run_info["env_set"]["NCCL_DEBUG"] == "WARN"

    capsys.readouterr()
    assert main(["replay", str(log), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)["timeline"]
    assert main(["snapshot", "--json", "--log", str(log), "--ray-address", "http://127.0.0.1:9"]) == 0
    snapped = json.loads(capsys.readouterr().out)["phases"]["timeline"]
    for timeline in (replayed, snapped):
        assert [(s["name"], s["status"]) for s in timeline] == [("actor init", "done"), ("weight sync", "done")]
        assert 0.55 <= timeline[0]["duration"] < 30 and 0.25 <= timeline[1]["duration"] < 30


def test_signal_death_is_128_plus_n(job_script: Path, tmp_path: Path) -> None:
    proc = gkdtop_run("--no-ui", "--log-file", str(tmp_path / "k.log"), "--", sys.executable, str(job_script), "kill")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "killed by SIGTERM (signal 15, exit status 143)" in err


def test_ctrl_c_reaches_the_job_once(job_script: Path, tmp_path: Path) -> None:
    log = tmp_path / "i.log"
    proc = gkdtop_run("--no-ui", "--log-file", str(log), "--", sys.executable, str(job_script), "interrupt")
    try:
        wait_for(lambda: "ready" in read(log))
        proc.send_signal(signal.SIGINT)  # what the terminal does to gkdtop's process group on Ctrl-C
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 11  # the job's own status: it saw exactly one SIGINT
    assert "SIGINTs: 1" in log.read_text()


def test_dry_run_lists_exactly_the_variables_set(job_script: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # the user's own: kept, so not listed as set
    assert main(["run", "--dry-run", "--", sys.executable, str(job_script), "env", "x"]) == 0
    out = capsys.readouterr().out
    listed = {line.split("=", 1)[0] for line in out.splitlines() if line and not line.startswith("#")}
    assert "# left at your own value: PYTHONFAULTHANDLER=1" in out
    assert not (tmp_path / "cache").exists()  # a dry run creates nothing

    baseline, under = tmp_path / "plain.json", tmp_path / "run.json"
    subprocess.run([sys.executable, str(job_script), "env", str(baseline)], check=True)
    proc = gkdtop_run("--no-ui", "--log-file", str(tmp_path / "e.log"), "--", sys.executable, str(job_script),
                      "env", str(under))
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    plain, child = json.loads(baseline.read_text()), json.loads(under.read_text())
    changed = {k for k in child if plain.get(k) != child[k]}
    assert changed == listed
    assert "NCCL_TIMEOUT" not in child and child["NCCL_DEBUG"] == "WARN"
    assert {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
            "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
            "GKDTOP_PROBE", "GKDTOP_RUN_DIR", "PYTHONPATH"} <= listed
    run_dir = Path(child["GKDTOP_RUN_DIR"])
    assert child["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == str(run_dir / "nccl_trace_rank_")
    assert (run_dir / "python" / "gkdtop" / "probe.py").is_file()  # the bootstrap dir holds the package


def test_nccl_debug_option_and_exit_descriptions(tmp_path: Path) -> None:
    plan = jobrun.plan_run(jobrun.RunOptions(["x"], nccl_debug="info"), environ={"NCCL_DEBUG": "WARN"},
                           run_dir=tmp_path)
    assert plan.env_set["NCCL_DEBUG"] == "INFO"  # an explicit option wins over the environment
    with pytest.raises(ValueError):
        jobrun.plan_run(jobrun.RunOptions(["x"], nccl_debug="LOUD"), environ={}, run_dir=tmp_path)
    assert jobrun.shell_status(-9) == 137 and jobrun.shell_status(3) == 3
    assert "OOM-killed" in jobrun.describe_exit(-9, oom_killed=True)
    assert jobrun.describe_exit(0) == "exited with code 0 (success)"


# ------------------------------------------------------------------ the run-mode dashboard


def run_mode_app(tmp_path: Path, job_script: Path, *args: str) -> tuple[GkdtopApp, jobrun.JobRun]:
    plan = jobrun.plan_run(jobrun.RunOptions([sys.executable, str(job_script), *args]), run_dir=tmp_path / "run")
    job = jobrun.start(plan)
    config = Config(phases=builtin_phases())
    config.refresh.update({"logs": 0.05, "gpus": 5.0, "procs": 0.5, "ray": 30.0, "ui": 0.1})
    monitor = Monitor(config, logs=[str(plan.log_path)], ray_address="http://127.0.0.1:9", root_pids=(job.pid,))
    return GkdtopApp(config, monitor, job=job), job


async def settle(pilot, predicate: Callable[[], bool], timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the app did not reach the expected state in time"
        await pilot.pause(0.05)


async def test_dashboard_says_how_the_job_ended_and_keeps_state(job_script: Path, tmp_path: Path) -> None:
    app, job = run_mode_app(tmp_path, job_script, "exit", "3")
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            bar = app.query_one(JobBar)
            await settle(pilot, lambda: "exited with code 3" in str(bar.render()))
            assert bar.has_class("-failed")
            await settle(pilot, lambda: any("exiting" in line.text for line in app.store.lines))
            await pilot.pause(0.5)
            assert app.is_running and "exited with code 3" in str(bar.render())  # still on screen
            await pilot.press("q")  # the job is over: q just quits
            await pilot.pause(0.2)
        assert app.return_value is None
        assert job.exit_status == 3
    finally:
        job.stop(grace=2)


async def test_q_while_the_job_runs_asks_stop_or_leave(job_script: Path, tmp_path: Path) -> None:
    app, job = run_mode_app(tmp_path, job_script, "sleep")
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot, lambda: "running for" in str(app.query_one(JobBar).render()))
            await pilot.press("q")
            await settle(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("escape")  # cancel: back to the dashboard, job untouched
            await settle(pilot, lambda: not isinstance(app.screen, QuitScreen))
            assert job.running()
            await pilot.press("q")
            await settle(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("s")
            await pilot.pause(0.2)
        assert app.return_value == "stop"  # `gkdtop run` stops the job after the dashboard closed
        assert job.running()
        assert job.stop(grace=5) == 128 + signal.SIGTERM
    finally:
        if job.running():
            os.killpg(job.pid, signal.SIGKILL)


async def test_a_second_ctrl_c_stops_a_job_that_ignored_the_first(job_script: Path, tmp_path: Path) -> None:
    app, job = run_mode_app(tmp_path, job_script, "deaf")
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot, lambda: any("ignoring ctrl-c" in line.text for line in app.store.lines))
            await pilot.press("ctrl+c")
            await settle(pilot, lambda: any("ctrl+c again stops it" in str(n.message) for n in app._notifications))
            assert job.running()  # it ignores SIGINT
            await pilot.press("ctrl+c")
            await settle(pilot, lambda: not job.running(), timeout=60)
        assert job.exit_status == 128 + signal.SIGTERM
    finally:
        if job.running():
            os.killpg(job.pid, signal.SIGKILL)
