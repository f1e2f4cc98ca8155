"""Cleanup against real debris: a Ray cluster whose raylet and gcs_server were `kill -9`ed, orphaned
fake engines, real /dev/shm/nccl-* segments (one mapped by a live process), another user's look-alike,
a live Ray cluster that must not be touched, and a Flight Recorder dump that must be kept.

Everything made here is removed in the fixture's finally; the `--yes` test deselects any plan item it did not make.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from gkdtop import prockind
from gkdtop.actions import cleanup
from gkdtop.actions.cleanup import CleanupItem, build_plan, execute, plan_json, plan_text
from gkdtop.actions.cleanup import cli as cleanup_cli
from tests.raycluster import RayCluster, new_cluster, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SETPRIV = shutil.which("setpriv")


def alive(pid: int, create_time: float) -> bool:
    """The same process still runs (a zombie is dead: PID 1 here reaps late)."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ident(pid: int) -> tuple[int, float]:
    return pid, psutil.Process(pid).create_time()


def spawn_orphan(title: str, prefix: list[str] | None = None, ignore_term: bool = False) -> tuple[int, float]:
    """A process titled `title` whose parent exited (the way an engine outlives its Ray worker)."""
    marker = f"{300 + random.random():.6f}"  # a unique sleep length finds it again
    trap = "trap '' TERM; " if ignore_term else ""
    subprocess.run([*(prefix or []), "bash", "-c", f"{trap}(exec -a '{title}' sleep {marker}) >/dev/null 2>&1 &"],
                   check=True, timeout=10)

    def find() -> tuple[int, float] | None:
        for proc in psutil.process_iter(["cmdline", "create_time"]):
            cmd = proc.info["cmdline"] or []
            if len(cmd) == 2 and cmd[0] == title and cmd[1] == marker:
                return proc.pid, proc.info["create_time"]
        return None

    return wait_for(find, timeout=30, interval=0.05)


def kill(pid: int, create_time: float) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) < 0.05:
            proc.kill()


@dataclass
class Debris:
    dead: RayCluster
    dead_procs: dict[int, float]  # the crashed cluster's processes, recorded before the kill
    survivors: dict[int, float]  # ... those still running when the plan is built (monitor.py, log_monitor.py)
    engine: tuple[int, float]
    stubborn: tuple[int, float]  # an engine worker that ignores SIGTERM
    foreign: tuple[int, float] | None  # another user's look-alike
    gpu_orphan: tuple[int, float]  # a multiprocessing child whose parent is gone
    gpu_nohup: tuple[int, float]  # an orphan that may be a live job started with nohup
    gpu_live_child: subprocess.Popen[bytes]
    shm_free: Path
    shm_mapped: Path
    shm_open: Path
    shm_foreign: Path | None
    mapper: subprocess.Popen[bytes]
    opener: subprocess.Popen[bytes]
    trace_prefix: str
    trace_dump: Path
    old_session: Path
    newest_session: Path
    extra: list[tuple[int, float]] = field(default_factory=list)

    def owns(self, target: int | str) -> bool:
        """Made by this fixture: `--yes` here must not act on another test's (or anyone's) debris."""
        if isinstance(target, int):
            return target in self.dead_procs or target in {pid for pid, _ in self.extra}
        return target.startswith(str(self.dead.temp_root)) or target == str(self.shm_free)

    def plan_args(self) -> dict[str, object]:
        return {"gpu_pids": {self.gpu_orphan[0], self.gpu_nohup[0], self.gpu_live_child.pid},
                "trace_prefix": self.trace_prefix, "ray_tmp": self.dead.temp_root / "ray"}


def _segment(tag: str) -> Path:
    fd, name = tempfile.mkstemp(prefix="nccl-", dir="/dev/shm")
    os.ftruncate(fd, 8192)
    os.write(fd, tag.encode())
    os.close(fd)
    return Path(name)


