"""Stack dumps against real processes and real py-spy: a real gloo deadlock, vanished and non-Python targets."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gkdtop.actions.stacks import (
    PYTHON_ROLES,
    StackDump,
    StackFrame,
    ThreadStack,
    dump_stacks,
    find_py_spy,
    group_stacks,
    outliers,
    report_json,
    report_text,
    write_report,
)
from gkdtop.actions.stacks import cli as stacks_cli
from gkdtop.collectors.procs import ProcCollector

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")

# One rank per process. The last rank skips the all_reduce the others enter: a real deadlock that
# lasts until the 5-minute gloo timeout (or the watchdog, should the test run die without cleanup).
RANK_SCRIPT = textwrap.dedent("""
    import os, sys, threading, time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    threading.Timer(120, os._exit, (3,)).start()  # watchdog: also a background thread in every dump
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(minutes=5))


    def stuck_outside_collective():
        time.sleep(600)


    def sync_weights():
        dist.all_reduce(torch.ones(4))


    if rank == world - 1:
        stuck_outside_collective()
    else:
        sync_weights()
""")


@dataclass
class World:
    procs: list[subprocess.Popen[bytes]]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.3):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def settled(world: World) -> bool:
    """Every rank is where the test wants it: in all_reduce, or in stuck_outside_collective."""
    report = dump_stacks(world.pids, timeout=30)
    names = [{f.function for t in d.threads for f in t.frames} for d in report.dumps]
    *inside, last = names
    return all(d.ok for d in report.dumps) and all("all_reduce" in n for n in inside) and (
        "stuck_outside_collective" in last)


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, World]]:
    """A 2-rank and a 4-rank deadlocked gloo job, started together (torch imports overlap)."""
    script = tmp_path_factory.mktemp("ranks") / "gloo_rank.py"
    script.write_text(RANK_SCRIPT)
    made: list[World] = []
    everything: list[subprocess.Popen[bytes]] = []
    try:
        for size in (2, 4):
            port = free_port()
            procs = []
            for rank in range(size):
                env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(size)}
                proc = subprocess.Popen([sys.executable, str(script), str(rank), str(size), str(port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(proc)
                everything.append(proc)
            made.append(World(procs))
        for world in made:
            assert wait_for(lambda w=world: settled(w), timeout=60), "the ranks never reached their places"
        yield made[0], made[1]
    finally:
        kill_all(everything)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A Python process already in its time.sleep (not still starting up) when the test gets it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        kill_all([proc])


def test_two_ranks_deadlock_singles_out_the_rank_that_skipped(worlds: tuple[World, World], tmp_path: Path) -> None:
    two, _ = worlds
    # The targets come as the Processes pane lists them: the ranks are the user's named job roots.
    rows = ProcCollector(root_pids=two.pids).collect()
    targets = [r for r in rows if r.pid in two.pids and r.role in PYTHON_ROLES]
    assert sorted(r.pid for r in targets) == sorted(two.pids)
    report = dump_stacks(targets)
    rank0, rank1 = (next(d for d in report.dumps if d.pid == pid) for pid in two.pids)
    assert rank0.ok and rank1.ok, (rank0.error, rank1.error)
    main0 = next(t for t in rank0.threads if t.name == "MainThread")
    assert main0.frames[0].function == "all_reduce"
    assert main0.frames[0].file.endswith("torch/distributed/distributed_c10d.py")
    assert "sync_weights" in [f.function for f in main0.frames]
    assert any(t.name != "MainThread" for t in rank0.threads)  # all threads, the watchdog too
    assert (rank0.rank, rank1.rank) == (0, 1)
    assert rank0.label == "driver gloo_rank.py rank 0/2"
    assert len(report.groups) == 2
    collective = next(g for g in report.groups if g.collective)
    assert collective.pids == [two.pids[0]]
    assert collective.summary == "all_reduce <- sync_weights <- <module>"
    assert report.outliers == [two.pids[1]]
    other = next(g for g in report.groups if not g.collective)
    assert other.summary.startswith("stuck_outside_collective <- ")

    # Saved as JSON + text, the JSON in the documented shape.
    path = write_report(report, tmp_path)
    assert path.parent == tmp_path and path.name.startswith("stacks-") and path.suffix == ".json"
    data = json.loads(path.read_text())
    assert data == report_json(report)
    assert {"schema", "dumps", "groups", "outliers"} <= data.keys() and data["schema"] == 1
    dump = data["dumps"][0]
    assert {"pid", "role", "label", "ok", "error", "threads"} <= dump.keys()
    assert {"name", "thread_id", "idle", "frames"} <= dump["threads"][0].keys()
    assert {"function", "file", "line"} <= dump["threads"][0]["frames"][0].keys()
    assert {"frames", "pids", "summary"} <= data["groups"][0].keys()
    assert data["outliers"] == [two.pids[1]]
    text = path.with_suffix(".txt").read_text()
    assert text == report_text(report)
    assert "NOT WHERE THE OTHERS ARE" in text and "stuck_outside_collective" in text
    assert write_report(report, tmp_path) != path  # a second dump in the same second keeps the first


def test_four_ranks_group_of_three_and_one_outlier(worlds: tuple[World, World]) -> None:
    _, four = worlds
    report = dump_stacks(four.pids)
    assert all(d.ok for d in report.dumps)
    assert [len(g.pids) for g in report.groups] == [3, 1]
    assert report.groups[0].pids == sorted(four.pids[:3])
    assert report.groups[0].collective
    assert report.groups[0].summary.startswith("all_reduce <- sync_weights")
    assert report.outliers == [four.pids[3]]
    assert "3 processes: all_reduce <- sync_weights" in report_text(report)


def test_native_frames_do_not_split_groups(worlds: tuple[World, World]) -> None:
    _, four = worlds
    report = dump_stacks(four.pids[1:], native=True, timeout=30)
    assert all(d.ok for d in report.dumps), [d.error for d in report.dumps]
    assert any(f.native for d in report.dumps for t in d.threads for f in t.frames)
    assert [len(g.pids) for g in report.groups] == [2, 1]
    assert report.outliers == [four.pids[3]]


def test_vanished_process(sleeper: subprocess.Popen[bytes]) -> None:
    rows = ProcCollector(root_pids=[sleeper.pid]).collect()
    target = next(r for r in rows if r.pid == sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    report = dump_stacks([target])
    assert not report.dumps[0].ok
    assert "process vanished" in report.dumps[0].error
    assert report.groups == [] and report.outliers == []


def test_non_python_processes_get_a_clear_row(sleeper: subprocess.Popen[bytes]) -> None:
    native = subprocess.Popen(["sleep", "60"])
    shell = subprocess.Popen(["bash", "-c", "sleep 60; true"])
    try:
        report = dump_stacks([native.pid, shell.pid, sleeper.pid])
        rows = {d.pid: d for d in report.dumps}
        assert rows[native.pid].error == "not a Python process (sleep)"
        assert rows[shell.pid].error == "not a Python process (bash)"
        assert rows[sleeper.pid].ok
        assert all("\n" not in d.error for d in report.dumps)
    finally:
        kill_all([native, shell])


def test_py_spy_missing(sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    assert find_py_spy([tmp_path]) is None
    assert find_py_spy() == str(Path(sys.executable).parent / "py-spy")  # the venv's, before PATH
    report = dump_stacks([sleeper.pid, os.getpid()], search=[tmp_path])
    assert [d.ok for d in report.dumps] == [False, False]
    assert all(d.error.startswith("py-spy not found") for d in report.dumps)


def test_py_spy_dumps_say_so(sleeper: subprocess.Popen[bytes]) -> None:
    report = dump_stacks([sleeper.pid])
    assert report.dumps[0].ok and report.dumps[0].method == "py-spy" and report.dumps[0].note == ""
    assert report_json(report)["dumps"][0]["method"] == "py-spy"
    assert report.nccl_traces == []  # no Flight Recorder pipe variable in its environment: nothing asked


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_ptrace_denied(sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    # py-spy run as `nobody` against our (root) process: the kernel refuses the ptrace.
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups {find_py_spy()} "$@"\n')
    wrapper.chmod(0o755)
    report = dump_stacks([sleeper.pid], py_spy=str(wrapper))
    assert report.dumps[0].error.startswith("permission denied by ptrace (run as its user or root")


def test_timeout_leaves_the_target_running(sleeper: subprocess.Popen[bytes]) -> None:
    report = dump_stacks([sleeper.pid], timeout=0.001)
    assert report.dumps[0].error.startswith("py-spy timed out")
    time.sleep(0.2)
    state = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state not in ("t", "T")  # a py-spy killed on timeout must not leave it stopped
    assert dump_stacks([sleeper.pid]).dumps[0].ok


def test_stacks_command(sleeper: subprocess.Popen[bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert stacks_cli.run([sleeper.pid], native=False, as_json=False, timeout=10, out_dir=None) == 0
    assert len(list((tmp_path / "cache" / "gkdtop" / "stacks").glob("stacks-*.txt"))) == 1
    capsys.readouterr()
    assert stacks_cli.run([sleeper.pid], native=False, as_json=True, timeout=10, out_dir=str(tmp_path)) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["dumps"][0]["ok"] and Path(data["file"]).is_file()
    assert "saved" in out.err
    assert stacks_cli.run([sleeper.pid], native=False, as_json=False, timeout=10, out_dir=str(tmp_path)) == 0
    text = capsys.readouterr().out
    assert text.startswith("gkdtop stacks ") and "1 process: <module>" in text
    assert len(list(tmp_path.glob("stacks-*.json"))) == 2
    sleeper.kill()
    sleeper.wait()
    assert stacks_cli.run([sleeper.pid], native=False, as_json=False, timeout=10, out_dir=str(tmp_path)) == 1
    assert "process vanished" in capsys.readouterr().out


# ---------------------------------------------------------------- grouping rules on hand-built dumps

C10D = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def frame(function: str, path: str, line: int = 1) -> StackFrame:
    return StackFrame(function, path.split("site-packages/")[-1], line, path)


def dump(pid: int, role: str, *stacks: list[StackFrame]) -> StackDump:
    threads = [ThreadStack("MainThread" if i == 0 else f"Thread-{i}", pid * 10 + i, True, list(s))
               for i, s in enumerate(stacks)]
    return StackDump(pid, role, f"{role} {pid}", True, threads=threads)


IN_BROADCAST = [frame("broadcast", C10D, 10), frame("sync_rollout_weights", "/job/fsdp_workers.py", 5),
                frame("fit", "/job/trainer.py", 7)]
ELSEWHERE = [frame("load_batch", "/job/data.py", 3), frame("fit", "/job/trainer.py", 9)]
IN_GET = [frame("get", "/v/lib/python3.11/site-packages/ray/_private/worker.py", 2), frame("main", "/job/main.py")]
GC_THREAD = [frame("Event.wait", "/usr/lib/python3.11/threading.py", 629),
             frame("PythonGCThread.run", "/v/lib/python3.11/site-packages/ray/_private/gc_collect_manager.py", 29)]


def test_peers_are_compared_within_their_role() -> None:
    dumps = [dump(1, "driver", IN_GET)] + [dump(p, "actor", IN_BROADCAST) for p in (2, 3, 4, 5)]
    dumps += [dump(6, "actor", ELSEWHERE), dump(7, "rollout", IN_BROADCAST), dump(8, "rollout", IN_BROADCAST)]
    groups = group_stacks(dumps)
    assert [(len(g.pids), g.summary) for g in groups] == [
        (6, "broadcast <- sync_rollout_weights <- fit"), (1, "get <- main"), (1, "load_batch <- fit")]
    assert outliers(dumps, groups) == [6]  # not the driver: it waits in ray.get as drivers do


def test_background_threads_and_thread_order_do_not_split_groups() -> None:
    dumps = [dump(1, "actor", IN_BROADCAST, GC_THREAD), dump(2, "actor", IN_BROADCAST), dump(3, "actor", ELSEWHERE)]
    groups = group_stacks(dumps)
    assert [g.pids for g in groups] == [[1, 2], [3]]
    assert outliers(dumps, groups) == [3]


def test_no_collective_needs_a_strict_majority() -> None:
    tie = [dump(1, "actor", ELSEWHERE), dump(2, "actor", IN_GET)]
    assert outliers(tie, group_stacks(tie)) == []
    most = [dump(p, "actor", ELSEWHERE) for p in (1, 2, 3)] + [dump(4, "actor", IN_GET)]
    assert outliers(most, group_stacks(most)) == [4]
    mismatched = [dump(1, "actor", IN_BROADCAST), dump(2, "actor", IN_BROADCAST),
                  dump(3, "actor", [frame("all_reduce", C10D, 20), *ELSEWHERE])]
    assert outliers(mismatched, group_stacks(mismatched)) == [3]  # a different collective than its peers


def test_unexpected_py_spy_output_is_an_error_not_a_crash() -> None:
    from gkdtop.actions.stacks import parse_py_spy_json

    for raw in ("not json", "{}", "[1]", '[{"frames": [{"name": "f", "line": "x"}]}]'):
        with pytest.raises(ValueError):
            parse_py_spy_json(raw)
    assert parse_py_spy_json("[]") == []


def test_an_idle_ray_worker_among_busy_peers_is_the_odd_one() -> None:
    """The demo's hang-sync: rank 0 blocks inside its own sync code (a C-level wait, no torch frame),
    rank 1 never made the call and idles in Ray's main_loop. That idle rank is the suspect."""
    main_loop = [frame("Worker.main_loop", "/v/lib/python3.11/site-packages/ray/_private/worker.py", 900),
                 frame("<module>", "/v/lib/python3.11/site-packages/ray/_private/workers/default_worker.py", 300)]
    in_sync = [frame("WeightSyncMember.broadcast_weights", "/job/sync.py", 272),
               frame("OnPolicyDistillActor.sync_weights", "/job/actor.py", 40)]
    dumps = [dump(1, "actor", in_sync, GC_THREAD), dump(2, "actor", main_loop, GC_THREAD),
             dump(3, "teacher", main_loop, GC_THREAD)]
    groups = group_stacks(dumps)
    assert outliers(dumps, groups) == [2]
    everyone_idle = [dump(1, "actor", main_loop), dump(2, "actor", main_loop)]
    assert outliers(everyone_idle, group_stacks(everyone_idle)) == []


def test_stacks_ray_flag_is_not_taken_for_an_abbreviation() -> None:
    from gkdtop.cli import build_parser

    args = build_parser().parse_args(["stacks", "--ray"])
    assert args.command == "stacks" and args.ray is True
