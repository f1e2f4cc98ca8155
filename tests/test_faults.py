"""Fault injection per collector, in the running app: the source raises, returns garbage or goes away.

Already covered elsewhere, not repeated here: a collector that raises or hangs in the loop
(test_runner), a raising GPU collector shown in its pane (test_app), one GPU lost mid-run in the
dashboard (test_tmux), NVML errors at the collector (test_gpu), Ray dying and coming back at the
collector (test_ray_pane), log rotation / deletion at the follower (test_logs).
Added: a result the store rejects (the loop survives), a log deleted and re-created under the
running app, a job process that exits, every GPU lost and back in the app over the fake
libnvidia-ml, and a Ray dashboard that answers garbage, then nothing, then comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gkdtop.collectors.base import run_forever
from gkdtop.collectors.ray import RayCollector
from gkdtop.config import Config, builtin_phases
from gkdtop.model import GpuState
from gkdtop.store import Store
from gkdtop.tui.logs_pane import LogsPane
from gkdtop.tui.procs_pane import ProcsPane
from tests import fakenvml
from tests.gkdlog import startup
from tests.test_app import log_lines, make_app, settle


class GarbageThenReal:
    """In front of the real recorded-GPU collector: its first answers are junk the store rejects, then real ones."""

    name = "gpus"
    interval = 0.05

    def __init__(self, real: object, junk: int = 2) -> None:
        self.real = real
        self.junk = junk
        self.calls = 0

    def collect(self) -> object:
        self.calls += 1
        if self.calls <= self.junk:
            return GpuState(status="ok", devices=[None])  # type: ignore[list-item]
        return self.real.collect()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.real.close()  # type: ignore[attr-defined]


async def test_a_result_the_store_rejects_is_an_error_and_the_loop_goes_on(tmp_path: Path) -> None:
    """Before the fix, an exception from the store ended the collector's loop silently: no update ever again."""
    from gkdtop.collectors.gpu import GpuCollector, RecordedBackend
    from tests.gpudata import recorded_gpus

    store = Store(Config(phases=builtin_phases()))
    collector = GarbageThenReal(GpuCollector(backend=RecordedBackend(str(recorded_gpus(tmp_path))), interval=0.05))
    task = asyncio.create_task(run_forever(collector, lambda r: store.put("gpus", r),
                                           lambda e, d: store.fail("gpus", e, d)))
    try:
        deadline = time.monotonic() + 20
        while collector.calls <= collector.junk + 1 or not store.health["gpus"].ok:
            assert time.monotonic() < deadline, store.health.get("gpus")
            await asyncio.sleep(0.02)
        assert store.gpus.status == "ok" and store.gpus.devices
        assert store.health["gpus"].failures == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_log_deleted_under_the_running_app_then_back(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 30, steps=1)
    app, log = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("step:1 -" in ln for ln in log_lines(app)))
        log.unlink()
        await settle(pilot, lambda: "1 deleted" in str(app.query_one(LogsPane).border_subtitle))
        log.write_text("[ACTOR] back after the log was deleted\n")
        await settle(pilot, lambda: any("back after the log was deleted" in ln for ln in log_lines(app)))
        assert "deleted" not in str(app.query_one(LogsPane).border_subtitle)
        assert "training loop" in str(app.phases.render())  # the phase history survived