@pytest.fixture(scope="module")
def debris(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Debris]:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    tmp = tmp_path_factory.mktemp("cleanup")
    dead = new_cluster()
    made: list[tuple[int, float]] = []
    paths: list[Path] = []
    children: list[subprocess.Popen[bytes]] = []
    dead_procs: dict[int, float] = {}
    try:
        dead.start()
        for proc in dead.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                dead_procs[proc.pid] = proc.create_time()
        for proc in dead.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.name() in ("raylet", "gcs_server"):
                    proc.send_signal(signal.SIGKILL)  # the crash
        time.sleep(1.0)
        engine = spawn_orphan("VLLM::EngineCore")
        stubborn = spawn_orphan("VLLM::Worker_TP1", ignore_term=True)
        gpu_orphan = spawn_orphan("python3 -c from multiprocessing.spawn import spawn_main")
        gpu_nohup = spawn_orphan("python3 train.py")
        made += [engine, stubborn, gpu_orphan, gpu_nohup]
        foreign = None
        if SETPRIV and os.getuid() == 0:
            foreign = spawn_orphan("VLLM::EngineCore", [SETPRIV, "--reuid=nobody", "--regid=nogroup",
                                                        "--clear-groups"])
            made.append(foreign)
        gpu_live_child = subprocess.Popen(["sleep", "300"])
        children.append(gpu_live_child)

        shm_free, shm_mapped, shm_open = _segment("free"), _segment("mapped"), _segment("open")
        paths += [shm_free, shm_mapped, shm_open]
        shm_foreign = None
        if os.getuid() == 0:
            shm_foreign = _segment("foreign")
            paths.append(shm_foreign)
            os.chown(shm_foreign, 65534, 65534)
        # A live job's segment, mapped with its descriptor closed: only /proc/PID/maps shows it.
        mapper = subprocess.Popen([sys.executable, "-c", (
            "import mmap, sys, time\n"
            f"f = open({str(shm_mapped)!r}, 'r+b'); m = mmap.mmap(f.fileno(), 4096); f.close()\n"
            "print('ok', flush=True); time.sleep(300)\n")], stdout=subprocess.PIPE)
        # ... and one held by an open descriptor only.
        opener = subprocess.Popen([sys.executable, "-c", (
            "import sys, time\n"
            f"f = open({str(shm_open)!r}, 'rb')\n"
            "print('ok', flush=True); time.sleep(300)\n")], stdout=subprocess.PIPE)
        children += [mapper, opener]
        assert mapper.stdout is not None and mapper.stdout.readline() == b"ok\n"
        assert opener.stdout is not None and opener.stdout.readline() == b"ok\n"

        trace_dump = tmp / "nccl_trace_rank_0"
        trace_dump.write_bytes(b"\x80\x04flight recorder")
        os.mkfifo(tmp / "nccl_trace_rank_0.pipe")

        ray_dir = dead.temp_root / "ray"
        newest = (ray_dir / "session_latest").resolve()
        old = ray_dir / "session_2020-01-01_00-00-00_000001_1"
        (old / "logs").mkdir(parents=True)
        (old / "logs" / "raylet.out").write_text("old run\n")

        survivors = {pid: ct for pid, ct in dead_procs.items() if alive(pid, ct)}
        yield Debris(dead, dead_procs, survivors, engine, stubborn, foreign, gpu_orphan, gpu_nohup, gpu_live_child,
                     shm_free, shm_mapped, shm_open, shm_foreign, mapper, opener, str(tmp / "nccl_trace_rank_"),
                     trace_dump, old, newest, made)
    finally:
        for pid, ct in made + list(dead_procs.items()):
            kill(pid, ct)
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
            with contextlib.suppress(Exception):
                child.wait(timeout=5)
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()
        dead.remove()


def by_target(items: list[CleanupItem]) -> dict[int | str, CleanupItem]:
    return {i.target: i for i in items}


