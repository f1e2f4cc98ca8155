"""The collector loop: a collector that raises or hangs is reported and retried; the others go on."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from gkdtop.collectors.base import run_forever
from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor, default_log_sources
from gkdtop.store import Store


class Flaky:
    """Fails twice, then works: the loop must back off and then recover."""

    name = "flaky"
    interval = 0.01

    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> int:
        self.calls += 1
        if self.calls <= 2:
            raise RuntimeError(f"source gone (attempt {self.calls})\nsecond line never shown")
        return self.calls

    def close(self) -> None:
        pass


class Hangs:
    name = "hangs"
    interval = 0.01

    def __init__(self) -> None:
        self.release = threading.Event()

    def collect(self) -> str:
        self.release.wait(10)
        return "late"

    def close(self) -> None:
        self.release.set()


async def test_errors_are_one_line_and_the_loop_recovers() -> None:
    results: list[int] = []
    errors: list[tuple[str, float]] = []
    task = asyncio.create_task(run_forever(Flaky(), results.append, lambda e, d: errors.append((e, d))))
    for _ in range(200):
        if results:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert results and results[0] == 3
    assert [e for e, _ in errors] == ["RuntimeError: source gone (attempt 1)", "RuntimeError: source gone (attempt 2)"]
    assert errors[1][1] > errors[0][1]  # backoff grows


async def test_a_hung_collector_is_reported_while_others_go_on() -> None:
    hangs, flaky = Hangs(), Flaky()
    errors: list[str] = []
    results: list[object] = []
    tasks = [
        asyncio.create_task(run_forever(hangs, results.append, lambda e, d: errors.append(e), timeout=0.2)),
        asyncio.create_task(run_forever(flaky, results.append, lambda e, d: None)),
    ]
    await asyncio.sleep(0.6)
    assert any("hung" in e for e in errors)
    assert any(isinstance(r, int) for r in results)  # the other collector kept working
    hangs.release.set()
    for _ in range(100):
        if "late" in results:
            break
        await asyncio.sleep(0.02)
    for t in tasks:
        t.cancel()
    assert "late" in results  # once the source answers again, its result is used


def test_store_health_reflects_failures_and_recovery() -> None:
    store = Store(Config(phases=builtin_phases()))
    store.fail("gpus", "NVMLError: Unknown Error", 2.0)
    assert not store.health["gpus"].ok and store.health["gpus"].error == "NVMLError: Unknown Error"
    from gkdtop.model import GpuState

    store.put("gpus", GpuState(status="ok"))
    assert store.health["gpus"].ok and store.health["gpus"].failures == 0


def test_default_log_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert not any(s.endswith("train.log") for s in default_log_sources())
    (tmp_path / "train.log").write_text("x\n")
    sources = default_log_sources()
    assert sources[0] == str(tmp_path / "train.log")
    assert str(tmp_path / "ray" / "session_latest" / "logs" / "worker-*.out") in sources


async def test_monitor_collect_once_without_any_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setenv("GKDTOP_GPU_REPLAY", str(tmp_path / "missing.json"))
    monitor = Monitor(Config(phases=builtin_phases()), logs=[str(tmp_path / "none.log")])
    await monitor.collect_once()
    await monitor.stop()
    store = monitor.store
    assert store.gpus.status == "unavailable" and "cannot read recorded GPU data" in store.gpus.reason
    assert store.ray.status == "not connected"
    assert store.log_files[0].state == "waiting"
    assert os.getpid() not in {p.pid for p in store.processes}


class Quick:
    """Answers at once, so a cancel often lands just as a collection ends."""

    name = "quick"
    interval = 0.0

    def collect(self) -> int:
        return 1

    def close(self) -> None:
        pass


async def test_a_cancel_as_a_collection_ends_stops_the_loop() -> None:
    """Quitting cancels each collector's loop once and waits for it (Monitor.stop). asyncio.wait_for before
    Python 3.12 dropped a cancel that arrived as the collection finished, and the loop ran on: the app hung
    on quit. Many cancels at varied moments: every loop must end."""
    for n in range(300):
        task = asyncio.create_task(run_forever(Quick(), lambda result: None, lambda error, delay: None))
        for _ in range(n % 7):
            await asyncio.sleep(0)  # cancel at a different step of the loop each time
        await asyncio.sleep(0.001 * (n % 3))
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=10)
        assert done, f"the loop ran on after its cancel (attempt {n})"


class Quiet:
    """Says it is idle after its first answer, until told there is something to read."""

    name = "quiet"
    interval = 0.01

    def __init__(self) -> None:
        self.calls = 0
        self.asked: list[bool] = []
        self.wanted = threading.Event()

    def idle(self) -> float:
        self.asked.append(not self.wanted.is_set())
        return 0.01 if self.asked[-1] else 0.0

    def collect(self) -> int:
        self.calls += 1
        return self.calls

    def close(self) -> None:
        pass


async def test_an_idle_collector_is_not_polled_until_it_has_something() -> None:
    quiet = Quiet()
    results: list[int] = []
    task = asyncio.create_task(run_forever(quiet, results.append, lambda e, d: None))
    try:
        for _ in range(500):  # polled once (the first answer is always wanted), then asked, not polled
            if len(quiet.asked) >= 20:
                break
            await asyncio.sleep(0.01)
        assert results == [1] and quiet.calls == 1 and all(quiet.asked)
        quiet.wanted.set()
        for _ in range(500):
            if len(results) >= 3:
                break
            await asyncio.sleep(0.01)
        assert results[:3] == [1, 2, 3]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Asleep(Quiet):
    """Idle until woken: as the remote-log collector until the picker asks."""

    def __init__(self) -> None:
        super().__init__()
        self.wake = lambda: None  # the loop replaces it

    def idle(self) -> float:
        self.asked.append(not self.wanted.is_set())
        return float("inf") if self.asked[-1] else 0.0


async def test_an_idle_collector_dozes_until_woken() -> None:
    """No wake-up to ask again every interval: asked once, then woken by the collector itself (from
    another thread, as the picker's request may come), and polled at once."""
    asleep = Asleep()
    results: list[int] = []
    task = asyncio.create_task(run_forever(asleep, results.append, lambda e, d: None))
    try:
        for _ in range(500):
            if asleep.asked:
                break
            await asyncio.sleep(0.01)
        for _ in range(20):  # 20 of its intervals: still the one question
            await asyncio.sleep(asleep.interval)
        assert results == [1] and asleep.asked == [True]
        asleep.wanted.set()
        threading.Thread(target=asleep.wake).start()
        for _ in range(500):
            if len(results) >= 2:
                break
            await asyncio.sleep(0.01)
        assert results[:2] == [1, 2]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
