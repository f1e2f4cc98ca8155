"""The process collector against real processes: roles, flags, GPU holders, and processes that vanish."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from gkdtop.collectors.procs import ProcCollector
from gkdtop.config import DRIVER_PATTERNS
from gkdtop.prockind import classify, display_name
from tests.raycluster import wait_for


def spawn_titled(title: str, seconds: int = 60) -> subprocess.Popen[bytes]:
    """A real process whose argv[0] is `title`, the way Ray and vLLM set their process titles."""
    return subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep {seconds}"])


def rows_by_pid(collector: ProcCollector) -> dict[int, object]:
    return {r.pid: r for r in collector.collect()}


@pytest.mark.parametrize(
    ("title", "cmdline", "role", "actor"),
    [
        ("ray::WorkerDict.update_actor", "ray::WorkerDict.update_actor", "actor", "WorkerDict"),
        ("ray::TaskRunner.run", "ray::TaskRunner.run", "driver", "TaskRunner"),
        ("ray::vLLMRolloutWorker", "ray::vLLMRolloutWorker", "rollout", "vLLMRolloutWorker"),
        ("ray::TeacherWorker.score", "ray::TeacherWorker.score", "teacher", "TeacherWorker"),
        ("ray::IDLE", "ray::IDLE", "ray-worker", ""),
        ("ray::DashboardAgent", "ray::DashboardAgent", "ray-daemon", ""),
        ("/x/ray/core/src/ray/raylet/raylet", "/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/r",
         "ray-daemon", ""),
        ("/v/bin/python3", "/v/bin/python3 -u /v/ray/dashboard/agent.py --node-id=1", "ray-daemon", ""),
        ("python3", "python3 -m ray.util.client.server --address=127.0.0.1:6379", "ray-daemon", ""),
        # Ray's files named in the arguments of something else: an editor, a test run, code, a user's script.
        ("less", "less /v/ray/dashboard/agent.py", None, ""),
        ("/usr/bin/raylet", "/usr/bin/raylet", None, ""),
        ("python3", "python3 -m pytest /v/ray/tests/test_log_monitor.py /v/ray/_private/log_monitor.py", None, ""),
        ("python3", "python3 -c pass /v/ray/dashboard/agent.py", None, ""),
        ("python3", "python3 /home/me/notes_about_default_worker.py", None, ""),
        ("python3", "python3 /home/me/tool.py /v/ray/_private/workers/default_worker.py", None, ""),
        ("VLLM::EngineCore", "VLLM::EngineCore", "engine", ""),
        # A Ray worker before it set its title: its arguments name the raylet's and plasma store's sockets.
        ("/venv/bin/python3", "/venv/bin/python3 /venv/ray/_private/workers/default_worker.py "
         "--object-store-name=/tmp/ray/session_x/sockets/plasma_store --raylet-name=/tmp/ray/session_x/sockets/raylet",
         "ray-worker", ""),
        # ... and the raylet, whose arguments name the worker's script.
        ("/venv/ray/core/src/ray/raylet/raylet", "/venv/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/r "
         "--python_worker_command=/venv/bin/python3 /venv/ray/_private/workers/default_worker.py", "ray-daemon", ""),
        ("python3", "python3 -m verl.trainer.main_ppo trainer.nnodes=1", "driver", ""),
        ("python", "python main_gkd.py --config x", "driver", ""),
        ("bash", "bash", None, ""),
    ],
)
def test_classify(title: str, cmdline: str, role: str | None, actor: str) -> None:
    import re

    assert classify(title, cmdline, re.compile("|".join(DRIVER_PATTERNS))) == (role, actor)


def test_display_name() -> None:
    assert display_name("/usr/bin/python3 -u /x/ray/_private/log_monitor.py --a") == "log_monitor.py"
    assert display_name("python -m verl.trainer.main_ppo a=b") == "python -m verl.trainer.main_ppo"
    assert display_name("/opt/ray/raylet --x") == "raylet"


def test_real_processes_roles_and_flags() -> None:
    worker = spawn_titled("ray::WorkerDict.init_model")
    engine = spawn_titled("VLLM::EngineCore")
    # A driver with a child, and a second child that exits unreaped (a real zombie).
    driver = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, time\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "if os.fork() == 0:\n"
        "    os._exit(0)\n"  # never waited for: stays a zombie while the driver lives
        "time.sleep(60)\n"), "main_gkd"])
    try:
        collector = ProcCollector(DRIVER_PATTERNS, interval=0.1)

        def ready() -> dict[int, object] | None:
            rows = rows_by_pid(collector)
            kids = psutil.Process(driver.pid).children()
            zombies = [k for k in kids if k.status() == psutil.STATUS_ZOMBIE]
            return rows if len(kids) == 2 and zombies and all(k.pid in rows for k in kids) else None

        rows = wait_for(ready, timeout=20, interval=0.2)
        assert rows[worker.pid].role == "actor"
        assert rows[worker.pid].actor == "WorkerDict"
        # Its parent is not a raylet: a Ray worker without its raylet is flagged.
        assert "orphaned" in rows[worker.pid].flags
        assert rows[engine.pid].role == "engine"
        assert rows[driver.pid].role == "driver"
        kids = {k.pid: k for k in psutil.Process(driver.pid).children()}
        states = {rows[pid].status: rows[pid] for pid in kids}
        assert states["zombie"].flags == ["zombie"]
        assert states["zombie"].role == "worker"
        assert states["sleeping"].role == "worker"
        # CPU is measured between two collections; RSS and age are real.
        row = rows_by_pid(collector)[driver.pid]
        assert row.rss > 1_000_000
        assert 0 <= time.time() - row.create_time < 60
    finally:
        for proc in (worker, engine, driver):
            for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
                child.kill()
            proc.kill()
            proc.wait()


def test_engine_whose_parent_died_is_orphaned() -> None:
    # bash starts the engine in the background and exits: the engine is re-parented.
    out = subprocess.run(["bash", "-c", "(exec -a 'VLLM::Worker_TP1' sleep 60) >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout.strip())
    try:
        row = wait_for(lambda: rows_by_pid(ProcCollector()).get(pid), timeout=30)
        assert row.role == "engine"
        assert "orphaned" in row.flags
    finally:
        psutil.Process(pid).kill()


def test_gpu_holders_and_root_pids_join_the_job() -> None:
    plain = subprocess.Popen(["sleep", "60"])
    rooted = subprocess.Popen(["sleep", "61"])
    try:
        collector = ProcCollector(root_pids=[rooted.pid], gpu_pids=lambda: {plain.pid})
        rows = rows_by_pid(collector)
        assert rows[plain.pid].role == "gpu-holder"
        assert rows[rooted.pid].role == "driver"
    finally:
        for p in (plain, rooted):
            p.kill()
            p.wait()


def test_processes_vanishing_mid_read_are_skipped_silently() -> None:
    """A storm of short-lived job processes while collecting: no exception, no ghost rows."""
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            p = subprocess.Popen(["bash", "-c", "exec -a 'ray::Churn' sleep 0.01"])
            p.wait()

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        collector = ProcCollector(DRIVER_PATTERNS)
        for _ in range(40):
            rows = collector.collect()
            for row in rows:
                assert row.pid > 0
    finally:
        stop.set()
        for t in threads:
            t.join()
    # No ghost row: each process listed was alive around the scan. (Another job's process on the machine may end just
    # after it: alive before the scan is enough; a churn process may come and go within it.)
    before = set(psutil.pids())
    rows = collector.collect()
    after = set(psutil.pids())
    assert all(r.pid in before or r.pid in after or r.status == "zombie" or r.actor == "Churn" for r in rows)


def test_real_ray_cluster_processes(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    rows = ProcCollector(DRIVER_PATTERNS).collect()
    daemons = [r for r in rows if r.role == "ray-daemon" and str(ray_cluster.temp_root) in r.cmdline]
    names = {r.name for r in daemons}
    assert {"raylet", "gcs_server"} <= names
    assert not any("stale-session" in r.flags for r in daemons)


def test_processes_of_a_dead_session_are_stale(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    """A daemon whose session has no live GCS any more (a crashed run) is flagged; the live one is not."""
    dead = "session_2020-01-01_00-00-00_000000_1"
    raylet = "/opt/ray/core/src/ray/raylet/raylet"
    leftover = subprocess.Popen(["bash", "-c", f"exec -a {raylet} {sys.executable} -c 'import time; time.sleep(60)' "
                                 f"--raylet_socket_name=/tmp/ray/{dead}/sockets/raylet"])
    try:
        rows = wait_for(lambda: {r.pid: r for r in ProcCollector().collect() if r.pid == leftover.pid} or None,
                        timeout=30, interval=0.2)
        assert rows[leftover.pid].role == "ray-daemon"
        assert "stale-session" in rows[leftover.pid].flags
        live = [r for r in ProcCollector().collect() if str(ray_cluster.temp_root) in r.cmdline]
        assert live and not any("stale-session" in r.flags for r in live)
    finally:
        leftover.kill()
        leftover.wait()


def test_a_worker_that_becomes_an_actor_is_labelled_again(tmp_path: Path) -> None:
    """Ray starts a worker as `python default_worker.py ...` and retitles it `ray::Class.method` later."""
    script = tmp_path / "ray" / "_private" / "workers" / "default_worker.py"
    script.parent.mkdir(parents=True)
    go = tmp_path / "go"  # the worker becomes an actor once the test has seen it as a plain worker
    script.write_text(f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
                      "os.execvp('bash', ['bash', '-c', \"exec -a 'ray::StudentActor.train' sleep 60\"])\n")
    proc = subprocess.Popen([sys.executable, str(script), "--raylet-name=/tmp/ray/session_x/sockets/raylet"])
    try:
        collector = ProcCollector(DRIVER_PATTERNS)
        first = wait_for(lambda: rows_by_pid(collector).get(proc.pid), timeout=30, interval=0.05)
        assert first.role == "ray-worker" and first.actor == ""  # type: ignore[attr-defined]
        go.touch()
        later = wait_for(lambda: (r := rows_by_pid(collector).get(proc.pid)) and r.actor and r, timeout=30,
                         interval=0.1)
        assert (later.role, later.actor) == ("actor", "StudentActor")  # type: ignore[attr-defined]
        assert later.name.startswith("ray::StudentActor")  # type: ignore[attr-defined]
    finally:
        proc.kill()
        proc.wait(10)


def test_a_ray_actor_keeps_its_cpu_percent_across_scans() -> None:
    """Ray titles are re-read every scan; that must not reset the CPU baseline (it read 0% before)."""
    proc = subprocess.Popen(["bash", "-c", f"exec -a 'ray::BusyActor.spin' {sys.executable} -c 'while True: pass'"])
    try:
        collector = ProcCollector(DRIVER_PATTERNS)
        wait_for(lambda: rows_by_pid(collector).get(proc.pid), timeout=30, interval=0.05)
        # With the baseline reset on every re-read, every later scan said 0%: a busy actor must read above it
        # (how far above depends on the machine's load, so no figure is asserted).
        row = wait_for(lambda: (r := rows_by_pid(collector).get(proc.pid)) and r.cpu_percent > 0 and r,
                       timeout=30, interval=0.3)
        assert row.actor == "BusyActor"  # type: ignore[attr-defined]
    finally:
        proc.kill()
        proc.wait(10)


def test_a_scan_that_finds_the_same_processes_moves_no_version() -> None:
    """An idle job's table is the same poll after poll: the store keeps its version, so no pane redraws;
    a process that exits moves it."""
    from gkdtop.config import Config
    from gkdtop.model import ProcTable
    from gkdtop.store import Store

    sleepers = [spawn_titled("ray::WorkerDict"), spawn_titled("VLLM::Worker_TP0")]
    ours = {p.pid for p in sleepers}
    try:
        collector = ProcCollector(DRIVER_PATTERNS, interval=0.1)

        def scan() -> ProcTable:
            """The scan's rows of these sleepers: the machine's other Ray and vLLM processes (another test's
            cluster starting, under `-n`) change from scan to scan."""
            return ProcTable(r for r in collector.collect() if r.pid in ours)

        store = Store(Config())
        wait_for(lambda: len(scan()) == len(ours), timeout=20, interval=0.2)
        store.put("procs", scan())
        store.put("procs", scan())  # the second scan measures CPU over the first: settled
        version = store.versions["procs"]

        def same() -> bool:  # a busy machine may see one sleeper's CPU tick: a later scan is still the same
            before = store.versions["procs"]
            store.put("procs", scan())
            return store.versions["procs"] == before

        wait_for(same, timeout=20, interval=0.2)
        assert store.versions["procs"] >= version
        gone = sleepers.pop()
        gone.kill()
        gone.wait()
        before = store.versions["procs"]
        store.put("procs", scan())
        assert store.versions["procs"] == before + 1
        assert gone.pid not in {p.pid for p in store.processes}
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()


def test_a_command_line_longer_than_one_read_is_read_whole() -> None:
    from gkdtop.capture.proc import READ_SIZE, read_proc_file

    long_args = ["x" * READ_SIZE] * 3  # a launcher's inline config: hydra overrides, a JSON blob
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *long_args])
    try:
        def execed() -> bytes | None:  # until the child execs, /proc shows the parent's command line
            raw = read_proc_file(f"/proc/{proc.pid}/cmdline")
            return raw if b"time.sleep(60)" in raw else None

        raw = wait_for(execed, timeout=20, interval=0.05)
        assert raw.split(b"\0")[-4:-1] == [arg.encode() for arg in long_args]
        with open(f"/proc/{proc.pid}/stat", "rb") as fh:
            assert read_proc_file(f"/proc/{proc.pid}/stat").split()[:3] == fh.read().split()[:3]
    finally:
        proc.kill()
        proc.wait()


def test_a_gpu_memory_change_redraws_the_same_process_table() -> None:
    """GPU MEM is joined into the rows by the GPU sample: a change there moves the Processes pane's
    version even when the next scan finds the same table."""
    from gkdtop.config import Config
    from gkdtop.model import GpuProcess, GpuSample, GpuState, ProcInfo
    from gkdtop.store import Store

    def table() -> list[ProcInfo]:
        return [ProcInfo(pid=4242, ppid=1, name="ray::WorkerDict", cmdline="ray::WorkerDict", role="actor",
                         user="me", status="sleeping", cpu_percent=0.0, rss=1 << 30, create_time=1.0)]

    def gpus(used: int) -> GpuState:
        return GpuState(status="ok", devices=[GpuSample(0, "H100", "GPU-0", 0.0, used, 80 << 30, None, None, None,
                                                        processes=[GpuProcess(4242, used)])])

    store = Store(Config())
    store.put("gpus", gpus(10 << 30))
    store.put("procs", table())
    assert store.processes[0].gpu_memory == 10 << 30
    version = store.versions["procs"]
    store.put("procs", table())
    store.put("gpus", gpus(10 << 30))
    assert store.versions["procs"] == version  # nothing moved
    store.put("gpus", gpus(40 << 30))  # the weights were loaded
    assert store.versions["procs"] > version and store.processes[0].gpu_memory == 40 << 30
