"""The real Textual app driven through Pilot, on real files, real processes and recorded GPU data."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from gkdtop.config import Config, builtin_phases
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp
from gkdtop.tui.filter_screen import FilterScreen
from gkdtop.tui.gpu_pane import GpuPane
from gkdtop.tui.help_screen import HelpScreen
from gkdtop.tui.log_view import LogView
from gkdtop.tui.logs_pane import LogsPane
from gkdtop.tui.phases_pane import PhasesPane
from gkdtop.tui.procs_pane import ProcsPane
from tests.gkdlog import ray, startup
from tests.gpudata import recorded_gpus


def make_app(tmp_path: Path, lines: list[str], mtime: float | None = None, **cfg: object) -> tuple[GkdtopApp, Path]:
    import os

    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    if mtime is not None:
        os.utime(log, (mtime, mtime))
    config = Config(phases=builtin_phases())
    config.refresh.update({"logs": 0.05, "gpus": 0.2, "procs": 0.5, "ray": 5.0, "ui": 0.1})
    for key, value in cfg.items():
        setattr(config, key, value)
    from gkdtop.collectors.gpu import RecordedBackend

    monitor = Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9", gpu_backend=RecordedBackend(
        str(recorded_gpus(tmp_path))))
    return GkdtopApp(config, monitor), log


def pane_text(app: GkdtopApp, pane_type: type) -> str:
    pane = app.query_one(pane_type)
    return str(pane.render())


def log_lines(app: GkdtopApp) -> list[str]:
    """The Logs pane's lines as held (each starts with its clock; folded rows are one line)."""
    return app.query_one(LogsPane).query_one(LogView).lines


async def settle(pilot, predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the app did not reach the expected state in time")
        await pilot.pause(0.05)


async def test_panes_show_the_job(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 200, steps=3, step_s=30)
    app, _ = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "training loop" in pane_text(app, PhasesPane))
        phases = pane_text(app, PhasesPane)
        assert "RUNNING" in phases
        assert "steps 3" in phases
        assert "update_actor 10.50s" in phases
        for name in ("config", "dataset generation", "resource pool", "actor init", "rollout init", "weight sync"):
            assert name in phases
        await settle(pilot, lambda: "H100 80GB HBM3" in pane_text(app, GpuPane))
        assert "lost" not in pane_text(app, GpuPane)
        await settle(pilot, lambda: any("step:3" in ln for ln in log_lines(app)))
        # The default filter keeps markers and step lines, drops the config dump.
        assert not any("actor_rollout_ref" in ln for ln in log_lines(app))
        assert any("[ACTOR] init_model START" in ln for ln in log_lines(app))


async def test_stall_banner_for_a_log_silent_before_start(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 1200, upto="sync")
    app, _ = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "STALLED" in pane_text(app, PhasesPane))
        phases = pane_text(app, PhasesPane)
        assert "weight sync" in phases
        assert re.search(r"no progress for 1\dm", phases)  # the log went quiet ~19 minutes before start
        assert "NCCL_TIMEOUT is read by nothing" in phases
        assert app.query_one(PhasesPane).has_class("-stalled")


