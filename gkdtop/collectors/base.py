"""The contract every collector follows, and the loop that runs one.

A collector is a plain object with a blocking `collect()`; the loop runs it in a worker thread
so a slow NVML call or a hung /proc read never blocks the UI, bounds it with a timeout, and on
failure records the error and retries with exponential backoff while the other collectors go on.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gkdtop.model import GpuSample


class Collector(Protocol):
    name: str
    interval: float  # seconds between two collections when healthy

    def collect(self) -> Any:
        """Blocking; returns the new state (or a batch of new items). Raise on failure."""

    def close(self) -> None:
        """Release handles (NVML, files). Called once when the monitor stops."""

    # Optional: `idle() -> float`, the seconds for which a collect() would only repeat the last result
    # (no NVML until its next retry; inf: no remote log asked for), 0 to poll. The loop dozes that
    # long, or until the collector calls its `wake()` (an attribute the loop sets where one exists):
    # no thread hop, store write or redraw, and no wake-up to ask again every interval.


class GpuBackend(Protocol):
    """Where GPU samples come from: NVML on a real machine, a recording for demos and tests."""

    def start(self) -> None:
        """Open the source; raise GpuUnavailable(reason) when there is nothing to open."""

    def driver_version(self) -> str: ...

    def sample(self) -> list[GpuSample]:
        """One reading of every device; a failing device carries `error`, it does not raise."""

    def shutdown(self) -> None: ...


MAX_BACKOFF = 30.0
MAX_DOZE = 30.0  # an idle collector is asked again at least this often


def one_line(exc: BaseException) -> str:
    """An exception as the single line a pane can show."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def run_forever(
    collector: Collector,
    on_result: Callable[[Any], Any],
    on_error: Callable[[str, float], None],
    timeout: float = 15.0,
) -> None:
    """Collect on the collector's interval; report results and errors through the callbacks.

    A collection still running after `timeout` is reported as hung and abandoned (threads can't
    be killed); the next attempt waits for the backoff. Rescheduling happens after a collection
    ends, so two collections of one collector never overlap.
    """
    failures = 0
    pending: asyncio.Future[Any] | None = None
    loop = asyncio.get_running_loop()
    idle = getattr(collector, "idle", None)
    woken = asyncio.Event()
    if hasattr(collector, "wake"):  # called from the UI (the picker) or a thread: ends a doze
        collector.wake = lambda: loop.call_soon_threadsafe(woken.set)
    reported = False
    while True:
        started = time.monotonic()
        if reported and idle is not None and (doze := idle()) > 0:
            waiter = asyncio.ensure_future(woken.wait())
            try:  # asyncio.wait, not wait_for: see below (a cancel as the wait ends must not be dropped)
                await asyncio.wait({waiter}, timeout=min(doze, MAX_DOZE))
            finally:
                waiter.cancel()
            woken.clear()
            continue
        try:
            if pending is None or pending.done():
                # The executor's future itself, not asyncio.to_thread's task around it: an idle
                # dashboard polls ~8 times a second, and the extra task was a third of each hop.
                pending = loop.run_in_executor(None, collector.collect)
            # asyncio.wait, not wait_for: before Python 3.12, wait_for returns the result and drops a
            # cancel that arrives as the collection ends (a loaded machine makes that likely), and the
            # loop then ran on, so quitting the dashboard hung in Monitor.stop's gather forever.
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if done:
                finished, pending = pending, None
                result = finished.result()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            pending = None
            failures += 1
            delay = min(MAX_BACKOFF, collector.interval * 2**failures)
            on_error(one_line(exc), delay)
            await asyncio.sleep(delay)
            continue
        if not done:  # still running: abandoned (threads can't be killed), reused by the next attempt
            failures += 1
            delay = min(MAX_BACKOFF, collector.interval * 2**failures)
            on_error(f"no answer after {timeout:.0f}s (hung); retrying", delay)
            await asyncio.sleep(delay)
            continue
        try:
            handled = on_result(result)
            if inspect.isawaitable(handled):  # a handler that yields to the UI between slices of a big result
                await handled
        except Exception as exc:  # a result the store can't take (garbage): an error, not a dead loop
            failures += 1
            delay = min(MAX_BACKOFF, collector.interval * 2**failures)
            on_error(f"bad result: {one_line(exc)}", delay)
            await asyncio.sleep(delay)
            continue
        failures = 0
        reported = True
        elapsed = time.monotonic() - started
        # A collector that stopped at its per-call budget with more waiting (a log flood) goes again
        # at once: sleeping the interval would cap how fast it can follow.
        behind = getattr(collector, "behind", False)
        await asyncio.sleep(0.0 if behind else max(0.0, collector.interval - elapsed))
