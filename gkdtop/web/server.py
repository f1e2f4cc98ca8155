"""The HTTP side of `gkdtop serve`: one page, its bundled assets and the WebSocket, all behind the token.

Every path starts with `/<token>/`; anything else is a bare 404. Files are served from a fixed
list (no directory listings, no path from the request reaches the file system). The page loads
nothing from elsewhere (textual-serve's client script and fonts come from the installed package)
and its Content-Security-Policy forbids it to.

Under load, without the token: a connection must finish its request's headers within the idle timeout
(`--idle-timeout`, IDLE_TIMEOUT by default), and an idle keep-alive one is closed after it; past
MAX_CONNECTIONS a new connection is closed at once, so half-sent requests cannot use up the file
descriptors. A tab's screen is capped at MAX_COLS x MAX_ROWS; memory is given back to the system once tabs close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from gkdtop.web.session import MAX_COLS, MAX_ROWS, Link, Session

if TYPE_CHECKING:
    from aiohttp.web_protocol import RequestHandler

    from gkdtop.web.guard import Guard

STOP_GRACE = 1.0  # seconds each tab's app gets to end when the server stops, then it is cancelled
SEND_TIMEOUT = 5.0  # a tab that takes no bytes for this long is gone
IDLE_TIMEOUT = 10.0  # default seconds to send a request's headers, or to sit idle between requests (--idle-timeout)
MAX_CONNECTIONS = 128  # open at once (tabs, page loads, whatever else connects); past it a new one is closed
TRIM_AFTER = 1.0  # seconds after the last tab closed, its memory is given back (once for a burst of closes)

HERE = Path(__file__).parent / "static"


def _client_files() -> dict[str, tuple[Path, str]]:
    """The page's assets: ours, and textual-serve's browser client (xterm.js + textual.js) and fonts."""
    client = Path(str(resources.files("textual_serve"))) / "static"
    return {
        "gkdtop.css": (HERE / "gkdtop.css", "text/css"),
        "gkdtop.js": (HERE / "gkdtop.js", "text/javascript"),
        "textual.js": (client / "js" / "textual.js", "text/javascript"),
        "xterm.css": (client / "css" / "xterm.css", "text/css"),
        "RobotoMono.ttf": (client / "fonts" / "RobotoMono-VariableFont_wght.ttf", "font/ttf"),
        "RobotoMono-Italic.ttf": (client / "fonts" / "RobotoMono-Italic-VariableFont_wght.ttf", "font/ttf"),
    }


class _CappedServer(web.Server):
    """aiohttp's low-level server with a cap on open connections: one past it is closed as it opens."""

    def __init__(self, handler: Callable[[web.BaseRequest], Any], max_connections: int, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.refused = 0

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self.connections) > self.max_connections:
            self.refused += 1
            # Closed once aiohttp has finished opening it (closing it in here leaves its handler half made).
            asyncio.get_running_loop().call_soon(handler.force_close)