@pytest.mark.parametrize("width", [260, 120])
async def test_the_phases_clock_repaints_only_the_lines_it_changed(tmp_path: Path, width: int) -> None:
    """A stalled phase's "no progress for …" ticks every second: those lines repaint, not the pane, and
    what is painted is what a whole repaint paints. At 120 columns the timeline ("‖ weight sync 19m02s")
    and the hints wrap: a ticking line that wraps to as many rows as before takes no layout pass."""
    from textual.geometry import Region

    lines, last = startup(time.time() - 1200, upto="sync")
    # Neither the stall-time dump nor the stack phase: with no root PIDs they read whatever training processes
    # run on the machine (a Ray worker of another test's cluster, under `-n`), and their note, arriving
    # meanwhile, adds a line to the pane (a layout pass).
    app, _ = make_app(tmp_path, lines, mtime=last, stall_stacks=False, stack_phase=False)
    async with app.run_test(size=(width, 50)) as pilot:
        await settle(pilot, lambda: "STALLED" in pane_text(app, PhasesPane))
        pane = app.query_one(PhasesPane)
        dirty: list[tuple[Region, ...]] = []
        layouts: list[bool] = []
        set_dirty, refresh_from, refresh = pane._set_dirty, pane.refresh_from, pane.refresh
        pane._set_dirty = lambda *regions: (dirty.append(regions), set_dirty(*regions))[1]  # type: ignore[method-assign]
        pane.refresh_from = lambda store: (dirty.clear(), refresh_from(store))[1]  # type: ignore[method-assign]
        pane.refresh = lambda *r, **kw: (layouts.append(kw.get("layout", False)), refresh(*r, **kw))[1]  # type: ignore[method-assign]
        timeline = next(line for line in pane._shown.split("\n") if "‖" in line)  # it ticks: "‖ weight sync 19m"
        assert (len(timeline) > pane.content_size.width) == (width == 120)

        def painted() -> list[str]:
            return ["".join(seg.text for seg in strip) for strip in pane.render_lines(Region(0, 0, *pane.size))]

        before = painted()

        def ticked_lines() -> bool:
            """The clock ticked and what it dirtied was some rows, not the pane (on a loaded machine two
            ticks may land in one frame: the test waits for a tick it can read, however long)."""
            return painted() != before and bool(dirty) and 0 < sum(r.height for r in dirty[-1]) < \
                pane.virtual_size.height

        await settle(pilot, ticked_lines)
        assert all(r.height == 1 or width == 120 for regions in dirty for r in regions)
        assert not any(layouts)
        ticked = painted()
        assert any("no progress for" in row for row in ticked)
        pane.refresh_from = lambda store: None  # type: ignore[method-assign]  # the text stays as painted
        pane.refresh()  # the whole pane, as before the change
        await pilot.pause()
        assert painted() == ticked


async def test_a_log_line_is_drawn_when_it_arrives_not_on_a_timer(tmp_path: Path) -> None:
    """The Logs pane redraws when the store's logs move, a beat after its last draw: with the panes'
    tick at 30 s a new line still reaches it at once, and polls of an idle log schedule nothing."""
    lines, last = startup(time.time() - 100, steps=1, step_s=5)
    app, log = make_app(tmp_path, lines, mtime=last)
    app.ui_interval = 30.0
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("step:1" in ln for ln in log_lines(app)))
        pane = app.query_one(LogsPane)
        draws: list[int] = []
        refresh_from = pane.refresh_from
        pane.refresh_from = lambda store: (draws.append(store.total_lines), refresh_from(store))[1]  # type: ignore[method-assign]
        polls = app.store.log_polls
        await settle(pilot, lambda: app.store.log_polls >= polls + 5)  # the idle log, polled
        assert draws == [] and app._quick_due is None
        # Nothing of the app's own polls faster than its tick (Textual's blink and the like aside).
        assert not [t for t in app._timers if t._repeat is None and t._interval < 1 and "set_interval" in t.name]
        with log.open("a") as fh:
            fh.write("[ACTOR] a line that came later\n")
        await settle(pilot, lambda: any("a line that came later" in ln for ln in log_lines(app)), timeout=20)
        assert len(draws) == 1


async def test_a_monitor_started_before_the_view_still_draws_its_logs(tmp_path: Path) -> None:
    """`gkdtop serve` starts the monitor before any view, outside every app's context: the Logs pane's
    redraw, scheduled from the store's writer, still runs in the view's own, and the view ends cleanly."""
    lines, last = startup(time.time() - 100, steps=1, step_s=5)
    owner, log = make_app(tmp_path, lines, mtime=last)
    monitor = owner.monitor
    assert monitor is not None
    monitor.start()
    try:
        app = GkdtopApp(monitor.config, monitor, owns_monitor=False)
        app.ui_interval = 30.0  # no tick: only the store's moves draw the Logs pane
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot, lambda: any("step:1" in ln for ln in log_lines(app)))
            with log.open("a") as fh:
                fh.write("[ACTOR] drawn by the view\n")
            await settle(pilot, lambda: any("drawn by the view" in ln for ln in log_lines(app)), timeout=20)
        assert app.return_code in (None, 0)
    finally:
        await monitor.stop()


