"""The built-in demo job for real: a private Ray cluster, torch gloo groups, real faults, real teardown.

Each test starts its own run (about 10-20 s to the first step on 2 cores) and checks, with psutil, that
nothing of it is left afterwards: no raylet / gcs_server / `ray::` worker of its sessions, nothing under
its Ray temp dir, no child of the launcher. Fixtures always stop the runs, sweep, and remove the debris
of `--fault leak`, so a failing test leaves nothing running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

from gkdtop.demo import FAULTS
from gkdtop.demo.job import parse_args
from gkdtop.demo.launcher import DemoOptions, DemoRun, find_processes, remove_debris, start_demo, terminate
from gkdtop.demo.printing import ProgressBar
from tests.test_ray_tasks import assert_rank_1_left_the_weight_sync

pytestmark = [pytest.mark.demo, pytest.mark.slow]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STEP = re.compile(r"step:(\d+) - timing_s/gen:[\d.]+ - timing_s/sync_rollout_weights:[\d.]+ - "
                  r"timing_s/get_teacher_knowledge:[\d.]+ - timing_s/update_actor:[\d.]+ - "
                  r"timing_s/step:[\d.]+ - actor/kl_loss:([\d.]+) - actor/lr:[\d.e+-]+")
# What the job prints by default: the lines verl's GKD recipe prints (main_gkd.py, ray_trainer.py),
# in the driver's and TaskRunner's order (docs/real-logs.md).
DRIVER_MARKERS = [
    r"ray init kwargs: \{'num_cpus': None, 'runtime_env': ",
    r"TaskRunner hostname: \S+, PID: \d+",
    r"resource_pool_spec: \{'rollout_pool': \[1\], 'actor_pool': \[2\]\}",
    r"Generating train split: \d+ examples",
    r"dataset len: 1024",
    r"Total training steps: 3",
    r"Training Progress",
    r"INFO: generate text done\.",
    r"INFO: update actor done\.",
    r"step:1 - ",
]
# The workers': verl's print_model_size on actor rank 0, the rollout in vLLM's format, the teacher server.
WORKER_MARKERS = [
    r"\(OnPolicyDistillActor pid=\d+\S*\) TinyBigramForCausalLM contains [\d.]+K parameters",
    r"\(RolloutWorker pid=\d+\S*\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[core\.py:\d+\] Initializing a V1 LLM engine",
    r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ seconds",
    r"\(TeacherWorker pid=\d+\S*\) Reading configs from gkdtop/tiny-teacher: config\.vocab_size=32",
    r"It took [\d.]+ seconds to wake up tags \['weights'\]\.",
    r"It took [\d.]+ seconds to wake up tags \['kv_cache'\]\.",
    r"It took [\d.]+ seconds to fall asleep\.",
]
WAKE_WEIGHTS = r"to wake up tags \['weights'\]"  # the rollout's first line of the initial weight sync


# --------------------------------------------------------------------------- helpers


def log_text(path: Path) -> str:
    try:
        return ANSI.sub("", path.read_text(errors="replace"))
    except FileNotFoundError:
        return ""


def wait_for_log(path: Path, pattern: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> str:
    """Poll the log until `pattern` shows; fail with its tail if it does not in time (or the job ends)."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        text = log_text(path)
        if rx.search(text):
            return text
        if time.monotonic() > deadline or not alive():
            pytest.fail(f"{pattern!r} not in the log after {timeout:.0f}s; tail:\n{text[-3000:]}")
        time.sleep(0.25)


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE  # is_running: pid reuse-proof
    except psutil.Error:
        return False


def names(procs: list[psutil.Process]) -> set[str]:
    out = set()
    for proc in procs:
        try:
            out.add(proc.name())
            cmd = proc.cmdline()
            if cmd and cmd[0].startswith("ray::"):
                out.add("ray::")
        except psutil.Error:
            continue
    return out


def assert_ray_was_running(seen: list[psutil.Process]) -> None:
    """The process survey must have found the cluster, or 'nothing left' proves nothing."""
    found = names(seen)
    assert {"raylet", "gcs_server", "ray::"} <= found, found


