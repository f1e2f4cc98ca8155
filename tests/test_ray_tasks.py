"""The Ray task view (collectors/ray_tasks.py, analysis/stragglers.py, analysis/taskphases.py): the phase
and the straggler from Ray's own task table, on real local clusters (own temp dir and ports), in the
real app, in `snapshot --json`; plus the pure logic over hand-made task lists, and a dashboard that
answers 404, garbage or nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gkdtop import snapshot
from gkdtop.analysis.stragglers import failed_causes, find_stragglers, rank_of
from gkdtop.analysis.taskphases import TaskPhaser, builtin_task_phases
from gkdtop.collectors.ray_tasks import RayTasksCollector, error_line
from gkdtop.config import Config, ConfigError, builtin_phases, load_config
from gkdtop.model.tasks import RayTask, RayTasksState
from gkdtop.monitor import Monitor
from gkdtop.store import Store
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.phases_pane import PhasesPane
from gkdtop.tui.ray_pane import RayPane
from tests.raycluster import RayCluster, new_cluster, start_driver, wait_for
from tests.test_app import pane_text, settle

NOW = 1_800_000_000.0


def task(func: str, state: str, actor: str, pid: int, created: float, start: float | None = None,
         end: float | None = None, rank: int | None = None, parent: str = "driver") -> RayTask:
    return RayTask(task_id=f"{actor}-{func}-{created}", func=func, state=state, name=func, actor_id=actor, pid=pid,
                   node_ip="10.0.0.3", created=created, start=created if start is None else start, end=end, rank=rank,
                   parent_task_id=parent)


# --- the pure logic -----------------------------------------------------------------------------


def test_three_of_four_returned_names_the_fourth_with_its_node_and_age() -> None:
    began = NOW - 245
    running = [task("WorkerDict.actor_rollout_update_actor", "RUNNING", "a4", 4242, began)]
    finished = [task("WorkerDict.actor_rollout_update_actor", "FINISHED", f"a{i}", 4000 + i, began + 0.01 * i,
                     end=NOW - 130 - i) for i in range(3)]
    # Each peer's return from an earlier step is no member of this round.
    finished.append(task("WorkerDict.actor_rollout_update_actor", "FINISHED", "a0", 4000, began - 600, end=began - 500))
    (found,) = find_stragglers(running, finished, NOW)
    assert found.kind == "straggler" and found.members == 4
    assert found.sentence(NOW) == ("3 of 4 WorkerDict finished actor_rollout_update_actor 2m10s ago; "
                                   "pid 4242 on node 10.0.0.3 is still in it (4m05s)")
    doc = found.as_json(NOW)
    assert (doc["method"], doc["finished"], doc["still_in"][0]["pid"]) == ("actor_rollout_update_actor", 3, 4242)
    # Not yet a straggler: the others returned a moment ago, in a call that takes minutes.
    fresh = [task("W.f", "FINISHED", f"b{i}", 10 + i, NOW - 100, end=NOW - 0.5) for i in range(3)]
    assert find_stragglers([task("W.f", "RUNNING", "b9", 19, NOW - 100)], fresh, NOW) == []
    # Another caller's call of the same method is another round.
    other = [task("W.f", "FINISHED", f"c{i}", 20 + i, NOW - 100, end=NOW - 50, parent="other") for i in range(3)]
    assert find_stragglers([task("W.f", "RUNNING", "c9", 29, NOW - 100)], other, NOW) == []


def test_a_rank_that_returned_from_the_weight_sync_left_the_collective() -> None:
    """The demo's hang-sync: rank 1 returns from sync_weights at once; rank 0 and the rollout wait."""
    phaser = TaskPhaser(builtin_task_phases())
    began = NOW - 185
    running = [task("OnPolicyDistillActor.sync_weights", "RUNNING", "r0", 100, began, rank=0),
               task("RolloutWorker.receive_weights", "RUNNING", "ro", 300, began + 0.002)]
    finished = [task("OnPolicyDistillActor.sync_weights", "FINISHED", "r1", 200, began + 0.001, end=began + 0.05,
                     rank=1)]
    (found,) = find_stragglers(running, finished, NOW, phaser.phase_of)  # the one-class round is inside it
    assert (found.kind, found.method, found.class_name) == ("left early", "weight sync", "")
    assert [t.rank for t in found.finished] == [1]
    assert found.sentence(NOW) == (
        "rank 1 (pid 200 on node 10.0.0.3) of OnPolicyDistillActor returned from sync_weights 3m04s ago after 0s, "
        "while rank 0 (pid 100 on node 10.0.0.3) and RolloutWorker pid 300 on node 10.0.0.3 are still in weight "
        "sync (3m05s): it left the collective the others are blocked in")
    assert found.as_json(NOW)["left"][0]["rank"] == 1
    # Without the phase rules, the class's own round says it.
    (alone,) = find_stragglers(running, finished, NOW)
    assert (alone.kind, alone.method, alone.class_name) == ("left early", "sync_weights", "OnPolicyDistillActor")
    # Seconds into the sync, nobody has left anything yet.
    assert find_stragglers(running, finished, began + 2, phaser.phase_of) == []


