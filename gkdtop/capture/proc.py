"""/proc read without ptrace: whole files in three system calls, a process's environment, its
interpreter, its rank, and a ProcInfo for a bare PID."""

from __future__ import annotations

import os
from pathlib import Path

from gkdtop.model import ProcInfo

READ_SIZE = 65536  # one read takes a whole /proc/PID/stat, and all but the longest command lines


def read_proc_file(path: str) -> bytes:
    """A /proc file whole, in three system calls: open() adds an fstat, an isatty ioctl and an lseek,
    and each scan reads a job process's stat (and a Ray worker's command line) every poll."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, READ_SIZE)
        if len(data) < READ_SIZE:
            return data
        chunks = [data]  # a long command line: read on to the end
        while chunk := os.read(fd, READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def process_environ(pid: int) -> dict[str, str]:
    """A process's initial environment (empty when /proc does not let us read it): what the job set
    for its ranks (RANK, the Flight Recorder's and the probe's variables), read without ptrace."""
    try:
        raw = read_proc_file(f"/proc/{pid}/environ")
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def proc_info(pid: int) -> ProcInfo:
    """A ProcInfo for a bare PID, with a role from the same rules as the Processes pane."""
    import psutil

    from gkdtop.prockind import classify, display_name

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            argv = proc.cmdline() or [proc.name()]
            create_time, ppid, status = proc.create_time(), proc.ppid(), proc.status()
    except psutil.NoSuchProcess:
        return ProcInfo(pid, 0, "(gone)", "", "", "?", "gone", 0.0, 0, 0.0)
    except psutil.AccessDenied:
        argv, create_time, ppid, status = [f"[{pid}]"], 0.0, 0, "?"
    cmdline = " ".join(argv)
    role, actor = classify(argv[0], cmdline, None, argv)
    return ProcInfo(pid, ppid, display_name(cmdline), cmdline, role or "", "", status, 0.0, 0, create_time, actor)


def rank_of(pid: int) -> tuple[int | None, int | None]:
    """RANK (else LOCAL_RANK) and WORLD_SIZE from the process's environment, when /proc lets us read it."""
    env = process_environ(pid)

    def number(name: str) -> int | None:
        value = env.get(name, "")
        return int(value) if value.isascii() and value.isdigit() else None

    rank = number("RANK")
    return (number("LOCAL_RANK") if rank is None else rank), number("WORLD_SIZE")


def alive(proc: ProcInfo) -> bool:
    """Is `proc` still there, and still the same process (not a recycled PID)?"""
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return False
    if proc.create_time:
        import psutil

        try:
            return abs(psutil.Process(proc.pid).create_time() - proc.create_time) <= 1
        except psutil.Error:
            return False
    return True


def exe_path(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def maps_python(pid: int) -> bool:
    """Does the process map an interpreter (libpython, or a python binary)? Unknown counts as yes."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return any("python" in line.rsplit("/", 1)[-1] for line in maps if "/" in line)
    except OSError:
        return True


def owner(pid: int) -> int:
    """The process's user id, -1 when it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def _fds(pid: int) -> list[tuple[str, str]]:
    """(fd, what it is open on) of a process: a path, `pipe:[N]`, `socket:[N]`; empty when unreadable."""
    where = f"/proc/{pid}/fd"
    try:
        names = os.listdir(where)
    except OSError:
        return []
    out = []
    for fd in names:
        try:
            out.append((fd, os.readlink(f"{where}/{fd}")))
        except OSError:
            continue
    return out


def _writes(pid: int, fd: str) -> bool:
    """Is the descriptor open for writing (O_WRONLY or O_RDWR in its fdinfo flags)? A reader (`tail -F`,
    gkdtop following the file) is no writer."""
    try:
        info = read_proc_file(f"/proc/{pid}/fdinfo/{fd}")
    except OSError:
        return False
    for line in info.splitlines():
        if line.startswith(b"flags:"):
            return int(line.split()[1], 8) & 3 != 0
    return False


def _ppid(pid: int) -> int:
    try:
        stat = read_proc_file(f"/proc/{pid}/stat")
    except OSError:
        return 0
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else 0


MAX_DEPTH = 64  # a process tree deeper than this is walked no further


def tied_to_files(paths: set[str], candidates: set[int]) -> set[int]:
    """Which of `candidates` are tied to the files at `paths` (real paths): a process that has one open for
    writing (the job's stdout redirected to it, a logger's handler, `gkdtop run` itself), one whose stdout or
    stderr feeds the pipe such a writer reads (`torchrun … | tee train.log`), the ancestors of those and
    their descendants (the job's process tree). One scan of /proc: what another job or a Ray cluster on the
    machine runs is not tied to a log it does not write."""
    writers = set()
    pipes: set[str] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        fds = _fds(pid)
        if any(target.removesuffix(" (deleted)") in paths and _writes(pid, fd) for fd, target in fds):
            writers.add(pid)
            pipes.update(target for fd, target in fds if fd == "0" and target.startswith("pipe:"))
    if pipes:
        writers.update(pid for pid in candidates if any(fd in ("1", "2") and target in pipes
                                                        for fd, target in _fds(pid)))
    ancestors = set()
    for pid in writers:
        for _ in range(MAX_DEPTH):
            pid = _ppid(pid)
            if pid <= 1 or pid in ancestors:
                break
            ancestors.add(pid)
    tied = set()
    for pid in candidates:
        if pid in writers or pid in ancestors:
            tied.add(pid)
            continue
        up = pid
        for _ in range(MAX_DEPTH):  # a descendant of a writer
            up = _ppid(up)
            if up <= 1:
                break
            if up in writers:
                tied.add(pid)
                break
    return tied


class TiedFinder:
    """tied_to_files with its last answer kept: that is one scan of every /proc/N/fd, so it runs again only when the
    followed files or the processes changed (the processes collector, each poll; Store.voters, for a table no
    collector saw)."""

    def __init__(self) -> None:
        self._key: tuple[frozenset[str], frozenset[int]] | None = None
        self._tied: frozenset[int] = frozenset()

    def __call__(self, paths: frozenset[str], pids: frozenset[int]) -> frozenset[int]:
        if (paths, pids) != self._key:
            self._key = (paths, pids)
            self._tied = frozenset(tied_to_files(set(paths), set(pids)) if paths and pids else ())
        return self._tied
