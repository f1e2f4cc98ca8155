"""The job's processes: Ray workers and daemons, drivers, inference engines, GPU holders.

Scans /proc every interval but reads a process's command line once (keyed by PID and start
time), and a job process's changing fields in one read of /proc/PID/stat, so watching a machine
with hundreds of processes stays cheap.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from gkdtop.capture.proc import TiedFinder, read_proc_file
from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model import ProcInfo, ProcTable
from gkdtop.prockind import SESSION_RE, classify, display_name

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# The state letter of /proc/PID/stat, named as psutil.Process.status() names it (psutil.STATUS_*).
STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
          "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked"}


@dataclass(slots=True)
class _Known:
    """What never changes for one process: read once."""

    create_time: float
    cmdline: str
    title: str  # the first argv word (Ray's `ray::Class.method` proc title lives here)
    user: str
    role: str | None  # None: not a job process by itself (may still join as a child or GPU holder)
    actor: str
    session: str
    ppid: int = 0  # refreshed on every scan for job processes; for the others, as first seen
    raw_cmdline: bytes = b""  # /proc/PID/cmdline as last parsed: a Ray title is parsed again only when it changed
    last_cpu: float = 0.0
    last_wall: float = 0.0


@dataclass(slots=True)
class _Stat:
    """What a job process's row needs each scan, from one read (psutil reads stat thrice, and statm)."""

    status: str
    ppid: int
    cpu: float  # user + system seconds
    started: float  # seconds after boot
    rss: int


@functools.cache
def boot_time() -> float:
    """Epoch seconds of the boot: a process's start in /proc/PID/stat counts from it (as psutil's create_time)."""
    import psutil  # where used, as below: importing it cost the first frame ~6 ms, before any scan

    return psutil.boot_time()


def read_stat(pid: int) -> _Stat | None:
    """/proc/PID/stat parsed; None when the process is gone. PermissionError where /proc hides it."""
    try:
        data = read_proc_file(f"/proc/{pid}/stat")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # after the name, which may hold spaces and parentheses
    if len(fields) < 22:
        return None
    return _Stat(
        status=STATES.get(fields[0].decode(), "?"),
        ppid=int(fields[1]),
        cpu=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
        started=int(fields[19]) / CLOCK_TICKS,
        rss=int(fields[21]) * PAGE_SIZE,
    )


