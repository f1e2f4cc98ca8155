"""The Ray pane's data against real clusters: actors, pending demands, two nodes, death and return."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from gkdtop.collectors.procs import ProcCollector
from gkdtop.collectors.ray import RayCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.store import Store
from gkdtop.tui.ray_pane import render_cluster
from tests.raycluster import RAY, RayCluster, new_cluster, start_driver, wait_for

DRIVER = """
import ray, sys, time
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0.1)
class Counter:
    def pid(self):
        import os
        return os.getpid()
@ray.remote(num_gpus=1)
class PaneNeedsGpu:
    def ping(self): return 1
@ray.remote(num_cpus=0.1)
class Doomed:
    def die(self):
        import os
        os._exit(1)
counters = [Counter.remote() for _ in range(3)]
pids = ray.get([c.pid.remote() for c in counters])
waiting = PaneNeedsGpu.remote()
doomed = Doomed.remote()
try:
    ray.get(doomed.die.remote())
except Exception:
    pass
sys.stdout.write('GKD-DRIVER ' + ' '.join(map(str, pids)) + '\\n'); sys.stdout.flush()
time.sleep(300)
"""



def test_actors_pending_demand_and_the_pid_join(ray_cluster: RayCluster) -> None:
    driver, line = start_driver(ray_cluster, DRIVER)
    try:
        pids = [int(p) for p in line.split()]
        collector = RayCollector(address=ray_cluster.dashboard, details_every=1)

        def ready():  # type: ignore[no-untyped-def]
            s = collector.collect()
            states = {(a.class_name, a.state) for a in s.actors}
            return s if s.pending and ("Doomed", "DEAD") in states else None

        state = wait_for(ready, timeout=60, interval=0.25)  # Ray reports the demand ~3 s after the ask
        by_class: dict[str, list] = {}
        for actor in state.actors:
            by_class.setdefault(actor.class_name, []).append(actor)
        assert sorted(a.pid for a in by_class["Counter"]) == sorted(pids)
        assert all(a.state == "ALIVE" for a in by_class["Counter"])
        assert by_class["PaneNeedsGpu"][0].state == "PENDING_CREATION"
        assert by_class["PaneNeedsGpu"][0].required_resources["GPU"] == 1.0
        assert by_class["Doomed"][0].death_cause  # why it died, in one line
        assert state.nodes and state.nodes[0].is_head and state.nodes[0].state == "ALIVE"
        assert {"GPU": 1.0}.items() <= state.pending[0].items()

        text = render_cluster(state).plain
        assert "3 × Counter" in text
        # Ray returns the keys in either order; the pane sorts them.
        assert "PENDING_CREATION  needs {" in text and "'GPU': 1.0" in text
        assert "DEAD" in text and "PENDING {" in text

        # The store joins actor -> PID -> process row.
        store = Store(Config(phases=builtin_phases()))
        store.put("procs", ProcCollector().collect())
        store.put("ray", state)
        rows = {r.pid: r for r in store.processes}
        assert all(rows[pid].actor == "Counter" for pid in pids)
    finally:
        driver.kill()
        driver.wait()


@pytest.fixture
def two_nodes() -> Iterator[RayCluster]:
    cluster = new_cluster()
    try:
        cluster.start(num_cpus=1)
        proc = subprocess.run([RAY, "start", f"--address={cluster.address}", "--num-cpus=1", "--num-gpus=0",
                               "--resources={\"second\": 1}", "--disable-usage-stats"],
                              env=cluster.env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        yield cluster
    finally:
        cluster.remove()


TWO_NODE_DRIVER = """
import ray, sys, time
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=0.1)
class Where:
    def node(self): return ray.get_runtime_context().get_node_id()
a = Where.options(resources={"second": 0.5}).remote()
b = Where.remote()
sys.stdout.write(f'GKD-DRIVER {ray.get(a.node.remote())} {ray.get(b.node.remote())}\\n'); sys.stdout.flush()
time.sleep(300)
"""


def test_two_nodes_then_death_and_reconnect(two_nodes: RayCluster) -> None:
    driver, line = start_driver(two_nodes, TWO_NODE_DRIVER)
    try:
        node_a, _ = line.split()
        collector = RayCollector(address=two_nodes.dashboard, details_every=1)
        state = wait_for(lambda: (s := collector.collect()).nodes_alive == 2 and len(s.nodes) == 2 and s, timeout=60)
        assert sum(n.is_head for n in state.nodes) == 1
        second = next(n for n in state.nodes if n.node_id == node_a)
        assert second.resources_total.get("second") == 1.0
        placed = {a.node_id for a in state.actors if a.class_name == "Where" and a.state == "ALIVE"}
        assert node_a in placed
        text = render_cluster(state).plain
        assert "Nodes (2 alive, 0 dead)" in text
    finally:
        driver.kill()
        driver.wait()

    # The cluster dies mid-run: "not connected" within seconds, and nothing is started in its place.
    two_nodes.kill()
    started = time.monotonic()
    state = collector.collect()
    assert time.monotonic() - started < 10
    assert state.status == "not connected" and "no answer" in state.reason
    assert not [p for p in two_nodes.processes() if p.status() != psutil.STATUS_ZOMBIE]

    # It comes back on the same address: the next poll reconnects by itself.
    two_nodes.start(num_cpus=1)
    state = wait_for(lambda: (s := collector.collect()).status == "connected" and s.nodes_alive and s, timeout=60)
    assert state.nodes and state.nodes[0].state == "ALIVE"
