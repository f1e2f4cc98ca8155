"""The dashboard: composes the panes, runs the monitor, and refreshes the panes from the store."""

from __future__ import annotations

import time
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Footer, Static

from gkdtop.config import Config
from gkdtop.format import clock
from gkdtop.monitor import Monitor
from gkdtop.tui import gpu_pane, procs_pane
from gkdtop.tui.filter_screen import FilterScreen
from gkdtop.tui.gpu_pane import GpuPane
from gkdtop.tui.help_screen import HelpScreen
from gkdtop.tui.logs_pane import LogsPane
from gkdtop.tui.phases_pane import PhasesPane, headline
from gkdtop.tui.procs_pane import ProcsPane
from gkdtop.tui.ray_pane import RayPane

COMPACT_WIDTH, COMPACT_HEIGHT = 110, 32
PANES = {"1": PhasesPane, "2": GpuPane, "3": ProcsPane, "4": LogsPane, "5": RayPane}


class TopBar(Static):
    DEFAULT_CSS = "TopBar { height: 1; background: $panel; }"


class GkdtopApp(App[None]):
    TITLE = "gkdtop"
    CSS = """
    #upper { height: 2fr; }
    #upper PhasesPane { width: 1fr; }
    #upper GpuPane { width: 1fr; }
    ProcsPane { height: 2fr; }
    LogsPane { height: 3fr; }
    #summary { height: 2; padding: 0 1; color: $text-muted; display: none; }
    .-compact #summary { display: block; }
    .-compact GpuPane { display: none; }
    .-compact ProcsPane { display: none; }
    .-compact #upper { height: 2fr; }
    .-compact LogsPane { height: 3fr; }
    .-compact GpuPane.-maximized, .-compact ProcsPane.-maximized { display: block; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("slash", "edit_filter", "Filter", key_display="/"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("space", "toggle_pause", "Pause"),
        Binding("s", "stacks", "Stacks"),
        Binding("c", "cleanup", "Cleanup"),
        Binding("e", "bundle", "Export"),
        Binding("tab", "app.focus_next", "Focus", show=False),
        Binding("shift+tab", "app.focus_previous", "Focus", show=False),
        Binding("escape", "restore", "Restore", show=False),
        *[Binding(key, f"maximize('{key}')", "Max", show=key == "1", key_display="1-5") for key in PANES],
    ]

    def __init__(self, config: Config, monitor: Monitor, refresh: float | None = None) -> None:
        super().__init__()
        self.config = config
        self.monitor = monitor
        self.store = monitor.store
        self.ui_interval = refresh or config.refresh.get("ui", 1.0)
        self._drawn: dict[str, int] = {}  # per source: the store version each pane last drew
        self.first_frame_at: float | None = None

    def compose(self) -> ComposeResult:
        yield TopBar(id="top")
        with Vertical(id="panes"):
            with Horizontal(id="upper"):
                yield PhasesPane(id="phases")
                yield GpuPane(id="gpus")
            yield Static("", id="summary")
            yield ProcsPane(id="procs")
            yield LogsPane(self.config.default_filter, id="logs")
        yield RayPane(id="ray")
        yield Footer()

    def on_mount(self) -> None:
        # Kept by reference: timers fire while a modal is on top, and queries search the top screen.
        self.top_bar = self.query_one(TopBar)
        self.summary = self.query_one("#summary", Static)
        self.phases = self.query_one(PhasesPane)
        self.gpus = self.query_one(GpuPane)
        self.procs = self.query_one(ProcsPane)
        self.logs = self.query_one(LogsPane)
        self.ray = self.query_one(RayPane)
        self.panes: dict[str, Widget] = {key: self.query_one(pane_type) for key, pane_type in PANES.items()}
        for pane in self.panes.values():
            pane.ALLOW_MAXIMIZE = True
            pane.can_focus = True
        self._apply_size(self.size.width, self.size.height)
        self.monitor.start()
        self.set_interval(self.ui_interval, self.refresh_panes)
        self.set_interval(min(0.25, self.ui_interval), self.refresh_logs)
        self.refresh_panes(force=True)
        self.call_after_refresh(self._first_frame)

    def _first_frame(self) -> None:
        self.first_frame_at = time.monotonic()

    async def on_unmount(self) -> None:
        await self.monitor.stop()

    def on_resize(self, event: Any) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        self.set_class(width < COMPACT_WIDTH or height < COMPACT_HEIGHT, "-compact")

    # --- refresh -------------------------------------------------------------------------------

    def refresh_panes(self, force: bool = False) -> None:
        store = self.store
        status = store.phase_status()
        top = headline(status, time.time())
        top.append(f"   {clock(time.time())}", "dim")
        self.top_bar.update(top)
        # Phases age by the clock even when nothing arrives, so they always redraw; the other
        # panes only when their source reported something new.
        self.phases.refresh_from(store)
        for source, panes in (("gpus", (self.gpus,)), ("procs", (self.procs, self.gpus)), ("ray", (self.ray,))):
            version = store.versions.get(source, 0)
            if force or self._drawn.get(source) != version:
                self._drawn[source] = version
                for pane in panes:
                    pane.refresh_from(store)
        if self.has_class("-compact"):
            self.summary.update(f"{gpu_pane.summary(store)}\n{procs_pane.summary(store)}")
        self.refresh_logs(force)

    def refresh_logs(self, force: bool = False) -> None:
        version = self.store.versions.get("logs", 0)
        if force or self._drawn.get("logs") != version:
            self._drawn["logs"] = version
            self.logs.refresh_from(self.store)

    # --- actions -------------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.config.source))

    def action_edit_filter(self) -> None:
        logs = self.logs

        def apply(value: str | None) -> None:
            if value is not None:
                logs.set_filter(value, self.store)

        self.push_screen(FilterScreen(logs.filter_text, self.config.filters), apply)

    # Stack-dump targets: Python processes of the job (Ray's own C++ daemons are not).
    STACK_ROLES = frozenset({"driver", "worker", "actor", "rollout", "ref", "teacher", "critic", "reward",
                             "ray-worker", "engine", "gpu-holder"})

    def action_stacks(self) -> None:
        from gkdtop.tui.stacks_screen import StacksScreen

        procs = [p for p in self.store.processes if p.role in self.STACK_ROLES and p.status != "zombie"]
        if not procs:
            self.notify("No job processes to dump (the Processes pane is empty).", severity="warning")
            return
        self.push_screen(StacksScreen(procs))

    def action_cleanup(self) -> None:
        from gkdtop.tui.cleanup_screen import CleanupScreen

        self.push_screen(CleanupScreen(self.store.gpu_pids()))

    def action_bundle(self) -> None:
        self.notify("Building the diagnostic bundle…")
        self.run_worker(self._bundle, thread=True, exclusive=True, group="bundle")

    def _bundle(self) -> None:
        from gkdtop.actions.bundle import build_bundle

        def progress(step: str, done: int, total: int) -> None:
            self.call_from_thread(self.notify, f"bundle {done}/{total}: {step}", timeout=2)

        try:
            path = build_bundle(self.monitor, None, progress=progress)
        except Exception as exc:
            self.call_from_thread(self.notify, f"bundle failed: {exc}", severity="error", timeout=10)
            return
        self.call_from_thread(self.notify, f"bundle written: {path}", timeout=30)

    def action_toggle_follow(self) -> None:
        self.logs.toggle_follow(self.store)

    def action_toggle_pause(self) -> None:
        self.logs.toggle_pause(self.store)

    def action_maximize(self, key: str) -> None:
        pane = self.panes[key]
        if self.screen.maximized is pane:
            self.screen.minimize()
            self.refresh_panes(force=True)
            return
        self.screen.maximize(pane, container=False)
        pane.focus()
        self.refresh_panes(force=True)

    def action_restore(self) -> None:
        if self.screen.maximized is not None:
            self.screen.minimize()
            self.refresh_panes(force=True)