async def test_a_progress_bar_with_brackets_is_shown_as_written(tmp_path: Path) -> None:
    """The bars under the Logs pane are log text, not markup: "[rank0]:" stays, "[/rank0]" is no error."""
    lines, last = startup(time.time() - 100, steps=1, step_s=5)
    app, log = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("step:1" in ln for ln in log_lines(app)))
        with log.open("a") as fh:
            fh.write("\r[rank0]: Loading [/rank0] shards:  50%|#####     | 5/10 [00:05<00:05,  1.00it/s]")
        progress = app.query_one(LogsPane).query_one("#progress", Static)
        await settle(pilot, lambda: "[rank0]: Loading [/rank0] shards" in str(progress.render()), timeout=20)


async def test_filter_edit_pause_and_follow(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 100, steps=2, step_s=5)
    app, log = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("step:2" in ln for ln in log_lines(app)))
        await pilot.press("slash")
        assert isinstance(app.screen, FilterScreen)
        await pilot.press("ctrl+u", *"(unclosed", "enter")
        assert isinstance(app.screen, FilterScreen)  # a bad regex is said, not applied
        assert "invalid regular expression" in str(app.screen.query_one("#error").render())
        await pilot.press("ctrl+u", *r"step:\d+", "enter")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, FilterScreen)
        shown = log_lines(app)
        assert shown and all("step:" in ln for ln in shown)
        assert len(shown) == 2

        await pilot.press("space")
        logs = app.query_one(LogsPane)
        assert logs.paused
        with log.open("a") as fh:
            fh.write(ray("TaskRunner", 1, "step:3 - timing_s/step:5.0 - actor/kl_loss:0.3") + "\n")
        await settle(pilot, lambda: "PAUSED · 1 new" in str(logs.border_subtitle))
        assert len(log_lines(app)) == 2
        await pilot.press("space")
        await settle(pilot, lambda: len(log_lines(app)) == 3)

        await pilot.press("f")
        assert not logs.follow and "scroll" in str(logs.border_subtitle)
        await pilot.press("f")
        assert logs.follow


async def test_maximize_help_and_focus(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 100, steps=1)
    app, _ = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        for key, pane_type in (("1", PhasesPane), ("2", GpuPane), ("3", ProcsPane), ("4", LogsPane)):
            await pilot.press(key)
            assert app.screen.maximized is app.query_one(pane_type)
            await pilot.press(key)
            assert app.screen.maximized is None
        await pilot.press("5")
        assert app.screen.maximized is not None and app.screen.maximized.id == "ray"
        await pilot.press("escape")
        assert app.screen.maximized is None
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one(Static).render())
        for keys in ("q", "?", "/", "f", "space", "tab / shift+tab", "1 2 3 4 5 6", "o", "m", "s", "c", "e", "n",
                     "ctrl+c"):
            assert f"  {keys:<16} " in text, keys  # every key the app and its panes bind, told once
        assert "the same key or escape restores" in text and "Processes: cycle the sort column" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        focused = []
        for _ in range(4):
            await pilot.press("tab")
            focused.append(app.focused.id if app.focused else None)
        assert {"phases", "gpus", "procs", "logs"} <= set(focused)


async def test_compact_layout_in_an_80x24_pane(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 100, steps=1)
    app, _ = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: "GPUs: 2" in str(app.query_one("#summary").render()))
        assert not app.query_one(GpuPane).display or app.query_one(GpuPane).size.height == 0
        summary = str(app.query_one("#summary").render())
        assert "Processes:" in summary
        await pilot.press("2")  # a collapsed pane can still be maximized
        await settle(pilot, lambda: "H100 80GB HBM3" in pane_text(app, GpuPane))
        assert app.query_one(GpuPane).size.height > 5


async def test_a_failing_collector_shows_its_error_and_the_rest_goes_on(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 100, steps=1)
    app, _ = make_app(tmp_path, lines, mtime=last)

    class Broken:
        name = "gpus"
        interval = 0.1

        def collect(self) -> object:
            raise OSError("NVML went away")

        def close(self) -> None:
            pass

    app.monitor.collectors[0] = Broken()
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "NVML went away" in pane_text(app, GpuPane))
        assert "retrying" in pane_text(app, GpuPane)
        await settle(pilot, lambda: "training loop" in pane_text(app, PhasesPane))


