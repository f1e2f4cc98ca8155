"""`gkdtop serve`: the real server process, driven by a real headless Chromium (Playwright) and raw clients.

Browser tests need Playwright's Python package (the test extra) and a system Chromium
(`apt-get install -y chromium`; Playwright's own browser download is not used). Without either they
are skipped, saying which is missing; under CI=true they fail instead (.ci/run installs Chromium).
The refusals (token, Origin, Host) use a raw WebSocket client: a browser would not let a test forge
those headers, an attacker's script need not be a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest

from gkdtop.web.guard import Guard, check_public_url, split_host
from tests.gkdlog import startup
from tests.raycluster import wait_for

CHROMIUM = os.environ.get("GKDTOP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _no_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (it is in the test extra: pip install -e '.[test]')"
    if CHROMIUM is None:
        return "no system Chromium (apt-get install -y chromium), or set GKDTOP_CHROMIUM to a Chromium binary"
    if not os.access(CHROMIUM, os.X_OK):
        return f"GKDTOP_CHROMIUM={CHROMIUM} is not an executable file"
    return None


# Under CI (.ci/run installs Chromium) a missing browser fails these tests: a skip there would check nothing.
needs_browser = pytest.mark.skipif(_no_browser() is not None and os.environ.get("CI") != "true",
                                   reason=_no_browser() or "")


# --- the server, a real process ----------------------------------------------------------------

class Served:
    """`gkdtop serve --port 0` on a real log; the URL it printed."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.log = tmp_path / "train.log"
        if not self.log.exists():
            lines, last = startup(time.time() - 200, steps=3, step_s=30)
            self.log.write_text("".join(line + "\n" for line in lines))
            os.utime(self.log, (last, last))
        env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gkdtop", "serve", "--port", "0", "--log", str(self.log),
             "--ray-address", "http://127.0.0.1:9", "--refresh", "0.25", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        assert self.proc.stdout is not None
        self._stderr: str | None = None
        deadline = time.monotonic() + 60
        line = ""
        while not line:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError(f"gkdtop serve printed no URL; stderr: {self.stderr()}")
            if select.select([self.proc.stdout], [], [], 0.1)[0]:
                line = self.proc.stdout.readline()
        match = re.search(r"(http://\S+/)", line)
        assert match, line
        self.url = match.group(1)
        parts = urlsplit(self.url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.token = parts.path.strip("/")

    def stderr(self) -> str:
        """What the server said on stderr, once it has exited (then its pipes are closed)."""
        if self.proc.poll() is None:
            return ""
        if self._stderr is None:
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self._stderr = self.proc.stderr.read()[-2000:]
            self.proc.stderr.close()
            self.proc.stdout.close()
        return self._stderr

    def processes(self) -> list[psutil.Process]:
        """The server and everything it started."""
        me = psutil.Process(self.proc.pid)
        return [me, *me.children(recursive=True)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*extra: str) -> Served:
        server = Served(tmp_path, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# --- the browser -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Any) -> Iterator[Any]:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    try:
        yield chromium
    finally:
        chromium.close()


class Tab:
    """One page on the server, with what it requested and every frame its WebSocket received."""

    def __init__(self, browser: Any, url: str, block_foreign: bool = False) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.requests: list[str] = []
        self.sockets: list[str] = []
        self.frames: list[str] = []
        self.blocked: list[str] = []
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("websocket", self._on_socket)
        if block_foreign:  # a cluster's firewall: whatever is not this server is dropped
            def route(route: Any) -> None:
                if route.request.url.startswith(origin + "/"):
                    route.continue_()
                else:
                    self.blocked.append(route.request.url)
                    route.abort()

            self.page.route("**/*", route)
        self.page.goto(url)

    def _on_socket(self, socket: Any) -> None:
        self.sockets.append(socket.url)
        socket.on("framereceived", lambda payload: self.frames.append(
            payload if isinstance(payload, str) else payload.decode("utf-8", "replace")))

    def text(self, since: int = 0) -> str:
        return "".join(self.frames[since:])

    def wait_text(self, needle: str | re.Pattern[str], since: int = 0, timeout: float = 30.0) -> None:
        """Wait until the frames since `since` hold `needle` (Playwright's wait, so frames keep arriving)."""
        deadline = time.monotonic() + timeout
        found = needle.search if isinstance(needle, re.Pattern) else lambda text: needle in text
        while not found(self.text(since)):
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never reached the tab; it got: {self.text(since)[-600:]!r}")
            self.page.wait_for_timeout(50)

    def first_frame(self) -> None:
        self.page.wait_for_selector("body.-first-byte", timeout=30_000)
        self.wait_text("Phases")

    def press(self, key: str) -> int:
        """Press `key` in the terminal; the frame count before it, to read what came back after."""
        self.page.focus(".xterm-helper-textarea")  # keys reach the app only once xterm's textarea has focus
        since = len(self.frames)
        self.page.keyboard.press(key)
        return since


def in_thread(coro: Any) -> Any:
    """asyncio.run in a thread of its own: Playwright's sync API may hold this thread's event loop."""
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


# --- the rules, as functions -------------------------------------------------------------------

def test_guard_rules() -> None:
    guard = Guard.for_server("127.0.0.1", None, token="t0k")
    assert guard.token_ok("t0k") and not guard.token_ok("t0K") and not guard.token_ok("")
    for host in ("127.0.0.1:8765", "localhost:9000", "[::1]:1", "LOCALHOST"):
        assert guard.host_problem(host) is None, host
    for host in ("evil.example:8765", "127.0.0.1.evil.example", "", "a b", "127.0.0.1:99999"):
        assert guard.host_problem(host) is not None, host
    assert guard.origin_problem("http://localhost:9000", "localhost:9000") is None  # an ssh tunnel's port
    assert guard.origin_problem("http://evil.example", "127.0.0.1:8765") is not None
    assert guard.origin_problem("http://127.0.0.1:1", "127.0.0.1:8765") is not None  # another local server's page
    assert guard.origin_problem(None, "127.0.0.1:8765") is not None
    assert guard.origin_problem("null", "127.0.0.1:8765") is not None
    proxied = Guard.for_server("127.0.0.1", check_public_url("https://Proxy.example/gkdtop"), token="t")
    assert proxied.host_problem("proxy.example") is None
    assert proxied.origin_problem("https://proxy.example", "127.0.0.1:8765") is None
    assert split_host("[::1]:80") == ("::1", 80)
    for bad in ("ftp://x/", "https://", "http://x/?a=1", "http://u:p@x/"):
        with pytest.raises(ValueError):
            check_public_url(bad)


async def test_read_only_view_refuses_actions_and_says_so(tmp_path: Path) -> None:
    """The app's flag on its own (no browser): c, s, e, n say they are off; nothing opens."""
    from tests.test_app import make_app

    app, _ = make_app(tmp_path, ["hello"])
    app.read_only = True
    async with app.run_test(size=(140, 40)) as pilot:
        for key, what in (("c", "cleanup is off"), ("s", "stacks is off"), ("e", "export is off"),
                          ("n", "picking log sources is off")):
            await pilot.press(key)
            await pilot.pause()
            assert len(app.screen_stack) == 1, f"{key} opened {app.screen}"
            assert any(what in str(n.message) for n in app._notifications), key
        assert not app.workers._workers  # no bundle being built


async def test_read_only_view_leaves_gkdtop_runs_job_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gkdtop run`'s job-control keys in a read-only view: ctrl+c sends no SIGINT, q closes the view only."""
    from gkdtop.tui.app import JobBar
    from tests.test_jobrun import JOB, run_mode_app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "job.py"
    script.write_text(JOB)
    app, job = run_mode_app(tmp_path, script, "sleep")
    app.read_only = True
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 60
            while "running for" not in str(app.query_one(JobBar).render()):
                assert time.monotonic() < deadline, "the job never showed as running"
                await pilot.pause(0.05)
            await pilot.press("ctrl+c")
            await pilot.pause()
            assert any("job control is off" in str(n.message) for n in app._notifications)
            await pilot.press("q")  # no "stop the job or leave it" question: the view just closes
            await pilot.pause(0.2)
        assert app.return_value is None
        assert job.running()  # neither SIGINT nor the stop reached it
    finally:
        job.stop(grace=2)


async def test_a_lone_escape_is_the_escape_key(tmp_path: Path) -> None:
    """ESC 0.1 s after another key: it must act by itself, not wait for more bytes (and make them alt+KEY).

    The view's driver on its own, no browser: the gap is the input's timing (what a person does), and
    the test waits on the event (the help closed), not on a sleep."""
    from gkdtop.web.session import Link, Session
    from tests.test_app import make_app

    drawn: list[bytes] = []

    async def send(data: bytes) -> None:
        drawn.append(data)

    app, _ = make_app(tmp_path, ["hello"])
    link = Link(send)
    session = Session(app, link)
    session.start(120, 40)

    async def until(predicate: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not predicate():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.02)

    await until(lambda: link.driver is not None and app.is_running and app.screen_stack)
    link.on_message('["stdin", "1"]')  # maximize Phases: escape restores it
    await until(lambda: app.screen.maximized is not None)
    await asyncio.sleep(0.3)  # a pause, then two keys 0.1 s apart
    link.on_message('["stdin", "f"]')
    await asyncio.sleep(0.1)
    link.on_message('["stdin", "\\u001b"]')
    await until(lambda: app.screen.maximized is None)
    session.stop()
    await session.wait(10)
    assert session.failure() is None and drawn


# --- the server, from outside ------------------------------------------------------------------

async def _ws(served: Served, token: str | None = None, origin: str | None = "same",
              host: str | None = None) -> tuple[int, str]:
    """Open the server's WebSocket as a raw client: (HTTP status, text of what it drew within a second)."""
    import aiohttp

    headers = {}
    if origin is not None:
        headers["Origin"] = served.origin if origin == "same" else origin
    if host is not None:
        headers["Host"] = host
    url = f"{served.origin.replace('http', 'ws', 1)}/{token or served.token}/ws?width=100&height=30"
    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(url, headers=headers, autoping=True)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status, ""
        drawn = ""
        deadline = time.monotonic() + 30
        while "Phases" not in drawn and "gkdtop serve:" not in drawn and time.monotonic() < deadline:
            try:
                message = await ws.receive(timeout=1)
            except asyncio.TimeoutError:
                continue
            if message.type == aiohttp.WSMsgType.BINARY:
                drawn += message.data.decode("utf-8", "replace")
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
        await ws.close()
        return 101, drawn


def test_refuses_wrong_token_foreign_origin_and_host(served: Callable[..., Served]) -> None:
    import urllib.error
    import urllib.request

    server = served()
    status, drawn = in_thread(_ws(server))
    assert status == 101 and "Phases" in drawn  # the control: the right token, Origin and Host are served
    wrong = ("y" if server.token.startswith("x") else "x") + server.token[1:]  # (1 in 64 tokens starts with x)
    assert in_thread(_ws(server, token=wrong))[0] == 404
    assert in_thread(_ws(server, origin="http://evil.example"))[0] == 403
    assert in_thread(_ws(server, origin=None))[0] == 403
    port = urlsplit(server.url).port
    assert in_thread(_ws(server, host=f"evil.example:{port}", origin=f"http://evil.example:{port}"))[0] == 421

    def get(path: str, **headers: str) -> int:
        request = urllib.request.Request(server.origin + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert get(f"/{server.token}/") == 200
    assert get("/") == 404
    assert get(f"/{server.token}x/") == 404
    assert get(f"/{server.token}/static/") == 404  # no directory listing
    assert get(f"/{server.token}/static/../../../etc/passwd") == 404
    assert get(f"/{server.token}/static/textual.js") == 200
    assert get(f"/{server.token}/", Host=f"evil.example:{port}") == 421


def test_viewers_are_capped(served: Callable[..., Served]) -> None:
    server = served("--max-viewers", "1")

    async def second_while_first_is_open() -> str:
        import aiohttp

        url = f"{server.origin.replace('http', 'ws', 1)}/{server.token}/ws"
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(url, headers={"Origin": server.origin}) as first:
            message = await first.receive(timeout=30)  # the first tab is drawn: it holds the one place
            assert message.type == aiohttp.WSMsgType.BINARY
            return (await _ws(server))[1]

    drawn = in_thread(second_while_first_is_open())
    assert "--max-viewers" in drawn and "Phases" not in drawn


# --- the server, in a real browser -------------------------------------------------------------

@needs_browser
def test_first_frame_and_a_key_round_trip(served: Callable[..., Served], browser: Any) -> None:
    server = served()
    tab = Tab(browser, server.url)
    tab.first_frame()
    since = tab.press("?")
    tab.wait_text("this help", since)  # the help screen, drawn by the app in response to the key
    tab.page.close()


@needs_browser
def test_actions_refused_without_allow_actions(served: Callable[..., Served], browser: Any) -> None:
    read_only = served()
    tab = Tab(browser, read_only.url)
    tab.first_frame()
    for key, what in (("c", "cleanup is off"), ("s", "stacks is off"), ("e", "export is off")):
        since = tab.press(key)
        tab.wait_text(f"Read-only view: {what}", since)
    assert not list((Path(read_only.log).parent / "cache").rglob("*.tar.gz"))  # no bundle was written
    tab.page.close()
    operator = served("--allow-actions")
    tab = Tab(browser, operator.url)
    tab.first_frame()
    since = tab.press("c")
    # The action ran: its preview (nothing runs until confirmed).
    tab.wait_text(re.compile(r"cleanup plan|Nothing to clean up|item\(s\)"), since)
    assert "Read-only" not in tab.text(since)
    tab.press("Escape")
    tab.page.close()


@needs_browser
def test_three_tabs_cost_one_monitor(served: Callable[..., Served], browser: Any) -> None:
    server = served()
    alone = len(server.processes())

    def followers() -> int:  # descriptors on the followed log: one per monitor
        return sum(1 for f in psutil.Process(server.proc.pid).open_files() if f.path == str(server.log))

    wait_for(followers, timeout=30, interval=0.05, what="the monitor to open the log")
    tabs = [Tab(browser, server.url) for _ in range(3)]
    for tab in tabs:
        tab.first_frame()
    assert len(server.processes()) == alone == 1
    assert followers() == 1
    since = tabs[1].press("?")  # each tab is its own view: help in one tab only
    tabs[1].wait_text("this help", since)
    for tab in tabs:
        tab.page.close()


@needs_browser
def test_no_request_leaves_the_machine(served: Callable[..., Served], browser: Any) -> None:
    server = served()
    tab = Tab(browser, server.url, block_foreign=True)
    tab.first_frame()
    since = tab.press("?")
    tab.wait_text("this help", since)
    assert tab.blocked == []
    assert tab.requests and all(url.startswith(server.origin + "/") for url in tab.requests), tab.requests
    ws_origin = server.origin.replace("http", "ws", 1)
    assert tab.sockets and all(url.startswith(ws_origin + "/") for url in tab.sockets), tab.sockets
    assert any(url.endswith(".ttf") for url in tab.requests)  # the font came from the package
    tab.page.close()


@needs_browser
def test_behind_a_public_url(served: Callable[..., Served], playwright: Any) -> None:
    """A name only the browser knows (a proxy's), mapped to loopback: the page, its absolute WebSocket URL,
    Host and Origin all carry it, and only --public-url makes the server accept them."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    public = f"http://proxy.example:{port}/"
    server = served("--port", str(port), "--public-url", public)
    assert server.url.startswith(public)
    chromium = playwright.chromium.launch(executable_path=CHROMIUM,
                                          args=["--no-sandbox", "--host-resolver-rules=MAP proxy.example 127.0.0.1"])
    try:
        tab = Tab(chromium, server.url)
        tab.first_frame()
        assert tab.sockets == [f"ws://proxy.example:{port}/{server.token}/ws?" + tab.sockets[0].split("?", 1)[1]]
    finally:
        chromium.close()


@needs_browser
def test_stop_with_tabs_open(served: Callable[..., Served], browser: Any) -> None:
    server = served()
    tabs = [Tab(browser, server.url) for _ in range(2)]
    for tab in tabs:
        tab.first_frame()
    started = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    wait_for(lambda: server.proc.poll() is not None, timeout=60, interval=0.05, what="gkdtop serve to exit")
    took = time.monotonic() - started  # speed is bench/serve.py's; here, that it ends at all and says so
    assert server.proc.returncode == 0, server.stderr()
    assert "stopped" in server.stderr()
    for tab in tabs:
        tab.wait_text("gkdtop serve stopped")
        tab.page.wait_for_selector("body.-closed", timeout=30_000)
        tab.page.close()
    print(f"stopped with 2 tabs open in {took:.2f} s")


@needs_browser
def test_a_dashboard_that_fails_to_start_says_why_on_the_page(browser: Any) -> None:
    """The app breaks in compose: the tab shows the error in one line, not a splash screen forever."""
    from textual.app import App

    from gkdtop.web.server import ServeOptions, Server

    class Broken(App[None]):
        def compose(self) -> Any:
            raise RuntimeError("compose failed: no such pane")

    server = Server(Broken, ServeOptions(port=0), Guard.for_server("127.0.0.1", None))
    loop = asyncio.new_event_loop()  # in a thread of its own: Playwright's sync API holds this thread's loop
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    try:
        tab = Tab(browser, server.url())
        tab.page.wait_for_selector("body.-first-byte", timeout=30_000)
        tab.wait_text("compose failed: no such pane")
        tab.page.wait_for_selector("body.-closed", timeout=30_000)
        tab.page.close()
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, says in ((["--port", str(port)], f"cannot listen on 127.0.0.1:{port}: address already in use"),
                           (["--public-url", "ftp://proxy.example/"], "--public-url: expected http(s)://")):
            run = subprocess.run([sys.executable, "-m", "gkdtop", "serve", "--log", str(tmp_path / "x.log"), *args],
                                 capture_output=True, text=True, timeout=120, cwd=tmp_path,
                                 env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
            assert run.returncode == 2
            assert says in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
            assert run.stdout == ""


@needs_browser
def test_lines_shown_before_a_resize_fold_again_at_the_new_width(tmp_path: Path, served: Callable[..., Served],
                                                                   browser: Any) -> None:
    """Lines already drawn when the tab's size changes (the page connects at 80x24 and then says its size;
    a window is resized) are folded again at the new width. Textual draws the resized screen before the
    pane hears of its new size: rows cut at the old width were kept under the new width and shown ever
    after, and a 1400x900 page showed half the lines cut at about 80 columns, while the tmux view was right."""
    ruler = "abcdefghij" * 15  # after the clock and the tag: two rows in a 1400-pixel-wide tab, one at 1900 pixels
    (tmp_path / "train.log").write_text("".join(f"[ROLLOUT] {i:03d} {ruler}\n" for i in range(40)))
    tab = Tab(browser, served().url)
    tab.first_frame()
    escapes = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")

    def drawn(text: str, since: int = 0, why: str = "") -> None:
        deadline = time.monotonic() + 30
        while text not in escapes.sub("", tab.text(since)):
            assert time.monotonic() < deadline, why
            tab.page.wait_for_timeout(50)

    drawn(f"039 {ruler[:100]}", why="the last line was not drawn at the tab's width (cut at its first size, 80x24)")
    since = len(tab.frames)
    tab.page.set_viewport_size({"width": 1900, "height": 900})
    drawn(f"039 {ruler}", since, "the last line was not drawn whole in the wider tab")


# --- issue 30: hostile viewers and clients ------------------------------------------------------

SECRET = "Xq7TzY2kLm9PwR4s"
HF = "hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb"


def _plant_secrets(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 200, steps=3, step_s=30)
    lines += [f"ERROR connecting with password={SECRET} to the store", f"[ACTOR] downloading with {HF}", "END step:3"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))


@needs_browser
def test_the_web_view_shows_log_lines_redacted(tmp_path: Path, served: Callable[..., Served], browser: Any) -> None:
    """Issue 30: the bundle of a log redacted its secrets while the browser view of the same log showed them."""
    _plant_secrets(tmp_path)
    tab = Tab(browser, served().url)
    tab.first_frame()
    tab.wait_text("password=<redacted>")
    tab.wait_text("downloading with <redacted>")
    assert SECRET not in tab.text() and HF not in tab.text()
    tab.page.close()


@needs_browser
def test_show_secrets_on_loopback_only(tmp_path: Path, served: Callable[..., Served], browser: Any) -> None:
    _plant_secrets(tmp_path)
    tab = Tab(browser, served("--show-secrets").url)  # the control: the user alone on loopback asked for them
    tab.first_frame()
    tab.wait_text(f"password={SECRET}")
    tab.page.close()
    for extra in (["--host", "0.0.0.0"], ["--public-url", "https://proxy.example/g/"]):
        run = subprocess.run([sys.executable, "-m", "gkdtop", "serve", "--show-secrets", "--port", "0", "--log",
                              str(tmp_path / "train.log"), *extra], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
        assert run.returncode == 2 and "--show-secrets is only for a view on loopback" in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1


@needs_browser
def test_a_filter_matches_what_the_view_shows(tmp_path: Path, served: Callable[..., Served], browser: Any) -> None:
    """A filter on the raw line would be an oracle: `password=Xq7` shows the line, `password=Xq8` does not,
    and the secret is guessed a character at a time. A redacted view's filter sees the redacted line."""
    _plant_secrets(tmp_path)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "gkdtop").mkdir(exist_ok=True)
    (tmp_path / "config" / "gkdtop" / "config.yaml").write_text(f"filters:\n  default: 'password={SECRET[:6]}|END'\n")
    tab = Tab(browser, served().url)
    tab.first_frame()
    tab.wait_text(re.compile(r"END(\x1b\[[0-9;]*m)* step:3"))  # the filter is on: the last line (it matches) is shown
    assert "to the store" not in tab.text()


@needs_browser
def test_screenshot_from_the_palette_answers_with_a_notice(served: Callable[..., Served], browser: Any) -> None:
    """Issue 30: the palette's Screenshot killed the tab (Textual's driver reports a failed delivery through
    call_from_thread, which raises on the app's own thread)."""
    tab = Tab(browser, served().url)
    tab.first_frame()
    tab.press("Control+p")
    since = len(tab.frames)
    tab.page.keyboard.type("Screenshot")
    tab.wait_text("Screenshot", since)
    since = tab.press("Enter")
    tab.wait_text("saves nothing on the server", since)
    since = tab.press("?")
    tab.wait_text("this help", since)  # the tab is alive: its app answers a key
    assert "dashboard stopped" not in tab.text()
    tab.page.close()


def _rows_and_columns(drawn: str) -> tuple[int, int]:
    """The largest row and column the frames moved the cursor to (CSI row;col H)."""
    moves = [(int(r), int(c)) for r, c in re.findall(r"\x1b\[(\d+);(\d+)H", drawn)]
    return max(r for r, _ in moves), max(c for _, c in moves)


def test_a_tabs_screen_is_capped(served: Callable[..., Served]) -> None:
    """Issue 30: 15 tabs asking for 1000x1000 took a core and 1 GB. A tab gets at most MAX_COLS x MAX_ROWS."""
    import aiohttp

    from gkdtop.web.session import MAX_COLS, MAX_ROWS

    server = served()

    async def huge() -> str:
        url = f"{server.origin.replace('http', 'ws', 1)}/{server.token}/ws?width=1000&height=1000"
        drawn = ""
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(url, headers={"Origin": server.origin}) as ws:
            deadline = time.monotonic() + 60
            while "Phases" not in drawn and time.monotonic() < deadline:
                with contextlib.suppress(asyncio.TimeoutError):
                    message = await ws.receive(timeout=1)
                    if message.type == aiohttp.WSMsgType.BINARY:
                        drawn += message.data.decode("utf-8", "replace")
            await ws.send_str('["resize", {"width": 1000, "height": 1000}]')
            since = len(drawn)
            while len(drawn) - since < 2000 and time.monotonic() < deadline:  # the screen drawn again
                with contextlib.suppress(asyncio.TimeoutError):
                    message = await ws.receive(timeout=1)
                    if message.type == aiohttp.WSMsgType.BINARY:
                        drawn += message.data.decode("utf-8", "replace")
        return drawn

    rows, columns = _rows_and_columns(in_thread(huge()))
    assert rows <= MAX_ROWS and columns <= MAX_COLS, (rows, columns)
    assert rows > 24  # the control: it drew past the default 80x24


def test_half_sent_requests_are_closed_and_capped(served: Callable[..., Served]) -> None:
    """Issue 30: 1,100 connections that never finish their headers held a descriptor each, without a token,
    until the server had none left. Now they are capped (MAX_CONNECTIONS) and closed after the idle timeout
    (--idle-timeout: 2 s here, 10 s by default)."""
    import socket
    import urllib.request

    from gkdtop.web.server import MAX_CONNECTIONS

    server = served("--idle-timeout", "2")
    port = urlsplit(server.url).port
    me = psutil.Process(server.proc.pid)
    before = me.num_fds()
    sockets = []
    for _ in range(MAX_CONNECTIONS + 150):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        sockets.append(sock)
    try:
        # Every one ends: the ones past the cap at once, the rest once their headers are late.
        open_ = set(sockets)
        deadline = time.monotonic() + 90
        held = None  # the server's descriptors for them once those past the cap are gone
        while open_:
            if held is None and len(open_) <= MAX_CONNECTIONS:
                held = me.num_fds() - before
            assert time.monotonic() < deadline, f"{len(open_)} half-sent connections still open"
            for sock in select.select(list(open_), [], [], 0.5)[0]:
                try:
                    ended = sock.recv(4096) == b""
                except ConnectionResetError:
                    ended = True
                if ended:
                    open_.discard(sock)
        assert held is not None and held <= MAX_CONNECTIONS + 20, held
    finally:
        for sock in sockets:
            sock.close()
    with urllib.request.urlopen(f"{server.origin}/{server.token}/", timeout=30) as response:
        assert response.status == 200  # and the server still serves


def test_bind_addresses_are_checked_and_printed_as_urls(tmp_path: Path, served: Callable[..., Served]) -> None:
    """Issue 30: `--host 0` and `'*'` were bound and printed as `http://0:...`; `[::]` said "unknown error -2"."""
    import socket

    for host in ("0", "*", "127.1", "no-such-host.invalid"):
        run = subprocess.run([sys.executable, "-m", "gkdtop", "serve", "--host", host, "--port", "0", "--log",
                              str(tmp_path / "x.log")], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
        assert run.returncode == 2 and run.stderr.startswith("gkdtop serve: --host: "), (host, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1 and run.stdout == ""
    server = served("--host", "[::]")
    assert urlsplit(server.url).hostname == socket.gethostname().lower()
    with socket.create_connection(("::1", urlsplit(server.url).port)) as sock:  # it listens on IPv6
        sock.sendall(f"GET /{server.token}/ HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.0 200")


def test_a_malformed_request_gets_a_400_and_no_traceback(served: Callable[..., Served]) -> None:
    """Issue 30: an empty or malformed request line made aiohttp print a traceback on serve's stderr."""
    import socket

    server = served()
    port = urlsplit(server.url).port
    for request in (b"GET * HTTP/1.1\r\nHost:\r\n\r\n", b"GET http:///x HTTP/1.1\r\nHost:\r\n\r\n",
                    b"GET / HTTP/1.1\r\nHost:\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request)
            assert re.match(rb"HTTP/1\.[01] 4\d\d", sock.recv(100)), request
    server.stop()
    assert "Traceback" not in server.stderr(), server.stderr()


def test_closed_tabs_leave_no_view_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: memory tabs took was never returned. Each tab's app pointed sys.stdout at itself and, the
    tabs ending out of order, sys.stdout kept a closed one's app and every app before it; Textual's
    `StylesCache.get_inner_outer` cache kept each widget's drawn lines. After the tabs close, none is left."""
    import gc

    import aiohttp
    from textual._styles_cache import StylesCache

    from gkdtop.config import load_config
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp
    from gkdtop.web.server import ServeOptions, Server

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _plant_secrets(tmp_path)
    streams = sys.stdout, sys.stderr

    # What earlier tests of this process left alive is not this test's: only new objects count.
    gc.collect()
    earlier = {id(o) for o in gc.get_objects() if isinstance(o, (GkdtopApp, StylesCache))}

    async def tabs_open_and_close() -> tuple[int, int]:
        config = load_config(None)
        monitor = Monitor(config, logs=[str(tmp_path / "train.log")], ray_address="http://127.0.0.1:9")
        server = Server(lambda: GkdtopApp(config, monitor, read_only=True, owns_monitor=False, redact=True),
                        ServeOptions(port=0), Guard.for_server("127.0.0.1", None, token="t"))
        await server.start()
        monitor.start()
        url = f"ws://127.0.0.1:{server.port}/t/ws?width=200&height=60"
        try:
            async with aiohttp.ClientSession() as session:
                sockets = [await session.ws_connect(url, headers={"Origin": f"http://127.0.0.1:{server.port}"})
                           for _ in range(3)]
                for ws in sockets:  # each drawn
                    drawn = ""
                    while "Phases" not in drawn:
                        message = await ws.receive(timeout=60)
                        assert message.type == aiohttp.WSMsgType.BINARY, message
                        drawn += message.data.decode("utf-8", "replace")
                for ws in sockets:  # closed in the order they opened: the apps end in the order they started
                    await ws.close()
            deadline = time.monotonic() + 60
            while True:
                await asyncio.sleep(0.2)
                gc.collect()
                apps = sum(isinstance(o, GkdtopApp) and id(o) not in earlier for o in gc.get_objects())
                caches = sum(isinstance(o, StylesCache) and id(o) not in earlier for o in gc.get_objects())
                if (apps == caches == 0 and not server.sessions) or time.monotonic() > deadline:
                    return apps, caches
        finally:
            await server.stop()
            await monitor.stop()

    try:
        assert in_thread(tabs_open_and_close()) == (0, 0)
    finally:
        sys.stdout, sys.stderr = streams
