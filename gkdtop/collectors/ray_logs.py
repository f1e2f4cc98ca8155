"""Log files of every Ray node, followed through the dashboard's state API (`ray logs` without ray).

Ray's dashboard serves each node's log directory: `GET /api/v0/logs?node_id=N&glob=G` lists the
files (the node's agent globs its own log dir), `GET /api/v0/logs/file?...&lines=K` returns the
last K lines, and `GET /api/v0/logs/stream?...&lines=K&interval=S` returns the last K lines and
then keeps the connection open, sending what the file gains every S seconds (the agent holds the
file open and reads on from its offset). There is no byte offset in the HTTP API, so:

- each followed file has one streaming connection, read by its own daemon thread into a bounded
  buffer (a full buffer stops the reads: TCP back-pressure, nothing is dropped); `collect()` only
  drains the buffers, up to `bytes_per_poll` per file, through the same bytes-to-lines code as
  local files (`collectors.follow`), so phases and findings see remote lines like local ones;
- the agent's stream never notices a rotation (it keeps reading the old, renamed file) or a
  truncation (it reads past the new end forever). So an idle stream (nothing for 4 stream intervals,
  `stream_interval`: STREAM_INTERVAL) is checked every `check_every` seconds against the file's current
  tail (`lines=2`): a tail that is not what the stream delivered, twice in a row 4 stream intervals
  apart with the stream silent in between, means the file was replaced or truncated, and the stream
  is reopened;
- a reopened stream starts with the last `backlog` lines again: the lines up to the last ones
  already delivered (an anchor of three lines) are dropped, so nothing is shown twice;
- a dead node (its agent gone), a deleted file, a dropped stream: the file's state says so and it
  is retried, never a crash.

Never imports ray. Costs nothing while no pattern is set and the source picker was never opened.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gkdtop.collectors.follow import Follower
from gkdtop.collectors.logs import LogBatch
from gkdtop.collectors.ray import DashboardFinder
from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model import LogFileState, LogLine, RayLogsState, RemoteLogSource

if TYPE_CHECKING:  # imported where used: http.client and urllib.request cost the first frame ~10 ms
    import http.client
    from collections.abc import Callable

STREAM_INTERVAL = 0.5  # seconds: how often the node's agent looks for new bytes in a streamed file
BUFFER_CAP = 1 << 20  # bytes held per file between two polls before the reader stops reading
RECENT = 64 << 10  # bytes of the delivered tail kept, to compare with the file's tail
ANCHOR_LINES = 3  # lines that identify "where we were" when a stream is reopened
SETTLE = 0.4  # seconds after a (re)opened stream's first byte before its initial tail is taken as complete
MAX_NODES = 256  # nodes listed per discovery
MAX_CATALOG = 5000  # remote files kept for the source picker


def source_name(node_id: str, node_ip: str, filename: str) -> str:
    """How a remote file is named in the Logs pane, snapshots and findings: unique per node."""
    return RemoteLogSource(node_id, node_ip, filename).source


def _pid_of(filename: str) -> int | None:
    """Ray worker logs are `worker-<worker id>-<job id>-<pid>.out|.err`."""
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    tail = stem.rsplit("-", 1)[-1]
    return int(tail) if stem.startswith("worker-") and tail.isdigit() else None


@dataclass(slots=True)
class RayLogBatch(LogBatch):
    """A LogBatch (lines, progress, files) plus what the remote side looks like."""

    state: RayLogsState = field(default_factory=RayLogsState)


class _Http:
    """The dashboard as an HTTP endpoint: short GETs with urllib, and the streaming connection."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def get(self, path: str, params: dict[str, object], timeout: float | None = None) -> bytes:
        import urllib.request

        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=timeout or self.timeout) as resp:
            return resp.read(4 << 20)

    def get_json(self, path: str, params: dict[str, object]) -> dict:
        doc = json.loads(self.get(path, params))
        return doc if isinstance(doc, dict) else {}

    def connect(self) -> http.client.HTTPConnection:
        """A connection for one stream: connect with a timeout, then block on reads without one.

        Ray sends the headers with the first chunk: an empty file answers nothing until it is
        written to, and an idle one sends nothing for hours. Hangs are caught by the tail checks,
        which shut the socket down.
        """
        import http.client

        parts = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=self.timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(None)
        return conn

    def stream(self, conn: http.client.HTTPConnection, path: str,
               params: dict[str, object]) -> http.client.HTTPResponse:
        prefix = urllib.parse.urlsplit(self.url).path
        conn.request("GET", f"{prefix}{path}?{urllib.parse.urlencode(params)}")
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read(2000).decode(errors="replace").strip()
            raise OSError(_explain(resp.status, body))
        return resp