async def test_a_flood_is_sieved_and_said(tmp_path: Path) -> None:
    """30,000 lines at once: the step line buried in them reaches the Phases pane, the newest line is
    shown, and the Logs pane says how many lines it did not show and why."""
    lines, last = startup(time.time() - 100, steps=2, step_s=5)
    app, log = make_app(tmp_path, lines, mtime=last)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "steps 2" in pane_text(app, PhasesPane))
        noise = [ray("WorkerDict", 2001, f"NCCL INFO Channel {i}/0 : 1[1] -> 2[2] via P2P") for i in range(30_000)]
        noise[10_000] = ray("TaskRunner", 1, "step:3 - timing_s/step:5.0 - actor/kl_loss:0.3")
        noise[-1] = ray("WorkerDict", 2001, "NCCL INFO the newest line")
        with log.open("a") as fh:
            fh.write("\n".join(noise) + "\n")
        await settle(pilot, lambda: any("the newest line" in ln for ln in log_lines(app)))
        await settle(pilot, lambda: "steps 3" in pane_text(app, PhasesPane))  # on the Phases pane's own timer
        assert app.store.skipped_lines > 20_000
        assert any(re.search(r"… .*[\d,]+ lines no rule needs not shown \(flood", ln) for ln in log_lines(app))


def test_a_stalled_phase_shows_its_last_known_line_cut_to_one_line_of_the_pane() -> None:
    """Where a stalled job stopped, in its own words, on one line above the hint: a long line is cut
    to the pane's width, not wrapped over the causes."""
    from gkdtop.model import PhaseStatus
    from gkdtop.tui.phases_pane import render_phases

    line = "Capturing CUDA graph shapes:  46%|████      | 31/67 [00:13<00:15, 2.38it/s]"
    status = PhaseStatus(current="rollout init", state="stalled", since=None, last_progress=None, stall_after=600.0,
                         hint=None, stalled_for=900.0, unrecognised=1,
                         recognised_last=line)
    shown = [row for row in render_phases(status, 0.0, width=60).plain.splitlines() if "last known" in row]
    assert len(shown) == 1 and len(shown[0]) <= 60 and shown[0].endswith("…"), shown
    assert "Capturing CUDA graph shapes" in shown[0]
    status.unrecognised = 40  # a long unknown tail: said as such instead
    assert "last known" not in render_phases(status, 0.0, width=60).plain


BACKWARD = "  Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"


async def test_a_stalled_job_s_phases_pane_quotes_the_log_s_own_last_line(tmp_path: Path) -> None:
    """A stalled job whose log goes on in lines no rule knows: the pane quotes the last of them, what the
    job printed last, as snapshot's text does, once they have been the last for the phase's stall_after;
    not while the last line is the one a rule knew. A browser view redacts it like the rest of the pane."""
    from gkdtop import snapshot

    lines, last = startup(time.time() - 1200, upto="sync")
    lines = lines[:-1]  # it ends on `Starting weight synchronization...`, a line a rule knows
    app, log = make_app(tmp_path, lines, mtime=last, stall_after=2.0)  # weight sync stalls after 2 s
    app.redact = True
    async with app.run_test(size=(300, 50)) as pilot:
        await settle(pilot, lambda: "STALLED" in pane_text(app, PhasesPane))
        assert "last line:" not in pane_text(app, PhasesPane)
        token = "hf_" + "PaneLastLineToken0123456789abcdef"
        with log.open("a") as fh:
            fh.write(ray("WorkerDict", 2001, f"warning: HF_TOKEN={token} set twice") + "\n")
            fh.write(ray("WorkerDict", 2001, f"  Variable._execution_engine.run_backward(  # HF_TOKEN={token}\n"))
        await settle(pilot, lambda: "last line:" in pane_text(app, PhasesPane))
        phases = pane_text(app, PhasesPane)
        row = next(row for row in phases.splitlines() if "last line:" in row)
        assert "(WorkerDict pid=2001, ip=10.0.0.7)   Variable._execution_engine.run_backward(" in row, row
        assert token not in phases and "HF_TOKEN=<redacted>" in row, row
        assert "STALLED" in phases and "root INFO Starting weight synchronization..." in phases  # last known
        said = snapshot.text_summary(snapshot.build(app.store))
        assert "last line: `(WorkerDict pid=2001, ip=10.0.0.7)   Variable._execution_engine.run_backward(" in said