class ProcCollector:
    name = "procs"

    def __init__(
        self,
        driver_patterns: Iterable[str] = (),
        root_pids: Iterable[int] = (),
        gpu_pids: Callable[[], set[int]] = set,
        interval: float = 2.0,
        followed: Callable[[], frozenset[str]] | None = None,
    ) -> None:
        from gkdtop.analysis.matcher import any_of

        self.driver_re = any_of(list(driver_patterns))  # user patterns: RE2, never backtracking
        self.root_pids = set(root_pids)
        self.gpu_pids = gpu_pids
        self.interval = interval
        self.me = os.getpid()
        self._known: dict[int, _Known] = {}
        self.followed = followed  # the followed log files' real paths, asked each scan (they change at any time)
        self._tied = TiedFinder()

    def collect(self) -> ProcTable:
        # One listdir of /proc per scan; a process is read in full once, when it first appears.
        # Only job processes are read again each scan (in _row): that keeps 1,000 processes cheap.
        import psutil

        now = time.time()
        alive = set(psutil.pids())
        for pid in list(self._known):
            if pid not in alive:
                del self._known[pid]
        parents: dict[int, int] = {}
        known = self._known
        job: dict[int, str] = {}
        live_gcs_sessions: set[str] = set()
        for pid in alive:
            info = known.get(pid)
            if info is None:
                info = self._learn(pid)
                if info is None:
                    continue
            elif (info.role == "ray-worker" and not info.actor) or info.title.startswith("ray::"):
                self._retitle(pid, info)  # Ray retitles a worker when it becomes an actor and per method call
            parents[pid] = info.ppid
            if info.role is not None:
                job[pid] = info.role
            if info.session and "gcs_server" in info.title:
                live_gcs_sessions.add(info.session)

        # Children of a driver or of a process the user named are part of the job too.
        roots = {pid for pid, role in job.items() if role == "driver"} | (self.root_pids & parents.keys())
        if roots:
            for pid in parents:
                if pid in job or pid == self.me:
                    continue
                ancestor, hops = parents.get(pid, 0), 0
                while ancestor > 1 and hops < 32:
                    if ancestor in roots:
                        job[pid] = "worker"
                        break
                    ancestor, hops = parents.get(ancestor, 0), hops + 1
            for pid in self.root_pids & parents.keys():
                job.setdefault(pid, "driver")
        gpu_pids = self.gpu_pids()
        for pid in gpu_pids & parents.keys():
            job.setdefault(pid, "gpu-holder")
        job.pop(self.me, None)

        rows = []
        for pid, role in job.items():
            row = self._row(pid, role, parents, now, live_gcs_sessions)
            if row is not None:
                rows.append(row)
        rows.sort(key=lambda r: (r.role, r.pid))
        return self._with_tied(rows)

    def _with_tied(self, rows: list[ProcInfo]) -> ProcTable:
        """The rows and which of them are tied to the followed files. That is one scan of every /proc/N/fd, so it
        runs here, in the collector's thread, not in a view's `Store.framework()`; and again only when the rows'
        PIDs or the files changed."""
        if self.followed is None:
            return ProcTable(rows)
        return ProcTable(rows, self._tied(self.followed(), frozenset(r.pid for r in rows)))

    def _learn(self, pid: int) -> _Known | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                create_time = proc.create_time()
                ppid = proc.ppid()
                user = proc.username()
                try:
                    argv = proc.cmdline() or [proc.name()]
                except psutil.ZombieProcess:  # exited, not reaped: /proc/PID/cmdline is empty
                    argv = [proc.name()]
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:
            argv, user, create_time, ppid = [f"[{pid}]"], "?", 0.0, 0
        cmdline = " ".join(argv)
        role, actor = classify(argv[0], cmdline, self.driver_re, argv)
        match = SESSION_RE.search(cmdline)
        info = _Known(create_time, cmdline, argv[0], user, role, actor, match.group(1) if match else "", ppid)
        self._known[pid] = info
        return info

    def _retitle(self, pid: int, info: _Known) -> None:
        """Re-read only the command line (in place: the CPU baseline of the last scan is kept).

        One read of the raw bytes per scan; psutil parses them only when they changed.
        """
        try:
            raw = read_proc_file(f"/proc/{pid}/cmdline")
        except OSError:
            return
        if raw == info.raw_cmdline:
            return
        info.raw_cmdline = raw
        import psutil

        try:
            argv = psutil.Process(pid).cmdline()  # psutil also splits a title that setproctitle wrote with spaces
        except psutil.Error:
            return
        cmdline = " ".join(argv)
        if not argv or cmdline == info.cmdline:
            return
        info.cmdline, info.title = cmdline, argv[0]
        info.role, info.actor = classify(argv[0], cmdline, self.driver_re, argv)

    def _row(
        self, pid: int, role: str, parents: dict[int, int], now: float, live_sessions: set[str]
    ) -> ProcInfo | None:
        info = self._known.get(pid) or self._learn(pid)
        if info is None:
            return None
        try:
            stat = read_stat(pid)
        except PermissionError:
            status, rss, stat = "?", 0, None
        else:
            if stat is None:
                return None  # vanished mid-read: skipped silently
            if info.create_time and abs(boot_time() + stat.started - info.create_time) > 1:
                del self._known[pid]  # PID reused: read it afresh next time
                return None
            status, rss, info.ppid = stat.status, stat.rss, stat.ppid
        parents[pid] = info.ppid
        cpu = 0.0
        if stat is not None:
            if info.last_wall:
                cpu = max(0.0, 100.0 * (stat.cpu - info.last_cpu) / max(1e-6, now - info.last_wall))
            info.last_cpu, info.last_wall = stat.cpu, now
        ppid = parents.get(pid, 0)
        flags = []
        if status == "zombie":  # psutil.STATUS_ZOMBIE, as STATES names it
            flags.append("zombie")
        parent = self._known.get(ppid)
        if role in ("ray-worker", "actor", "rollout", "ref", "teacher", "critic", "reward") and info.title.startswith(
            "ray::"
        ):
            if ppid <= 1 or parent is None or "raylet" not in parent.title:
                flags.append("orphaned")  # a Ray worker outlives its raylet
        elif role == "engine" and ppid <= 1:
            flags.append("orphaned")
        session = info.session or (parent.session if parent is not None else "")
        if session and session not in live_sessions:
            flags.append("stale-session")
        return ProcInfo(
            pid=pid,
            ppid=ppid,
            name=display_name(info.cmdline),
            cmdline=info.cmdline,
            role=role,
            user=info.user,
            status=status,
            cpu_percent=round(cpu, 1),
            rss=rss,
            create_time=info.create_time,
            actor=info.actor,
            flags=flags,
        )

    def close(self) -> None:
        self._known.clear()


SPEC: CollectorSpec[list[ProcInfo]] = CollectorSpec(
    result=list,
    write=lambda store, processes: store.write_procs(processes),
    build=lambda wiring, interval: ProcCollector(
        wiring.driver_patterns, wiring.root_pids, wiring.gpu_pids or set, interval=interval,
        followed=wiring.followed),
    snapshot=("processes", lambda store: [asdict(p) for p in store.processes]),
    after=("gpus", "logs"),  # GPU holders join the process list; the followed files say which rows are tied
)
