"""The dashboard: composes the panes, runs the monitor, and refreshes the panes from the store."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer, Static

from gkdtop.format import clock
from gkdtop.tui import gpu_pane, procs_pane
from gkdtop.tui.filter_screen import FilterScreen
from gkdtop.tui.gpu_pane import GpuPane
from gkdtop.tui.help_screen import HelpScreen
from gkdtop.tui.logs_pane import LogsPane
from gkdtop.tui.metrics_pane import MetricsPane
from gkdtop.tui.phases_pane import PhasesPane, headline
from gkdtop.tui.procs_pane import ProcsPane
from gkdtop.tui.ray_pane import RayPane

if TYPE_CHECKING:
    from rich.text import Text
    from textual.widget import Widget

    from gkdtop.alerts.events import AlertEvent
    from gkdtop.alerts.loop import Alerts
    from gkdtop.config import Config
    from gkdtop.jobrun import JobRun
    from gkdtop.monitor import Monitor, StallDump
    from gkdtop.store import Store

COMPACT_WIDTH, COMPACT_HEIGHT = 110, 32
QUICK_BEAT = 0.25  # seconds: a followed log's lines reach the Logs pane at most this late
# What a read-only view (`gkdtop serve` without --allow-actions) refuses, action -> what to call it: each acts
# on the machine (ptrace, kill, files) or on what the shared monitor follows, not just on this view.
ACTIONS_OFF = {"stacks": "stacks", "cleanup": "cleanup", "bundle": "export", "pick_sources": "picking log sources",
               "job_control": "job control"}
PANES = {"1": PhasesPane, "2": GpuPane, "3": ProcsPane, "4": LogsPane, "5": RayPane, "6": MetricsPane}
FOCUS_HELP = "move focus between panes"
MAXIMIZE_HELP = "maximize Phases / GPUs / Processes / Logs / Ray / Metrics; the same key or escape restores"


class SourcePane(Protocol):
    """A pane as the app routes redraws to it: the store sources it draws (class attributes: SOURCES;
    optionally TICKS, seconds after which its text has aged with the clock and it redraws on the next
    tick though no source moved, and QUICK, also drawn a quick beat after its sources move) and how
    it draws them."""

    SOURCES: ClassVar[tuple[str, ...]]

    def refresh_from(self, store: Store) -> None: ...


def stall_stacker(store: Store) -> StallDump:
    """The stall-time dump this dashboard hands its monitor, imported when the monitor first needs it
    (after the first frame): the monitor imports no action."""
    from gkdtop.actions.stall_stacks import StallStacker

    return StallStacker(store)


Action = TypeVar("Action", bound=Callable[..., Any])


def needs_monitor(action: Action) -> Action:
    """An action on the job's data: a key typed ahead of the monitor (wired just after the first
    frame) does nothing rather than reach for a store that is not there yet."""

    @functools.wraps(action)
    def guarded(app: GkdtopApp, *args: Any) -> Any:
        return None if app.monitor is None else action(app, *args)

    return guarded  # type: ignore[return-value]


class Column(Vertical):
    """A layout container with nothing of its own to draw. BLANK: each clock tick re-renders every
    container it overlaps, and a blank one is a row of spaces, not a styled, filtered, cached line."""

    BLANK = True


class Row(Horizontal):
    """As Column, side by side."""

    BLANK = True


class TopBar(Static):
    DEFAULT_CSS = "TopBar { height: 1; background: $panel; }"


class JobBar(Static):
    """`gkdtop run`: the job's state; once it ended, how (code, signal, OOM), with the panes left as they were."""

    DEFAULT_CSS = """
    JobBar { height: 1; background: $primary-darken-2; padding: 0 1; }
    JobBar.-ended { background: $success-darken-2; }
    JobBar.-failed { background: $error; color: $text; text-style: bold; }
    """

    def refresh_from(self, job: JobRun) -> None:
        code = job.poll()
        self.set_class(code is not None, "-ended")
        self.set_class(code not in (None, 0), "-failed")
        self.update(job.status_line(), layout=False)  # one row, whatever it says: no layout pass


