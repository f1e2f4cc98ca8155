"""One browser tab: a Textual app in this process, drawn into that tab's WebSocket.

Textual's own web driver talks to a parent process over stdin/stdout (one process per tab, each
with its own monitor). This driver writes to the tab's socket instead, so every tab is a view of
the server's one monitor and store: ten tabs cost ten sets of widgets, not ten monitors.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from textual import constants, events, messages
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.geometry import Size

if TYPE_CHECKING:
    from textual.app import App

MAX_COLS, MAX_ROWS = 400, 150  # a tab's screen at most: 15 tabs at 1000x1000 took a core and 1 GB; a 4K
# monitor at a small font is about 380x120
MAX_PENDING = 8 << 20  # bytes drawn but not yet taken by the tab: past this the tab is too slow and is closed
ESC_TIMEOUT = constants.ESCAPE_DELAY + 0.05  # a lone ESC is the Escape key once no more bytes came for this long


class Link:
    """The tab's end: output bytes queued to the socket in order, input text parsed into Textual events."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send
        self._pending = bytearray()
        self._flusher: asyncio.Task[None] | None = None
        self.driver: SessionDriver | None = None
        self.broken: str | None = None  # why output stopped: the tab went away or fell behind
        self.closed = asyncio.Event()

    def write(self, data: bytes) -> None:
        if self.broken is not None:
            return
        self._pending += data
        if len(self._pending) > MAX_PENDING:
            self.broken = f"the tab fell {len(self._pending) >> 20} MiB behind"
            self._pending.clear()
            self.closed.set()
            return
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        # Frames written while one send is under way go out together in the next.
        while self._pending and self.broken is None:
            chunk = bytes(self._pending)
            self._pending.clear()
            try:
                await self._send(chunk)
            except (ConnectionError, RuntimeError) as exc:
                self.broken = f"the tab went away ({exc})"
                self.closed.set()

    async def drain(self) -> None:
        """Wait until everything written so far went out (or could not)."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    def on_message(self, text: str) -> None:
        """One message from textual.js: ["stdin", text], ["resize", {width, height}], ["focus"], ["blur"]."""
        driver = self.driver
        if driver is None:
            return
        try:
            envelope = json.loads(text)
        except ValueError:
            return
        if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
            return
        kind, body = envelope[0], envelope[1] if len(envelope) > 1 else None
        if kind == "stdin" and isinstance(body, str):
            driver.feed(body)
        elif kind == "resize" and isinstance(body, dict):
            width, height = body.get("width"), body.get("height")
            if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
                driver.resize(min(width, MAX_COLS), min(height, MAX_ROWS))
        elif kind == "focus":
            driver.send_message(events.AppFocus())
        elif kind == "blur":
            driver.send_message(events.AppBlur())


class SessionDriver(Driver):
    """Textual's driver for one tab: escape sequences out through the Link, keys in from it."""

    def __init__(self, app: App[Any], *, link: Link, debug: bool = False, mouse: bool = True,
                 size: tuple[int, int] | None = None) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self.link = link
        link.driver = self
        self._parser = XTermParser(debug=debug)
        self._input_open = True
        self._tick: asyncio.TimerHandle | None = None

    @property
    def is_web(self) -> bool:
        return True

    def write(self, data: str) -> None:
        self.link.write(data.encode("utf-8"))

    def flush(self) -> None:
        pass

    def start_application_mode(self) -> None:
        # Alternate screen, mouse reports (SGR), no cursor, bracketed paste: what a terminal app asks of xterm.js.
        self.write("\x1b[?1049h\x1b[?1000h\x1b[?1003h\x1b[?1015h\x1b[?1006h\x1b[?25l\x1b[?2004h")
        size = Size(*(self._size or (80, 24)))
        self.send_message(events.Resize(size, size))
        self._app.call_later(self._app.post_message, events.AppBlur())  # focus comes when the tab's terminal has it

    def disable_input(self) -> None:
        self._input_open = False

    def stop_application_mode(self) -> None:
        self._input_open = False
        if self._tick is not None:
            self._tick.cancel()
        self.write("\x1b[?2004l\x1b[?1006l\x1b[?1015l\x1b[?1003l\x1b[?1000l\x1b[?25h\x1b[?1049l")

    def feed(self, text: str) -> None:
        if not self._input_open:
            return
        for event in self._parser.feed(text):
            self.process_message(event)
        # A lone ESC waits for the parser's timeout, and nothing else would wake it: look again once that
        # has passed since the last bytes (a tick timed from earlier bytes could come too soon and leave the
        # ESC to prefix the next key).
        if self._tick is not None:
            self._tick.cancel()
        self._tick = self._loop.call_later(ESC_TIMEOUT, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self._input_open:
            for event in self._parser.tick():
                self.process_message(event)

    def resize(self, width: int, height: int) -> None:
        self._size = (width, height)
        size = Size(width, height)
        self.send_message(events.Resize(size, size))

    def deliver_binary(self, binary: Any, *, delivery_key: str, save_path: Path, **_: Any) -> None:
        """Textual's "save a file" (the palette's Screenshot): a browser view never writes on the server's disk."""
        binary.close()
        self._app.call_later(self._app.notify, "A browser view saves nothing on the server (use the browser's own "
                             "screenshot).", severity="warning")
        # Not Driver._delivery_failed: it posts through call_from_thread, which raises on the app's own
        # thread (this one) and killed the tab.
        self._app.post_message(events.DeliveryFailed(key=delivery_key, exception=PermissionError("browser view"),
                                                     name=None))

    def open_url(self, url: str, new_tab: bool = True) -> None:
        """Textual's default starts a browser where the server runs; a browser view has no business there."""
        self._app.call_later(self._app.notify, f"Not opened (a browser view): {url}", severity="warning")

    def end(self) -> None:
        """The tab went away or the server stops: end the app (its on_unmount runs; a shared monitor stays)."""
        self._input_open = False
        self.send_message(messages.ExitApp())


class Session:
    """Runs one app for one tab until the app exits or the tab goes away; says why it ended."""

    def __init__(self, app: App[Any], link: Link) -> None:
        self.app = app
        self.link = link
        self.errors = io.StringIO()
        # A crash in the app is shown in the tab (one line) and kept whole for the server's stderr.
        app.error_console = Console(file=self.errors, markup=False, highlight=False, width=100)
        app.driver_class = partial(SessionDriver, link=link)  # type: ignore[assignment]
        # Textual points sys.stdout/stderr at the app while it runs (redirect_stdout). Tabs' apps in one process
        # end out of order, and each restores what it found: sys.stdout kept a closed tab's app and, through
        # the target each app saved, every app before it (15 large tabs left ~40 MB each time, never freed).
        # A view's stray prints go to the server's terminal instead.
        for name, stream in (("_capture_stdout", sys.__stdout__), ("_capture_stderr", sys.__stderr__)):
            if hasattr(app, name):
                setattr(app, name, stream)
        self.task: asyncio.Task[Any] | None = None

    def start(self, width: int, height: int) -> None:
        self.task = asyncio.get_running_loop().create_task(self.app.run_async(size=(width, height)),
                                                           name="gkdtop-serve-session")

    def stop(self) -> None:
        """Ask the app to exit (the tab closed, or the server stops)."""
        driver = self.link.driver
        if driver is not None:
            driver.end()
        else:
            self.app.exit()

    async def wait(self, timeout: float) -> None:
        """Wait for the app to end; past `timeout` cancel it (a stop must not hang on one tab)."""
        if self.task is None:
            return
        done, _ = await asyncio.wait({self.task}, timeout=timeout)
        if not done:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task

    def failure(self) -> str | None:
        """The app's error as one line, or None when it ended normally."""
        if self.task is None or not self.task.done():
            return None
        if not self.task.cancelled() and (exc := self.task.exception()) is not None:
            return f"{type(exc).__name__}: {exc}".splitlines()[0]
        if getattr(self.app, "return_code", 0) in (0, None):
            return None
        lines = [line.strip(" │╭╰─") for line in self.errors.getvalue().splitlines()]
        lines = [line for line in lines if line]
        return lines[-1] if lines else "the dashboard stopped with an error"
