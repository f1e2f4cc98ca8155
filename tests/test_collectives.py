"""The collective view on real gloo ranks: gkdtop.probe's Flight Recorder dumps, torch's analyzer, the sentence.

Three real processes form a named gloo group (a ProcessGroup over a TCPStore, as the demo's weight sync)
and then really deadlock: in `skip` rank 1 never enters the second broadcast; in `mismatch` it calls
all_reduce where the others broadcast. The probe in each answers gkdtop's request while its main
thread is blocked in C. No part is simulated.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gkdtop.actions import collectives
from gkdtop.actions.stacks import find_py_spy, proc_info
from gkdtop.cli import main
from gkdtop.demo.launcher import free_port
from gkdtop.tui.phases_pane import PhasesPane
from gkdtop.tui.stacks_screen import StacksScreen
from tests.test_actions_tui import _complete, stalled_app, tree_text
from tests.test_app import pane_text, settle

RANK = textwrap.dedent("""
    import os, sys, threading, time
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from gkdtop import probe  # GKDTOP_PROBE=1: installs itself

    threading.Timer(180, os._exit, (3,)).start()  # never outlive a test run that died without cleanup
    rank, port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    store = dist.TCPStore("127.0.0.1", port, 3, is_master=rank == 0, timeout=timedelta(seconds=60))
    prefixed = dist.PrefixStore("weight_sync", store)
    gloo = dist.ProcessGroupGloo(prefixed, rank, 3, timedelta(minutes=5))
    group = dist.ProcessGroup(prefixed, rank, 3)
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    group._set_group_name("weight_sync")
    weights = torch.ones(8)
    group.broadcast(weights, 0).wait()  # collective #1: everyone


    def sync_weights():
        for _ in range(3):
            group.broadcast(weights, 0).wait()
        group.allreduce([torch.zeros(2)]).wait()  # the checksum: nobody gets past it


    print("ready", flush=True)
    if rank == 1 and mode == "skip":
        time.sleep(600)
    elif rank == 1 and mode == "mismatch":
        group.allreduce([torch.zeros(2)]).wait()
    else:
        sync_weights()
""")


# The ranks' parent: the job's root process, as a launcher (torchrun, a Ray worker) would be.
LAUNCH = textwrap.dedent("""
    import subprocess, sys, time
    rank_script, port, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    ranks = [subprocess.Popen([sys.executable, "-c", rank_script, str(r), port, mode], stdout=subprocess.PIPE)
             for r in range(3)]
    for proc in ranks:
        assert proc.stdout.readline() == b"ready\\n"
    print(" ".join(str(proc.pid) for proc in ranks), flush=True)
    time.sleep(180)
""")


@dataclass
class Ranks:
    launcher: subprocess.Popen[bytes]
    pids: list[int]
    run_dir: Path


def start_ranks(mode: str, run_dir: Path) -> Ranks:
    env = {**os.environ, "GKDTOP_PROBE": "1", "GKDTOP_RUN_DIR": str(run_dir), "TORCH_FR_BUFFER_SIZE": "200",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCH, RANK, str(free_port()), mode], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert launcher.stdout is not None
    pids = [int(pid) for pid in launcher.stdout.readline().split()]
    assert len(pids) == 3, "the ranks did not start"
    return Ranks(launcher, pids, run_dir)


def stop(ranks: Ranks) -> None:
    for pid in ranks.pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ranks.launcher.kill()
    ranks.launcher.wait(timeout=10)


@pytest.fixture(scope="module")
def skipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ranks]:
    ranks = start_ranks("skip", tmp_path_factory.mktemp("skip"))
    yield ranks
    stop(ranks)


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ranks]:
    ranks = start_ranks("mismatch", tmp_path_factory.mktemp("mismatch"))
    yield ranks
    stop(ranks)


def settled(ranks: Ranks, predicate) -> collectives.CollectiveReport:  # type: ignore[no-untyped-def]
    """Ask until the ranks are where the test put them (the last one may still be on its way in)."""
    deadline = time.monotonic() + 60
    while True:
        report = collectives.collect([proc_info(pid) for pid in ranks.pids])
        if predicate(report) or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def settled_skip(report: collectives.CollectiveReport) -> bool:
    """Rank 0 and 2 entered broadcast #2 (either may be a moment later than the other), rank 1 never will."""
    group = weight_sync(report)
    return group is not None and group.missing == [1]


