"""Fixed scenes of the real app for SVG snapshot tests and the README screenshots.

Real log files, recorded GPU data, a fixed clock and a fixed process table: everything that
changes from run to run is pinned, so the same scene renders the same SVG.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gkdtop.config import Config, builtin_phases
from gkdtop.model import ProcInfo
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from tests.gkdlog import ray, startup

# 2026-01-11 10:00:00 UTC: scenes set TZ=UTC so clocks print the same everywhere.
T0 = 1768125600.0
GIB = 1024**3


class FixedProcs:
    """A fixed process table (pids, roles, sizes) as a real job shows it."""

    name = "procs"
    interval = 60.0

    def __init__(self, now: float) -> None:
        self.now = now

    def collect(self) -> list[ProcInfo]:
        def row(pid: int, ppid: int, role: str, name: str, actor: str, cpu: float, rss_g: float,
                age: float, flags: list[str] | None = None, status: str = "sleeping") -> ProcInfo:
            return ProcInfo(pid=pid, ppid=ppid, name=name, cmdline=name, role=role, user="me", status=status,
                            cpu_percent=cpu, rss=int(rss_g * GIB), create_time=self.now - age, actor=actor,
                            flags=flags or [])

        return [
            row(133900, 1, "driver", "python -m recipe.gkd.main_gkd", "", 0.0, 1.2, 900),
            row(133947, 4100, "driver", "ray::TaskRunner.run", "TaskRunner", 0.3, 2.1, 890),
            row(2001, 4100, "actor", "ray::WorkerDict.sync_rollout_weights", "WorkerDict", 100.0, 14.2, 850),
            row(2002, 4100, "actor", "ray::WorkerDict.sync_rollout_weights", "WorkerDict", 0.0, 14.1, 850),
            row(2003, 4100, "rollout", "ray::vLLMRolloutWorker", "vLLMRolloutWorker", 0.0, 9.8, 840),
            row(2010, 2003, "engine", "VLLM::EngineCore", "", 0.0, 6.5, 830),
            row(4100, 1, "ray-daemon", "raylet", "", 1.1, 0.4, 950),
            row(4090, 1, "ray-daemon", "gcs_server", "", 0.7, 0.3, 951),
            row(3777, 1, "engine", "VLLM::Worker_TP1", "", 0.0, 3.2, 86400, ["orphaned", "stale-session"]),
        ]

    def close(self) -> None:
        pass


def gpu_frame() -> list[list[dict[str, object]]]:
    return [[
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "utilization": 0, "memory_used": 63 * GIB,
         "memory_total": 80 * GIB, "temperature": 41.0, "power": 118.0, "power_limit": 700.0,
         "processes": [{"pid": 2001, "used_memory": 41 * GIB}, {"pid": 2010, "used_memory": 21 * GIB}]},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "utilization": 100, "memory_used": 66 * GIB,
         "memory_total": 80 * GIB, "temperature": 63.0, "power": 402.0, "power_limit": 700.0,
         "processes": [{"pid": 2002, "used_memory": 41 * GIB}, {"pid": 3777, "used_memory": 24 * GIB}]},
    ]]


def stalled_scene(directory: Path, minutes_silent: float = 14) -> tuple[GkdtopApp, float]:
    """A GKD job hung in weight sync (one rank never joined), opened after it went quiet."""
    from gkdtop.collectors.gpu import RecordedBackend

    lines, last = startup(T0, upto="sync")
    lines.append(ray("WorkerDict", 2002, "[SYNC] waiting in broadcast (group actor->rollout, rank 1)"))
    log = directory / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))
    gpus = directory / "gpus.json"
    gpus.write_text(json.dumps(gpu_frame()))
    now = last + minutes_silent * 60
    config = Config(phases=builtin_phases())
    # One GPU sample, one process table, one Ray answer: the picture must not depend on timing.
    config.refresh.update({"gpus": 600.0, "ray": 600.0})
    config.stack_phase = False  # py-spy has nothing to read in the fixed table's made-up PIDs
    monitor = Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9",
                      gpu_backend=RecordedBackend(str(gpus)))
    monitor.collectors = [c if c.name != "procs" else FixedProcs(now) for c in monitor.collectors]
    return GkdtopApp(config, monitor), now


def pin_clock(now: float) -> None:
    """Freeze wall-clock time and the time zone (monotonic clocks are left alone)."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    time.time = lambda: now  # type: ignore[assignment]


def settle_then_pin(now: float):  # type: ignore[no-untyped-def]
    """A `run_before` that waits for every collector to report once, then freezes the clock."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        app = pilot.app
        for _ in range(400):
            health = app.store.health
            if {"gpus", "procs", "logs", "ray"} <= health.keys() and app.store.total_lines:
                break
            await pilot.pause(0.05)
        else:
            raise AssertionError(f"collectors did not report: {sorted(app.store.health)}")
        pin_clock(now)
        app.refresh_panes(force=True)
        await pilot.pause(0.3)

    return run_before


def curves_scene(directory: Path) -> tuple[GkdtopApp, float]:
    """A verl run of 800 steps whose generation got twice as slow at step 500 (and one slow step at
    333): the Metrics pane's picture, and the anomaly the Phases pane states."""
    from gkdtop.collectors.gpu import RecordedBackend
    from tests.verlrun import verl_run

    last = verl_run(directory / "train.log", 800, t0=T0 - 800 * 40, gen_at=lambda step, rng: 300.0 if step == 333
                    else rng.gauss(20.0 if step >= 500 else 10.0, 0.6))
    log = directory / "train.log"
    os.utime(log, (last, last))
    gpus = directory / "gpus.json"
    gpus.write_text(json.dumps(gpu_frame()))
    now = last + 20
    config = Config(phases=builtin_phases())
    config.refresh.update({"gpus": 600.0, "ray": 600.0})
    config.stack_phase = False
    monitor = Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9",
                      gpu_backend=RecordedBackend(str(gpus)))
    monitor.collectors = [c if c.name != "procs" else FixedProcs(now) for c in monitor.collectors]
    return GkdtopApp(config, monitor), now