def _explain(status: int, body: str) -> str:
    """The dashboard's answers, as a person reads them."""
    first = body.splitlines()[0][:200] if body else ""
    if "doesn't exist" in body and "Agent for node" in body:
        return "node gone: its Ray agent is not registered (node dead or restarting)"
    if "file is not found" in body:
        return "deleted: " + first
    return f"dashboard answered {status}" + (f": {first}" if first else "")


def _http_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read(2000).decode(errors="replace")
        except Exception:
            body = ""
        return _explain(exc.code, body)
    return f"no answer from the dashboard ({getattr(exc, 'reason', None) or exc})"[:200]


class _RemoteFile:
    """One followed remote file: its stream reader thread, its buffer, and the line parser."""

    def __init__(self, node_id: str, node_ip: str, filename: str, max_line: int,
                 stream_interval: float = STREAM_INTERVAL) -> None:
        self.node_id, self.node_ip, self.filename = node_id, node_ip, filename
        self.stream_interval = stream_interval
        self.source = source_name(node_id, node_ip, filename)
        self.pid = _pid_of(filename)
        # The local follower's bytes-to-lines half: partial lines, `\r` bars, ANSI, caps.
        self.parser = Follower(self.source, max_line, at_start_up=False)
        self.state = LogFileState(self.source, "waiting")
        self.cond = threading.Condition()
        self.buf = bytearray()
        self.stop = False
        self.thread: threading.Thread | None = None
        self.conn: http.client.HTTPConnection | None = None
        self.ended = True  # no reader running
        self.stream_error = ""
        self.first_byte: float | None = None
        self.last_byte: float | None = None
        self.opened = 0.0
        self.settling = False  # a (re)opened stream: hold its initial tail until it is complete
        self.backlog = True  # the first stream's initial tail is the file's existing content
        self.anchor: list[bytes] = []  # the last complete lines delivered
        self.recent = b""  # the last bytes delivered: what the file's tail should end with
        self.retry_at = 0.0
        self.next_check = 0.0
        self.suspect: float | None = None  # last_byte when a tail check first disagreed
        self.node_dead = False

    # --- the reader thread ----------------------------------------------------------------------

    def open(self, http_: _Http, lines: int, now: float, check_every: float) -> None:
        self.close()
        self.stop, self.ended, self.stream_error = False, False, ""
        self.first_byte = self.last_byte = None
        self.opened = now
        self.settling, self.suspect = True, None
        self.next_check = now + check_every  # the first tail check: one period after (re)opening
        with self.cond:
            self.buf.clear()
        params = {"node_id": self.node_id, "filename": self.filename, "lines": max(1, lines),
                  "interval": self.stream_interval}
        self.thread = threading.Thread(target=self._read, args=(http_, params), daemon=True,
                                       name=f"gkdtop-raylog-{self.filename[:40]}")
        self.thread.start()

    def _read(self, http_: _Http, params: dict[str, object]) -> None:
        import http.client

        try:
            self.conn = conn = http_.connect()
            if self.stop:
                return
            resp = http_.stream(conn, "/api/v0/logs/stream", params)
            while not self.stop:
                data = resp.read1(1 << 16)
                if not data:
                    self.stream_error = "stream ended (node or dashboard went away?)"
                    return
                with self.cond:
                    while len(self.buf) >= BUFFER_CAP and not self.stop:
                        self.cond.wait(1.0)  # back-pressure: the collector drains, then we read on
                    self.buf += data
                    now = time.monotonic()
                    self.last_byte = now
                    if self.first_byte is None:
                        self.first_byte = now
                        # Bytes that come late were written after we connected: new, not backlog.
                        self.backlog = self.backlog and now - self.opened < 1.0
        except http.client.IncompleteRead:
            if not self.stop:
                self.stream_error = "stream cut off: the node's Ray agent went away (node dead or restarting?)"
        except Exception as exc:
            if not self.stop:
                self.stream_error = str(exc)[:200] if isinstance(exc, OSError) and str(exc) else _http_error(exc)
        finally:
            self.ended = True
            conn = self.conn
            if conn is not None:
                conn.close()

    def close(self) -> None:
        """Stop the reader: shut its socket down so a blocked read returns at once."""
        self.stop = True
        with self.cond:
            self.cond.notify_all()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn = None
        self.ended = True

    # --- the collector side ---------------------------------------------------------------------

    def take(self, budget: int, now: float, out: list[LogLine], progress: dict[str, LogLine]) -> int:
        """Parse up to `budget` buffered bytes into `out`; returns the bytes taken."""
        with self.cond:
            if self.settling:
                if (self.first_byte is None or now - self.first_byte < SETTLE) and not self.ended:
                    return 0
                data = bytes(self.buf)  # the whole initial tail, at most BUFFER_CAP
                self.buf.clear()
            else:
                data = bytes(self.buf[:budget])
                del self.buf[:budget]
            self.cond.notify_all()
        start = len(out)
        if self.settling:
            self.settling = False
            data = self._after_anchor(data, out)
        if not data:
            return 0
        self.parser._feed(data, time.time(), out, progress)
        backlog, self.backlog = self.backlog, False
        for line in out[start:]:
            line.backlog = backlog
            line.ip = line.ip or self.node_ip
            line.pid = line.pid or self.pid
        if progress.get(self.source) is not None:
            progress[self.source].ip = self.node_ip
        self.recent = (self.recent + data)[-RECENT:]
        complete = data[: data.rfind(b"\n") + 1]
        if complete:
            self.anchor = (self.anchor + complete.split(b"\n")[:-1])[-ANCHOR_LINES:]
        self.state.lines = self.parser.state.lines
        return len(data)

    def _after_anchor(self, data: bytes, out: list[LogLine]) -> bytes:
        """A reopened stream repeats the file's last lines: drop those up to the anchor, once."""
        if self.backlog:
            return data
        lines = data.split(b"\n")
        n = len(self.anchor)
        for i in range(len(lines) - n, -1, -1) if n else ():
            if lines[i : i + n] == self.anchor:
                # The resent tail holds our unfinished line from its start: start it again.
                self.parser.partial, self.parser.over, self.parser.shown = b"", 0, ""
                return b"\n".join(lines[i + n :])
        # Not found: the file was replaced or truncated (or more than the tail was written meanwhile);
        # the old file's unfinished line will never be finished.
        self.parser._flush(out)
        return data

    def check(self, http_: _Http, now: float) -> None:
        """Is the file still the one the idle stream reads? (see the module doc)"""
        busy = self.last_byte is not None and now - self.last_byte < 4 * self.stream_interval  # 2 s by default
        if busy or self.settling or self.node_dead:
            self.suspect = None
            return
        try:
            tail = http_.get("/api/v0/logs/file", {"node_id": self.node_id, "filename": self.filename,
                                                   "lines": 2}, timeout=3.0)
        except Exception as exc:
            why = _http_error(exc)
            self.close()
            self.stream_error = why
            self.state.state = "deleted" if why.startswith("deleted") else "error"
            return
        if self.ended:
            return
        k = min(len(tail), len(self.recent))
        if (k and tail[-k:] == self.recent[-k:]) or (not tail and not self.recent):
            self.suspect = None
            return
        if self.suspect is None or self.suspect != self.last_byte:
            self.suspect = self.last_byte  # look again shortly: a write may just be on its way
            self.next_check = now + 4 * self.stream_interval
            return
        self.state.rotations += 1  # replaced or truncated: the stream reads a file that is no longer there
        self.close()
        self.stream_error = ""
        self.retry_at = now

    def snapshot(self) -> LogFileState:
        s = self.state
        return LogFileState(s.path, s.state, s.error, s.size, s.lines, s.rotations, s.truncations, s.mtime)