async def test_a_job_process_that_exits_leaves_the_table(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 30, steps=1)
    app, _ = make_app(tmp_path, lines, mtime=last)
    proc = subprocess.Popen(["bash", "-c", "exec -a 'ray::WorkerDict' sleep 600"])
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot, lambda: str(proc.pid) in pane_rows(app))
            proc.kill()
            proc.wait()
            await settle(pilot, lambda: str(proc.pid) not in pane_rows(app))
            assert app.store.health["procs"].ok
            await settle(pilot, lambda: "step:1 -" in "\n".join(log_lines(app)))  # the rest went on
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def pane_rows(app: object) -> str:
    table = app.query_one(ProcsPane)  # type: ignore[attr-defined]
    return "\n".join(" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))


APP_OVER_FAKE_NVML = """
import asyncio, time
from pathlib import Path
from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.gpu_pane import GpuPane

async def main():
    gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}", util=40 + i, mem_used=GIB) for i in range(2)]
    write_data(DATA, gpus)
    log = Path(DATA).with_name("train.log")
    log.write_text("Initializing Actor Worker...\\n")
    config = Config(phases=builtin_phases())
    config.refresh.update({"gpus": 0.1, "logs": 0.1, "procs": 5.0, "ray": 5.0, "ui": 0.1})
    app = GkdtopApp(config, Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9"))

    async def until(*texts, present=True):
        deadline = time.monotonic() + 20
        while any((text in str(app.query_one(GpuPane).render())) != present for text in texts):
            assert time.monotonic() < deadline, str(app.query_one(GpuPane).render())
            await asyncio.sleep(0.05)
        return str(app.query_one(GpuPane).render())

    async with app.run_test(size=(160, 50)):
        emit(await until("41%"))
        for gpu in gpus:
            gpu.error = 15  # NVML_ERROR_GPU_IS_LOST on every call: all GPUs fell off the bus
        write_data(DATA, gpus)
        # a poll can read GPU 0 before the write and GPU 1 after it: wait until neither shows a number
        emit(await until("40%", "41%", present=False))
        for gpu in gpus:
            gpu.error = 0
            gpu.util = 77
        write_data(DATA, gpus)
        emit(await until("77%"))

asyncio.run(main())
"""


def test_every_gpu_lost_then_back_in_the_app(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    lib = fakenvml.build(tmp_path_factory.mktemp("fake_nvml_faults"))
    ok, lost, back = fakenvml.run(APP_OVER_FAKE_NVML, lib, tmp_path / "gpus.txt", timeout=90)
    assert "40%" in ok and "41%" in ok
    assert lost.count("GPU is lost") >= 1 and "40%" not in lost  # the pane says why, not stale numbers
    assert "77%" in back and "GPU is lost" not in back


# --- a Ray dashboard that answers garbage, then nothing, then properly ---------------------------


class Dashboard:
    """A local HTTP server standing in for the Ray dashboard's REST API, whose answers a test switches."""

    def __init__(self) -> None:
        self.mode = "garbage"
        self.garbage: list[bytes] = [b"not json", b"[1, 2, 3]", b'{"data": 5}',
                                     b'{"data": {"clusterStatus": {"loadMetricsReport": {"usage": [1]}}}}', b"null"]
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits += 1
                if owner.mode == "garbage":
                    body = owner.garbage[owner.hits % len(owner.garbage)]
                elif self.path.startswith("/api/cluster_status"):
                    body = json.dumps({"data": {"clusterStatus": {
                        "loadMetricsReport": {"usage": {"CPU": [1.0, 4.0]}},
                        "autoscalerReport": {"activeNodes": {"head": 1}}}}}).encode()
                else:
                    body = json.dumps({"data": {"result": {"result": [], "total": 0}}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    server = Dashboard()
    try:
        yield server
    finally:
        with contextlib.suppress(OSError):
            server.stop()


async def test_ray_garbage_then_gone_then_back(dashboard: Dashboard) -> None:
    store = Store(Config(phases=builtin_phases()))
    collector = RayCollector(address=dashboard.url, interval=0.05, timeout=1.0, details_every=1)
    task = asyncio.create_task(run_forever(collector, lambda r: store.put("ray", r),
                                           lambda e, d: store.fail("ray", e, d)))

    async def until(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, (store.ray, store.health.get("ray"))
            await asyncio.sleep(0.02)

    try:
        # Garbage: never "connected" with made-up numbers; either an error state or a recorded failure.
        await until(lambda: dashboard.hits >= 2 * len(dashboard.garbage))
        assert store.ray.status != "connected" or not store.ray.resources_total
        dashboard.mode = "ok"
        await until(lambda: store.ray.status == "connected" and store.ray.resources_total.get("CPU") == 4.0)
        assert store.health["ray"].ok
        dashboard.stop()  # the dashboard dies
        await until(lambda: store.ray.status == "not connected")
        assert "no answer" in store.ray.reason
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Switchable:
    """In front of a real collector: raises while `broken`, then answers with the real one's results."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.name = real.name  # type: ignore[attr-defined]
        self.interval = 0.05  # the retry backoff starts from here: recovery is quick
        self.broken = True

    def collect(self) -> object:
        if self.broken:
            raise OSError(f"{self.name} source went away")
        return self.real.collect()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.real.close()  # type: ignore[attr-defined]


def _pane_says(app: object, source: str) -> str:
    from gkdtop.tui.gpu_pane import GpuPane
    from gkdtop.tui.ray_pane import RayPane

    if source == "gpus":
        return str(app.query_one(GpuPane).render())  # type: ignore[attr-defined]
    if source == "ray":
        return str(app.query_one(RayPane).render())  # type: ignore[attr-defined]
    pane = app.query_one(LogsPane if source == "logs" else ProcsPane)  # type: ignore[attr-defined]
    return str(pane.border_subtitle)


@pytest.mark.parametrize("source", ["gpus", "procs", "ray", "logs"])
async def test_each_pane_shows_its_collector_failing_and_recovering(tmp_path: Path, source: str) -> None:
    lines, last = startup(time.time() - 30, steps=1)
    app, _ = make_app(tmp_path, lines, mtime=last)
    collectors = app.monitor.collectors
    index = next(i for i, c in enumerate(collectors) if c.name == source)
    flaky = Switchable(collectors[index])
    collectors[index] = flaky
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: f"collector error: OSError: {source} source went away" in _pane_says(app, source))
        assert "(retrying)" in _pane_says(app, source)
        if source != "logs":  # the others went on (the logs' history is read in a thread: wait for it)
            await settle(pilot, lambda: "training loop" in str(app.phases.render()))
        flaky.broken = False
        await settle(pilot, lambda: "collector error" not in _pane_says(app, source))
