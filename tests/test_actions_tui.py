"""The action keys in the real app: s (and the dump taken when a stall began), c, e — on real processes.

A real Python process blocked in a known function is the job; its log went quiet long ago, so the
phase engine declares a stall at once and gkdtop takes one stack dump by itself. Cleanup runs on a
real orphaned engine process and a real leaked /dev/shm segment (and nothing else: the test
deselects whatever else the machine's plan holds before it runs).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from textual.widgets import SelectionList, Static, Tree

from gkdtop.actions.stacks import find_py_spy
from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.cleanup_screen import CleanupScreen
from gkdtop.tui.phases_pane import PhasesPane
from gkdtop.tui.stacks_screen import StacksScreen
from tests.gkdlog import startup
from tests.gpudata import recorded_gpus
from tests.test_app import pane_text, settle
from tests.test_cleanup import kill, spawn_orphan

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")

JOB = """
import time

def wait_for_weights():
    time.sleep(600)

print("ready", flush=True)
wait_for_weights()
"""


@pytest.fixture
def job() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait(10)


def stalled_app(tmp_path: Path, root: int, stall_look: float = 0.2) -> GkdtopApp:
    from gkdtop.collectors.gpu import RecordedBackend

    lines, last = startup(time.time() - 1200, upto="sync")  # quiet for 20 minutes: stalled at once
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))
    config = Config(phases=builtin_phases())
    # The stall watcher looks every `stall_look` s (1 s by default): a window of 2 s holds ten looks at 0.2.
    config.refresh.update({"logs": 0.1, "gpus": 0.5, "procs": 0.3, "ray": 5.0, "ui": 0.1, "stall_stacks": stall_look})
    monitor = Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9", root_pids=(root,),
                      gpu_backend=RecordedBackend(str(recorded_gpus(tmp_path))))
    own_dump_only(monitor, root)
    return GkdtopApp(config, monitor)


def own_dump_only(monitor: Monitor, root: int) -> None:
    """The stall-time dump takes the stacks of `root` and its descendants only. The dashboard dumps every Python
    process of the job view, and that holds each Ray process on the machine: under `-n`, other workers' clusters
    and jobs, whose dumps took this test's past 60 s on a loaded machine."""
    from gkdtop.actions.stacks import dump_stacks
    from gkdtop.actions.stall_stacks import StallStacker

    def dump(targets):  # type: ignore[no-untyped-def]
        try:
            tree = {root, *(c.pid for c in psutil.Process(root).children(recursive=True))}
        except psutil.Error:
            tree = {root}
        return dump_stacks([t for t in targets if t.pid in tree])

    def stacker(store):  # type: ignore[no-untyped-def]
        return StallStacker(store, dump=dump)

    start = monitor.start
    monitor.start = lambda stall_dump=None: start(stall_dump=stacker if stall_dump else None)  # type: ignore[method-assign]


def tree_text(screen: StacksScreen) -> str:
    out: list[str] = []

    def walk(node) -> None:  # type: ignore[no-untyped-def]
        out.append(str(node.label))
        for child in node.children:
            walk(child)

    walk(screen.query_one(Tree).root)
    return "\n".join(out)


def test_a_stall_declared_before_the_processes_are_listed_waits_for_them(tmp_path: Path,
                                                                       job: subprocess.Popen[str]) -> None:
    """A loaded machine lists the processes after the log has already stalled (CI, session 21): the stall was
    then handled with nothing to dump, and no dump was ever taken for it."""
    from gkdtop.actions.stall_stacks import StallStacker
    from gkdtop.collectors.logs import LogCollector
    from gkdtop.collectors.procs import ProcCollector
    from gkdtop.store import Store

    lines, last = startup(time.time() - 1200, upto="sync")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))
    store = Store(Config(phases=builtin_phases()))
    stacker = StallStacker(store, dump=lambda targets: pytest.fail("dumped"))
    collector = LogCollector([str(log)], backlog=50)
    for _ in range(3):
        store.put("logs", collector.collect())
    assert store.phase_status().state == "stalled"
    assert stacker.due() == []  # no process list yet
    store.put("procs", ProcCollector(root_pids=(job.pid,)).collect())
    assert job.pid in {p.pid for p in stacker.due()}  # the same stall, now with its job


