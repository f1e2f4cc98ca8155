"""Multi-node Ray against real clusters: remote logs, per-node GPUs (fake NVML in Ray's agent), remote stacks.

One two-node cluster on this machine (head + a second `ray start` with ports of its own) serves the
tests in file order; the last one kills the second node. The head runs with
RAY_DASHBOARD_ENABLE_PROFILING=1 and py-spy on its PATH, and every Ray process loads the fake
libnvidia-ml.so.1 (tests/fakenvml.py) with its own data file per node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gkdtop import snapshot
from gkdtop.actions.stacks import report_text
from gkdtop.actions.stacks.remote import dump_ray_stacks, parse_py_spy_text, ray_targets
from gkdtop.collectors.ray import RayCollector
from gkdtop.collectors.ray_logs import RayLogCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.model import GpuSample, GpuState
from gkdtop.store import Store
from gkdtop.tui.gpu_pane import render_gpus
from tests import fakenvml
from tests.raycluster import RayCluster, new_cluster, start_driver, wait_for

DRIVER = """
import os, sys, threading, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0.1, resources={"second": 0.5}, max_concurrency=4)
class Trainer:
    def where(self):
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def gkd_blocked_here(self):
        threading.Event().wait()

    def talk(self):
        for i in range(100000):
            print(f"step:{i} - loss:0.5 - timing_s/gen:0.1 - timing_s/step:0.3", flush=True)
            time.sleep(0.3)

t = Trainer.remote()
pid, node = ray.get(t.where.remote())
t.gkd_blocked_here.remote()
t.talk.remote()
sys.stdout.write(f'GKD-DRIVER {pid} {node}\\n'); sys.stdout.flush()
time.sleep(600)
"""


@dataclass
class TwoNodes:
    cluster: RayCluster
    second_metrics_port: int
    driver: subprocess.Popen[str]
    pid: int  # the Trainer actor's worker, on the second node
    second: str  # the second node's id

    @property
    def logs_dir(self) -> Path:
        return self.cluster.temp_root / "ray" / "session_latest" / "logs"



@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    work = tmp_path_factory.mktemp("multinode")
    lib = fakenvml.build(work / "nvml")
    fakenvml.write_data(work / "head.txt", [fakenvml.FakeGpu(name="NVIDIA FAKE-HEAD", uuid="GPU-head-0", util=42)])
    fakenvml.write_data(work / "second.txt", [
        fakenvml.FakeGpu(name="NVIDIA FAKE-SECOND", uuid=f"GPU-second-{i}", util=10 + i,
                         mem_used=(i + 1) * fakenvml.GIB)
        for i in range(2)
    ])
    common = {"LD_LIBRARY_PATH": str(lib), "RAY_DASHBOARD_ENABLE_PROFILING": "1",
              # The node's agent finds py-spy with shutil.which: our venv's must be on its PATH.
              "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cluster = new_cluster()
    driver = None
    try:
        cluster.start(num_cpus=1, env={**common, "FAKE_NVML_DATA": str(work / "head.txt")})
        metrics = cluster.add_node(resources={"second": 1}, env={**common, "FAKE_NVML_DATA": str(work / "second.txt")})
        driver, line = start_driver(cluster, DRIVER)
        pid, node = line.split()
        yield TwoNodes(cluster, metrics, driver, int(pid), node)
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        cluster.remove()


def collect_into(store: Store, collector: RayLogCollector, until, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    """Poll the collector into the store (as the monitor does) until `until(store)` holds."""

    def step():  # type: ignore[no-untyped-def]
        store.put("ray_logs", collector.collect())
        return until(store)

    return wait_for(step, timeout=timeout, interval=0.25)


def test_remote_worker_lines_reach_the_phase_engine(two_nodes: TwoNodes) -> None:
    store = Store(Config(phases=builtin_phases()))
    collector = RayLogCollector([f"worker-*-{two_nodes.pid}.out"], two_nodes.cluster.dashboard,
                                nodes=[two_nodes.second], check_every=1.0)
    try:
        started = time.monotonic()
        collect_into(store, collector, lambda s: s.phases.status(time.time()).steps_done >= 3)
        remote = [ln for ln in store.lines if ln.source.startswith("ray:")]
        assert remote and all(two_nodes.second[:8] in ln.source for ln in remote)
        assert all(ln.pid == two_nodes.pid for ln in remote)  # from the worker file's name
        assert time.monotonic() - started < 20
        # Live lines keep coming, each once: step numbers strictly increase.
        seen = len(remote)
        collect_into(store, collector, lambda s: sum(ln.source.startswith("ray:") for ln in s.lines) >= seen + 5)
        steps = [int(ln.text.split(" ", 1)[0].split(":")[1]) for ln in store.lines if ln.text.startswith("step:")]
        assert steps == sorted(set(steps))
        files = store.ray_logs.files
        assert len(files) == 1 and files[0].state == "following" and files[0].lines >= seen
        doc = snapshot.build(store)
        sources = doc["ray"]["log_sources"]
        assert sources["patterns"] == [f"worker-*-{two_nodes.pid}.out"]
        assert sources["followed"][0]["node_id"] == two_nodes.second
        assert sources["files"][0]["state"] == "following"
    finally:
        collector.close()


def test_truncation_and_rotation_of_a_remote_file(two_nodes: TwoNodes) -> None:
    """The agent's stream misses both; the tail check notices, reopens, and shows each line once."""
    path = two_nodes.logs_dir / "gkd-rotating.log"
    path.write_text("".join(f"old {i}\n" for i in range(5)))
    store = Store(Config(phases=builtin_phases()))
    # The tail checked every 0.25 s, the agent streaming every 0.1 s (0.5 s by default): a stream idle for
    # 0.4 s is checked, and a tail that differs twice 0.4 s apart reopens it (2 s and 2 s by default).
    collector = RayLogCollector(["gkd-rotating.log"], two_nodes.cluster.dashboard, nodes=[two_nodes.second],
                                check_every=0.25, stream_interval=0.1)

    def texts(s: Store) -> list[str]:
        return [ln.text for ln in s.lines if ln.source.endswith(":gkd-rotating.log")]

    try:
        collect_into(store, collector, lambda s: texts(s) == [f"old {i}" for i in range(5)])
        with open(path, "a") as fh:
            fh.write("appended\n")
        collect_into(store, collector, lambda s: texts(s)[-1:] == ["appended"])
        with open(path, "r+") as fh:  # copytruncate
            fh.truncate(0)
        path.write_text("after truncate 1\nafter truncate 2\n")
        collect_into(store, collector, lambda s: texts(s)[-2:] == ["after truncate 1", "after truncate 2"])
        path.rename(path.with_name("gkd-rotating.log.1"))  # logrotate: rename, then a new file
        path.write_text("new file 1\n")
        collect_into(store, collector, lambda s: texts(s)[-1:] == ["new file 1"])
        with open(path, "a") as fh:
            fh.write("new file 2\n")
        collect_into(store, collector, lambda s: texts(s)[-1:] == ["new file 2"])
        assert texts(store) == [*(f"old {i}" for i in range(5)), "appended", "after truncate 1", "after truncate 2",
                                "new file 1", "new file 2"]
        assert store.ray_logs.files[0].rotations >= 2
    finally:
        collector.close()