def test_plan_lists_the_debris_with_reasons(debris: Debris, ray_cluster: RayCluster) -> None:
    before = {pid: ct for pid, ct in debris.dead_procs.items() if alive(pid, ct)}
    items = build_plan(**debris.plan_args())  # type: ignore[arg-type]
    after = {pid: ct for pid, ct in before.items() if alive(pid, ct)}
    plan = by_target(items)
    print(plan_text(items))

    # The crashed cluster: whatever ran before and after the plan was built ran during it, so it is listed.
    assert after, "the crashed cluster left no survivor to clean up"
    for pid in after:
        assert pid in plan, f"crashed cluster's PID {pid} not in the plan"
        assert plan[pid].kind in ("ray-process", "ray-orphan", "child")
        assert plan[pid].selected
    reasons = " ".join(plan[pid].reason for pid in after)
    assert "gcs_server and raylet are not running" in reasons

    engine = plan[debris.engine[0]]
    assert engine.kind == "engine" and engine.selected and "parent is gone" in engine.reason
    assert plan[debris.stubborn[0]].kind == "engine"

    # GPU holders: an orphaned helper is debris; a plain orphan (nohup?) and one whose parent (this test)
    # runs are listed unselected.
    assert plan[debris.gpu_orphan[0]].kind == "gpu-holder" and plan[debris.gpu_orphan[0]].selected
    nohup = plan[debris.gpu_nohup[0]]
    assert not nohup.selected and "nohup" in nohup.reason
    live_child = plan[debris.gpu_live_child.pid]
    assert not live_child.selected and "select by hand" in live_child.reason

    # Segments: the free one goes; the mapped and the open one are kept with who uses them.
    free = plan[str(debris.shm_free)]
    assert free.action == "remove" and free.selected and "no process has it open or mapped" in free.reason
    mapped = plan[str(debris.shm_mapped)]
    assert mapped.action == "keep" and not mapped.selected and f"PID {debris.mapper.pid}" in mapped.reason
    held = plan[str(debris.shm_open)]
    assert held.action == "keep" and f"PID {debris.opener.pid}" in held.reason

    # Sessions: the old one goes; the newest (the crashed run's logs) only by hand.
    assert plan[str(debris.old_session)].selected
    assert not plan[str(debris.newest_session)].selected

    # Evidence is kept, never offered for deletion.
    dump = plan[str(debris.trace_dump)]
    assert dump.kind == "flight-recorder" and dump.action == "keep" and not dump.selected
    assert "evidence" in dump.reason

    # Never: another user's process or file, this process and its parents, a live cluster.
    if debris.foreign:
        assert debris.foreign[0] not in plan
    if debris.shm_foreign:
        assert str(debris.shm_foreign) not in plan
    assert os.getpid() not in plan and 1 not in plan
    for proc in ray_cluster.processes():
        assert proc.pid not in plan, f"live cluster's {proc.name()} ({proc.pid}) is in the plan"
    live_sessions = build_plan(gpu_pids={p.pid for p in ray_cluster.processes()},
                               ray_tmp=ray_cluster.temp_root / "ray", trace_prefix=debris.trace_prefix)
    assert not [i for i in live_sessions if i.kind == "ray-session"
                and str(ray_cluster.temp_root) in str(i.target)]
    assert not {p.pid for p in ray_cluster.processes()} & {i.target for i in live_sessions}


def test_dry_run_json_changes_nothing(debris: Debris, capsys: pytest.CaptureFixture[str]) -> None:
    code = cleanup_cli.run(dry_run=True, yes=True, as_json=True, grace=1.0, **debris.plan_args())
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 1 and doc["results"] == []
    assert doc["items"] and set(doc["items"][0]) == {"kind", "target", "reason", "action", "selected"}
    targets = {i["target"] for i in doc["items"]}
    assert debris.engine[0] in targets and str(debris.shm_free) in targets
    assert alive(*debris.engine) and debris.shm_free.exists() and debris.old_session.exists()