def test_task_names_map_to_phases_for_verl_openrlhf_and_the_demo() -> None:
    phaser = TaskPhaser(builtin_task_phases())
    assert {rule.framework for rule in phaser.rules} >= {"verl", "openrlhf", "demo"}
    for rule in phaser.rules:  # compiled lazily at run time: each one here, by the engine that runs it
        assert rule.tasks.compiled is not None, rule
    expected = {
        "WorkerDict.actor_rollout_generate_sequences": "generation",
        "WorkerDict.actor_rollout_update_actor": "actor update",
        "WorkerDict.ref_compute_ref_log_prob": "reference log-prob",
        "WorkerDict.actor_rollout_compute_log_prob": "old log-prob",
        "WorkerDict.critic_update_critic": "critic update",
        "WorkerDict.actor_rollout_save_checkpoint": "checkpoint save",
        "LLMRayActor.add_requests": "generation",
        "PolicyModelActor.broadcast_to_vllm": "weight sync",
        "ReferenceModelActor.forward": "reference log-prob",
        "OnPolicyDistillActor.sync_weights": "weight sync",
        "RolloutWorker.receive_weights": "weight sync",
        "TaskRunner.run": None,  # the driver's loop: every phase at once, so none
        "ActorModelRayActor.fit": None,  # OpenRLHF's loop before its 0.8 rewrite: the same (it was `actor update`)
        "PolicyModelActor.fit": "actor update",  # since then: one step's update, called by the driver
    }
    assert {func: phaser.phase_of(func) for func in expected} == expected
    found = phaser.task_phase([task("TaskRunner.run", "RUNNING", "t", 1, NOW - 600),
                               *[task("WorkerDict.actor_rollout_update_actor", "RUNNING", f"w{i}", 10 + i, NOW - 30 - i)
                                 for i in range(4)]])
    assert found is not None and found.text == "actor update (from Ray tasks: WorkerDict.actor_rollout_update_actor ×4)"
    assert found.since == NOW - 33
    assert found.as_json(NOW, "generation", "evidence")["agrees"] is False


def test_user_task_phases_come_first_and_a_bad_one_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("task_phases:\n  - phase: rollout scoring\n"
                    "    tasks: '^WorkerDict\\.actor_rollout_generate_sequences$'\n")
    store = Store(load_config(path))
    assert store.task_phaser().phase_of("WorkerDict.actor_rollout_generate_sequences") == "rollout scoring"
    assert store.task_phaser().phase_of("WorkerDict.actor_rollout_update_actor") == "actor update"
    path.write_text("stall_after: 60\ntask_phases:\n  - phase: x\n    task: 'y'\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:4: task_phases\[0\]\.task: unknown key"):
        load_config(path)
    path.write_text("task_phases:\n  - phase: x\n    tasks: '(unclosed'\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:3: task_phases\[0\]\.tasks: "):
        load_config(path)
    path.write_text("task_phases:\n  - phase: x\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:2: task_phases\[0\]: needs 'phase' and 'tasks'"):
        load_config(path)


def test_failed_tasks_become_causes_unless_the_log_says_them() -> None:
    boom = RayTask("t1", "W.boom", "FAILED", actor_id="545bce65e801608e", pid=4242, node_ip="10.0.0.3",
                   error_type="TASK_EXECUTION_EXCEPTION", error="ValueError: bad shard 7", end=NOW)
    cancelled = RayTask("t2", "W.stop", "FAILED", actor_id="a", error_type="TASK_CANCELLED", error="cancelled")
    assert failed_causes([cancelled, boom], lambda text: False) == [
        "Ray task W.boom failed on node 10.0.0.3 (pid 4242, actor 545bce65): ValueError: bad shard 7"]
    assert failed_causes([boom], lambda text: text == "ValueError: bad shard 7") == []
    message = ("User exception:\nray::W.boom() (pid=19485, ip=10.0.0.3, actor_id=545b, repr=W(rank=0))\n"
               "           ^^^^^^^^^^^^\n  File \"<string>\", line 11, in boom\nValueError: bad shard 7")
    assert error_line("TASK_EXECUTION_EXCEPTION", message) == "ValueError: bad shard 7"
    assert error_line("ACTOR_DIED", "The actor died unexpectedly before finishing this task.\nmore") == \
        "The actor died unexpectedly before finishing this task."
    assert (rank_of("a1b2c3WorkerDict_0:3"), rank_of("xWorkerDict_1:3"), rank_of("Counter")) == (3, None, None)