def test_fake_gpus_of_every_node_through_rays_agent(two_nodes: TwoNodes) -> None:
    collector = RayCollector(address=two_nodes.cluster.dashboard, details_every=1)
    state = wait_for(lambda: (s := collector.collect()).nodes and all(n.gpus for n in s.nodes) and s, timeout=60)
    by_id = {n.node_id: n for n in state.nodes}
    second = by_id[two_nodes.second]
    assert [g.uuid for g in second.gpus] == ["GPU-second-0", "GPU-second-1"]
    assert second.gpus[1].utilization == 11 and second.gpus[1].memory_used == 2 * fakenvml.GIB
    assert second.gpus[0].temperature == 40 and second.gpus[0].power == 100
    head = next(n for n in state.nodes if n.is_head)
    assert [g.name for g in head.gpus] == ["NVIDIA FAKE-HEAD"]

    # The GPU pane: this node from local NVML (matched by UUID), the other node's GPUs labelled by node.
    store = Store(Config(phases=builtin_phases()))
    store.put("gpus", GpuState(status="ok", devices=[
        GpuSample(0, "NVIDIA FAKE-HEAD", "GPU-head-0", 42.0, 0, 80 * fakenvml.GIB, 40.0, 100.0, 700.0)]))
    store.put("ray", state)
    text = render_gpus(store, 100).plain
    assert f"node {second.ip} {two_nodes.second[:8]}" in text
    assert text.count("FAKE-SECOND") == 2 and text.count("FAKE-HEAD") == 1
    nodes = snapshot.build(store)["ray"]["nodes"]
    assert {g["uuid"] for n in nodes for g in n["gpus"]} == {"GPU-head-0", "GPU-second-0", "GPU-second-1"}


def test_remote_stack_through_the_dashboard(two_nodes: TwoNodes) -> None:
    url = two_nodes.cluster.dashboard
    targets = [t for t in ray_targets(url, classes=["Trainer"]) if t.pid == two_nodes.pid]
    assert targets and targets[0].node_id == two_nodes.second
    report = dump_ray_stacks(url, targets=targets, timeout=20)
    dump = report.dumps[0]
    assert dump.ok, dump.error
    assert dump.method == "ray-dashboard" and "Trainer" in dump.label
    functions = [f.function for t in dump.threads for f in t.frames]
    assert any(fn.endswith("gkd_blocked_here") for fn in functions)
    assert "gkd_blocked_here (" in report_text(report)


