"""One scan of the machine's processes, and the questions cleanup asks of it.

Which Ray session a process belongs to and whether that session still runs here, whether its
parent is gone, whether it is ours to touch, and who has a file open or mapped. What kind of
process each one is comes from gkdtop/prockind.py, the same classifier the Processes pane uses: a
Ray process is told by what it runs (Ray's binaries, its scripts as the interpreter's program, `ray::`
titles), never by a word in its arguments as `ray stop`'s command-line patterns would.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from gkdtop import prockind
from gkdtop.capture.proc import process_environ


@dataclass(slots=True)
class Proc:
    """One process as cleanup sees it, read once per scan."""

    pid: int
    ppid: int
    uid: int | None
    name: str
    argv: list[str]
    create_time: float
    status: str
    session: str = ""
    gcs_port: str = ""
    ray: bool = False  # one of Ray's own programs, by what it runs

    @property
    def title(self) -> str:
        return self.argv[0] if self.argv else self.name

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv) if self.argv else self.name

    @property
    def zombie(self) -> bool:
        return self.status == psutil.STATUS_ZOMBIE

    @property
    def label(self) -> str:
        return prockind.label(self.title, self.cmdline)

    @property
    def engine(self) -> bool:
        return prockind.engine_title(self.title, self.name)

    @property
    def anchor(self) -> bool:
        """A gcs_server or raylet: while one runs here, its session is live."""
        return prockind.is_gcs(self.title, self.name) or prockind.is_raylet(self.title, self.name)


def scan() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for p in psutil.process_iter(["ppid", "uids", "name", "cmdline", "create_time", "status"]):
        info = p.info
        uids = info.get("uids")
        argv = info.get("cmdline") or []
        proc = Proc(
            pid=p.pid, ppid=info.get("ppid") or 0, uid=uids.real if uids else None, name=info.get("name") or "",
            argv=list(argv), create_time=info.get("create_time") or 0.0, status=info.get("status") or "?",
        )
        proc.ray = prockind.ray_program(proc.argv) is not None
        proc.session, proc.gcs_port = prockind.session(proc.cmdline), prockind.gcs_port(proc.cmdline)
        procs[p.pid] = proc
    return procs


def ancestors(pid: int, procs: dict[int, Proc], limit: int = 64) -> list[int]:
    chain: list[int] = []
    proc = procs.get(pid)
    while proc is not None and proc.ppid > 0 and len(chain) < limit:
        chain.append(proc.ppid)
        proc = procs.get(proc.ppid)
    return chain


def protected_pids() -> set[int]:
    """PID 1, the kernel's threads' parent, this process and every ancestor of it."""
    keep = {0, 1, 2, os.getpid()}
    with contextlib.suppress(psutil.Error):
        keep.update(p.pid for p in psutil.Process().parents())
    return keep


class Machine:
    """One scan of the processes, with the questions the planner asks of it."""

    def __init__(self) -> None:
        self.procs = scan()
        self.uid = os.getuid()
        self.protected = protected_pids()
        # A session lives while its gcs_server runs here, or its raylet does: a worker node of a
        # multi-node cluster has no local gcs_server, and its raylet exits by itself when the GCS is gone.
        anchors = [p for p in self.procs.values() if p.anchor and not p.zombie]
        self.live_sessions = {p.session for p in anchors if p.session}
        self.live_ports = {p.gcs_port for p in anchors if p.gcs_port}
        # A process that names its GCS by address only (the client server) belongs to the session
        # of any process naming both.
        self.port_session = {p.gcs_port: p.session for p in self.procs.values() if p.gcs_port and p.session}

    def session_of(self, proc: Proc) -> tuple[str, str]:
        """(session name, GCS port) of a process: its own, or its nearest ancestor's."""
        for candidate in [proc.pid, *ancestors(proc.pid, self.procs)]:
            p = self.procs.get(candidate)
            if p is None:
                break
            if p.session:
                return p.session, p.gcs_port
            if p.gcs_port:
                return self.port_session.get(p.gcs_port, ""), p.gcs_port
        return "", ""

    def liveness(self, proc: Proc) -> tuple[bool | None, str]:
        """(True: its cluster runs, False: it does not, None: cannot tell), and what was looked at."""
        session, port = self.session_of(proc)
        if session:
            return session in self.live_sessions, f"session {session}"
        if port:
            return port in self.live_ports, f"the GCS on port {port}"
        if proc.ray and (raylet := prockind.raylet_pid(process_environ(proc.pid))) is not None:
            anchor = self.procs.get(raylet)
            alive = anchor is not None and prockind.is_raylet(anchor.title, anchor.name) and not anchor.zombie \
                and anchor.create_time <= proc.create_time + 1.0
            return alive, f"the raylet PID {raylet} that started it"
        return None, ""

    def parent_gone(self, proc: Proc) -> bool:
        parent = self.procs.get(proc.ppid)
        return proc.ppid <= 1 or parent is None or parent.name in prockind.REAPERS

    def ours(self, proc: Proc) -> bool:
        return proc.uid == self.uid and proc.pid not in self.protected and not proc.zombie


@dataclass(slots=True)
class FileUsers:
    """Who has each file open or mapped, from every readable /proc/PID/{fd,maps}."""

    users: dict[tuple[int, int], set[int]] = field(default_factory=dict)  # (dev, inode) -> PIDs
    unreadable: set[int] = field(default_factory=set)  # PIDs we could not look into


def file_users(paths: Iterable[Path], procs: dict[int, Proc]) -> FileUsers:
    wanted: dict[tuple[int, int], Path] = {}
    by_path: dict[str, tuple[int, int]] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            key = (st.st_dev, st.st_ino)
            wanted[key] = path
            by_path[str(path)] = key
    found = FileUsers()
    if not wanted:
        return found
    devs = {(os.major(dev), os.minor(dev), ino): (dev, ino) for dev, ino in wanted}
    for pid, proc in procs.items():
        if proc.zombie:
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in wanted:
                    found.users.setdefault(key, set()).add(pid)
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    if len(parts) < 6 or parts[4] == "0":
                        continue
                    major, _, minor = parts[3].partition(":")
                    try:
                        key3 = (int(major, 16), int(minor, 16), int(parts[4]))
                    except ValueError:
                        continue
                    key = devs.get(key3) or by_path.get(parts[5].rstrip("\n").removesuffix(" (deleted)"))
                    if key is not None:
                        found.users.setdefault(key, set()).add(pid)
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            found.unreadable.add(pid)
        except OSError:
            found.unreadable.add(pid)
    return found


def segment_users(paths: Iterable[Path]) -> dict[Path, set[int]]:
    """The PIDs that have each file open or mapped (by device and inode), for callers outside the plan."""
    paths = list(paths)
    found = file_users(paths, scan())
    out: dict[Path, set[int]] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            out[path] = found.users.get((st.st_dev, st.st_ino), set())
    return out