async def test_a_stall_takes_one_dump_s_shows_it_and_e_bundles_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: subprocess.Popen[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    stacks_dir = tmp_path / "cache" / "gkdtop" / "stacks"
    app = stalled_app(tmp_path, job.pid)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "stacks taken at the stall" in pane_text(app, PhasesPane), timeout=60)
        taken = app.store.stall_stacks
        assert taken.phase == "weight sync"
        ours = next(d for d in taken.report.dumps if d.pid == job.pid)
        assert ours.ok, ours.error
        assert any(f.function == "wait_for_weights" for t in ours.threads for f in t.frames)
        assert Path(taken.path).parent == stacks_dir and Path(taken.path).exists()

        await pilot.press("s")
        await settle(pilot, lambda: isinstance(app.screen, StacksScreen))
        screen = app.screen
        assert isinstance(screen, StacksScreen)
        await settle(pilot, lambda: "wait_for_weights" in tree_text(screen))
        status = str(screen.query_one("#status", Static).render())
        assert "when 'weight sync' stalled" in status and taken.path in status

        await pilot.press("r")  # dump again, now
        await settle(pilot, lambda: screen.path != taken.path and "wait_for_weights" in tree_text(screen),
                     timeout=60)
        assert "stalled" not in str(screen.query_one("#status", Static).render())
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, StacksScreen))

        # One stall, one automatic dump: the watcher does not dump the same stall again.
        await pilot.pause(2.0)
        assert app.store.stall_stacks is taken
        assert len(list(stacks_dir.glob("*.json"))) == 2  # the stall's and the r key's

        await pilot.press("e")
        await settle(pilot, lambda: list(tmp_path.glob("gkdtop-bundle-*.tar.gz")), timeout=60)
        bundle = next(tmp_path.glob("gkdtop-bundle-*.tar.gz"))
        await settle(pilot, lambda: _complete(bundle), timeout=60)
        with tarfile.open(bundle) as tar:
            names = tar.getnames()
        assert any(n.endswith("stacks/" + Path(taken.path).name) for n in names), names


def _complete(path: Path) -> bool:
    try:
        with tarfile.open(path) as tar:
            return bool(tar.getnames())
    except (tarfile.TarError, EOFError, OSError):
        return False


async def test_stall_stacks_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              job: subprocess.Popen[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    app = stalled_app(tmp_path, job.pid)
    app.config.stall_stacks = False
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "STALLED" in pane_text(app, PhasesPane))
        await pilot.pause(2.0)
        assert app.store.stall_stacks is None
        assert not (tmp_path / "cache" / "gkdtop" / "stacks").exists()


@pytest.fixture
def debris() -> Iterator[tuple[tuple[int, float], Path]]:
    engine = spawn_orphan("VLLM::EngineCore")
    shm = Path("/dev/shm") / f"nccl-{secrets.token_hex(3)}"
    shm.write_bytes(b"\0" * 4096)
    old = time.time() - 600
    os.utime(shm, (old, old))
    yield engine, shm
    kill(*engine)
    shm.unlink(missing_ok=True)


async def test_c_previews_the_plan_then_runs_only_what_is_selected(
        tmp_path: Path, debris: tuple[tuple[int, float], Path]) -> None:
    (engine_pid, _), shm = debris
    app = stalled_app(tmp_path, os.getpid())
    async with app.run_test(size=(180, 50)) as pilot:
        await pilot.press("c")
        await settle(pilot, lambda: isinstance(app.screen, CleanupScreen) and bool(app.screen.items), timeout=60)
        screen = app.screen
        assert isinstance(screen, CleanupScreen)
        targets = {str(item.target): i for i, item in enumerate(screen.items)}
        assert str(engine_pid) in targets and str(shm) in targets, sorted(targets)
        listing = screen.query_one(SelectionList)
        prompts = {i: str(listing.get_option_at_index(i).prompt) for i in targets.values()}
        assert "VLLM::EngineCore" in prompts[targets[str(engine_pid)]]
        assert "no process has it open or mapped" in prompts[targets[str(shm)]]
        # Nothing has happened yet: the plan is a preview.
        assert psutil.pid_exists(engine_pid) and shm.exists()

        listing.deselect_all()  # this machine may hold other debris: run ours only
        listing.select(targets[str(engine_pid)])
        listing.select(targets[str(shm)])
        await pilot.press("r")
        await settle(pilot, lambda: "Done:" in str(screen.query_one("#status", Static).render()), timeout=60)
        done = str(screen.query_one("#status", Static).render())
        assert str(engine_pid) in done and str(shm) in done
        assert not shm.exists()
        assert not psutil.pid_exists(engine_pid) or psutil.Process(engine_pid).status() == psutil.STATUS_ZOMBIE
        unselected = [item for item in screen.items if str(item.target) not in (str(engine_pid), str(shm))]
        assert all(not item.selected for item in unselected)