def weight_sync(report: collectives.CollectiveReport) -> collectives.GroupFinding | None:
    return next((g for g in report.groups if g.name == "weight_sync"), None)


def test_a_rank_that_never_entered_the_broadcast_is_named(skipped: Ranks) -> None:
    report = settled(skipped, lambda r: settled_skip(r))
    assert [d.ok for d in report.dumps] == [True, True, True], [d.error for d in report.dumps]
    group = weight_sync(report)
    assert group is not None and report.analyzer.startswith("torch 2.")
    assert (group.kind, group.missing, group.culprits, group.op, group.seq) == \
        ("missing ranks", [1], [1], "broadcast", 2), group
    states = {s.rank: s for s in group.states}
    assert states[1].last_completed == 1 and not states[1].current  # it did #1, then never came
    assert states[0].current == "broadcast" and states[0].pid == skipped.pids[0]
    assert report.sentence.startswith("rank 1 (") and "never entered broadcast #2 of weight_sync; rank 0" in \
        report.sentence, report.sentence
    # Each answer is the rank's own file, replaced by the next request: the report keeps the bytes.
    assert all(json.loads(d.raw)["pid"] == d.pid for d in report.dumps)


def test_a_rank_calling_another_collective_is_a_type_mismatch(mismatched: Ranks) -> None:
    # Until rank 0 has entered broadcast #2 as well, rank 0 is missing from it: that is right, and not yet this.
    report = settled(mismatched, lambda r: (g := weight_sync(r)) is not None and g.culprits == [1])
    group = weight_sync(report)
    assert group is not None
    assert (group.kind, group.culprits, group.op, group.seq) == ("collective type", [1], "broadcast", 2), group
    assert group.called[1] == "all_reduce"
    assert "rank 1 (" in report.sentence and "called all_reduce where ranks 0 and 2 called broadcast" in \
        report.sentence, report.sentence
    assert "'broadcast' does not match found collective type: 'all_reduce'" in group.detail  # torch's words


@pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")
def test_stacks_json_carries_the_collectives_and_keeps_the_dumps(skipped: Ranks, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    settled(skipped, lambda r: settled_skip(r))
    assert main(["stacks", "--json", "--out-dir", str(tmp_path), *map(str, skipped.pids)]) == 0
    data = json.loads(capsys.readouterr().out)
    colls = data["collectives"]
    group = next(g for g in colls["groups"] if g["name"] == "weight_sync")
    assert group["missing"] == [1] and group["seq"] == 2
    assert colls["sentence"] == group["sentence"]
    # The probe's thread is gkdtop's, not the job's: it does not split the ranks' stack groups.
    assert not any("probe.py" in f["file"] for g in data["groups"] for f in g["frames"])
    kept = sorted(Path(d["file"]).name for d in colls["dumps"])
    assert kept == sorted(f"fr-{pid}.json" for pid in skipped.pids)
    assert Path(data["file"]).with_name(Path(data["file"]).stem + "-fr").is_dir()
    assert "COLLECTIVES (Flight Recorder): rank 1 (" in Path(data["file"]).with_suffix(".txt").read_text()


def test_a_dump_file_is_read_as_data_never_run() -> None:
    torch = pytest.importorskip("torch")
    real = torch._C._distributed_c10d._dump_fr_trace()  # torch's own pickle, as its trigger pipe writes it
    assert isinstance(collectives.parse_trace(real)["entries"], list)
    with pytest.raises(ValueError, match=r"refused posix\.system"):
        collectives.parse_trace(pickle.dumps(os.system))
    with pytest.raises(ValueError, match="not a Flight Recorder dump"):
        collectives.parse_trace(b"\x80\x04flight recorder of rank 1")


@pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")
async def test_the_stall_line_and_the_s_screen_name_the_rank_and_the_collective(
        skipped: Ranks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # where e writes the bundle
    settled(skipped, settled_skip)
    # its log went quiet long ago: the stall dump comes at once (the watcher at its default pace, 1 s: this test's
    # dump waits on the ranks' Flight Recorder pipes, and a whole run once saw it miss 90 s at a 0.2 s pace)
    app = stalled_app(tmp_path, skipped.launcher.pid, stall_look=1.0)
    async with app.run_test(size=(180, 50)) as pilot:
        # The pane's headline is the first group with a finding: ours, or another job's on this machine (a run an
        # earlier test left deadlocked). Wait for ours among the groups, then the pane for the headline.
        def ours_found() -> bool:
            taken = app.store.stall_stacks
            colls = getattr(getattr(taken, "report", None), "collectives", None)
            return colls is not None and any(g.job == str(skipped.run_dir) for g in colls.groups)

        await settle(pilot, lambda: ours_found() and "collectives: rank " in pane_text(app, PhasesPane), timeout=90)
        colls = app.store.stall_stacks.report.collectives
        assert f"collectives: {colls.sentence}" in pane_text(app, PhasesPane)
        assert "never entered broadcast #" in pane_text(app, PhasesPane)  # ours, or another job's on this machine
        ours = next(g for g in colls.groups if g.job == str(skipped.run_dir))
        assert ours.sentence.startswith("rank 1 (worker) never entered broadcast #2 of weight_sync"), ours
        await pilot.press("s")
        await settle(pilot, lambda: isinstance(app.screen, StacksScreen))
        screen = app.screen
        assert isinstance(screen, StacksScreen)
        # Other jobs on this machine may be in the tree too: look for ours.
        ours = f"rank 1  pid {skipped.pids[1]}  worker: last completed #1, in no collective"
        await settle(pilot, lambda: ours in tree_text(screen))
        tree = tree_text(screen)
        assert "Flight Recorder: " in tree
        assert f"rank 0  pid {skipped.pids[0]}  worker: last completed #1, in broadcast" in tree
        await pilot.press("escape")
        await settle(pilot, lambda: not isinstance(app.screen, StacksScreen))

        await pilot.press("e")  # the bundle keeps the dumps the stall-time report analysed, and the analysis
        await settle(pilot, lambda: [b for b in tmp_path.glob("gkdtop-bundle-*.tar.gz") if _complete(b)], timeout=90)
        with tarfile.open(next(tmp_path.glob("gkdtop-bundle-*.tar.gz"))) as tar:
            names = tar.getnames()
            kept = [n for n in names if "/flight-recorder/stacks-" in n and n.endswith(".json")]
            assert {Path(n).name for n in kept} >= {f"fr-{pid}.json" for pid in skipped.pids}, names
            report = next(n for n in names if Path(n).name == Path(app.store.stall_stacks.path).name)
            member = tar.extractfile(report)
            assert member is not None
            groups = json.loads(member.read())["collectives"]["groups"]
            assert any(g["missing"] == [1] and g["job"] == str(skipped.run_dir) for g in groups), groups


def test_a_file_or_link_in_place_of_the_fifo_is_never_written(tmp_path: Path) -> None:
    """The FIFO's path comes from the target's environment: whatever lies there that is not its FIFO stays as it is."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ,
                                                                                "GKDTOP_RUN_DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        probe_dir = tmp_path / "probe"
        probe_dir.mkdir()
        victim = tmp_path / "victim.txt"
        victim.write_text("precious\n")
        pipe = probe_dir / f"fr-{proc.pid}.pipe"
        for planted in ("file", "link"):
            if planted == "file":
                pipe.write_text("precious\n")
            else:
                pipe.unlink()
                pipe.symlink_to(victim)
            assert collectives.request_probe_dumps([proc_info(proc.pid)], wait=0.2) == []
            assert victim.read_text() == "precious\n" and pipe.read_text() == "precious\n"
    finally:
        proc.kill()
        proc.wait(10)


def test_nothing_to_analyse_imports_no_torch(tmp_path: Path) -> None:
    """`s` on a job without ranks must not pay for importing torch (seconds, hundreds of MB)."""
    code = ("import sys; from gkdtop.actions import collectives; r = collectives.analyze([]); "
            "print('torch' in sys.modules, r.analyzer == '', r.groups == [])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True", "True"], out
