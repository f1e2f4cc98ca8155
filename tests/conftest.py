from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.raycluster import RAY, RayCluster, new_cluster, port_free

_PRESTARTED: list[RayCluster] = []  # the session's cluster, coming up since the collection ended


def pytest_configure(config: pytest.Config) -> None:
    """`-n N` (pytest-xdist) schedules by group: `--dist load` becomes `loadgroup` (load, keeping each group
    below on one worker); another `--dist` asked for is kept. A worker parses the command line again (its
    `--dist` is the one typed, if any): pytest_configure_node tells it."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("gkdtop_loadgroup"):
        config.option.loadgroup = True  # read by xdist's pytest_collection_modifyitems in the worker


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist has no such hook
def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    node.workerinput["gkdtop_loadgroup"] = node.config.option.dist == "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker (`-n N`), the tests that share one of our module- or session-scoped fixtures (a Ray
    cluster, the crashed cluster of test_cleanup, the Chromium of test_serve, the deadlocked ranks of test_stacks,
    ...) form one xdist group, run by one worker, so each such fixture is set up once, as in a serial run; the
    tests that share the session's Ray cluster (`ray_cluster`: actors and tasks on 2 CPUs) run one at a time on
    it. The real demo runs (mark `demo`: Ray and torch starting, ~20 s each) are one group too: three at once on
    two cores took ~55 s each. Every other test goes to whichever worker is free."""
    if not hasattr(config, "workerinput"):  # the tests run here, or under xdist nowhere (its controller)
        return
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys_of: dict[int, list[str]] = {}
    for item in items:
        keys = ["mark demo"] if item.get_closest_marker("demo") else []
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name) if info is not None else None
            if defs and defs[-1].scope != "function" and defs[-1].baseid.startswith("tests"):
                keys.append(f"{defs[-1].baseid}::{name}")
        for key in keys:
            parent[root(key)] = root(keys[0])
        keys_of[id(item)] = keys
    members: dict[str, list[str]] = {}
    for key in list(parent):
        members.setdefault(root(key), []).append(key)
    names = {top: "ray" if any(k.endswith("::ray_cluster") for k in keys) else min(keys).replace(" ", "-")
             for top, keys in members.items()}
    for item in items:
        if keys_of[id(item)]:
            item.add_marker(pytest.mark.xdist_group(names[root(keys_of[id(item)][0])]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """When some test will use `ray_cluster`, its `ray start` begins now, in the background: in a whole run
    the first of those tests comes a minute later, and the cluster (~7 s of CPU to start) is up by then.
    Not in an xdist worker: each collects every test, and the one running them is not known yet (it
    starts the cluster at the first test that needs it)."""
    if session.config.option.collectonly or not Path(RAY).exists() or hasattr(session.config, "workerinput"):
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

