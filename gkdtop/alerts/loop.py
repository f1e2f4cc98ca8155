"""Once a second: the store's verdict to events, events to stdout, apprise and tmux, and the verdict to
the metrics endpoint. One loop for `watch`, the dashboard and `serve`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gkdtop.alerts.events import AlertEvent, AlertWatcher

if TYPE_CHECKING:
    from gkdtop.alerts.metrics import MetricsExporter
    from gkdtop.alerts.notify import Notifier
    from gkdtop.config import Config
    from gkdtop.model import PhaseStatus
    from gkdtop.store import Store


@dataclass(slots=True)
class AlertOptions:
    """What the command line and the config say about telling others (plain values: made before any import)."""

    urls: list[str] = field(default_factory=list)  # expanded already ($VAR read)
    metrics_port: int | None = None  # None: no endpoint; 0: any free port
    metrics_host: str = "127.0.0.1"
    job: str = ""
    every: float = 600.0
    heartbeat: float = 0.0

    @property
    def wanted(self) -> bool:
        return bool(self.urls) or self.metrics_port is not None


def options_from(args: object, config: Config) -> AlertOptions:
    """The options of a command that has `add_alerts`' arguments, over the config's `notify:` keys.
    Raises NotifyError (one line, no URL shown) for a $VAR that is not set."""
    from gkdtop.alerts.notify import collect_urls

    urls = collect_urls(getattr(args, "notify", None) or [], config.notify)
    heartbeat = getattr(args, "heartbeat", None)
    return AlertOptions(urls, getattr(args, "metrics_port", None), getattr(args, "metrics_host", None) or "127.0.0.1",
                        getattr(args, "job_name", None) or "", config.notify_every,
                        config.heartbeat if heartbeat is None else heartbeat)


class Alerts:
    """The loop. `on_event` sees every event (watch prints it, the dashboard rings); `on_error` every
    one-line failure (a refused send)."""

    def __init__(self, store: Store, watcher: AlertWatcher, notifier: Notifier | None = None,
                 metrics: MetricsExporter | None = None, on_event: Callable[[AlertEvent], None] | None = None,
                 on_error: Callable[[str], None] | None = None, tmux: bool = False) -> None:
        self.store = store
        self.watcher = watcher
        self.notifier = notifier
        self.metrics = metrics
        self.on_event = on_event
        self.on_error = on_error
        self.tmux = tmux and bool(os.environ.get("TMUX")) and shutil.which("tmux") is not None
        self._last_error = ""

    async def run(self, every: float = 1.0) -> None:
        while True:
            await asyncio.sleep(every)
            self.tick(time.time())

    def tick(self, now: float, status: PhaseStatus | None = None) -> list[AlertEvent]:
        """The events due at `now` told, and the metrics brought up to date (`status`: the store's
        verdict at `now` when the caller computed it already, as the dashboard's redraw has). A failure
        here is said once (per distinct error) and the next second tries again: telling others must not
        stop because one look went wrong, nor take the dashboard's redraw down with it."""
        try:
            return self._tick(now, status)
        except Exception as exc:
            said = f"alerts: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if said != self._last_error and self.on_error is not None:
                self.on_error(said)
            self._last_error = said
            return []

    def _tick(self, now: float, status: PhaseStatus | None) -> list[AlertEvent]:
        status = status or self.store.phase_status(now)
        events = self.watcher.check(now, status)
        if self.metrics is not None:
            for event in events:
                self.metrics.events[event.kind] = self.metrics.events.get(event.kind, 0) + 1
            self.metrics.update(self.store, status)
        for event in events:
            if self.notifier is not None:
                self.notifier.send(event)
            if self.on_event is not None:
                self.on_event(event)
            if self.tmux and event.kind in ("stalled", "failed"):
                self._tmux_message(event.title)
        if self.notifier is not None and self.on_error is not None:
            while not self.notifier.errors.empty():
                self.on_error(self.notifier.errors.get())
        return events

    def _tmux_message(self, text: str) -> None:
        """The status line of the user's tmux says it for ten seconds (the bell is the view's)."""
        target = ["-t", os.environ["TMUX_PANE"]] if os.environ.get("TMUX_PANE") else []
        with contextlib.suppress(OSError):
            subprocess.Popen(["tmux", "display-message", *target, "-d", "10000", text.replace("#", "##")],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (at most `timeout` seconds) and stop serving metrics."""
        if self.notifier is not None:
            self.notifier.close(timeout)
        if self.metrics is not None:
            self.metrics.close()


def start(store: Store, options: AlertOptions, stall_stacks: bool,
          on_event: Callable[[AlertEvent], None] | None = None, on_error: Callable[[str], None] | None = None,
          tmux: bool = False, job_ended: Callable[[], tuple[int, str] | None] | None = None) -> Alerts:
    """Build the loop from the options: raises NotifyError for a URL apprise cannot use and OSError
    for a metrics port that cannot be bound, each said in one line by the caller."""
    notifier = metrics = None
    if options.urls:
        from gkdtop.alerts.notify import Notifier

        notifier = Notifier(options.urls)
    if options.metrics_port is not None:
        from gkdtop.alerts.metrics import MetricsExporter

        metrics = MetricsExporter(options.metrics_host, options.metrics_port)
    watcher = AlertWatcher(store, options.job, options.every, options.heartbeat, wait_for_dump=stall_stacks,
                           job_ended=job_ended)
    return Alerts(store, watcher, notifier, metrics, on_event, on_error, tmux)
