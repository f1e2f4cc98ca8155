"""The one-line Ray status against a real local cluster, and when there is none."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gkdtop.collectors.ray import RayCollector, parse_cluster_status, resolve_dashboard
from gkdtop.tui.ray_pane import ray_line
from tests.raycluster import RayCluster, free_port, new_cluster, wait_for


def test_connected_to_the_newest_session(ray_cluster, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RAY_TMPDIR", str(ray_cluster.temp_root))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    url, _, session = resolve_dashboard(None)
    assert url == ray_cluster.dashboard
    assert session.startswith("session_")
    collector = RayCollector()
    # Right after `ray start` the autoscaler may not have reported resources yet.
    state = wait_for(lambda: (s := collector.collect()).resources_total and s, timeout=30)
    assert state.status == "connected", state.reason
    assert state.resources_total["CPU"] == 2.0
    assert state.nodes_alive == 1
    assert ray_line(state).startswith("Ray: 1 node | CPU ")


def test_explicit_dashboard_address(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    state = RayCollector(address=ray_cluster.dashboard).collect()
    assert state.status == "connected"


def test_pending_gpu_demand_is_said_in_one_line(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    """An actor asks for a GPU the cluster lacks: the status line names the demand."""
    driver = subprocess.Popen(
        [sys.executable, "-c", (
            "import ray, time\n"
            f"ray.init(address='{ray_cluster.address}', log_to_driver=False)\n"
            "@ray.remote(num_gpus=1)\n"
            "class NeedsGpu:\n"
            "    def ping(self): return 1\n"
            "a = NeedsGpu.remote()\n"
            "print('submitted', flush=True)\n"
            "time.sleep(120)\n")],
        env=ray_cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert driver.stdout is not None and "submitted" in driver.stdout.readline()
        collector = RayCollector(address=ray_cluster.dashboard)
        state = wait_for(lambda: (s := collector.collect()).pending and s, timeout=60, interval=0.25)
        assert {"GPU": 1.0}.items() <= state.pending[0].items()
        line = ray_line(state)
        assert "PENDING 1" in line and "'GPU': 1.0" in line and "cannot be scheduled" in line
    finally:
        driver.kill()
        driver.wait()


def ray_daemons() -> dict[int, str]:
    """The machine's raylets and GCS servers, with their command lines (a process that ends during the scan is
    none: under `-n`, other workers' processes come and go)."""
    return {p.pid: " ".join(p.info["cmdline"] or ()) for p in psutil.process_iter(["name", "cmdline"])
            if p.info["name"] in ("raylet", "gcs_server")}