def assert_nothing_left(seen: list[psutil.Process], sessions: set[int], temp_dir: str | None, since: float,
                        launcher: psutil.Process | None = None) -> None:
    left = [p for p in seen if is_alive(p)]
    assert not left, [(p.pid, p.name()) for p in left]
    markers = [temp_dir] if temp_dir else []
    more = find_processes(sessions=sessions, markers=markers, since=since)
    assert not more, [(p.pid, p.name()) for p in more]
    if launcher is not None:
        kids = [p for p in launcher.children(recursive=True) if is_alive(p) and p.create_time() >= since - 1]
        assert not kids, [(p.pid, p.name(), p.cmdline()[:4]) for p in kids]
    if temp_dir:
        assert not Path(temp_dir).exists()


def mapped_by(path: str) -> list[int]:
    """Pids that map `path` or hold it open."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if path in (entry / "maps").read_text():
                pids.append(int(entry.name))
                continue
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) == path:
                    pids.append(int(entry.name))
                    break
        except OSError:
            continue
    return pids


def flock_waiters() -> set[int]:
    """Pids blocked waiting for a file lock: /proc/locks marks each waiter's line `->`."""
    pids = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->":
            pids.add(int(fields[5]))
    return pids


def run_sessions(run: DemoRun) -> set[int]:
    sessions = {run.pid}
    sid = run.cluster_info().get("session_id")
    if isinstance(sid, int):
        sessions.add(sid)
    return sessions


def gkdtop_json(*args: str, timeout: float = 60.0) -> dict:
    """Run `gkdtop ARGS --json` as a user would and parse what it prints."""
    out = subprocess.run([sys.executable, "-m", "gkdtop", *args, "--json"], capture_output=True, text=True,
                         timeout=timeout)
    assert out.stdout.strip(), out.stderr[-2000:]
    return json.loads(out.stdout)


def poll_snapshot(until: Callable[[dict], bool], timeout: float, *args: str) -> tuple[dict, float]:
    """Take snapshots until one satisfies `until`; return it and when it was taken (monotonic)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = gkdtop_json("snapshot", *args)
        if until(snap):
            return snap, time.monotonic()
        if time.monotonic() > deadline:
            pytest.fail(f"no snapshot satisfied the condition in {timeout:.0f}s; last: {json.dumps(snap)[:3000]}")
        time.sleep(0.5)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., DemoRun]]:
    """start(**DemoOptions) -> a run in this process; every run is stopped, swept and de-debrised after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs: list[DemoRun] = []

    def start(**kwargs: object) -> DemoRun:
        run = start_demo(DemoOptions(**kwargs))  # type: ignore[arg-type]
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.stop(grace=10.0)
        terminate(run.processes())
        remove_debris(run.debris())


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], Path]]]:
    """`gkdtop demo --no-ui` as a separate launcher process; always killed and swept after."""
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    cache = tmp_path / "cache"

    def start(**kwargs: object) -> tuple[subprocess.Popen[str], Path]:
        code = ("import sys; from gkdtop.demo.launcher import DemoOptions, main_no_ui; "
                f"sys.exit(main_no_ui(DemoOptions(**{kwargs!r})))")
        env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        # As from a terminal: Ctrl-C must reach it even when the suite runs as a background job
        # (a shell starts those with SIGINT ignored, and the launcher would inherit that).
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        procs.append((proc, cache))
        return proc, cache

    yield start
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    for info in run_infos(cache):
        sessions = {info["pid"], *cluster_session(Path(info["run_dir"]))}
        terminate(find_processes(sessions=sessions, markers=[info["ray_temp_dir"]], since=info["started"]))
        shutil.rmtree(info["ray_temp_dir"], ignore_errors=True)


def run_infos(cache: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(cache.glob("gkdtop/runs/*/run.json"))]


def cluster_session(run_dir: Path) -> set[int]:
    try:
        return {json.loads((run_dir / "cluster.json").read_text())["session_id"]}
    except (OSError, ValueError, KeyError):
        return set()