# --- a dashboard that answers 404, garbage or nothing -------------------------------------------------


class Dashboard(BaseHTTPRequestHandler):
    """A real HTTP server in front of the collector: old Ray (no task list), garbage, or a hang."""

    mode = "404"
    release = threading.Event()

    def do_GET(self) -> None:
        if self.mode == "hang":
            self.release.wait(30)
        if self.mode == "404" or self.mode == "hang":
            self.send_error(404)
            return
        body = b"<html>not json</html>" if self.mode == "garbage" else json.dumps(
            {"result": False, "msg": "Failed to query the GCS: deadline exceeded\nmore", "data": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dashboard() -> Iterator[tuple[str, type[Dashboard]]]:
    handler = type("Handler", (Dashboard,), {"release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def test_old_ray_garbage_an_unwilling_state_api_and_a_hang_are_one_line_each(
        dashboard: tuple[str, type[Dashboard]]) -> None:
    url, handler = dashboard
    collector = RayTasksCollector(url, interval=0.1, timeout=1.0)
    state = collector.collect()
    assert state.status == "unsupported" and "\n" not in state.reason
    assert "has no /api/v0/tasks (404): the task view needs Ray >= 2.9" in state.reason
    handler.mode = "garbage"
    assert (collector.collect().status, collector.collect().reason) == (
        "error", "the dashboard's answer is not JSON (Expecting value)")
    handler.mode = "unwilling"
    assert collector.collect().reason == "the state API said: Failed to query the GCS: deadline exceeded"
    handler.mode = "hang"
    started = time.monotonic()
    state = collector.collect()
    assert time.monotonic() - started < 10
    assert state.status == "not connected" and state.reason == f"no answer from {url} (timed out)"


# --- real clusters --------------------------------------------------------------------------------

FOUR_ACTORS = """
import os, sys, threading, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0.1)
class Shard:
    def pid(self):
        return os.getpid()
    def train_step(self, hang):
        if hang:
            threading.Event().wait()  # never returns: the straggler
        return os.getpid()
shards = [Shard.remote() for _ in range(4)]
pids = ray.get([s.pid.remote() for s in shards])
calls = [s.train_step.remote(i == 2) for i, s in enumerate(shards)]
ray.get([c for i, c in enumerate(calls) if i != 2])
sys.stdout.write(f"GKD-DRIVER {pids[2]} " + " ".join(map(str, pids)) + "\\n"); sys.stdout.flush()
time.sleep(600)
"""

FAILING = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0.1)
class Loader:
    def load(self):
        raise ValueError("bad shard 7 in /data/train-00007.parquet")
loader = Loader.remote()
try:
    ray.get(loader.load.remote())
except Exception:
    pass
sys.stdout.write("GKD-DRIVER failed\\n"); sys.stdout.flush()
time.sleep(600)
"""


def monitor_for(cluster_dashboard: str, tmp_path: Path, interval: float) -> Monitor:
    """A monitor with no log at all (the file never exists), polling the task table every `interval`.

    Its polls may keep the test cluster's dashboard busy half the time (SERVER_SHARE, 2% by default, spaces
    them out by 50 times what the last one took: the first one's table reads, 0.1-0.3 s on a loaded machine,
    put the second 5-15 s later); the tests count polls, not seconds."""
    config = Config(phases=builtin_phases())
    config.stack_phase = config.stall_stacks = False
    config.refresh.update({"ray_tasks": interval, "ray": 60.0, "gpus": 60.0, "procs": 60.0, "ui": 0.2})
    monitor = Monitor(config, logs=[str(tmp_path / "no-such.log")], ray_address=cluster_dashboard)
    next(c for c in monitor.collectors if c.name == "ray_tasks").server_share = 0.5  # type: ignore[attr-defined]
    return monitor


def listed(dashboard: str, name: str) -> dict[str, int]:
    """How many tasks named `name` the dashboard's state API lists, by state."""
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"limit": 1000, "detail": 1, "filter_keys": "name", "filter_predicates": "=",
                                    "filter_values": name})
    with urllib.request.urlopen(f"{dashboard}/api/v0/tasks?{query}", timeout=10) as response:
        rows = (json.load(response).get("data") or {}).get("result", {}).get("result") or []
    states: dict[str, int] = {}
    for row in rows:
        states[row.get("state")] = states.get(row.get("state"), 0) + 1
    return states


