from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.raycluster import RAY, RayCluster, new_cluster, port_free

_PRESTARTED: list[RayCluster] = []  # the session's cluster, coming up since the collection ended


def pytest_collection_finish(session: pytest.Session) -> None:
    """When some test will use `ray_cluster`, its `ray start` begins now, in the background: in a whole run
    the first of those tests comes a minute later, and the cluster (~7 s of CPU to start) is up by then."""
    if session.config.option.collectonly or not Path(RAY).exists():
        return
    if any("ray_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        cluster = new_cluster()
        cluster.begin_start()
        _PRESTARTED.append(cluster)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A cluster begun but never used (the run stopped before its tests) is removed like one that was."""
    while _PRESTARTED:
        _PRESTARTED.pop().remove()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """One real local Ray cluster for the tests that need one; torn down (this cluster only) after."""
    if shutil.which("ray") is None and not RayCluster.__module__:
        pytest.skip("ray is not installed")
    begun = bool(_PRESTARTED)
    cluster = _PRESTARTED.pop() if begun else new_cluster()
    try:
        if begun:
            cluster.wait_started()
        else:
            cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="module")
def default_port_cluster() -> Iterator[RayCluster]:
    """A cluster on Ray's default ports (GCS 6379, dashboard 8265), like someone else's `ray start --head`
    on a shared machine; in its own temp dir, torn down by killing exactly its processes. Skipped when
    those ports are taken (then such a cluster is already up, which is what the tests need to hold against)."""
    if not (port_free(6379) and port_free(8265)):
        pytest.skip("ports 6379/8265 are taken on this machine")
    cluster = new_cluster(own_temp_dir=True, gcs_port=6379, dashboard_port=8265)
    try:
        try:
            cluster.start(num_cpus=1)
        except RuntimeError as exc:
            if port_free(6379) and port_free(8265):
                raise
            pytest.skip(f"ports 6379/8265 were taken meanwhile: {str(exc)[-200:]}")
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(autouse=True)
def _sigpipe_as_python_sets_it() -> Iterator[None]:
    """`gkdtop`'s main() lets SIGPIPE end it quietly (`| head`); a test that runs main() in this process
    must not leave it so, or the next test's server writing to a closed socket kills the whole run."""
    before = signal.getsignal(signal.SIGPIPE)
    yield
    signal.signal(signal.SIGPIPE, before)