async def test_a_running_job_s_phases_pane_does_not_quote_its_last_line(tmp_path: Path) -> None:
    """A running job's last line is the Logs pane's, new with every line: the verdict holds it (snapshot's
    JSON carries it) but the pane does not quote it."""
    lines, last = startup(time.time() - 200, steps=3, step_s=30)
    app, log = make_app(tmp_path, lines, mtime=last, stall_after=3600.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "steps 3" in pane_text(app, PhasesPane))
        with log.open("a") as fh:
            fh.write(ray("WorkerDict", 2001, BACKWARD) + "\n")
        await settle(pilot, lambda: "run_backward(" in app.store.phase_status().unrecognised_last)
        pane = app.query_one(PhasesPane)
        pane.refresh_from(app.store)  # drawn from the store that holds the line, as its timer would
        phases = pane._shown
        assert "RUNNING" in phases and "last line:" not in phases, phases


async def test_the_first_frame_comes_before_the_monitor(tmp_path: Path) -> None:
    """`gkdtop` hands the app a function that makes the monitor: it is called just after the first frame."""
    _, log = make_app(tmp_path, ["(TaskRunner pid=7) [ACTOR] init_model START"])
    config = Config(phases=builtin_phases())
    config.refresh.update({"logs": 0.05, "ui": 0.1})
    frames_before: list[float | None] = []

    def make_monitor() -> Monitor:
        frames_before.append(app.first_frame_at)
        return Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9")

    app = GkdtopApp(Config(), make_monitor)
    assert app.action_toggle_follow() is None and app.monitor is None  # a key typed ahead: nothing to act on yet
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("init_model START" in ln for ln in log_lines(app)))
        assert len(frames_before) == 1 and frames_before[0] is not None  # made once, after the first frame
        assert app.config is config and app.store is app.monitor.store  # type: ignore[union-attr]


async def test_a_browser_view_hides_a_secret_yaml_block_s_lines(tmp_path: Path) -> None:
    """The view redacts line by line: a YAML block scalar's value lines carry no name of their own, so
    the pane marks them as they arrive, after their writer's `password: |` line; a filter for the value
    finds nothing (no oracle). The lines after the block show again."""
    lines = ["config:", "  db_password: |", "    Tr0ub4dor&3horse", "    s3cond-line-of-it", "  retries: 3",
             "✓ Configuration loaded"]
    app, _ = make_app(tmp_path, lines, filters={"default": ""})
    app.redact = True
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: any("Configuration loaded" in line for line in log_lines(app)))
        shown = "\n".join(log_lines(app))
        assert "db_password" in shown and "retries: 3" in shown, shown
        assert "Tr0ub4dor" not in shown and "s3cond-line" not in shown, shown
        pane = app.query_one(LogsPane)
        pane.set_filter("Tr0ub4dor", app.store)
        await pilot.pause(0.2)
        assert not any("Tr0ub4dor" in line or "<redacted>" in line for line in log_lines(app)), log_lines(app)


async def test_the_phases_pane_marks_a_phase_read_from_words(tmp_path: Path) -> None:
    """A vLLM server's stats lines with requests in flight, written an hour ago: the pane names generation and says
    it is a guess from a line's words, with the line (analysis/wordphase.py), as replay and snapshot do."""
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 3600))
    lines = [f"INFO {stamp} llm_engine.py:161] Initializing an LLM engine (v0.6.1) with config: model='/m/q'",
             f"INFO {stamp} model_runner.py:1523] Graph capturing finished in 19 secs.",
             *[f"INFO {stamp} metrics.py:351] Avg prompt throughput: 20.{i} tokens/s, Avg generation throughput: "
               f"88.{i} tokens/s, Running: {17 + i} reqs, Swapped: 0 reqs, Pending: 4 reqs" for i in range(3)]]
    app, _ = make_app(tmp_path, lines, mtime=time.time() - 3600)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "a guess" in pane_text(app, PhasesPane))
        phases = pane_text(app, PhasesPane)
        assert "STALLED  generation (a guess)" in phases and "phase read from the words" in phases
        assert "training loop" not in phases  # a server runs no loop
        # The timeline says so too: the engine's start-up was passed (when it ended, no line says), then the guess.
        # It said `‖ engine init 1h00m` under the verdict.
        assert "engine init ?" in phases and "‖ generation (a guess)" in phases, phases
