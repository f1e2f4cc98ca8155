"""Phases of review 26 / audit 24's logs (session 26): lines that say where a run is, read in the right phase."""

from __future__ import annotations

from pathlib import Path

from gkdtop.config import load_config
from gkdtop.replay import replay


def run(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.log"
    path.write_text("".join(line + "\n" for line in lines))
    return replay([str(path)], load_config(None))


def test_verls_training_from_scratch_opens_the_loop_where_no_bar_or_step_line_comes(tmp_path: Path) -> None:
    """verl's fit() prints it once every worker is up: a silence after it is step 1, not rollout init."""
    report = run(tmp_path, [
        "2025-03-02 08:01:10,120\tINFO worker.py:1918 -- Started a local Ray instance.",
        "(WorkerDict pid=5512) INFO 03-02 08:06:40 [core.py:193] init engine (profile, create kv cache, warmup model)"
        " took 21.40 seconds",
        "(TaskRunner pid=5101) Training from scratch",
        "(TaskRunner pid=5101) 2025-03-02 08:07:02.450 | INFO     | agents.base:run:181 - Running 32 trajectories",
    ])
    assert report.status.current == "training loop"