class RayLogCollector:
    """Remote log files: those matching `patterns` on every (selected) node, plus those picked by hand."""

    name = "ray_logs"

    def __init__(self, patterns: list[str] | None = None, address: str | None = None, nodes: list[str] | None = None,
                 max_files: int = 16, bytes_per_poll: int = 256 << 10, backlog: int = 200, max_line: int = 16384,
                 interval: float = 0.5, list_every: float = 10.0, check_every: float = 5.0,
                 timeout: float = 3.0, stream_interval: float = STREAM_INTERVAL) -> None:
        self.patterns = list(patterns or [])
        self.address = address
        self.nodes = list(nodes or [])  # node id prefixes or IPs; empty: every node
        self.max_files = max_files
        self.bytes_per_poll = bytes_per_poll
        self.backlog = backlog
        self.max_line = max_line
        self.interval = interval
        self.list_every = list_every
        self.check_every = check_every
        self.timeout = timeout
        self.stream_interval = stream_interval  # the agent's: a stream idle for 4 of them may be checked
        self._files: dict[str, _RemoteFile] = {}
        self._picked: dict[str, tuple[str, str, str]] = {}  # source -> (node id, ip, filename), from the picker
        self._dropped: set[str] = set()  # sources the picker turned off (pattern matches included)
        self._lock = threading.Lock()
        self._catalog: list[RemoteLogSource] = []
        self._catalog_wanted = False
        self._next_list = 0.0
        self._state = RayLogsState(patterns=list(self.patterns))
        self._finder = DashboardFinder(address, timeout, keep=list_every)
        self.wake: Callable[[], None] = lambda: None  # the monitor's loop sets it: ends an idle doze at once

    # --- from the source picker (UI thread) -------------------------------------------------------

    def request_catalog(self) -> None:
        """List every node's files on the next poll (the picker is open)."""
        with self._lock:
            self._catalog_wanted = True
            self._next_list = 0.0
        self.wake()

    def set_followed(self, sources: list[RemoteLogSource]) -> None:
        """Follow exactly these (in addition to nothing else): the picker's choice replaces patterns' picks."""
        with self._lock:
            wanted = {s.source: (s.node_id, s.node_ip, s.filename) for s in sources}
            self._dropped = {src for src in self._files if src not in wanted}
            self._picked = wanted
            self._next_list = 0.0
        self.wake()

    # --- collect ----------------------------------------------------------------------------------

    def idle(self) -> float:
        """Nothing asked for (no pattern, pick or catalog) and nothing followed: a poll would say the same
        until the picker asks (it calls wake())."""
        with self._lock:
            return 0.0 if self.patterns or self._picked or self._catalog_wanted or self._files else math.inf

    def collect(self) -> RayLogBatch:
        now = time.monotonic()
        with self._lock:
            active = bool(self.patterns or self._picked or self._catalog_wanted or self._files)
            due = now >= self._next_list
        batch = RayLogBatch()
        if not active:
            batch.state = self._state
            return batch
        found, wrong = self._finder.find()
        url = None if wrong else found.url
        http_ = _Http(url or "", self.timeout)
        if due:
            self._next_list = now + self.list_every
            if url is None:
                self._finder.forget()
                self._state = RayLogsState(status="not connected", reason=wrong or "no Ray dashboard found",
                                           patterns=list(self.patterns))
            else:
                self._discover(http_)
        for rf in list(self._files.values()):
            self._poll(rf, http_ if url else None, now, batch, self.bytes_per_poll)
        batch.files = [rf.snapshot() for rf in self._files.values()]
        state = self._state
        batch.state = RayLogsState(status=state.status, reason=state.reason, dashboard=state.dashboard,
                                   patterns=list(self.patterns), nodes=list(self.nodes), files=list(batch.files),
                                   available=list(self._catalog), skipped=state.skipped,
                                   followed=[RemoteLogSource(rf.node_id, rf.node_ip, rf.filename, True)
                                             for rf in self._files.values()])
        return batch

    def _poll(self, rf: _RemoteFile, http_: _Http | None, now: float, batch: RayLogBatch, budget: int) -> None:
        st = rf.state
        if rf.node_dead:
            st.state, st.error = "error", "node DEAD"
            return
        if rf.ended and not rf.settling and rf.buf == b"":
            if rf.stream_error:
                st.state = "deleted" if rf.stream_error.startswith("deleted") else "error"
                st.error = rf.stream_error
            if http_ is not None and now >= rf.retry_at:
                # Reopen: the first time for the backlog, later to resync after the anchor.
                rf.retry_at = now + self.check_every
                rf.open(http_, self.backlog, now, self.check_every)
            return
        taken = rf.take(budget, now, batch.lines, batch.progress)
        if rf.ended and not rf.buf and rf.stream_error:
            st.state = "deleted" if rf.stream_error.startswith("deleted") else "error"
            st.error = rf.stream_error
        elif not rf.settling:
            st.state, st.error = "following", ""
        st.size += taken
        if http_ is not None and now >= rf.next_check and not rf.ended:
            rf.next_check = now + self.check_every
            rf.check(http_, now)

    def _discover(self, http_: _Http) -> None:
        """Nodes from the state API; each selected node's files by glob; start / stop followers."""
        try:
            doc = http_.get_json("/api/v0/nodes", {"limit": MAX_NODES})
            rows = ((doc.get("data") or {}).get("result") or {}).get("result") or []
        except Exception as exc:
            self._state = RayLogsState(status="not connected", reason=_http_error(exc), dashboard=http_.url,
                                       patterns=list(self.patterns))
            return
        nodes = [(str(r.get("node_id", "")), str(r.get("node_ip", "")), str(r.get("state", "")))
                 for r in rows if isinstance(r, dict)]
        alive = {nid: ip for nid, ip, state in nodes if state == "ALIVE" and self._selected(nid, ip)}
        with self._lock:
            want_catalog, self._catalog_wanted = self._catalog_wanted, False
            picked = dict(self._picked)
            dropped = set(self._dropped)
        errors: list[str] = []
        matches: list[tuple[str, str, str]] = []
        catalog: list[RemoteLogSource] = []
        if self.patterns or want_catalog:
            for nid, ip in sorted(alive.items(), key=lambda kv: kv[1]):
                try:
                    names = self._list(http_, nid, "*" if want_catalog else None)
                except Exception as exc:
                    errors.append(f"{ip or nid[:8]}: {_http_error(exc)}")
                    continue
                for name in names:
                    if any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], p)
                           for p in self.patterns):
                        matches.append((nid, ip, name))
                    if want_catalog and len(catalog) < MAX_CATALOG:
                        catalog.append(RemoteLogSource(nid, ip, name))
        wanted: dict[str, tuple[str, str, str]] = dict(picked)
        for nid, ip, name in matches:
            src = source_name(nid, ip, name)
            if src not in dropped:
                wanted.setdefault(src, (nid, ip, name))
        # A followed file stays (its state says deleted / node DEAD) unless the picker turned it off:
        # a node that did not answer one listing must not make its files vanish from the pane.
        for src in [s for s in self._files if s in dropped and s not in picked]:
            self._files.pop(src).close()
        for src, (nid, ip, name) in wanted.items():
            if src not in self._files and len(self._files) < self.max_files:
                self._files[src] = _RemoteFile(nid, ip, name, self.max_line, self.stream_interval)
        dead = {nid for nid, _, state in nodes if state != "ALIVE"}
        known = {nid for nid, _, _ in nodes}
        for rf in self._files.values():
            rf.node_dead = rf.node_id in dead or rf.node_id not in known
            if rf.node_dead:
                rf.close()
        if want_catalog:
            followed = set(self._files)
            for item in catalog:
                item.followed = item.source in followed
            self._catalog = catalog
        self._state = RayLogsState(status="connected", reason="; ".join(errors)[:300], dashboard=http_.url,
                                   patterns=list(self.patterns), skipped=sum(src not in self._files for src in wanted))

    def _list(self, http_: _Http, node_id: str, glob: str | None) -> list[str]:
        """File names on one node: one listing per pattern (or all of them, for the picker)."""
        globs = [glob] if glob else list(dict.fromkeys(self.patterns))
        names: list[str] = []
        for pattern in globs:
            doc = http_.get_json("/api/v0/logs", {"node_id": node_id, "glob": pattern})
            result = (doc.get("data") or {}).get("result") or {}
            for files in (result.values() if isinstance(result, dict) else []):
                names += [f for f in files if isinstance(f, str) and not f.endswith("/")]
        return sorted(set(names))

    def _selected(self, node_id: str, ip: str) -> bool:
        return not self.nodes or any(node_id.startswith(n) or ip == n for n in self.nodes)

    def close(self) -> None:
        for rf in self._files.values():
            rf.close()


SPEC: CollectorSpec[RayLogBatch] = CollectorSpec(
    result=RayLogBatch,
    write=lambda store, batch: store.write_ray_logs(batch),
    build=lambda wiring, interval: RayLogCollector(
        list(wiring.ray_logs), wiring.ray_address, backlog=wiring.backlog, max_line=wiring.max_line,
        interval=interval),
)
