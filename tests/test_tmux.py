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
    screen = type_filter(tmux, "Rollout W.rker")
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
    tmux.wait_gone("gkdtop keys")  # help closed: now `q` quits the app (in the help screen it closes help)
    tmux.keys("q")
    tmux.wait_for("EXITED 0", timeout=60)


def test_gpu_pane_through_real_pynvml_and_a_gpu_lost_mid_run(tmp_path: Path, tmux: Tmux) -> None:
    """The real dashboard over the stand-in libnvidia-ml.so.1: two GPUs, then one falls off the bus."""
    import shutil

    from tests import fakenvml

    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fake NVML library")
    lib = fakenvml.build(tmp_path / "lib")
    data = tmp_path / "nvml.txt"
    gpus = [fakenvml.FakeGpu(name="NVIDIA H100 80GB HBM3", util=87, mem_used=61 * fakenvml.GIB,
                             procs=[(4242, 30 * fakenvml.GIB)]),
            fakenvml.FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-1", util=12, mem_used=5 * fakenvml.GIB)]
    fakenvml.write_data(data, gpus)
    log = tmp_path / "train.log"
    log.write_text("Initializing Actor Worker...\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path), "LD_LIBRARY_PATH": str(lib),
           "FAKE_NVML_DATA": str(data)}
    tmux.start([GKDTOP, "--log", str(log)], env=env)
    screen = tmux.wait_for("H100 80GB HBM3", timeout=30)
    assert "61.0G/80.0G" in tmux.wait_for("61.0G/80.0G")
    assert "pid 4242" in screen or "pid 4242" in tmux.wait_for("pid 4242")
    gpus[1].error = fakenvml.GPU_IS_LOST
    fakenvml.write_data(data, gpus)
    screen = tmux.wait_for("GPU is lost", timeout=20)
    assert "61.0G/80.0G" in screen  # the other GPU goes on
    assert "4 Logs" in screen  # and so does the rest of the dashboard
    tmux.keys("q")
    tmux.wait_for("EXITED 0", timeout=60)


def test_a_stall_rings_the_bell_and_is_said_on_tmux_status_line(tmp_path: Path, tmux: Tmux) -> None:
    """Inside tmux the dashboard tells a stall where the user looks: the status line of the tmux they
    are attached to (`display-message`) and its bell. A real client is attached from a second tmux,
    whose screen and bell flag show what the user's terminal got."""
    log = tmp_path / "train.log"
    go = tmp_path / "go"
    env = {"XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path), "LD_LIBRARY_PATH": str(tmp_path)}
    # gkdtop starts once the client is attached: a status message reaches the clients attached when it is said.
    tmux.start(["bash", "-c", f'until [ -e {go} ]; do sleep 0.05; done; exec "$0" "$@"', GKDTOP, "--log", str(log),
                "--stall-after", "3"], env=env)
    outer = Tmux(width=130, height=44)
    try:
        outer.start(["tmux", "-L", tmux.socket, "attach", "-t", tmux.session])
        outer.wait_for("[t]")  # the inner session's status line, seen through the attached client
        lines, _ = startup(time.time() - 100, upto="sync")
        log.write_text("".join(line + "\n" for line in lines))
        go.touch()
        screen = outer.wait_for("gkdtop: train.log STALLED in weight sync", timeout=90)
        assert screen.rstrip().splitlines()[-1].startswith("gkdtop: train.log STALLED"), screen  # the status line
        deadline = time.monotonic() + 30  # the bell travels with the app's next write, through two tmux servers
        while (bell := outer._run("list-windows", "-t", outer.session, "-F", "#{window_bell_flag}").strip()) != "1" \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert bell == "1", "the bell reached the attached terminal"
    finally:
        outer.kill()


def type_filter(tmux: Tmux, pattern: str, tries: int = 3) -> str:
    """`/`, the pattern, Enter; the screen once the Logs pane's subtitle names the filter.

    The modal is drawn a moment before its input takes focus, and on a busy machine that moment was longer than any
    fixed wait (keys typed before it are lost): type until the text shows, clearing the input each time. Once (CI, a
    busy 2-core machine) the modal closed on Enter with the filter unchanged, as if a key had been lost: then the
    whole edit is done again, and the filter must still be applied in the end."""
    screens = []
    for _ in range(tries):
        tmux.keys("/")
        tmux.wait_for("Filter (regular expression")
        for _ in range(20):
            tmux.keys("C-u")
            tmux.keys(pattern)
            try:
                tmux.wait_for(pattern, timeout=3)
                break
            except TimeoutError:
                continue
        else:
            raise AssertionError("the filter's input never showed what was typed")
        tmux.keys("Enter")
        try:
            return tmux.wait_for(f"filter: {pattern}", timeout=20)
        except TimeoutError as exc:
            screens.append(str(exc))
            if "Filter (regular expression" in tmux.screen():
                tmux.keys("Escape")
                tmux.wait_gone("Filter (regular expression")
    raise AssertionError(f"the filter was not applied in {tries} tries:\n" + "\n".join(screens))