async def test_four_actors_one_never_returns_is_named_by_pid_within_two_polls(
        ray_cluster: RayCluster, tmp_path: Path) -> None:
    driver, line = start_driver(ray_cluster, FOUR_ACTORS)
    try:
        hung, *pids = (int(word) for word in line.split())
        # The workers report their tasks' events to the GCS about once a second, later on a loaded machine (4
        # polls once, under `-n 3`): the polls are counted from when Ray itself lists the three returns.
        wait_for(lambda: listed(ray_cluster.dashboard, "Shard.train_step").get("FINISHED", 0) >= 3, timeout=60,
                 interval=0.2, what="the state API listing the three finished train_step calls")
        monitor = monitor_for(ray_cluster.dashboard, tmp_path, interval=1.5)
        collector = next(c for c in monitor.collectors if c.name == "ray_tasks")
        named_at: list[int] = []
        monitor.store.watch(lambda source: named_at.append(collector.polls)  # type: ignore[attr-defined]
                            if source == "ray_tasks" and monitor.store.stragglers and not named_at else None)
        app = GkdtopApp(monitor.config, monitor)
        async with app.run_test(size=(180, 50)) as pilot:
            await settle(pilot, lambda: bool(named_at), timeout=60)
            assert named_at[0] <= 2, named_at
            (found,) = app.store.stragglers
            assert found.kind == "straggler" and [t.pid for t in found.running] == [hung]
            assert {t.pid for t in found.finished} == set(pids) - {hung}
            sentence = found.sentence(time.time())
            assert sentence.startswith("3 of 4 Shard finished train_step ") and f"pid {hung} on node " in sentence
            await settle(pilot, lambda: f"pid {hung} on node" in pane_text(app, PhasesPane))
            assert "3 of 4 Shard finished train_step" in pane_text(app, PhasesPane)

            # The Ray pane, maximized: the running tasks by age, the straggler's row marked; o reverses them.
            await pilot.press("5")
            await settle(pilot, lambda: "Running tasks (" in pane_text(app, RayPane))
            text = pane_text(app, RayPane)
            assert "oldest first (o)" in text and "Shard.train_step" in text and str(hung) in text
            await pilot.press("o")
            await settle(pilot, lambda: "newest first (o)" in pane_text(app, RayPane))

            doc = snapshot.build(app.store)
            row = next(t for t in doc["ray"]["tasks"] if t["pid"] == hung)
            assert (row["class"], row["method"], row["name"]) == ("Shard", "train_step", "Shard.train_step")
            assert row["actor_id"] and row["node"] and row["running_for"] > 0
            (straggler,) = doc["ray"]["stragglers"]
            assert (straggler["method"], straggler["finished"], straggler["members"]) == ("train_step", 3, 4)
            assert straggler["still_in"][0]["pid"] == hung and straggler["sentence"].startswith("3 of 4 Shard")
            assert doc["ray"]["task_view"]["status"] == "connected"
    finally:
        driver.kill()
        driver.wait()


def test_a_failed_task_reaches_snapshot_json(ray_cluster: RayCluster, tmp_path: Path) -> None:
    driver, _ = start_driver(ray_cluster, FAILING)
    try:
        watcher = RayTasksCollector(ray_cluster.dashboard, failed_every=1)  # until Ray lists it (events come late)
        wait_for(lambda: any("bad shard 7" in t.error for t in watcher.collect().failed), timeout=60,
                 what="the failed task")
        # The driver's log failed the run but lacks the task's error: the failure's hint leads with it.
        log = tmp_path / "driver.log"
        log.write_text("TaskRunner hostname: node-3, PID: 4242\nTraceback (most recent call last):\n"
                       "  File \"main.py\", line 9, in <module>\nRuntimeError: the loader returned no batch\n")
        out = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(log),
                              "--ray-address", ray_cluster.dashboard],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**ray_cluster.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        assert out.returncode == 0, out.stderr[-2000:]
        doc = json.loads(out.stdout)
        failed = next(t for t in doc["ray"]["failed_tasks"] if t["name"] == "Loader.load")
        assert failed["error"] == "ValueError: bad shard 7 in /data/train-00007.parquet"
        assert failed["error_type"] == "TASK_EXECUTION_EXCEPTION" and failed["state"] == "FAILED"
        assert failed["actor_id"] and failed["node"] and failed["pid"]
        assert doc["ray"]["task_view"]["failed_total"] >= 1
        assert doc["phases"]["state"] == "failed", doc["phases"]
        cause = doc["phases"]["hint"]["causes"][0]
        assert cause.startswith("Ray task Loader.load failed on node ")
        assert cause.endswith(f"(pid {failed['pid']}, actor {failed['actor_id'][:8]}): {failed['error']}")
    finally:
        driver.kill()
        driver.wait()