class GkdtopApp(App[str | None]):
    TITLE = "gkdtop"
    CSS = """
    #upper { height: 2fr; }
    #upper PhasesPane { width: 1fr; }
    #upper GpuPane { width: 1fr; }
    #upper GpuPane.-none { width: 36; }
    #lower { height: 5fr; }
    ProcsPane { height: 2fr; }
    LogsPane { height: 3fr; }
    #summary { height: 2; padding: 0 1; color: $text-muted; display: none; }
    .-compact #summary { display: block; }
    .-compact GpuPane { display: none; }
    .-compact ProcsPane { display: none; }
    .-compact #upper { height: 2fr; }
    .-compact #lower { height: 3fr; }
    .-compact LogsPane { height: 1fr; }
    .-compact GpuPane.-maximized, .-compact ProcsPane.-maximized { display: block; }
    """
    # The tooltip is the key's one description: the footer shows it on hover, the help screen (`?`) lists it.
    BINDINGS = [
        Binding("q", "quit", "Quit", tooltip="quit"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="this help"),
        Binding("slash", "edit_filter", "Filter", key_display="/",
                tooltip="edit the log filter (a regular expression; a preset name such as 'default' or 'all')"),
        Binding("f", "toggle_follow", "Follow", tooltip="follow the newest log lines on / off"),
        Binding("space", "toggle_pause", "Pause", tooltip="pause / resume the log view (lines keep being collected)"),
        Binding("s", "stacks", "Stacks", tooltip="dump the Python stacks of every job process (py-spy), grouped; "
                "odd ones out marked; while stalled, first the dump taken when the stall began (r: dump again)"),
        Binding("c", "cleanup", "Cleanup",
                tooltip="clean up a crashed run's debris: shows the plan first, runs only what you confirm"),
        Binding("e", "bundle", "Export", tooltip="export a diagnostic bundle (.tar.gz, secrets redacted)"),
        Binding("n", "pick_sources", "Sources", show=False,
                tooltip="pick log files of Ray nodes (remote workers) to follow in the Logs pane"),
        Binding("tab", "app.focus_next", "Focus", show=False, tooltip=FOCUS_HELP),
        Binding("shift+tab", "app.focus_previous", "Focus", show=False, tooltip=FOCUS_HELP),
        Binding("escape", "restore", "Restore", show=False),  # told with 1-6
        *[Binding(key, f"maximize('{key}')", "Max", show=key == "1", key_display="1-6", tooltip=MAXIMIZE_HELP)
          for key in PANES],
        Binding("ctrl+c", "help_quit", show=False, system=True,  # Textual's own key, with what it does here
                tooltip="in `gkdtop run`: send SIGINT to the job, as a shell would"),
    ]

    def __init__(self, config: Config, monitor: Monitor | Callable[[], Monitor], refresh: float | None = None,
                 job: JobRun | None = None, read_only: bool = False, owns_monitor: bool = True,
                 alert_args: object = None, redact: bool = False) -> None:
        """`monitor` may be a function that makes one: it is then called just after the first frame,
        so the frame does not wait for the data layer's imports, the rules and the collectors.
        `redact`: log text shown with its secrets redacted (a browser view, unless --show-secrets)."""
        super().__init__()
        self.redact = redact
        self.job = job  # `gkdtop run`: the job this dashboard started
        self.read_only = read_only  # a viewer, not an operator: ACTIONS_OFF say so instead of acting
        self.owns_monitor = owns_monitor  # False when several views share one running monitor (gkdtop serve)
        self.config = config
        self.monitor: Monitor | None = None
        self._make_monitor = monitor if callable(monitor) else None
        if not callable(monitor):
            self._attach(monitor)
        self.ui_interval = refresh or config.refresh.get("ui", 1.0)
        self._drawn: dict[SourcePane, tuple[int, ...]] = {}  # per pane: its sources' store versions when it last drew
        self._aged_at: dict[SourcePane, float] = {}  # per TICKS pane: when its text has aged (monotonic)
        self._top: Text | None = None  # the top bar as last drawn
        self._quick_sources: set[str] = set()  # what the QUICK panes draw: a move schedules their redraw
        self._quick_due: asyncio.TimerHandle | None = None  # that redraw, while one is scheduled
        self._app_context: contextvars.Context | None = None  # where it runs: this app's, taken in _run
        self._quick_drawn = 0.0  # monotonic: the QUICK panes' last redraw
        self.first_frame_at: float | None = None
        self.alert_args = alert_args  # --notify, --metrics-port: read with the config when the monitor starts
        self.alerts: Alerts | None = None
        self._interrupted = False  # `gkdtop run`: a Ctrl-C was passed to the job

    def _attach(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.store: Store = monitor.store
        self.config = monitor.config

    def compose(self) -> ComposeResult:
        yield TopBar(id="top")
        if self.job is not None:
            yield JobBar(id="job")
        # Upper and lower in containers of their own: Textual repaints every widget whose container
        # overlaps a changed line, so the Phases pane's clock (ticking every second) must not share
        # one with the process table and the scrollback.
        with Column(id="panes"):
            with Row(id="upper"):
                yield PhasesPane(id="phases")
                yield GpuPane(id="gpus")
            yield Static("", id="summary")
            with Column(id="lower"):
                yield ProcsPane(id="procs")
                yield LogsPane(self.config.default_filter, id="logs")
        yield RayPane(id="ray")
        yield MetricsPane(id="metrics")  # shown maximized (6)
        yield Footer()

    def on_mount(self) -> None:
        # Kept by reference: timers fire while a modal is on top, and queries search the top screen.
        self.top_bar = self.query_one(TopBar)
        self.job_bar = self.query_one(JobBar) if self.job is not None else None
        self.summary = self.query_one("#summary", Static)
        self.phases = self.query_one(PhasesPane)
        self.gpus = self.query_one(GpuPane)
        self.procs = self.query_one(ProcsPane)
        self.logs = self.query_one(LogsPane)
        self.ray = self.query_one(RayPane)
        self.panes: dict[str, Widget] = {key: self.query_one(pane_type) for key, pane_type in PANES.items()}
        # Redraws are routed by what each pane declares it draws (its SOURCES), in compose order.
        drawing: list[Any] = [w for w in self.query("*") if isinstance(getattr(w, "SOURCES", None), tuple)]
        self._quick: list[SourcePane] = [p for p in drawing if getattr(p, "QUICK", False)]
        self._ticked: list[SourcePane] = [p for p in drawing if not getattr(p, "QUICK", False)]
        for pane in self.panes.values():
            pane.ALLOW_MAXIMIZE = True
            pane.can_focus = True
        self._apply_size(self.size.width, self.size.height)
        self.call_after_refresh(self._first_frame)
        if self.monitor is None:
            self.call_after_refresh(self._wire)  # after _first_frame: the frame is drawn by then
        else:
            self._run()

    def _wire(self) -> None:
        """Just after the first frame: make the monitor, then run as if it had been handed in."""
        assert self._make_monitor is not None
        self._attach(self._make_monitor())
        self._run()

    def _run(self) -> None:
        """Start the monitor (if this view owns it) and the timers that redraw the panes from its store."""
        assert self.monitor is not None
        if self.owns_monitor:
            self.monitor.start(stall_dump=stall_stacker)
            self._start_alerts()
        self.set_interval(self.ui_interval, self.refresh_panes)
        self._quick_sources = {source for pane in self._quick for source in pane.SOURCES}
        # The store's writer may run outside this app's context (serve starts the monitor before any
        # view, and Textual's timers need their app's context): the redraw is scheduled in this one.
        self._app_context = contextvars.copy_context()
        self.store.watch(self._source_moved)
        self.refresh_panes(force=True)

    def _start_alerts(self) -> None:
        """Tell others (--notify, the config's notify:, --metrics-port), and inside tmux ring its bell and
        put a stall on its status line; a bad URL or a busy port is said in a toast, the dashboard goes on."""
        import os

        from gkdtop.alerts import loop
        from gkdtop.alerts.notify import NotifyError

        try:
            options = loop.options_from(self.alert_args, self.config)
            if options.wanted or os.environ.get("TMUX"):
                self.alerts = loop.start(self.store, options, self.config.stall_stacks, on_event=self._alerted,
                                         on_error=lambda line: self.notify(line, severity="error", timeout=10,
                                                                           markup=False),
                                         tmux=True, job_ended=self._job_ended if self.job is not None else None)
        except (NotifyError, OSError) as exc:
            self.notify(f"alerts are off: {exc}", severity="error", timeout=15, markup=False)

    def _job_ended(self) -> tuple[int, str] | None:
        """`gkdtop run`'s job, once it has exited: its status and how it ended (`failed` names a crash)."""
        job = self.job
        if job is None or job.running():
            return None
        return job.exit_status or 0, job.outcome()

    def _alerted(self, event: AlertEvent) -> None:
        if event.kind in ("stalled", "failed"):
            self.bell()
        self.notify(event.title.removeprefix("gkdtop: "), timeout=10, markup=False,  # a file name is no markup
                    severity="error" if event.kind in ("stalled", "failed")
                    else "warning" if event.kind == "anomaly" else "information")

    def _source_moved(self, source: str) -> None:
        """A QUICK pane's source moved: draw it a quick beat after its last draw. A flood is drawn four
        times a second and an idle log never: no timer wakes the dashboard to find nothing new."""
        if source not in self._quick_sources or self._quick_due is not None:
            return
        beat = min(QUICK_BEAT, self.ui_interval)
        wait = max(0.0, self._quick_drawn + beat - time.monotonic())
        self._quick_due = asyncio.get_running_loop().call_later(wait, self._quick_draw, context=self._app_context)

    def _quick_draw(self) -> None:
        self._quick_due = None
        self._quick_drawn = time.monotonic()
        self.refresh_logs()

    def _first_frame(self) -> None:
        self.first_frame_at = time.monotonic()

    async def on_unmount(self) -> None:
        if self.monitor is not None:
            self.store.unwatch(self._source_moved)  # a shared monitor (serve) outlives this view
        if self._quick_due is not None:
            self._quick_due.cancel()
        if self.owns_monitor and self.monitor is not None:
            await self.monitor.stop()
        if self.alerts is not None:
            await asyncio.to_thread(self.alerts.close)

    def on_resize(self, event: Any) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        self.set_class(width < COMPACT_WIDTH or height < COMPACT_HEIGHT, "-compact")

    # --- refresh -------------------------------------------------------------------------------

    def refresh_panes(self, force: bool = False) -> None:
        store = self.store
        now = time.time()
        status = store.phase_status(now)
        if self.alerts is not None:
            self.alerts.tick(now, status)
        top = headline(status, now)
        framework = store.framework()
        if framework.label:
            top.append(f"   {framework.label}", "cyan")
        top.append(f"   {clock(time.time())}", "dim")
        if self.read_only:
            top.append("   read-only", "dim")
        if top != self._top:  # the same text again still repaints the row, and the compositor with it
            self._top = top
            self.top_bar.update(top, layout=False)  # one row: the clock's tick needs no layout pass
        if self.job is not None:
            assert self.job_bar is not None  # composed with the job
            self.job_bar.refresh_from(self.job)
        self._redraw(self._ticked, force)
        if self.has_class("-compact"):
            self.summary.update(f"{gpu_pane.summary(store)}\n{procs_pane.summary(store)}", layout=False)
        self.refresh_logs(force)

    def refresh_logs(self, force: bool = False) -> None:
        """The panes that declare QUICK (the Logs pane): when their sources move, and every tick."""
        try:
            self._redraw(self._quick, force)
        except NoMatches:  # a timer that fired while the app quits: the pane's widgets are gone
            return

    def _redraw(self, panes: list[SourcePane], force: bool) -> None:
        """Each pane whose declared SOURCES moved since it last drew, or whose TICKS say its text aged."""
        versions = self.store.versions
        now = time.monotonic()
        for pane in panes:
            drawn = tuple(versions.get(source, 0) for source in pane.SOURCES)
            ticks = getattr(pane, "TICKS", 0.0)
            aged = ticks and now >= self._aged_at.get(pane, 0.0)
            if force or aged or self._drawn.get(pane) != drawn:
                self._drawn[pane] = drawn
                if ticks:  # half a tick early: the timer's jitter must not skip a whole tick
                    self._aged_at[pane] = now + ticks - self.ui_interval / 2
                pane.refresh_from(self.store)

    # --- actions -------------------------------------------------------------------------------

    def refused(self, action: str) -> bool:
        """In a read-only view, say that `action` is off and how to turn it on; True when refused."""
        if not self.read_only:
            return False
        self.notify(f"Read-only view: {ACTIONS_OFF[action]} is off (start gkdtop serve with --allow-actions).",
                    severity="warning", timeout=5)
        return True

    async def action_quit(self) -> None:
        """Quit; with a job of `gkdtop run` still running, ask first: stop it or leave it (the result says).

        A read-only view just closes: the job is not its to stop."""
        job = self.job
        if job is None or not job.running() or self.read_only:
            self.exit()
            return
        from gkdtop.tui.quit_screen import QuitScreen

        def chosen(choice: str | None) -> None:
            if choice is not None:
                self.exit(choice)

        if not isinstance(self.screen, QuitScreen):
            self.push_screen(QuitScreen(job.pid, " ".join(job.plan.command)), chosen)

    def action_help_quit(self) -> None:
        """ctrl+c: in `gkdtop run`, SIGINT to the job's process group, as a shell would; else Textual's hint."""
        if self.job is not None and self.job.running() and self.refused("job_control"):
            return
        if self.job is not None and self._interrupted and self.job.running():
            import threading

            from gkdtop.jobrun import STOP_GRACE_S

            # The job ignored the first: as `gkdtop run --no-ui` does, a second stops it.
            self.notify(f"Ctrl-C again and job {self.job.pid} still runs: SIGTERM to its processes, SIGKILL in "
                        f"{STOP_GRACE_S:g} s", severity="warning", timeout=8)
            threading.Thread(target=self.job.stop, name="gkdtop-run-stop", daemon=True).start()
            return
        if self.job is not None and self.job.interrupt():
            self._interrupted = True
            self.notify(f"SIGINT sent to job {self.job.pid}; ctrl+c again stops it", timeout=3)
            return
        super().action_help_quit()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.config.source, [*self.BINDINGS, *ProcsPane.BINDINGS, *RayPane.BINDINGS,
                                                         *MetricsPane.BINDINGS]))

    @needs_monitor
    def action_edit_filter(self) -> None:
        logs = self.logs

        def apply(value: str | None) -> None:
            if value is not None:
                logs.set_filter(value, self.store)

        self.push_screen(FilterScreen(logs.filter_text, self.config.filters), apply)

    @needs_monitor
    def action_stacks(self) -> None:
        if self.refused("stacks"):
            return
        from gkdtop.actions.stacks import stack_targets
        from gkdtop.tui.stacks_screen import StacksScreen

        procs = stack_targets(self.store.processes)
        taken = self.store.stall_stacks
        if taken is not None and self.store.phase_status().state == "stalled":
            self.push_screen(StacksScreen(procs, taken=taken))  # the dump from when the stall began; r: again
            return
        if not procs:
            self.notify("No job processes to dump (the Processes pane is empty).", severity="warning")
            return
        self.push_screen(StacksScreen(procs))

    @needs_monitor
    def action_cleanup(self) -> None:
        if self.refused("cleanup"):
            return
        from gkdtop.tui.cleanup_screen import CleanupScreen

        self.push_screen(CleanupScreen(self.store.gpu_pids()))

    @needs_monitor
    def action_pick_sources(self) -> None:
        """The Logs pane's remote sources: which Ray nodes' files to follow (tui/source_screen.py)."""
        if self.refused("pick_sources"):
            return
        from gkdtop.tui.source_screen import SourceScreen

        collector = next((c for c in self.monitor.collectors if c.name == "ray_logs"), None)

        def apply(chosen: list[Any] | None) -> None:
            if chosen is not None and collector is not None:
                collector.set_followed(chosen)  # type: ignore[attr-defined]

        self.push_screen(SourceScreen(self.store, getattr(collector, "request_catalog", None)), apply)

    @needs_monitor
    def action_bundle(self) -> None:
        if self.refused("bundle"):
            return
        self.notify("Building the diagnostic bundle…")
        self.run_worker(self._bundle, thread=True, exclusive=True, group="bundle")

    def _bundle(self) -> None:
        from gkdtop.actions.bundle import build_bundle

        def progress(step: str, done: int, total: int) -> None:
            self.call_from_thread(self.notify, f"bundle {done}/{total}: {step}", timeout=2)

        try:
            prefix = self.job.plan.trace_prefix or None if self.job is not None else None  # the run's dumps
            path = build_bundle(self.monitor, None, progress=progress, trace_prefix=prefix)
        except Exception as exc:
            self.call_from_thread(self.notify, f"bundle failed: {exc}", severity="error", timeout=10)
            return
        self.call_from_thread(self.notify, f"bundle written: {path}", timeout=30)

    @needs_monitor
    def action_toggle_follow(self) -> None:
        self.logs.toggle_follow(self.store)

    @needs_monitor
    def action_toggle_pause(self) -> None:
        self.logs.toggle_pause(self.store)

    @needs_monitor
    def action_maximize(self, key: str) -> None:
        pane = self.panes[key]
        if self.screen.maximized is pane:
            self.screen.minimize()
            self.refresh_panes(force=True)
            return
        self.screen.maximize(pane, container=False)
        pane.focus()
        self.refresh_panes(force=True)

    @needs_monitor
    def action_restore(self) -> None:
        if self.screen.maximized is not None:
            self.screen.minimize()
            self.refresh_panes(force=True)
