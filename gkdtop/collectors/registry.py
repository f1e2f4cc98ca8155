"""Every source of state in one ordered list: what the monitor runs, the store takes and the config tunes.

A source is a line here (its name and default interval: the config reads these without importing any
collector) plus the `SPEC` its module declares (result type, store writer, how to build the collector,
its part of `snapshot --json`). Modules are imported when a spec is first asked for, so loading a
config or drawing the first frame does not pay for psutil, urllib or py-spy's helpers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from gkdtop.collectors.base import Collector
    from gkdtop.collectors.gpu import GpuBackend
    from gkdtop.config import Config
    from gkdtop.store import Store

R = TypeVar("R")


@dataclass(slots=True)
class Wiring:
    """What the monitor was given; each spec's `build` takes the parts its collector needs."""

    config: Config
    store: Store
    log_sources: list[str]
    ray_address: str | None = None
    root_pids: tuple[int, ...] = ()
    gpu_backend: GpuBackend | None = None
    ray_logs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CollectorSpec(Generic[R]):
    """A collector module's declaration (its module-level `SPEC`)."""

    result: type | tuple[type, ...]  # what a collection returns; the store refuses anything else, by name
    write: Callable[[Store, R], bool]  # folds a result into the store; False when nothing a view shows moved
    # The collector, polled on its interval; None: the monitor's own watcher produces the result
    # (stack_phase) or one handed to it from outside (stall_stacks: an action the monitor must not import).
    build: Callable[[Wiring, float], Collector] | None = None
    snapshot: tuple[str, Callable[[Store], Any]] | None = None  # its key and section in `snapshot --json`
    after: tuple[str, ...] = ()  # collected once (snapshot, bundle): these sources' results first


@dataclass(slots=True)
class Source:
    """One registry line: the store source, the config's `refresh.<name>`, the panes' `SOURCES` entry."""

    name: str
    interval: float  # default seconds between polls (or looks, for a watcher)
    module: str  # declares `SPEC`; imported on first use
    polled: bool = True  # False: no collector (its spec's `build` is None), so the monitor imports it only when needed

    def spec(self) -> CollectorSpec[Any]:
        return _spec(self.module)

    def collector(self, wiring: Wiring, interval: float) -> Collector:
        """Its collector, polling every `interval` seconds (config `refresh.<name>`)."""
        build = self.spec().build
        if build is None:
            raise TypeError(f"{self.name}: {self.module}'s SPEC has no build, yet its registry line says polled")
        return build(wiring, interval)


SOURCES: list[Source] = [
    Source("gpus", 1.0, "gkdtop.collectors.gpu"),
    Source("logs", 0.25, "gkdtop.collectors.logs"),
    Source("ray", 5.0, "gkdtop.collectors.ray"),
    # Remote nodes' log files: idle (no requests) until --ray-logs or the Logs pane's picker asks.
    Source("ray_logs", 0.5, "gkdtop.collectors.ray_logs"),
    Source("procs", 2.0, "gkdtop.collectors.procs"),
    Source("stack_phase", 1.0, "gkdtop.collectors.stackphase", polled=False),
    Source("stall_stacks", 1.0, "gkdtop.actions.stall_stacks", polled=False),
]

UI = "ui"  # the config's refresh key for the panes' redraw; not a source


def default_refresh() -> dict[str, float]:
    """The config's `refresh` defaults: every source's interval, plus the panes' redraw."""
    return {**{s.name: s.interval for s in SOURCES}, UI: 1.0}


def polled() -> list[Source]:
    """The sources the monitor polls, in order."""
    return [s for s in SOURCES if s.polled]


def find(name: str) -> Source:
    """The registry line for `name`; a KeyError naming the known ones otherwise."""
    for source in SOURCES:
        if source.name == name:
            return source
    raise KeyError(f"no source {name!r} (known: {', '.join(s.name for s in SOURCES)})")


def _spec(module: str) -> CollectorSpec[Any]:
    spec = getattr(importlib.import_module(module), "SPEC", None)
    if not isinstance(spec, CollectorSpec):
        raise TypeError(f"{module} declares no SPEC (a CollectorSpec)")
    return spec