class _NoTraceback(logging.Filter):
    """A malformed request (`GET *`, `GET http:///x`) is answered 400 by aiohttp, which also logs a traceback
    to our stderr for each: anyone who can connect could fill the terminal. It is dropped; the client has its 400."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, HttpProcessingError)


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    public_url: str | None = None  # the URL browsers use, when a proxy or tunnel stands in between
    allow_actions: bool = False
    max_viewers: int = 16
    title: str = "gkdtop"
    idle_timeout: float = IDLE_TIMEOUT  # seconds to send a request's headers, or to sit idle between requests


class Server:
    """One aiohttp site; each tab's WebSocket runs a view from `app_factory` over the shared monitor."""

    def __init__(self, app_factory: Callable[[], Any], options: ServeOptions, guard: Guard) -> None:
        self.app_factory = app_factory
        self.options = options
        self.guard = guard
        self.files = _client_files()
        for name, (path, _) in self.files.items():
            if not path.is_file():
                raise FileNotFoundError(f"{name}: {path} is missing (reinstall textual-serve)")
        self.page = string.Template((HERE / "page.html").read_text())
        self.sessions: set[Session] = set()
        self.sockets: set[web.WebSocketResponse] = set()
        self.handlers: set[asyncio.Task[Any]] = set()  # the WebSocket handlers still running
        self.runner: web.ServerRunner | None = None
        self.web_server: _CappedServer | None = None
        self.port = options.port
        self.stopping = False
        self._trim: asyncio.TimerHandle | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        server_log = logging.getLogger("aiohttp.server")
        if not any(isinstance(f, _NoTraceback) for f in server_log.filters):
            server_log.addFilter(_NoTraceback())
        self.web_server = _CappedServer(self.handle, MAX_CONNECTIONS, access_log=None,
                                        keepalive_timeout=self.options.idle_timeout)
        self.runner = web.ServerRunner(self.web_server, handle_signals=False, shutdown_timeout=STOP_GRACE)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.options.host, self.options.port, reuse_address=True)
        await site.start()
        server = site._server  # the port the kernel chose for --port 0
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    def url(self) -> str:
        """The one URL to open: the public one when given, else this machine's."""
        if self.options.public_url:
            return f"{self.options.public_url}{self.guard.token}/"
        host = self.options.host
        if host in ("0.0.0.0", "::", ""):
            import socket

            host = socket.gethostname()  # getfqdn() says "localhost" on many a container
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/{self.guard.token}/"

    async def stop(self) -> None:
        """Close every tab (each is told why), end their apps, then the site: bounded, tabs open or not."""
        self.stopping = True
        for session in list(self.sessions):
            session.link.write(_notice("gkdtop serve stopped."))
            session.stop()
        await asyncio.gather(*(s.wait(STOP_GRACE) for s in list(self.sessions)))
        # Each handler sends what its tab has left and closes its socket; one that can't in time is closed here.
        # (Left running, aiohttp's cleanup would wait its own shutdown timeout for each.)
        if self.handlers:
            await asyncio.wait(set(self.handlers), timeout=STOP_GRACE)
        for ws in list(self.sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=1001, message=b"server stopped"), STOP_GRACE)
        if self._trim is not None:
            self._trim.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    # --- requests ----------------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method != "GET":
            return _refuse(405, f"{request.method[:20]} is not served (GET only)")
        if (problem := self.guard.host_problem(request.headers.get("Host"))) is not None:
            return _refuse(421, problem)
        token, _, rest = request.path[1:].partition("/")
        if not self.guard.token_ok(token):
            return _refuse(404, "not found (open the URL gkdtop serve printed: it holds the token)")
        if rest == "":
            if not request.path.endswith("/"):  # relative URLs in the page need the trailing slash
                raise web.HTTPFound(f"{request.path}/")
            return self.index()
        if rest == "ws":
            return await self.websocket(request)
        folder, _, name = rest.partition("/")
        if folder == "static" and name in self.files:
            path, mime = self.files[name]
            return web.FileResponse(path, headers={**_HEADERS, "Content-Type": mime,
                                                   "Cache-Control": "private, max-age=3600"})
        return _refuse(404, "not found")

    def index(self) -> web.Response:
        ws_url = f"{self.options.public_url}{self.guard.token}/ws" if self.options.public_url else "ws"
        body = self.page.substitute(
            title=_html(self.options.title), ws_url=_html(ws_url),
            mode="actions allowed" if self.options.allow_actions else "read-only")
        return web.Response(text=body, content_type="text/html",
                            headers={**_HEADERS, "Content-Security-Policy": self._csp(), "Cache-Control": "no-store"})

    def _csp(self) -> str:
        connect = "'self'"
        if self.options.public_url:
            from gkdtop.web.guard import origin_of

            origin = origin_of(self.options.public_url)
            connect += f" {origin.replace('http', 'ws', 1)}"
        return (f"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; font-src 'self'; "
                f"img-src 'self' data:; connect-src {connect}; frame-ancestors 'none'; base-uri 'none'; "
                "form-action 'none'")

    async def websocket(self, request: web.BaseRequest) -> web.StreamResponse:
        if (problem := self.guard.origin_problem(request.headers.get("Origin"), request.headers.get("Host"))):
            return _refuse(403, problem)
        ws = web.WebSocketResponse(heartbeat=20, max_msg_size=1 << 20, timeout=SEND_TIMEOUT)
        await ws.prepare(request)
        self.sockets.add(ws)
        handler = asyncio.current_task()
        if handler is not None:
            self.handlers.add(handler)
        try:
            if self.stopping:
                await ws.send_bytes(_notice("gkdtop serve is stopping."))
            elif len(self.sessions) >= self.options.max_viewers:
                await ws.send_bytes(_notice(f"gkdtop serve: {len(self.sessions)} tabs are open, the most it "
                                            "serves (--max-viewers): close one and reload."))
            else:
                await self._run_session(request, ws)
        finally:
            self.sockets.discard(ws)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=1001 if self.stopping else 1000), STOP_GRACE)
            self.handlers.discard(handler)  # type: ignore[arg-type]
        return ws

    async def _run_session(self, request: web.BaseRequest, ws: web.WebSocketResponse) -> None:
        width = _size(request.query.get("width"), 80, MAX_COLS)
        height = _size(request.query.get("height"), 24, MAX_ROWS)

        async def send(data: bytes) -> None:
            await asyncio.wait_for(ws.send_bytes(data), SEND_TIMEOUT)

        link = Link(send)
        try:
            app = self.app_factory()
        except Exception as exc:  # shown in the tab, not a splash screen forever
            await ws.send_bytes(_notice(f"gkdtop serve: the dashboard could not start: {exc}"))
            return
        session = Session(app, link)
        self.sessions.add(session)
        try:
            session.start(width, height)
            assert session.task is not None
            reader = asyncio.create_task(self._read(ws, link))
            closed = asyncio.create_task(link.closed.wait())
            await asyncio.wait({session.task, reader, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not session.task.done():  # the tab went away or fell behind: end its app
                session.stop()
                await session.wait(STOP_GRACE)
            reader.cancel()
            closed.cancel()
            if (failure := session.failure()) is not None:
                print(f"gkdtop serve: a tab's dashboard failed: {failure}\n{session.errors.getvalue()}",
                      file=sys.__stderr__)
                link.write(_notice(f"gkdtop serve: the dashboard stopped: {failure}"))
            await link.drain()
        finally:
            self.sessions.discard(session)
            self._trim_later()

    def _trim_later(self) -> None:
        """Give a closed tab's memory back to the system, once the closes in a burst are over."""
        if self._trim is not None:
            self._trim.cancel()
        self._trim = asyncio.get_running_loop().call_later(TRIM_AFTER, _give_back)

    async def _read(self, ws: web.WebSocketResponse, link: Link) -> None:
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                data = message.data
                with contextlib.suppress(ValueError):
                    envelope = json.loads(data)
                    if isinstance(envelope, list) and envelope[:1] == ["ping"] and len(envelope) > 1:
                        await ws.send_str(json.dumps(["pong", str(envelope[1])[:32]]))
                        continue
                link.on_message(data)
            elif message.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                break


# Textual methods cached with `lru_cache` on the method: the instance (a widget's styles cache, a table, an
# app's colour filter, a tab's key parser) is part of each key, so it outlives its app until 32 to 1,024
# later calls push it out: 15 large tabs closed left ~40 MB each time, for good. Each maps a few values to
# a style or a key: emptying them costs a few recomputations.
_INSTANCE_CACHES = (("textual._styles_cache", "StylesCache", "get_inner_outer"),
                    ("textual.widgets._data_table", "DataTable", "_get_styles_to_render_cell"),
                    ("textual.filter", "ANSIToTruecolor", "truecolor_style"),
                    ("textual._xterm_parser", "XTermParser", "_parse_extended_key"))


def _give_back() -> None:
    """Free what closed tabs left behind in Textual's instance caches, then ask glibc to return the pages."""
    import importlib

    for module, cls, method in _INSTANCE_CACHES:
        with contextlib.suppress(ImportError, AttributeError):  # a Textual without it
            getattr(getattr(importlib.import_module(module), cls), method).cache_clear()
    from gkdtop.heap import give_back

    give_back()


_HEADERS = {"Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}


def _refuse(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=f"gkdtop serve: {reason}\n", headers=_HEADERS)


def _notice(text: str) -> bytes:
    """A message drawn in the tab's terminal: the screen cleared, the text at the top in reverse video."""
    return f"\x1b[?1049l\x1b[2J\x1b[H\x1b[?25l\x1b[1;7m {text} \x1b[0m\r\n".encode()


def _size(text: str | None, default: int, most: int) -> int:
    """A tab's width or height as it asked, at most `most` (a bigger screen costs every frame)."""
    try:
        value = int(text or default)
    except ValueError:
        return default
    return min(value, most) if value > 0 else default


def _html(text: str) -> str:
    import html

    return html.escape(text, quote=True)
