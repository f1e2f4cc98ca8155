"""Sending events through apprise (Slack, Discord, Telegram, Matrix, ntfy, email, webhooks) on a
thread of its own: a slow or dead endpoint never holds up the dashboard. URLs carry tokens, so they
are never printed: a URL is named by its scheme and its place in the list."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gkdtop.alerts.events import AlertEvent

ENV_URLS = "GKDTOP_NOTIFY"  # whitespace-separated URLs, for a unit file or a sidecar's secret
SEND_TIMEOUT = 15.0  # seconds per endpoint
QUEUE_MAX = 100  # events waiting to be sent; past that the oldest are dropped and counted
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # inside a URL only ${NAME}: a `$` in a password stays
_WHOLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # an entry that is only $NAME


class NotifyError(ValueError):
    """A URL that cannot be used, said in one line that does not show it."""


def describe(url: str, index: int) -> str:
    """How a URL is named in a message: `#2 (slack://…)`, never its token."""
    scheme = url.split("://", 1)[0] if "://" in url else "?"
    return f"#{index + 1} ({scheme[:20]}://…)"


def expand(url: str, env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """`${SLACK_URL}` in a URL, or an entry that is just `$SLACK_URL`, read from the environment, so a
    config file holds no token. A lone `$` elsewhere is the URL's own (a password's)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env or not env[name]:
            raise NotifyError(f"notify: the environment variable {name} is not set")
        return env[name]

    url = url.strip()
    if (whole := _WHOLE.fullmatch(url)) is not None:
        return value(whole)
    return _VAR.sub(value, url)


def collect_urls(given: Iterable[str], configured: Iterable[str],
                 env: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The command line's, the config's and $GKDTOP_NOTIFY's URLs, expanded, without repeats."""
    urls: list[str] = []
    for url in [*given, *configured, *env.get(ENV_URLS, "").split()]:
        full = expand(url, env)
        if full and full not in urls:
            urls.append(full)
    return urls


class Notifier:
    """One apprise object per URL (so a failure names its URL), sent from a daemon thread in order."""

    def __init__(self, urls: list[str]) -> None:
        import apprise

        # apprise logs a refused URL in full through logging's last-resort handler: keep it quiet.
        logging.getLogger("apprise").addHandler(logging.NullHandler())
        logging.getLogger("apprise").propagate = False
        self.targets: list[tuple[str, Any]] = []
        for index, url in enumerate(urls):
            target = apprise.Apprise()
            if not target.add(url):
                raise NotifyError(f"notify: URL {describe(url, index)} is not one apprise can send to "
                                  "(see https://github.com/caronc/apprise/wiki)")
            self.targets.append((describe(url, index), target))
        self.errors: queue.SimpleQueue[str] = queue.SimpleQueue()  # one line per failed send, for the caller
        self.sent = 0
        self.dropped = 0
        self._queue: queue.Queue[AlertEvent | None] = queue.Queue(QUEUE_MAX)
        self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self._thread.start()

    def send(self, event: AlertEvent) -> None:
        """Queue `event`; never blocks (a full queue drops its oldest)."""
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self._queue.task_done()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, waiting at most `timeout` seconds (a stop must not hang on a dead endpoint)."""
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        done.wait(timeout)
        self.send_stop()

    def send_stop(self) -> None:
        with contextlib.suppress(queue.Full):  # a daemon thread: it ends with us anyway
            self._queue.put_nowait(None)

    def _run(self) -> None:
        import apprise

        kinds = {"stalled": apprise.NotifyType.WARNING, "failed": apprise.NotifyType.FAILURE,
                 "recovered": apprise.NotifyType.SUCCESS, "finished": apprise.NotifyType.SUCCESS,
                 "anomaly": apprise.NotifyType.WARNING}
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                for name, target in self.targets:
                    try:
                        ok = target.notify(body=event.message, title=event.title,
                                           notify_type=kinds.get(event.kind, apprise.NotifyType.INFO),
                                           timeout=SEND_TIMEOUT)
                    except Exception as exc:  # a plugin's own failure: said, and the next URL still tried
                        ok = False
                        self.errors.put(f"notify: sending {event.kind} to {name} failed: {type(exc).__name__}")
                        continue
                    if ok:
                        self.sent += 1
                    else:
                        self.errors.put(f"notify: sending {event.kind} to {name} failed (refused or unreachable)")
            finally:
                self._queue.task_done()
