"""End to end: the real `gkdtop` command in a real tmux, keys typed, screen read."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.gkdlog import ray, startup
from tests.tmux import Tmux, tmux_available

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")]
GKDTOP = str(Path(sys.executable).with_name("gkdtop"))


@pytest.fixture
def tmux():  # type: ignore[no-untyped-def]
    t = Tmux(width=130, height=42)
    yield t
    t.kill()


def test_gkdtop_in_tmux_follows_a_log_and_answers_keys(tmp_path: Path, tmux: Tmux) -> None:
    lines, _ = startup(time.time() - 60, upto="rollout")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    env = {"XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path), "LD_LIBRARY_PATH": str(tmp_path)}
    tmux.start([GKDTOP, "--log", str(log), "--stall-after", "30"], env=env)
    screen = tmux.wait_for("rollout init", timeout=30)
    assert "1 Phases" in screen and "4 Logs" in screen
    # No NVML here (LD_LIBRARY_PATH points at an empty dir): the GPU pane says so, the rest runs.
    assert "NVML" in tmux.wait_for("unavailable")
    # New lines appended while it runs show up and move the phase.
    with log.open("a") as fh:
        fh.write(ray("TaskRunner", 1, "✓ Rollout Worker initialized in 30.5s") + "\n")
        fh.write(ray("TaskRunner", 1, "Starting weight synchronization...") + "\n")
    tmux.wait_for("weight sync")
    # `/` edits the filter live. The pattern is one no log line contains, so seeing it proves it was typed.
    tmux.keys("/")
    tmux.wait_for("Filter (regular expression")
    time.sleep(0.5)  # the modal is drawn a moment before its input takes focus
    tmux.keys("C-u")
    tmux.keys("Rollout W.rker")
    tmux.wait_for("Rollout W.rker")
    tmux.keys("Enter")
    screen = tmux.wait_for("filter: Rollout W.rker")
    logs = screen.split("4 Logs", 1)[1]
    assert "Rollout Worker initialized" in logs
    assert "Starting weight synchronization" not in logs
    # `3` maximizes the Processes pane, `3` again restores.
    tmux.keys("3")
    screen = tmux.wait_gone("4 Logs")
    assert "3 Processes" in screen and "PID" in screen and "1 Phases" not in screen
    tmux.keys("3")
    tmux.wait_for("4 Logs")
    # `?` help, escape, then `q` quits cleanly.
    tmux.keys("?")
    tmux.wait_for("gkdtop keys")
    time.sleep(0.2)
    tmux.keys("Escape")
    time.sleep(0.2)
    tmux.keys("q")
    tmux.wait_for("EXITED 0", timeout=15)
