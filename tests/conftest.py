from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.raycluster import RayCluster, new_cluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """One real local Ray cluster for the tests that need one; torn down (this cluster only) after."""
    if shutil.which("ray") is None and not RayCluster.__module__:
        pytest.skip("ray is not installed")
    cluster = new_cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