def test_without_terminal_or_yes_nothing_happens(debris: Debris, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a TTY: the answer is not even read
    assert cleanup_cli.run(dry_run=False, yes=False, as_json=False, grace=1.0, **debris.plan_args()) == 1
    captured = capsys.readouterr()
    assert "VLLM::EngineCore" in captured.out and "not a terminal and no --yes" in captured.err
    assert alive(*debris.engine) and debris.shm_free.exists()


def test_execute_rechecks_each_target() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        ct = psutil.Process(proc.pid).create_time()
        reused = CleanupItem("engine", proc.pid, "test", "terminate", True, "sleep", ct - 100.0)
        me = CleanupItem("engine", os.getpid(), "test", "terminate", True, "pytest", psutil.Process().create_time())
        gone = CleanupItem("nccl-shm", "/dev/shm/nccl-gkdtop-not-there", "test", "remove")
        keep = CleanupItem("flight-recorder", "/tmp/nccl_trace_rank_gkdtop_test", "test", "keep", True)
        results = execute([reused, me, gone, keep], grace=0.5)
        outcomes = {r.target: r.outcome for r in results}
        assert outcomes == {proc.pid: "already gone", os.getpid(): "skipped",
                            "/dev/shm/nccl-gkdtop-not-there": "already gone"}
        assert proc.poll() is None  # a different process under a reused PID is left alone
    finally:
        proc.kill()
        proc.wait()


def test_yes_removes_the_debris_and_nothing_else(debris: Debris, ray_cluster: RayCluster,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    live_before = {p.pid: p.create_time() for p in ray_cluster.processes()}
    # RAY_TMPDIR is where the sessions are looked for when no ray_tmp is given.
    monkeypatch.setenv("RAY_TMPDIR", str(debris.dead.temp_root))
    args = debris.plan_args()
    del args["ray_tmp"]
    real_plan = cleanup.build_plan

    def own_plan(**kwargs: object) -> list[CleanupItem]:
        items = real_plan(**kwargs)  # type: ignore[arg-type]
        for item in items:
            item.selected = item.selected and debris.owns(item.target)
        return items

    monkeypatch.setattr(cleanup_cli, "build_plan", own_plan)
    start = time.monotonic()
    code = cleanup_cli.run(dry_run=False, yes=True, as_json=True, grace=1.0, **args)
    took = time.monotonic() - start
    doc = json.loads(capsys.readouterr().out)
    results = {r["target"]: r for r in doc["results"]}
    print(json.dumps(doc["results"], indent=1))
    assert code == 0, doc["results"]
    assert took < 15

    assert results[debris.engine[0]]["outcome"] in ("terminated", "killed")
    assert results[debris.stubborn[0]]["outcome"] == "killed"  # it ignores SIGTERM
    assert results[debris.gpu_orphan[0]]["outcome"] in ("terminated", "killed")
    for pid, ct in [debris.engine, debris.stubborn, debris.gpu_orphan, *debris.survivors.items()]:
        assert not alive(pid, ct), f"PID {pid} survived the cleanup"
    assert not debris.shm_free.exists()
    assert not debris.old_session.exists()

    # Untouched: live job's segments and their users, unselected items, evidence, others, the live cluster.
    assert debris.shm_mapped.exists() and debris.shm_open.exists()
    assert debris.mapper.poll() is None and debris.opener.poll() is None
    assert debris.gpu_live_child.poll() is None and debris.gpu_live_child.pid not in results
    assert alive(*debris.gpu_nohup) and debris.gpu_nohup[0] not in results
    assert debris.newest_session.exists()
    assert debris.trace_dump.read_bytes() == b"\x80\x04flight recorder"
    if debris.foreign:
        assert alive(*debris.foreign)
    if debris.shm_foreign:
        assert debris.shm_foreign.exists()
    for pid, ct in live_before.items():
        assert alive(pid, ct) or pid not in {p.pid for p in ray_cluster.processes()}, pid
    assert not set(live_before) & set(results)


def test_plan_text_and_json_shape() -> None:
    items = [CleanupItem("engine", 123, "inference engine process whose parent is gone", "terminate", True,
                         "VLLM::EngineCore"),
             CleanupItem("flight-recorder", "/tmp/nccl_trace_rank_0", "evidence", "keep", False)]
    text = plan_text(items)
    assert "[x] terminate engine" in text and "PID 123 VLLM::EngineCore" in text
    assert "[ ] keep" in text and "1 selected" in text
    assert plan_text([]).startswith("Nothing to clean up")
    doc = plan_json(items, [cleanup.CleanupResult(123, "engine", "terminated", "exited after SIGTERM")])
    assert doc == {"schema": 1,
                   "items": [{"kind": "engine", "target": 123, "reason": items[0].reason, "action": "terminate",
                              "selected": True},
                             {"kind": "flight-recorder", "target": "/tmp/nccl_trace_rank_0", "reason": "evidence",
                              "action": "keep", "selected": False}],
                   "results": [{"target": 123, "kind": "engine", "outcome": "terminated",
                                "detail": "exited after SIGTERM"}]}


def test_worker_node_without_local_gcs_is_live() -> None:
    """On a worker node of a multi-node cluster the GCS runs on the head: a running raylet keeps its session live."""
    session = "session_2026-01-01_00-00-00_000001_4242"
    code = ("import subprocess, time\n"
            "subprocess.Popen(['bash', '-c', \"exec -a 'ray::WorkerDict.update_actor' sleep 300\"])\n"
            "print('ok', flush=True); time.sleep(300)\n")
    argv = [sys.executable, "-c", code, f"--session_dir=/tmp/gkdtop-none/ray/{session}"]
    raylet = subprocess.Popen(["bash", "-c", f"exec -a /fake/ray/core/src/ray/raylet/raylet {shlex.join(argv)}"],
                              stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert raylet.stdout is not None and raylet.stdout.readline() == b"ok\n"
        worker = wait_for(lambda: psutil.Process(raylet.pid).children(), timeout=30, interval=0.05)[0]
        plan = by_target(build_plan(trace_prefix="/nonexistent/nccl_trace_rank_", shm_dir="/nonexistent"))
        assert raylet.pid not in plan and worker.pid not in plan
    finally:
        os.killpg(raylet.pid, signal.SIGKILL)
        raylet.wait()


@pytest.fixture
def look_alikes(tmp_path: Path) -> Iterator[dict[str, int]]:
    """Real processes whose arguments name Ray's files but that are not Ray: a pager, a test run, code,
    a user's script called notes_about_default_worker.py, a grep, a shell script in a `ray` folder."""
    ray = tmp_path / "x" / "ray"
    files = [ray / "dashboard" / "agent.py", ray / "_private" / "log_monitor.py",
             ray / "_private" / "workers" / "default_worker.py", ray / "tests" / "test_log_monitor.py"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("# ray's file\n")
    agent, log_monitor, worker, test_file = map(str, files)
    notes = tmp_path / "notes_about_default_worker.py"
    notes.write_text("import time\ntime.sleep(300)\n")
    pytest_script = tmp_path / "pytest"  # a stand-in for the pytest console script: it runs no test
    pytest_script.write_text("import time\ntime.sleep(300)\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # grep blocks opening it: a grep that stays up
    session = "session_2020-01-01_00-00-00_000000_7"  # a dead session named in the arguments too
    commands = {
        "less": ["less", "-f", agent],
        "tail": ["tail", "-f", log_monitor, f"/tmp/ray/{session}/logs/raylet.out"],
        "python -c": [sys.executable, "-c", "import time; time.sleep(300)", agent, f"--session-dir=/tmp/ray/{session}"],
        "notes script": [sys.executable, str(notes), worker],
        "pytest": [sys.executable, str(pytest_script), test_file, "-k", "log_monitor.py"],
        "grep": ["grep", "default_worker.py", str(fifo)],
        "sh": ["sh", "-c", "sleep 300", log_monitor, "--gcs-address=127.0.0.1:1"],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    master, slave = pty.openpty()  # less stays up only on a terminal
    try:
        for what, argv in commands.items():
            procs[what] = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                           env={**os.environ, "TERM": "dumb"})
        wait_for(lambda: all(_cmdline(p.pid)[1:] == commands[w][1:] for w, p in procs.items()), timeout=30,
                 interval=0.05)
        yield {what: p.pid for what, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        os.close(master)
        os.close(slave)


def _cmdline(pid: int) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).cmdline()
    return []


def test_processes_that_only_mention_ray_files_are_never_planned(look_alikes: dict[str, int],
                                                                   ray_cluster: RayCluster,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = {"trace_prefix": "/nonexistent/nccl_trace_rank_", "shm_dir": "/nonexistent",
             "ray_tmp": Path("/nonexistent")}
    for p in look_alikes.values():
        assert psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    # With a live cluster on the node (this test's own) ...
    plan = by_target(build_plan(**quiet))  # type: ignore[arg-type]
    assert not {what: pid for what, pid in look_alikes.items() if pid in plan}
    # ... and as if none ran (other users' and other tests' clusters may be up on this machine): no
    # gcs_server or raylet counts as live, which selects every Ray process - and still none of these.
    monkeypatch.setattr(prockind, "is_gcs", lambda title, name: False)
    monkeypatch.setattr(prockind, "is_raylet", lambda title, name: False)
    plan = by_target(build_plan(**quiet))  # type: ignore[arg-type]
    assert not {what: pid for what, pid in look_alikes.items() if pid in plan}
    # The same scan does select Ray's own programs then: the rule is not just "select nothing".
    live = {p.pid for p in ray_cluster.processes()}
    assert live & {t for t, i in plan.items() if i.selected}


def test_a_real_ray_program_without_its_raylet_is_planned(tmp_path: Path) -> None:
    """Ray's worker script run by Python, whose raylet (RAY_RAYLET_PID) is gone, and a `ray::` worker
    started by a raylet that was killed: both planned; a look-alike started beside them is not."""
    script = tmp_path / "site-packages" / "ray" / "_private" / "workers" / "default_worker.py"
    script.parent.mkdir(parents=True)
    script.write_text("import time\ntime.sleep(300)\n")
    gone = subprocess.Popen(["sleep", "0"])
    gone.wait()  # a PID that was a process and is no more
    env = {**os.environ, "RAY_RAYLET_PID": str(gone.pid)}
    worker = subprocess.Popen([sys.executable, "-u", str(script), "--node-ip-address=127.0.0.1"], env=env)
    titled = subprocess.Popen(["bash", "-c", "exec -a 'ray::IDLE' sleep 300"], env=env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(script)], env=env)
    try:
        wait_for(lambda: _cmdline(worker.pid)[-1:] == ["--node-ip-address=127.0.0.1"]
                 and _cmdline(titled.pid)[:1] == ["ray::IDLE"] and _cmdline(other.pid)[-1:] == [str(script)],
                 timeout=30, interval=0.05)
        plan = by_target(build_plan(trace_prefix="/nonexistent/nccl_trace_rank_", shm_dir="/nonexistent",
                                    ray_tmp=Path("/nonexistent")))
        for proc in (worker, titled):
            item = plan[proc.pid]
            assert item.kind == "ray-orphan" and item.selected, item
            assert f"raylet PID {gone.pid}" in item.reason
        assert other.pid not in plan
    finally:
        for proc in (worker, titled, other):
            proc.kill()
            proc.wait()
