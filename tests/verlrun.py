"""Long verl runs for the curves and anomaly tests, the Metrics scene and the bench: our own numbers
in verl's step-line shape (`step:N - key:value - …`, verl's key names, the Ray prefix)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.gkdlog import asctime, ray, startup

RUNNER = ("TaskRunner", 133947)


def step_line(step: int, gen: float, rng: random.Random, score: float = 0.6, extra: str = "") -> str:
    """One step's metrics line: generation `gen` seconds, the rest noisy around fixed levels."""
    update = rng.gauss(20.0, 1.0)
    total = gen + update + 2.0
    parts = [f"step:{step}", f"actor/entropy:{rng.uniform(0.4, 0.6):.6f}",
             f"actor/pg_loss:{rng.uniform(-0.05, 0.05):.6f}", f"actor/grad_norm:{rng.uniform(0.1, 0.4):.6f}",
             f"critic/score/mean:{score * rng.uniform(0.9, 1.1):.6f}",
             f"response_length/mean:{rng.uniform(380, 420):.3f}",
             f"response_length/clip_ratio:{rng.uniform(0.0, 0.01):.7f}",
             f"timing_s/gen:{gen:.9f}", "timing_s/reward:2.000000000", f"timing_s/update_actor:{update:.9f}",
             f"timing_s/step:{total:.9f}", f"perf/throughput:{1.8e6 / total * rng.uniform(0.95, 1.05):.6f}"]
    return ray(*RUNNER, " - ".join(parts) + extra, color=False)


def steady(step: int, rng: random.Random) -> float:
    return rng.gauss(10.0, 0.6)


def verl_run(path: Path, steps: int, gen_at: Callable[[int, random.Random], float] = steady, seed: int = 7,
             every: int = 0, t0: float | None = None) -> float:
    """A verl log of `steps` steps after the start-up (`every`: a validation step's extra key that
    often); the time of its last line."""
    rng = random.Random(seed)
    lines, t = startup(time.time() - 86400 if t0 is None else t0, steps=0)
    for step in range(1, steps + 1):
        gen = gen_at(step, rng)
        t += gen + 22
        lines.append(ray(*RUNNER, f"{asctime(t)} root INFO Training Progress: {step}/{steps}", color=False))
        extra = f" - val-core/acc/mean@1:{rng.uniform(0.3, 0.5):.4f}" if every and step % every == 0 else ""
        lines.append(step_line(step, gen, rng, extra=extra))
    path.write_text("".join(line + "\n" for line in lines))
    return t


LIVE_WAIT = 120.0  # seconds: a busy 2-core machine polls a few thousand lines in well under one


def live_and_history(tmp_path: Path, text: str, done: Callable[[Any], bool]) -> tuple[Any, Any]:
    """`text` read as history (replay's chunked reader) and followed live (a real collector appending it
    to a file), the live store polled until `done(store)`: (history's phase engine, the live store)."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.history import file_range
    from gkdtop.collectors.logs import LogCollector
    from gkdtop.config import Config, builtin_phases
    from gkdtop.store import Store

    log = tmp_path / "history.log"
    log.write_text(text)
    analysis = Analysis(Config(phases=builtin_phases()).rules())
    analysis.read_history([file_range(str(log))])
    live_log = tmp_path / "live.log"
    live_log.write_text("")
    store = Store(Config(phases=builtin_phases()))
    collector = LogCollector([str(live_log)], backlog=0)
    try:
        store.put("logs", collector.collect())
        with live_log.open("a") as fh:
            fh.write(text)
        deadline = time.monotonic() + LIVE_WAIT
        while not done(store):  # (a condition never met fails the test, not spins it)
            assert time.monotonic() < deadline, f"the live store did not get there in {LIVE_WAIT:g} s of polling"
            store.put("logs", collector.collect())
    finally:
        collector.close()
    return analysis.phases, store
