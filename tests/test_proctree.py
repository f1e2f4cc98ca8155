"""gkdtop.proctree on real process trees: SIGTERM, grace, SIGKILL, and what it says happened to each."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gkdtop import proctree

# A parent with two children: one that dies of SIGTERM, one that ignores it. Each child prints its
# PID once it is ready (the handler installed); the parent prints both and then waits.
TREE = textwrap.dedent("""
    import signal, subprocess, sys, time
    code = sys.argv[1]
    kids = [subprocess.Popen([sys.executable, "-c", code, mode], stdout=subprocess.PIPE, text=True)
            for mode in ("plain", "stubborn")]
    print(*(k.stdout.readline().strip() for k in kids), flush=True)
    while True:
        time.sleep(1)
""")
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif sys.argv[1] == "marks":  # says it got SIGTERM (in a file), then exits
        def on_term(signum, frame):
            open(sys.argv[2], "w").close()
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
    print(os.getpid(), flush=True)
    while True:
        time.sleep(1)
""")


# A process group leader and its child (in its group), which marks a SIGTERM in a file.
LEADER = textwrap.dedent("""
    import signal, subprocess, sys, time
    if sys.argv[3] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kid = subprocess.Popen([sys.executable, "-c", sys.argv[1], "marks", sys.argv[2]], stdout=subprocess.PIPE,
                           text=True)
    print(kid.stdout.readline().strip(), flush=True)
    while True:
        time.sleep(1)
""")


def wait_for(condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; whatever is left of them (and their children) is killed afterwards."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        kids: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(proc.pid).children(recursive=True)
        for kid in kids:
            with contextlib.suppress(psutil.Error):
                kid.kill()
        proc.kill()
        proc.wait()


def test_a_tree_ends_with_each_process_said_how(started: list[subprocess.Popen[str]]) -> None:
    parent = subprocess.Popen([sys.executable, "-c", TREE, CHILD], stdout=subprocess.PIPE, text=True)
    started.append(parent)
    plain_pid, stubborn_pid = (int(p) for p in parent.stdout.readline().split())  # type: ignore[union-attr]
    procs = [psutil.Process(pid) for pid in (parent.pid, plain_pid, stubborn_pid)]

    endings = proctree.terminate(procs, grace=1.0, kill_wait=10.0)

    assert [e.pid for e in endings] == [parent.pid, plain_pid, stubborn_pid]
    outcome = {e.pid: (e.outcome, e.detail) for e in endings}
    assert outcome[parent.pid] == ("terminated", "exited after SIGTERM")
    assert outcome[plain_pid] == ("terminated", "exited after SIGTERM")
    assert outcome[stubborn_pid] == ("killed", "ignored SIGTERM for 1 s; SIGKILL")
    assert all(proctree.gone(p) for p in procs)
    assert proctree.survivors(procs, endings) == []
    # The zombie of our own child was left for its parent: Popen still reads how it ended.
    assert parent.wait(10) == -signal.SIGTERM


def test_a_process_already_gone_is_said_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    handle = psutil.Process(proc.pid)
    proc.wait(20)
    assert proctree.terminate([handle], grace=1.0) == [proctree.Ending(proc.pid, "already gone")]


def start_leader(started: list[subprocess.Popen[str]], mark: Path, stubborn: bool) -> tuple[int, psutil.Process]:
    """A process group leader (ignoring SIGTERM when `stubborn`) and its child, which marks a SIGTERM in a file."""
    leader = subprocess.Popen([sys.executable, "-c", LEADER, CHILD, str(mark), "stubborn" if stubborn else "plain"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    started.append(leader)
    kid = psutil.Process(int(leader.stdout.readline()))  # type: ignore[union-attr]
    assert os.getpgid(kid.pid) == leader.pid
    return leader.pid, kid


def test_the_group_gets_only_the_sigkill_when_asked(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    """A driver that tears its own cluster down gets SIGTERM alone; its group is SIGKILLed if it does not finish."""
    mark = tmp_path / "child-got-sigterm"
    leader, kid = start_leader(started, mark, stubborn=True)

    endings = proctree.terminate([psutil.Process(leader)], grace=0.5, kill_wait=10.0, group=leader, term_group=False)

    assert [(e.pid, e.outcome) for e in endings] == [(leader, "killed")]
    wait_for(lambda: proctree.gone(kid))
    assert not mark.exists()  # the child was never sent SIGTERM: the group got the SIGKILL only


def test_the_group_gets_the_sigterm_too_by_default(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    mark = tmp_path / "child-got-sigterm"
    leader, kid = start_leader(started, mark, stubborn=False)

    endings = proctree.terminate([psutil.Process(leader)], grace=10.0, group=leader)

    assert [(e.pid, e.outcome) for e in endings] == [(leader, "terminated")]
    wait_for(lambda: proctree.gone(kid))
    assert mark.exists()  # the child is not among the processes given: the group's SIGTERM reached it