NO_EVENTS_DRIVER = """
import sys, threading, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0.1)
class Quiet:
    def wait(self):
        threading.Event().wait()
quiet = Quiet.remote()
busy = quiet.wait.remote()
sys.stdout.write("GKD-DRIVER started\\n"); sys.stdout.flush()
time.sleep(600)
"""


@pytest.fixture
def eventless() -> Iterator[RayCluster]:
    """A cluster whose workers record no task events, killed by the test (Ray dying mid-run)."""
    cluster = new_cluster()
    try:
        cluster.start(num_cpus=1, env={"RAY_task_events_report_interval_ms": "0"})
        yield cluster
    finally:
        cluster.remove()


async def test_no_task_events_then_ray_dying_are_one_line_each_and_the_app_goes_on(
        eventless: RayCluster, tmp_path: Path) -> None:
    driver, _ = start_driver(eventless, NO_EVENTS_DRIVER)
    try:
        monitor = monitor_for(eventless.dashboard, tmp_path, interval=0.5)
        # Two looks 1 s apart that find none (EVENTS_CONFIRM, 5 s by default): the cluster reports nothing at all.
        next(c for c in monitor.collectors if c.name == "ray_tasks").events_confirm = 1.0  # type: ignore[attr-defined]
        app = GkdtopApp(monitor.config, monitor)
        async with app.run_test(size=(180, 50)) as pilot:
            await pilot.press("5")
            await settle(pilot, lambda: app.store.ray_tasks.status == "no task events", timeout=90)
            await settle(pilot, lambda: "Ray tasks: no task events: the cluster records no task events "
                                        "(RAY_task_events_report_interval_ms=0?)" in pane_text(app, RayPane))
            assert "\n" not in app.store.ray_tasks.reason
            eventless.kill()  # Ray dies under the running dashboard
            await settle(pilot, lambda: app.store.ray_tasks.status == "not connected", timeout=60)
            await settle(pilot, lambda: "Ray tasks: not connected: " in pane_text(app, RayPane))
            assert app.store.health["ray_tasks"].ok  # a state, not a collector error
            await pilot.press("1")  # the dashboard goes on
            await settle(pilot, lambda: app.screen.maximized is app.query_one(PhasesPane))
    finally:
        driver.kill()
        driver.wait()


# --- the demo's hang-sync ---------------------------------------------------------------------------


def assert_rank_1_left_the_weight_sync(run: object) -> None:
    """The task view on the demo's hang-sync names rank 1 as the member that left the weight sync.

    Called by tests/test_demo.py's hang-sync test on its run, while it hangs: one demo run (a private
    cluster, torch in five processes: half a minute on 2 cores) serves both instead of one each."""
    collector = RayTasksCollector(run.dashboard_url, interval=1.0)  # type: ignore[attr-defined]
    store = Store(Config(phases=builtin_phases()))

    def left() -> RayTasksState | None:
        assert run.running(), run.log_path.read_text()[-3000:]  # type: ignore[attr-defined]
        store.put("ray_tasks", collector.collect())
        return store.ray_tasks if any(s.kind == "left early" for s in store.stragglers) else None

    wait_for(left, timeout=240, interval=1.0, what="the weight sync's early leaver")
    (found,) = store.stragglers
    assert (found.kind, found.method) == ("left early", "weight sync")
    (rank1,) = found.finished
    assert (rank1.rank, rank1.class_name, rank1.method) == (1, "OnPolicyDistillActor", "sync_weights")
    assert rank1.actor_name.endswith("OnPolicyDistillActor_0:1")
    still = {(t.class_name, t.rank) for t in found.running}
    assert still == {("OnPolicyDistillActor", 0), ("RolloutWorker", None)}
    sentence = found.sentence(time.time())
    assert sentence.startswith(f"rank 1 (pid {rank1.pid} on node ") and "returned from sync_weights" in sentence
    assert "it left the collective the others are blocked in" in sentence
    assert store.task_phase is not None and store.task_phase.phase == "weight sync"
