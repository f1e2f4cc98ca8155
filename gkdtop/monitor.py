"""Wires the collectors to the store and runs them: one asyncio task per collector.

Used by the TUI (run until quit), by `snapshot` (collect once, or for a duration) and by tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from gkdtop.collectors.base import Collector, one_line, run_forever
from gkdtop.collectors.ray import ray_temp_dir
from gkdtop.collectors.registry import Wiring, polled
from gkdtop.store import Store

if TYPE_CHECKING:
    from gkdtop.collectors.base import GpuBackend
    from gkdtop.config import Config
    from gkdtop.model import ProcInfo

LOG_SLICE = 2000  # lines stored per turn of the event loop (~20 ms of phase and finding checks)


def default_log_sources() -> list[str]:
    """With no --log: ./train.log if present, plus the newest Ray session's driver and worker logs."""
    sources = []
    if os.path.exists("train.log"):
        sources.append(os.path.abspath("train.log"))
    logs = ray_temp_dir() / "session_latest" / "logs"
    # Through the session_latest link, so a session started later is picked up by the re-glob.
    sources += [str(logs / "job-driver-*.log"), str(logs / "worker-*.out"), str(logs / "worker-*.err")]
    return sources


class StallDump(Protocol):
    """The stall-time stack dump (actions/stall_stacks.StallStacker): handed in by the dashboard, so the
    monitor, which only runs collectors, imports no action."""

    def due(self) -> list[ProcInfo]:
        """The processes to dump if a new stall was declared since the last look, else []."""

    def take(self, targets: list[ProcInfo]) -> object:
        """Blocking: the dump, as the `stall_stacks` source's result."""