def wait_run_info(cache: Path, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while not (infos := run_infos(cache)):
        if time.monotonic() > deadline:
            pytest.fail("the launcher wrote no run.json")
        time.sleep(0.1)
    return infos[0]


# --------------------------------------------------------------------------- cheap checks (no Ray)


def test_faults_are_the_documented_ones() -> None:
    assert FAULTS == ("hang-sync", "mismatch-sync", "stall-dataset", "crash-rollout", "infeasible", "leak")
    for fault in FAULTS:
        assert parse_args(["--fault", fault]).fault == fault


def test_unknown_fault_is_refused_before_anything_starts(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="unknown fault"):
        start_demo(DemoOptions(fault="nope"))
    assert not list(tmp_path.iterdir())  # not even a run directory


def test_progress_bar_looks_like_tqdm(capsys: pytest.CaptureFixture[str]) -> None:
    bar = ProgressBar("Training Progress", total=4)
    bar.update(1)
    bar.close()
    split = ProgressBar("Generating train split", unit="examples")
    split.update(128)
    split.close()
    out = capsys.readouterr().out
    assert "\rTraining Progress:   0%|          | 0/4 [00:00<?, ?it/s]" in out
    assert re.search(r"\rTraining Progress:  25%\|██▌       \| 1/4 \[00:00<", out)
    assert "\rGenerating train split: 0 examples [00:00, ? examples/s]" in out
    assert re.search(r"\rGenerating train split: 128 examples \[00:00, [\d.]+ examples/s\]\n", out)


# --------------------------------------------------------------------------- the real job


def test_three_steps_no_ui_finish_clean(launcher: Callable[..., tuple[subprocess.Popen[str], Path]]) -> None:
    t0 = time.monotonic()
    proc, cache = launcher(steps=3, pace=0.0)  # no emulated accelerator time: nothing here times a step
    info = wait_run_info(cache)
    log = Path(info["log"])
    wait_for_log(log, r"step:1 - ", timeout=120, alive=lambda: proc.poll() is None)
    first_step_s = time.monotonic() - t0
    sessions = {info["pid"], *cluster_session(Path(info["run_dir"]))}
    seen = find_processes(roots=[info["pid"]], sessions=sessions, markers=[info["ray_temp_dir"]],
                          since=info["started"])
    assert_ray_was_running(seen)
    out, _ = proc.communicate(timeout=120)
    total_s = time.monotonic() - t0
    assert proc.returncode == 0, out
    assert f"run directory {info['run_dir']}" in out and f"log {log}" in out

    text = log_text(log)
    pos = -1
    for marker in DRIVER_MARKERS:  # present, and in the TaskRunner's order
        m = re.compile(marker).search(text, pos + 1)
        assert m, f"{marker!r} missing (or out of order) in:\n{text[-4000:]}"
        assert m.group(0) in text
        pos = m.start()
    for marker in WORKER_MARKERS:
        assert re.search(marker, text), marker
    assert "[ACTOR]" not in text and "[SYNC]" not in text  # the playbook's markers only with --markers playbook
    # gkdtop reads it as the verl job it prints like: the profile, and every phase named.
    doc = gkdtop_json("replay", str(log))
    assert doc["framework"]["name"] == "verl" and doc["framework"]["label"].startswith("verl · GKD"), doc["framework"]
    # The initial weight sync is a span of its own when the rollout's wake-up line reaches the log
    # before the TaskRunner's first bar (two processes: Ray forwards each on its own).
    names = [span["name"] for span in doc["timeline"] if span["name"] != "weight sync"]
    assert names == ["config", "worker-group creation", "dataset generation", "actor init", "rollout init",
                     "teacher", "training loop", "finished"], names
    assert doc["state"] == "done" and doc["steps"]["count"] == 3
    # Watched as it was written (at its own stamps), the clean run tells only that it finished: no false alarm.
    told = gkdtop_json("replay", "--alerts", str(log))
    assert [event["event"] for event in told] == ["finished"], told
    steps = [(int(s), float(loss)) for s, loss in STEP.findall(text)]
    assert [s for s, _ in steps] == [1, 2, 3], text[-3000:]
    assert steps[-1][1] < steps[0][1], steps  # the distillation loss falls
    assert "✓ Training finished: 3 steps" in text
    assert_nothing_left(seen, sessions, info["ray_temp_dir"], info["started"])
    print(f"\n[demo timing] first step line after {first_step_s:.1f}s, whole 3-step run {total_s:.1f}s")


def test_hang_sync_deadlocks_in_the_collective_and_stop_cleans_up(demo: Callable[..., DemoRun]) -> None:
    run = demo(steps=3, fault="hang-sync")
    text = wait_for_log(run.log_path, WAKE_WEIGHTS, 120, alive=run.running)
    sync_seen = time.monotonic()
    assert "Reading configs from gkdtop/tiny-teacher" in text
    seen = run.processes()
    assert_ray_was_running(seen)

    # gkdtop's own snapshot says where it hangs, within --stall-after plus a margin for a loaded machine.
    stall_after, margin = 3.0, 10.0
    snap, stalled_at = poll_snapshot(lambda s: s["phases"]["state"] == "stalled", stall_after + margin + 20,
                                     "--log", str(run.log_path), "--stall-after", str(stall_after),
                                     "--ray-address", str(run.dashboard_url))
    assert snap["phases"]["current"] == "weight sync", snap["phases"]
    assert stalled_at - sync_seen <= stall_after + margin, stalled_at - sync_seen
    assert snap["phases"]["stalled_for"] >= stall_after
    assert snap["phases"]["hint"]["causes"], snap["phases"]["hint"]
    done = [p["name"] for p in snap["phases"]["timeline"] if p["status"] == "done"]
    assert {"config", "worker-group creation", "dataset generation", "actor init", "rollout init",
            "teacher"} <= set(done), done
    assert snap["framework"]["name"] == "verl", snap["framework"]
    text = log_text(run.log_path)
    assert run.running()
    assert "to wake up tags ['kv_cache']" not in text
    assert not STEP.search(text)

    # gkdtop's stack dump: rank 0 waits inside the weight broadcast, rank 1 never made the call and is
    # singled out as the one that is not where its peers are.
    # Rank 0 printed the model size (verl prints it on rank 0 only); rank 1 is the other actor process.
    rank0 = int(re.search(r"\(OnPolicyDistillActor pid=(\d+)\S*\) TinyBigramForCausalLM", text).group(1))  # type: ignore[union-attr]
    actors = {p.pid for p in run.processes() if "OnPolicyDistillActor" in " ".join(p.cmdline())}
    assert rank0 in actors and len(actors) == 2, actors
    ranks = {0: rank0, 1: (actors - {rank0}).pop()}
    rollout = int(re.search(r"\(RolloutWorker pid=(\d+)", text).group(1))  # type: ignore[union-attr]
    report = gkdtop_json("stacks", str(ranks[0]), str(ranks[1]), str(rollout), timeout=120)
    by_pid = {d["pid"]: d for d in report["dumps"]}
    assert all(d["ok"] for d in by_pid.values()), report
    assert by_pid[ranks[0]]["role"] == by_pid[ranks[1]]["role"] == "actor"
    frames = {pid: {f["function"] for t in d["threads"] for f in t["frames"]} for pid, d in by_pid.items()}
    assert any("broadcast_weights" in f for f in frames[ranks[0]])
    assert any("broadcast_weights" in f for f in frames[rollout])
    assert not any("broadcast_weights" in f for f in frames[ranks[1]])
    assert report["outliers"] == [ranks[1]], report["outliers"]
    # The Flight Recorder says it below Python: rank 1 never entered the first broadcast of weight_sync.
    colls = report["collectives"]
    sync = next(g for g in colls["groups"] if g["name"] == "weight_sync")
    assert (sync["kind"], sync["missing"], sync["op"], sync["seq"]) == ("missing ranks", [1], "broadcast", 1), sync
    assert {s["rank"]: s["pid"] for s in sync["states"]} == {0: ranks[0], 1: ranks[1], 2: rollout}
    assert colls["sentence"].startswith("rank 1 (OnPolicyDistillActor) never entered broadcast #1 of weight_sync")
    # Ray's task table says it too: rank 1 returned from the weight sync its peers are blocked in.
    assert_rank_1_left_the_weight_sync(run)

    sessions = run_sessions(run)
    run.stop()
    assert run.returncode == 128 + signal.SIGTERM  # the driver tore down by itself, no SIGKILL needed
    assert_nothing_left(seen, sessions, str(run.ray_temp_dir), run.started, launcher=psutil.Process())


def test_mismatch_sync_is_named_a_type_mismatch_with_its_culprit(demo: Callable[..., DemoRun]) -> None:
    run = demo(steps=3, fault="mismatch-sync")
    text = wait_for_log(run.log_path, WAKE_WEIGHTS, 120, alive=run.running)
    actors = [str(p.pid) for p in run.processes() if "OnPolicyDistillActor" in " ".join(p.cmdline())]
    pids = [*actors, re.search(r"\(RolloutWorker pid=(\d+)", text).group(1)]  # type: ignore[union-attr]

    def named(report: dict) -> bool:
        sync = next((g for g in report["collectives"]["groups"] if g["name"] == "weight_sync"), {})
        return sync.get("culprits") == [1]

    deadline = time.monotonic() + 60
    while not named(report := gkdtop_json("stacks", *pids, timeout=120)) and time.monotonic() < deadline:
        time.sleep(0.5)  # rank 0 may not have reached the broadcast yet
    sync = next(g for g in report["collectives"]["groups"] if g["name"] == "weight_sync")
    assert (sync["kind"], sync["culprits"], sync["op"], sync["seq"]) == ("collective type", [1], "broadcast", 1), sync
    assert report["collectives"]["sentence"].startswith(
        "collective type mismatch at collective #1 of weight_sync: rank 1 (OnPolicyDistillActor) called all_reduce "
        "where ranks 0 and 2 called broadcast"), report["collectives"]["sentence"]
    assert run.running() and not STEP.search(log_text(run.log_path))
    run.stop()


def test_crash_rollout_fails_with_actor_died(demo: Callable[..., DemoRun]) -> None:
    run = demo(steps=4, fault="crash-rollout", markers="playbook", pace=0.0)  # the old markers: still printed on demand
    wait_for_log(run.log_path, r"\[SYNC\] Starting weight synchronization", timeout=120, alive=run.running)
    seen = run.processes()
    assert_ray_was_running(seen)
    sessions = run_sessions(run)
    code = run.wait(timeout=120)
    assert code is not None and code != 0
    text = log_text(run.log_path)
    assert "ActorDiedError" in text
    assert "Traceback (most recent call last)" in text
    assert [int(s) for s, _ in STEP.findall(text)] == [1]  # it died in step 2
    assert "[ACTOR] init_model START" in text and "INFO: update actor done." not in text
    doc = gkdtop_json("replay", str(run.log_path))
    # The worker's own `Fatal Python error: Segmentation fault` is the root cause where Ray delivers it before the
    # driver's ActorDiedError (an actor's death never replaces an error already named).
    said = doc["failure"]
    # (Ray's own handler prints it first as `*** SIGSEGV received at time=… on cpu 1 ***` where that line comes first.)
    causes = ("ActorDiedError", "Segmentation fault", "SIGSEGV")
    assert doc["state"] == "failed" and any(w in said for w in causes), said
    # The job's own teardown already removed its cluster; stop() has nothing left to do.
    assert_nothing_left(seen, sessions, str(run.ray_temp_dir), run.started, launcher=psutil.Process())
    run.stop()


def test_leak_leaves_exactly_an_orphan_and_a_shm_segment(demo: Callable[..., DemoRun]) -> None:
    run = demo(steps=4, fault="leak", pace=0.0)
    wait_for_log(run.log_path, WAKE_WEIGHTS, timeout=120, alive=run.running)
    seen = run.processes()
    assert_ray_was_running(seen)
    sessions = run_sessions(run)
    code = run.wait(timeout=120)
    assert code is not None and code != 0
    text = log_text(run.log_path)
    assert "ActorDiedError" in text
    debris = run.debris()
    try:
        assert len(debris["orphans"]) == 1 and len(debris["shm"]) == 1, debris
        orphan = psutil.Process(debris["orphans"][0]["pid"])
        assert is_alive(orphan)
        assert orphan.cmdline()[1:] == debris["orphans"][0]["cmdline"][1:]
        assert "--engine-core" in orphan.cmdline() and str(run.run_dir) in orphan.cmdline()
        assert f"engine core started | pid={orphan.pid}" in text
        # Re-parented away from everything of the run (to PID 1 or the nearest subreaper).
        assert orphan.ppid() == 1 or orphan.ppid() not in {p.pid for p in seen} | {os.getpid()}
        assert os.getsid(orphan.pid) not in sessions
        shm = debris["shm"][0]
        assert re.fullmatch(r"/dev/shm/nccl-[A-Za-z0-9]{6}", shm)
        assert os.path.getsize(shm) == 4 << 20
        assert shm in text
        assert mapped_by(shm) == []
        # gkdtop's cleanup plan finds exactly this debris (dry run: it touches nothing).
        plan = gkdtop_json("cleanup", "--dry-run")
        targets = {str(item["target"]): item for item in plan["items"]}
        assert str(orphan.pid) in targets and shm in targets, sorted(targets)
        assert targets[shm]["selected"] and targets[str(orphan.pid)]["selected"], plan
        assert is_alive(orphan) and os.path.exists(shm)
        # Apart from the debris, the run is gone.
        assert_nothing_left([p for p in seen if p.pid != orphan.pid], sessions, str(run.ray_temp_dir),
                            run.started)
        run.stop()
        assert is_alive(orphan) and os.path.exists(shm)  # stop() does not clean debris: that is cleanup's job
    finally:
        remove_debris(debris)
    assert not os.path.exists(debris["shm"][0])
    assert not psutil.pid_exists(debris["orphans"][0]["pid"]) or not is_alive(
        psutil.Process(debris["orphans"][0]["pid"]))


def test_infeasible_waits_for_gpus_that_never_come(demo: Callable[..., DemoRun]) -> None:
    run = demo(steps=3, fault="infeasible")
    wait_for_log(run.log_path, r"Total training steps: 3", timeout=120, alive=run.running)
    seen = run.processes()
    assert_ray_was_running(seen)
    # Ray itself reports the demand that fits no node.
    text = wait_for_log(run.log_path, r"No available node types can fulfill|cannot be scheduled", timeout=60,
                        alive=run.running)
    assert "'GPU'" in text
    # gkdtop's Ray collector shows the demand that will never be met, and the stalled phase names it.
    snap, _ = poll_snapshot(lambda s: any("GPU" in d for d in s["ray"].get("pending") or []), 60,
                            "--log", str(run.log_path), "--ray-address", str(run.dashboard_url),
                            "--stall-after", "3")
    assert snap["ray"]["status"] == "connected", snap["ray"]
    assert not snap["ray"]["resources"]["total"].get("GPU")
    text = log_text(run.log_path)
    assert run.running()
    assert "TinyBigramForCausalLM contains" not in text  # no actor got to load its model
    sessions = run_sessions(run)
    run.stop()
    assert_nothing_left(seen, sessions, str(run.ray_temp_dir), run.started, launcher=psutil.Process())


def test_stall_dataset_then_ctrl_c_to_the_launcher(launcher: Callable[..., tuple[subprocess.Popen[str], Path]]
                                                    ) -> None:
    proc, cache = launcher(steps=3, fault="stall-dataset")
    info = wait_run_info(cache)
    log = Path(info["log"])
    text = wait_for_log(log, r"Generating train split: 0 examples", timeout=120, alive=lambda: proc.poll() is None)
    sessions = {info["pid"], *cluster_session(Path(info["run_dir"]))}
    seen = find_processes(roots=[info["pid"]], sessions=sessions, markers=[info["ray_temp_dir"]],
                          since=info["started"])
    assert_ray_was_running(seen)
    # Stalled for good: the TaskRunner waits in the kernel for the cache lock (not a fixed sleep and a hope).
    runner = int(re.search(r"TaskRunner hostname: \S+, PID: (\d+)", text).group(1))  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while runner not in flock_waiters():
        assert time.monotonic() < deadline, f"TaskRunner {runner} never blocked on a lock: {flock_waiters()}"
        time.sleep(0.1)
    text = log_text(log)
    assert "Dataset generation completed" not in text and "Creating ResourcePool" not in text
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # Ctrl-C in the terminal reaches the launcher only
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "received SIGTERM: tearing down" in log_text(log)
    assert_nothing_left(seen, sessions, info["ray_temp_dir"], info["started"])


def test_job_dies_with_its_launcher(launcher: Callable[..., tuple[subprocess.Popen[str], Path]]) -> None:
    """A gkdtop that is SIGKILLed cannot run stop(): the job notices its parent is gone and tears down."""
    proc, cache = launcher(steps=3, fault="stall-dataset")
    info = wait_run_info(cache)
    wait_for_log(Path(info["log"]), r"Generating train split: 0 examples", timeout=120,
                 alive=lambda: proc.poll() is None)
    sessions = {info["pid"], *cluster_session(Path(info["run_dir"]))}
    seen = find_processes(roots=[info["pid"]], sessions=sessions, markers=[info["ray_temp_dir"]],
                          since=info["started"])
    assert_ray_was_running(seen)
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 60
    while any(is_alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "received SIGTERM: tearing down" in log_text(Path(info["log"]))
    assert_nothing_left(seen, sessions, info["ray_temp_dir"], info["started"])