def test_remote_node_dies_while_followed(two_nodes: TwoNodes) -> None:
    store = Store(Config(phases=builtin_phases()))
    collector = RayLogCollector([f"worker-*-{two_nodes.pid}.out"], two_nodes.cluster.dashboard,
                                nodes=[two_nodes.second], check_every=1.0, list_every=2.0)
    try:
        collect_into(store, collector, lambda s: any(ln.source.startswith("ray:") for ln in s.lines))
        two_nodes.cluster.kill_node(two_nodes.second_metrics_port)
        started = time.monotonic()
        collect_into(store, collector, lambda s: s.ray_logs.files and s.ray_logs.files[0].state == "error",
                     timeout=60)
        error = store.ray_logs.files[0].error
        assert "node" in error, error  # says why: the stream was cut, the node is gone or DEAD
        assert time.monotonic() - started < 60
        # It keeps polling without raising, and the head keeps answering for the rest.
        for _ in range(3):
            store.put("ray_logs", collector.collect())
        assert store.ray_logs.status == "connected"
    finally:
        collector.close()


AGENT_DRIVER = """
import sys, threading, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0.1, max_concurrency=2)
class Stuck:
    def pid(self):
        import os
        return os.getpid()
    def gkd_agent_blocked_here(self):
        threading.Event().wait()

s = Stuck.remote()
pid = ray.get(s.pid.remote())
s.gkd_agent_blocked_here.remote()
sys.stdout.write(f'GKD-DRIVER {pid}\\n'); sys.stdout.flush()
time.sleep(600)
"""


def test_stacks_without_profiling_403_then_the_gkdtop_agent(ray_cluster: RayCluster) -> None:
    """The session cluster's head has no RAY_DASHBOARD_ENABLE_PROFILING: the 403 is said, the agent works."""
    driver, line = start_driver(ray_cluster, AGENT_DRIVER)
    try:
        pid = int(line)
        url = ray_cluster.dashboard
        targets = [t for t in ray_targets(url, classes=["Stuck"]) if t.pid == pid]
        assert targets
        refused = dump_ray_stacks(url, targets=targets).dumps[0]
        assert not refused.ok and "403" in refused.error and "RAY_DASHBOARD_ENABLE_PROFILING=1" in refused.error
        report = dump_ray_stacks(url, targets=targets, agent=True, gcs=ray_cluster.address,
                                 agent_env=ray_cluster.env(), timeout=20)
        dump = report.dumps[0]
        assert dump.ok, dump.error
        assert dump.method == "ray-agent"
        assert any(f.function.endswith("gkd_agent_blocked_here") for t in dump.threads for f in t.frames)
        # The agent actors are gone again: only the job's actors are alive.
        alive = wait_for(lambda: (s := RayCollector(address=url, details_every=1).collect()).actors and s, timeout=30)
        assert not [a for a in alive.actors if a.class_name == "GkdtopStackAgent" and a.state == "ALIVE"]
    finally:
        driver.kill()
        driver.wait()


def test_parse_py_spy_text() -> None:
    """Ray's traceback endpoint returns py-spy's text dump: threads, states, frames (native ones too)."""
    text = """Process 9031: ray::Trainer
Python v3.11.7 (/usr/bin/python3.11)

Thread 9031 (idle): "MainThread"
    Worker.main_loop (ray/_private/worker.py:1069)
    <module> (ray/_private/workers/default_worker.py:323)
Thread 9059 (idle)
Thread 0x7F00 (active+gil): "Dummy-1"
    Trainer.talk (drv.py:9)
    epoll_wait (libc.so.6)
"""
    threads = parse_py_spy_text(text)
    assert [(t.thread_id, t.name, t.idle, t.owns_gil) for t in threads] == [
        (9031, "MainThread", True, False), (9059, "Thread 9059", True, False), (0x7F00, "Dummy-1", False, True)]
    assert threads[0].frames[0].function == "Worker.main_loop" and threads[0].frames[0].line == 1069
    assert threads[2].frames[1].native and threads[2].frames[1].file == "libc.so.6"


def test_source_picker_follows_the_checked_files() -> None:
    """The `n` modal: lists what the collector found on the nodes, returns the checked files."""
    import asyncio

    from textual.app import App

    from gkdtop.model import RayLogsState, RemoteLogSource
    from gkdtop.tui.source_screen import SourceScreen

    store = Store(Config(phases=builtin_phases()))
    followed = RemoteLogSource("aaaa1111", "10.0.0.2", "worker-1-01000000-11.out", True)
    store.ray_logs = RayLogsState(status="connected", followed=[followed], available=[
        followed, RemoteLogSource("aaaa1111", "10.0.0.2", "raylet.out"),
        RemoteLogSource("bbbb2222", "10.0.0.3", "worker-2-01000000-22.out")])
    asked: list[bool] = []
    chosen: list[list[RemoteLogSource] | None] = []

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(SourceScreen(store, lambda: asked.append(True)), chosen.append)

    async def run() -> None:
        app = Host()
        async with app.run_test() as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SourceScreen)
            screen.query_one("#narrow").value = "worker-*"
            await pilot.pause()
            files = screen.query_one("#files")
            assert files.option_count == 2  # raylet.out narrowed away
            files.select(RemoteLogSource("bbbb2222", "10.0.0.3", "worker-2-01000000-22.out").source)
            await pilot.pause()
            await pilot.press("ctrl+s")
            await pilot.pause()

    asyncio.run(run())
    assert asked == [True]
    assert chosen and chosen[0] is not None
    assert sorted(s.node_ip for s in chosen[0]) == ["10.0.0.2", "10.0.0.3"]