def test_nothing_listening_returns_quickly_and_starts_nothing(ray_cluster: RayCluster,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit GCS address where nothing listens is "not connected", never another cluster: here the
    newest session under RAY_TMPDIR is a live one, and a default-port cluster may run on the machine too."""
    monkeypatch.setenv("RAY_TMPDIR", str(ray_cluster.temp_root))
    before = ray_daemons()
    port = free_port()
    started = time.monotonic()
    state = RayCollector(address=f"127.0.0.1:{port}").collect()
    assert time.monotonic() - started < 10  # no retries, no waiting for a cluster to come up
    assert state.status == "not connected"
    assert state.reason == f"no Ray cluster at 127.0.0.1:{port}: nothing listens there"
    assert ray_line(state) == f"Ray: not connected: no Ray cluster at 127.0.0.1:{port}: nothing listens there"
    # Another worker's test may start a cluster meanwhile (under `-n`): one the collector started would be its
    # child, or live in a temp dir it could pick (this cluster's, Ray's default /tmp/ray).
    ours = {c.pid for c in psutil.Process().children(recursive=True)}
    started = {pid: cmd for pid, cmd in ray_daemons().items() if pid not in before}
    assert not {pid: cmd for pid, cmd in started.items()
                if pid in ours or str(ray_cluster.temp_root) in cmd or "/tmp/ray/" in cmd}


def test_each_gcs_address_shows_its_own_cluster(ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two live clusters on one machine, one under RAY_TMPDIR, one started with `ray start --temp-dir`:
    each GCS address shows its own cluster, whichever temp dir the default points at."""
    other = new_cluster(own_temp_dir=True)
    try:
        other.start(num_cpus=1)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        for asked, default_dir in ((other, ray_cluster), (ray_cluster, other)):
            monkeypatch.setenv("RAY_TMPDIR", str(default_dir.temp_root))  # the other one is the newest there
            url, _, session = resolve_dashboard(asked.address)
            assert (url, session) == (asked.dashboard, asked.session)
            collector = RayCollector(address=asked.address)
            state = wait_for(lambda c=collector: (s := c.collect()).resources_total and s, timeout=60)
            assert state.status == "connected", state.reason
            assert (state.address, state.session) == (asked.dashboard, asked.session)
            assert state.resources_total["CPU"] == (1.0 if asked is other else 2.0)
        # The GCS address by this machine's own name works as well as loopback.
        host = socket.gethostname()
        assert resolve_dashboard(f"{host}:{other.gcs_port}")[0] == other.dashboard
    finally:
        other.remove()


def test_a_dead_session_whose_dashboard_port_another_cluster_took(tmp_path: Path, ray_cluster: RayCluster,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest session is a crashed run's; its dashboard port now serves another cluster: not shown as ours."""
    dead = "session_2026-01-01_00-00-00_000000_1"
    session = tmp_path / "ray" / dead
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "dashboard.log").write_text(
        f"INFO -- Dashboard head http address: 127.0.0.1:{ray_cluster.dashboard_port}\n")
    (tmp_path / "ray" / "session_latest").symlink_to(session)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    state = RayCollector().collect()
    assert state.status == "not connected"
    assert state.reason == f"the dashboard at {ray_cluster.dashboard} serves {ray_cluster.session}, not {dead}"


def test_a_listener_that_is_no_gcs_is_not_the_default_port_cluster(default_port_cluster: RayCluster,
                                                                   tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone else's cluster on the default ports (6379, 8265): an address whose port is no Ray GCS
    (a plain listener) falls back to 127.0.0.1:8265, which is checked and refused; 6379 is that cluster."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # nothing here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        state = RayCollector(address=f"127.0.0.1:{port}").collect()
    assert state.status == "not connected"
    assert state.reason == (f"the dashboard at http://127.0.0.1:8265 belongs to the cluster whose GCS is on port "
                            f"6379, not 127.0.0.1:{port}")
    state = RayCollector(address=f"127.0.0.1:{free_port()}").collect()
    assert state.status == "not connected" and "nothing listens there" in state.reason
    collector = RayCollector(address="127.0.0.1:6379")
    state = wait_for(lambda: (s := collector.collect()).status == "connected" and s, timeout=60)
    assert state.session == default_port_cluster.session
    assert RayCollector().collect().reason == "no Ray session found on this node"


def test_no_session_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    state = RayCollector().collect()
    assert state.status == "not connected"
    assert state.reason == "no Ray session found on this node"
    assert ray_line(state) == "Ray: not connected: no Ray session found on this node"


def test_session_left_by_a_dead_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashed run leaves /tmp/ray/session_latest behind: the status says nobody answers there."""
    session = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    port = free_port()
    (session / "logs" / "dashboard.log").write_text(f"INFO -- Dashboard head http address: 127.0.0.1:{port}\n")
    (tmp_path / "ray" / "session_latest").symlink_to(session)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    state = RayCollector().collect()
    assert state.status == "not connected"
    assert f"http://127.0.0.1:{port}" in state.reason


def test_demand_shapes_as_ray_260_reports_them() -> None:
    """Shapes taken from a real Ray 2.60 dashboard (`gkdtop demo --fault infeasible`), and garbage."""
    doc = {"data": {"clusterStatus": {"loadMetricsReport": {
        "usage": {"CPU": [1.0, 4.0], "GPU": "garbage"},
        "resourceDemand": [[{"CPU": 1.0, "GPU": 2.0}, 3], ["junk"], None],
        "pgDemand": [[{"bundles": [[{"CPU": 0.25, "GPU": 1.0}, 8]], "strategy": "STRICT_PACK"}, 1],
                     [{"bundles": "garbage"}, 1]],
    }}}}
    state = parse_cluster_status(doc, "http://x", "session_x")
    assert state.pending == [{"CPU": 1.0, "GPU": 2.0}, {"CPU": 2.0, "GPU": 8.0}]
    assert state.resources_total == {"CPU": 4.0} and state.resources_available == {"CPU": 3.0}