class Monitor:
    def __init__(
        self,
        config: Config,
        logs: Iterable[str] | None = None,
        ray_address: str | None = None,
        root_pids: Iterable[int] = (),
        gpu_backend: GpuBackend | None = None,
        ray_logs: Iterable[str] = (),
    ) -> None:
        self.config = config
        self.store = Store(config)
        self.log_sources = list(logs) if logs else (config.logs or default_log_sources())
        wiring = Wiring(self.log_sources, config.backlog, config.max_line, ray_address, tuple(root_pids), gpu_backend,
                        list(ray_logs), list(config.driver_patterns), self.store.flood_sieve(), self.store.gpu_pids,
                        self.store.followed_paths)
        # Every polled source of the registry (collectors/registry.py), at its configured interval.
        self.collectors: list[Collector] = [
            source.collector(wiring, config.refresh.get(source.name, source.interval)) for source in polled()
        ]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, stall_dump: Callable[[Store], StallDump] | None = None) -> None:
        """Start every collector's loop in the running event loop; with `stall_dump` (and config
        `stall_stacks`), also the watcher that takes one stack dump when a stall is declared."""
        for collector in self.collectors:
            self._tasks.append(
                asyncio.create_task(
                    run_forever(
                        collector,
                        self._put_logs if collector.name == "logs" else
                        lambda result, name=collector.name: self.store.put(name, result),
                        lambda error, delay, name=collector.name: self.store.fail(name, error, delay),
                    ),
                    name=f"collector-{collector.name}",
                )
            )
        if self.config.stall_stacks and stall_dump is not None:
            self._tasks.append(asyncio.create_task(self._stall_stacks(stall_dump), name="stall-stacks"))
        if self.config.stack_phase:
            self._tasks.append(asyncio.create_task(self._stack_phase(), name="stack-phase"))

    async def _put_logs(self, batch: Any) -> None:
        """A flood's batch in slices, yielding between them: a key press waits for one slice, not 100k lines.

        The first batch names what the files held before they were followed: that history is read
        first, in a thread, into an analysis of its own that then replaces the store's (no live line
        is read meanwhile: this collector waits for it)."""
        if batch.history:
            self.store.history_pending = True
            from gkdtop.analysis.engine import Analysis
            from gkdtop.store import read_history

            try:
                analysis = await asyncio.to_thread(read_history, Analysis(self.config.rules()), batch.history)
            except Exception as exc:  # the dashboard goes on with what the live lines show
                self.store.history_pending = False
                self.store.fail("logs", f"reading the logs' history: {one_line(exc)}", 0)
            else:
                self.store.adopt_history(analysis)
            batch.history = []
        for part in batch.slices(LOG_SLICE):
            self.store.put("logs", part)
            await asyncio.sleep(0)

    async def _stall_stacks(self, make: Callable[[Store], StallDump]) -> None:
        """Take one stack dump when a stall is declared (config `stall_stacks`); never twice per stall."""
        stacker = make(self.store)  # here, not in start(): its imports (py-spy's helpers) wait for the first frame
        every = self.config.refresh.get("stall_stacks", 1.0)
        while True:
            await asyncio.sleep(every)
            targets = stacker.due()
            if not targets:
                continue
            # A daemon thread, not the loop's executor: quitting must not wait for py-spy to finish.
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            threading.Thread(target=_settle, args=(done, stacker.take, targets), name="stall-stacks",
                             daemon=True).start()
            try:
                taken = await done
            except Exception as exc:  # the dashboard goes on; the pane says why there is no dump
                self.store.fail("stall_stacks", one_line(exc), 0)
            else:
                self.store.put("stall_stacks", taken)

    async def _stack_phase(self) -> None:
        """While the log cannot say where the job is, its stacks (collectors/stackphase.py), backing off."""
        from gkdtop.collectors.stackphase import StackPhaseSampler

        sampler = StackPhaseSampler()
        every = self.config.refresh.get("stack_phase", 1.0)
        while True:
            await asyncio.sleep(every)
            await self.sample_stack_phase(sampler)

    async def sample_stack_phase(self, sampler: Any, live: bool = True) -> None:
        """One look: clear the stack phase when the log says enough, else read the stacks when due.
        `live`: wait for two log polls first (`snapshot` has one, and its silence is measured already)."""
        import time

        from gkdtop.collectors.stackphase import sample_reason

        if self.store.history_pending or (live and self.store.log_polls < 2):
            return  # as for the stall-time dump: the first live lines set the clock offset, and silence with it
        now = time.time()
        status = self.store.phase_status(now)
        reason = sample_reason(status, self.store.analysis.phases.last_activity, now)
        if not reason:
            sampler.reset()
            if self.store.stack_phase is not None:
                self.store.put("stack_phase", None)
            return
        targets = sampler.due(reason, self.store.stack_candidates(status.clock_offset), now)
        if not targets:
            return
        # A daemon thread, not the loop's executor: quitting must not wait for py-spy to finish.
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        threading.Thread(target=_settle, args=(done, sampler.sample, targets, reason), name="stack-phase",
                         daemon=True).start()
        try:
            result = await done
        except Exception as exc:  # sample() answers its own failures with a note; this is the last guard
            self.store.fail("stack_phase", one_line(exc), 0)
        else:
            self.store.put("stack_phase", result)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for collector in self.collectors:
            with contextlib.suppress(Exception):
                collector.close()

    async def collect_once(self, timeout: float = 10.0) -> None:
        """Each collector once; GPUs before processes so GPU holders join the process list."""

        async def one(collector: Collector) -> None:
            try:
                result = await asyncio.wait_for(asyncio.to_thread(collector.collect), timeout)
            except asyncio.TimeoutError:
                self.store.fail(collector.name, f"no answer after {timeout:.0f}s (hung)", 0)
            except Exception as exc:
                self.store.fail(collector.name, one_line(exc), 0)
            else:
                if collector.name == "logs":
                    await self._put_logs(result)
                else:
                    self.store.put(collector.name, result)

        # Those that read another's result (the registry's `after`) go in a second round.
        later = {source.name for source in polled() if source.spec().after}
        await asyncio.gather(*(one(c) for c in self.collectors if c.name not in later))
        await asyncio.gather(*(one(c) for c in self.collectors if c.name in later))
        if self.config.stack_phase:  # the log and the processes are in: read the stacks if the log can't say
            from gkdtop.collectors.stackphase import StackPhaseSampler

            await self.sample_stack_phase(StackPhaseSampler(), live=False)


def _settle(future: asyncio.Future[Any], work: Any, *args: Any) -> None:
    """Run `work(*args)` in this thread and hand its result (or error) to `future`'s loop."""
    result, error = None, None
    try:
        result = work(*args)
    except Exception as exc:
        error = exc
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
        future.get_loop().call_soon_threadsafe(_resolve, future, result, error)


def _resolve(future: asyncio.Future[Any], result: Any, error: Exception | None) -> None:
    if future.done():  # cancelled: the monitor stopped meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

