"""Every source of state in one ordered list: what the monitor runs, the store takes and the config tunes.

A source is a line here (its name and default interval: the config reads these without importing any
collector) plus the `SPEC` its module declares (result type, store writer, how to build the collector,
its part of `snapshot --json`). Modules are imported when a spec is first asked for, so loading a
config or drawing the first frame does not pay for psutil, urllib or py-spy's helpers.

The store and the config sit above this layer: a spec's writer and snapshot section take the store
(typed `Any` here, so no collector imports it), and a collector is built from `Wiring`, the plain
values the monitor takes out of the config and the store.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from gkdtop.collectors.base import Collector, GpuBackend

R = TypeVar("R")


@dataclass(slots=True)
class Wiring:
    """What the monitor was given, as plain values; each spec's `build` takes the parts its collector needs."""

    log_sources: list[str]
    backlog: int  # config `backlog`: lines of a file's end read at start-up
    max_line: int  # config `max_line`
    ray_address: str | None = None
    root_pids: tuple[int, ...] = ()
    gpu_backend: GpuBackend | None = None
    ray_logs: list[str] = field(default_factory=list)
    driver_patterns: list[str] = field(default_factory=list)  # config `driver_patterns`
    sieve: Callable[[bytes, int], set[int]] | None = None  # which lines of a flood some rule needs (the store's)
    gpu_pids: Callable[[], set[int]] | None = None  # the GPU holders the store knows of (procs joins them)
    followed: Callable[[], frozenset[str]] | None = None  # the followed log files' real paths (procs: who is tied)


@dataclass(slots=True)
class CollectorSpec(Generic[R]):
    """A collector module's declaration (its module-level `SPEC`)."""

    result: type | tuple[type, ...]  # what a collection returns; the store refuses anything else, by name
    write: Callable[[Any, R], bool]  # folds a result into the store; False when nothing a view shows moved
    # The collector, polled on its interval; None: the monitor's own watcher produces the result
    # (stack_phase, and stall_stacks: the dump the dashboard hands the monitor, which imports no action).
    build: Callable[[Wiring, float], Collector] | None = None
    snapshot: tuple[str, Callable[[Any], Any]] | None = None  # its key and section in `snapshot --json`, from the store
    after: tuple[str, ...] = ()  # collected once (snapshot, bundle): these sources' results first


@dataclass(slots=True)
class Source:
    """One registry line: the store source, the config's `refresh.<name>`, the panes' `SOURCES` entry."""

    name: str
    interval: float  # default seconds between polls (or looks, for a watcher)
    module: str  # declares `SPEC` (or `module:NAME`); imported on first use
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
    Source("ray_tasks", 3.0, "gkdtop.collectors.ray_tasks"),  # Ray's task table: the phase and the straggler
    # Remote nodes' log files: idle (no requests) until --ray-logs or the Logs pane's picker asks.
    Source("ray_logs", 0.5, "gkdtop.collectors.ray_logs"),
    Source("procs", 2.0, "gkdtop.collectors.procs"),
    Source("stack_phase", 1.0, "gkdtop.collectors.stackphase", polled=False),
    Source("stall_stacks", 1.0, "gkdtop.collectors.stackphase:STALL_SPEC", polled=False),
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


def _spec(where: str) -> CollectorSpec[Any]:
    module, _, name = where.partition(":")
    spec = getattr(importlib.import_module(module), name or "SPEC", None)
    if not isinstance(spec, CollectorSpec):
        raise TypeError(f"{module} declares no {name or 'SPEC'} (a CollectorSpec)")
    return spec
