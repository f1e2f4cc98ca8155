"""A test-only collector, added the way a real one is: this module plus one registry line (test_registry.py).

It watches the size of the first log file: small enough to read at a glance, real enough to move
when the test appends to the file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gkdtop.collectors.registry import CollectorSpec, Wiring

if TYPE_CHECKING:
    from gkdtop.store import Store


class TinyCollector:
    name = "tiny"

    def __init__(self, path: str, interval: float) -> None:
        self.path = path
        self.interval = interval
        self.calls = 0  # the test waits on polls, not on time

    def collect(self) -> int:
        self.calls += 1
        return os.stat(self.path).st_size

    def close(self) -> None:
        pass


def write(store: Store, size: int) -> bool:
    """A test-only attribute: a real source gives its result a field of the Store."""
    changed = size != getattr(store, "tiny_bytes", None)
    store.tiny_bytes = size  # type: ignore[attr-defined]
    return changed


def build(wiring: Wiring, interval: float) -> TinyCollector:
    return TinyCollector(wiring.log_sources[0], interval)


SPEC: CollectorSpec[int] = CollectorSpec(
    result=int,
    write=write,
    build=build,
    snapshot=("tiny", lambda store: {"bytes": store.tiny_bytes}),
)
