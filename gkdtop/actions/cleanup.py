"""`gkdtop cleanup`: the debris of a crashed run, found, previewed item by item, removed on confirmation.

What counts as debris (each item says why it was chosen):
- Ray processes (Ray's own programs by what they run - its binaries, its scripts as the interpreter's
  program, `ray::` titles - never by a Ray file named in the arguments of an editor, pager, test run
  or grep; plus their children) of a dead session - neither its
  gcs_server nor its raylet runs here (a worker node of a multi-node cluster has no local gcs_server,
  so the raylet counts too) - and `ray::` workers whose raylet is gone;
- vLLM / SGLang engine processes (`VLLM::EngineCore`, `VLLM::Worker_TP*`, `sglang::*`) whose parent is
  gone: `ray stop` does not match them and they keep their GPU memory;
- processes holding GPU memory that no live job owns (the GPU PIDs come from the store): selected when
  they are helper processes (multiprocessing, compile workers) whose parent is gone; listed for
  selection by hand otherwise, since a job started with nohup is an orphan too;
- `/dev/shm/nccl-*` segments no process has open or mapped (deleting a mapped one crashes that job);
- old Ray session directories (`$RAY_TMPDIR/ray/session_*`).
PyTorch Flight Recorder dumps (`/tmp/nccl_trace_rank_*`) are listed as kept evidence, never deleted:
`rm -rf /tmp/nccl*` is the playbook tip that destroys them.

Safety rules: only the current user's processes and files; never PID 1, gkdtop or its ancestors;
processes of a live job (a live Ray session, a parent that still runs) are not put in the plan at all,
except GPU holders whose job cannot be told apart from a live one: those come unselected, "select by
hand". Every target is checked again right before it is acted on (same process by start time, segment
still unmapped, session still dead).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gkdtop.collectors.procs import SESSION_RE
from gkdtop.collectors.rayproc import ray_program

SCHEMA = 1

# A Ray process is told by what it runs (collectors/rayproc.py): Ray's binaries, Ray's own scripts as a
# Python interpreter's program, `ray::` titles. A word in the arguments (`less .../dashboard/agent.py`,
# `pytest .../test_log_monitor.py`) never makes one: `ray stop`'s command-line patterns would.
ENGINE_TITLE_RE = re.compile(r"^(?:VLLM::|sglang::)")
GCS_PORT_RE = re.compile(r"--gcs_server_port=(\d+)")
GCS_ADDRESS_RE = re.compile(r"--(?:gcs[-_]address|address)[= ]\S*?:(\d+)(?:\s|$)")
# Helper processes that only live for a parent (multiprocessing spawn/forkserver children, torch
# compile workers): holding GPU memory with that parent gone, they are leftovers.
HELPER_RE = re.compile(r"multiprocessing\.(?:spawn|forkserver|resource_tracker)|spawn_main|_inductor/compile_worker")
# Parents that adopt orphans: a process whose parent is one of these has lost its real parent.
REAPERS = {"systemd", "init", "tini", "dumb-init", "catatonit"}
FLIGHT_RECORDER_ENV = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
FLIGHT_RECORDER_DEFAULT = "/tmp/nccl_trace_rank_"

PROCESS_KINDS = ("ray-process", "ray-orphan", "engine", "gpu-holder", "child")


@dataclass(slots=True)
class CleanupItem:
    """One thing the plan would act on. target: a PID (processes) or a path (files, directories).

    kind: ray-process | ray-orphan | engine | gpu-holder | child | nccl-shm | ray-session | flight-recorder
    action: terminate (SIGTERM, grace, SIGKILL) | remove | keep (never acted on)
    """

    kind: str
    target: int | str
    reason: str
    action: str
    selected: bool = True
    name: str = ""  # what a person calls the process, for display
    create_time: float = 0.0  # the process's start time: its identity when we come back to act


@dataclass(slots=True)
class CleanupResult:
    """outcome: terminated | killed | already gone | permission denied | removed | skipped | failed."""

    target: int | str
    kind: str
    outcome: str
    detail: str = ""


# --- reading the machine ------------------------------------------------------------------------


@dataclass(slots=True)
class _Proc:
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
        from gkdtop.collectors.procs import display_name

        return self.title[:60] if self.title.startswith(("ray::", "VLLM::", "sglang::")) else display_name(
            self.cmdline)


def _scan() -> dict[int, _Proc]:
    procs: dict[int, _Proc] = {}
    for p in psutil.process_iter(["ppid", "uids", "name", "cmdline", "create_time", "status"]):
        info = p.info
        uids = info.get("uids")
        argv = info.get("cmdline") or []
        proc = _Proc(
            pid=p.pid, ppid=info.get("ppid") or 0, uid=uids.real if uids else None, name=info.get("name") or "",
            argv=list(argv), create_time=info.get("create_time") or 0.0, status=info.get("status") or "?",
        )
        cmd = proc.cmdline
        proc.ray = ray_program(proc.argv) is not None
        if (m := SESSION_RE.search(cmd)) is not None:
            proc.session = m.group(1)
        if (m := GCS_PORT_RE.search(cmd) or GCS_ADDRESS_RE.search(cmd)) is not None:
            proc.gcs_port = m.group(1)
        procs[p.pid] = proc
    return procs


def _ancestors(pid: int, procs: dict[int, _Proc], limit: int = 64) -> list[int]:
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


def _is_ray(proc: _Proc) -> bool:
    return proc.ray


def _is_engine(proc: _Proc) -> bool:
    return bool(ENGINE_TITLE_RE.match(proc.title) or ENGINE_TITLE_RE.match(proc.name))


def _is_gcs(proc: _Proc) -> bool:
    # By name too: a live-looking anchor only ever keeps things out of the plan.
    return proc.name == "gcs_server" or proc.title.rsplit("/", 1)[-1] == "gcs_server"


def _is_raylet(proc: _Proc) -> bool:
    return proc.name == "raylet" or proc.title.rsplit("/", 1)[-1] == "raylet"


def _raylet_pid(pid: int) -> int | None:
    """RAY_RAYLET_PID from a process's environment: Ray sets it for every worker and agent the raylet starts."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"RAY_RAYLET_PID="):
            value = item[len(b"RAY_RAYLET_PID="):]
            return int(value) if value.isdigit() else None
    return None


class _Machine:
    """One scan of the processes, with the questions the planner asks of it."""

    def __init__(self) -> None:
        self.procs = _scan()
        self.uid = os.getuid()
        self.protected = protected_pids()
        # A session lives while its gcs_server runs here, or its raylet does: a worker node of a
        # multi-node cluster has no local gcs_server, and its raylet exits by itself when the GCS is gone.
        anchors = [p for p in self.procs.values() if (_is_gcs(p) or _is_raylet(p)) and not p.zombie]
        self.live_sessions = {p.session for p in anchors if p.session}
        self.live_ports = {p.gcs_port for p in anchors if p.gcs_port}
        # A process that names its GCS by address only (the client server) belongs to the session
        # of any process naming both.
        self.port_session = {p.gcs_port: p.session for p in self.procs.values() if p.gcs_port and p.session}

    def session_of(self, proc: _Proc) -> tuple[str, str]:
        """(session name, GCS port) of a process: its own, or its nearest ancestor's."""
        for candidate in [proc.pid, *_ancestors(proc.pid, self.procs)]:
            p = self.procs.get(candidate)
            if p is None:
                break
            if p.session:
                return p.session, p.gcs_port
            if p.gcs_port:
                return self.port_session.get(p.gcs_port, ""), p.gcs_port
        return "", ""

    def liveness(self, proc: _Proc) -> tuple[bool | None, str]:
        """(True: its cluster runs, False: it does not, None: cannot tell), and what was looked at."""
        session, port = self.session_of(proc)
        if session:
            return session in self.live_sessions, f"session {session}"
        if port:
            return port in self.live_ports, f"the GCS on port {port}"
        if proc.ray and (raylet := _raylet_pid(proc.pid)) is not None:
            anchor = self.procs.get(raylet)
            alive = anchor is not None and _is_raylet(anchor) and not anchor.zombie \
                and anchor.create_time <= proc.create_time + 1.0
            return alive, f"the raylet PID {raylet} that started it"
        return None, ""

    def parent_gone(self, proc: _Proc) -> bool:
        parent = self.procs.get(proc.ppid)
        return proc.ppid <= 1 or parent is None or parent.name in REAPERS

    def ours(self, proc: _Proc) -> bool:
        return proc.uid == self.uid and proc.pid not in self.protected and not proc.zombie


# --- the plan -------------------------------------------------------------------------------------


def build_plan(
    gpu_pids: set[int] | frozenset[int] = frozenset(),
    shm_dir: str | os.PathLike[str] = "/dev/shm",
    ray_tmp: Path | None = None,
    now: float | None = None,
    trace_prefix: str | None = None,
) -> list[CleanupItem]:
    """Everything that looks like debris, with its reason; processes first, then files.

    ray_tmp: the directory holding `session_*` (default `$RAY_TMPDIR/ray`, else `/tmp/ray`).
    trace_prefix: Flight Recorder dump prefix (default `$TORCH_NCCL_DEBUG_INFO_TEMP_FILE` or /tmp/nccl_trace_rank_).
    """
    from gkdtop.collectors.ray import ray_temp_dir

    now = time.time() if now is None else now
    machine = _Machine()
    items = _process_items(machine, set(gpu_pids))
    items += _shm_items(machine, Path(shm_dir), now)
    items += _session_items(machine, ray_tmp if ray_tmp is not None else ray_temp_dir(), now)
    items += _flight_recorder_items(trace_prefix or os.environ.get(FLIGHT_RECORDER_ENV) or FLIGHT_RECORDER_DEFAULT,
                                    machine.uid, now)
    return items


def _process_items(machine: _Machine, gpu_pids: set[int]) -> list[CleanupItem]:
    procs = machine.procs
    chosen: dict[int, CleanupItem] = {}

    def add(proc: _Proc, kind: str, reason: str, selected: bool = True) -> None:
        chosen[proc.pid] = CleanupItem(kind, proc.pid, reason, "terminate", selected, proc.label, proc.create_time)

    for proc in procs.values():
        if not machine.ours(proc):
            continue
        if _is_ray(proc):
            live, what = machine.liveness(proc)
            if live:
                continue
            if live is False and what.startswith("the raylet"):
                add(proc, "ray-orphan", f"orphaned Ray process: {what} is gone")
            elif live is False:
                add(proc, "ray-process", f"Ray process of {what}, whose gcs_server and raylet are not running")
            elif proc.title.startswith("ray::") and machine.parent_gone(proc):
                add(proc, "ray-orphan", f"orphaned Ray worker: its raylet is gone (parent PID {proc.ppid})")
            elif not machine.live_sessions:
                add(proc, "ray-process", "Ray process while no Ray cluster runs on this node")
        elif _is_engine(proc) and machine.parent_gone(proc):
            live, _ = machine.liveness(proc)
            if not live:
                add(proc, "engine", f"inference engine process whose parent is gone (parent PID {proc.ppid}); "
                                    "`ray stop` does not match it and it keeps its GPU memory")

    # Children of debris go with it; otherwise they outlive it as orphans (often holding GPU memory).
    for proc in procs.values():
        if proc.pid in chosen or not machine.ours(proc):
            continue
        debris_parent = next((a for a in _ancestors(proc.pid, procs) if a in chosen), None)
        if debris_parent is None:
            continue
        if machine.liveness(proc)[0]:
            continue
        parent = chosen[debris_parent]
        kind = "engine" if _is_engine(proc) else "child"
        add(proc, kind, f"child of PID {debris_parent} ({parent.name}), which is debris", parent.selected)

    for pid in sorted(gpu_pids):
        proc = procs.get(pid)
        if proc is None or not machine.ours(proc):
            continue
        if pid in chosen:
            chosen[pid].reason += "; holds GPU memory"
            continue
        if machine.liveness(proc)[0]:
            continue
        if machine.parent_gone(proc) and HELPER_RE.search(proc.cmdline):
            add(proc, "gpu-holder", "holds GPU memory; a worker process whose parent is gone: no live job owns it")
        elif machine.parent_gone(proc):
            # A job started with nohup also has no parent: an orphan alone is no proof of debris.
            add(proc, "gpu-holder", "holds GPU memory and its parent is gone, but it may be a job started with "
                                    "nohup: select by hand", selected=False)
        else:
            parent = procs.get(proc.ppid)
            add(proc, "gpu-holder", f"holds GPU memory; its parent PID {proc.ppid} ({parent.label if parent else '?'}) "
                                    "still runs, so it may be a live job: select by hand", selected=False)
    return sorted(chosen.values(), key=lambda i: (PROCESS_KINDS.index(i.kind), int(i.target)))


@dataclass(slots=True)
class _Users:
    """Who has each file open or mapped, from every readable /proc/PID/{fd,maps}."""

    users: dict[tuple[int, int], set[int]] = field(default_factory=dict)  # (dev, inode) -> PIDs
    unreadable: set[int] = field(default_factory=set)  # PIDs we could not look into


def _file_users(paths: Iterable[Path], procs: dict[int, _Proc]) -> _Users:
    wanted: dict[tuple[int, int], Path] = {}
    by_path: dict[str, tuple[int, int]] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            key = (st.st_dev, st.st_ino)
            wanted[key] = path
            by_path[str(path)] = key
    found = _Users()
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
    found = _file_users(paths, _scan())
    out: dict[Path, set[int]] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            out[path] = found.users.get((st.st_dev, st.st_ino), set())
    return out


def _age(seconds: float) -> str:
    from gkdtop.format import human_duration

    return human_duration(max(0.0, seconds))


def _size(n: float) -> str:
    from gkdtop.format import human_bytes

    return human_bytes(n)


def _segments(shm_dir: Path, uid: int) -> list[tuple[Path, os.stat_result]]:
    out = []
    try:
        entries = sorted(shm_dir.glob("nccl-*"))
    except OSError:
        return []
    for path in entries:
        with contextlib.suppress(OSError):
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
                out.append((path, st))
    return out


def _shm_items(machine: _Machine, shm_dir: Path, now: float) -> list[CleanupItem]:
    segments = _segments(shm_dir, machine.uid)
    if not segments:
        return []
    users = _file_users([p for p, _ in segments], machine.procs)
    items = []
    for path, st in segments:
        pids = sorted(users.users.get((st.st_dev, st.st_ino), set()))
        desc = f"NCCL shared-memory segment, {_size(st.st_size)}, last written {_age(now - st.st_mtime)} ago"
        if pids:
            who = ", ".join(f"PID {pid} ({machine.procs[pid].label})" for pid in pids[:3] if pid in machine.procs)
            items.append(CleanupItem("nccl-shm", str(path), f"{desc}; in use by {who}: deleting it would crash "
                                     "that job", "keep", selected=False))
            continue
        # A process we could not look into might map it if the file's mode lets other users in. One of
        # our own that we cannot read is non-dumpable (or an outer namespace's init, as PID 1 is in some
        # sandboxes): not a process that runs an NCCL rank.
        doubt = [pid for pid in users.unreadable if pid in machine.procs
                 and machine.procs[pid].uid != machine.uid and st.st_mode & 0o066]
        if doubt:
            items.append(CleanupItem("nccl-shm", str(path), f"{desc}; {len(doubt)} process(es) could not be "
                                     "checked for it: select by hand", "remove", selected=False))
        else:
            items.append(CleanupItem("nccl-shm", str(path), f"{desc}; no process has it open or mapped", "remove"))
    return items


def _dir_size(path: Path, cap: int = 20000) -> tuple[int, bool]:
    """Bytes under a directory, reading at most `cap` entries (True when it stopped early)."""
    total = seen = 0
    for root, dirs, files in os.walk(path):
        for name in files:
            seen += 1
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
            if seen >= cap:
                return total, True
        seen += len(dirs)
    return total, False


def _session_items(machine: _Machine, ray_tmp: Path, now: float) -> list[CleanupItem]:
    try:
        latest = (ray_tmp / "session_latest").resolve(strict=True)
    except OSError:
        latest = None
    items = []
    try:
        dirs = sorted(ray_tmp.glob("session_*"))
    except OSError:
        return []
    for path in dirs:
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != machine.uid or path.name == "session_latest":
            continue
        if path.name in machine.live_sessions:
            continue  # the live cluster's: never
        size, more = _dir_size(path)
        desc = f"Ray session directory, {'≥' if more else ''}{_size(size)}, {_age(now - st.st_mtime)} old; " \
               "neither its gcs_server nor its raylet runs"
        if latest is not None and path.resolve() == latest:
            items.append(CleanupItem("ray-session", str(path), desc + "; the newest session: the last run's logs, "
                                     "bundle them first (select by hand)", "remove", selected=False))
        else:
            items.append(CleanupItem("ray-session", str(path), desc, "remove"))
    return items


def _flight_recorder_items(prefix: str, uid: int, now: float) -> list[CleanupItem]:
    base = Path(prefix)
    items = []
    with contextlib.suppress(OSError):
        for path in sorted(base.parent.glob(base.name + "*")):
            with contextlib.suppress(OSError):
                st = path.lstat()
                if st.st_uid != uid:
                    continue
                what = "trigger pipe" if stat.S_ISFIFO(st.st_mode) else f"dump, {_size(st.st_size)}"
                items.append(CleanupItem("flight-recorder", str(path),
                                         f"PyTorch Flight Recorder {what}, {_age(now - st.st_mtime)} old: evidence "
                                         "of the last collective hang, offered to the bundle; never deleted",
                                         "keep", selected=False))
    return items


# --- acting -----------------------------------------------------------------------------------------


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


def _wait_gone(procs: dict[int, psutil.Process], timeout: float) -> None:
    """Drop the processes that exit (or turn zombie) from `procs`, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while procs:
        for pid in [pid for pid, p in procs.items() if _gone(p)]:
            del procs[pid]
        if not procs or time.monotonic() >= deadline:
            return
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def execute(items: list[CleanupItem], grace: float = 5.0) -> list[CleanupResult]:
    """Act on the selected items: processes (SIGTERM, `grace` seconds, SIGKILL), then files.

    Each target is checked again first: the PID must still be the same process (by start time), the
    segment still unused, the session still dead. `keep` items are never acted on.
    """
    chosen = [i for i in items if i.selected and i.action != "keep"]
    grace = max(0.0, grace)
    results: dict[int, CleanupResult] = {}
    _terminate([(n, i) for n, i in enumerate(chosen) if i.action == "terminate"], grace, results)
    files = [(n, i) for n, i in enumerate(chosen) if i.action == "remove"]
    if files:
        machine = _Machine()  # after the processes went: what still runs now
        _remove_segments([(n, i) for n, i in files if i.kind == "nccl-shm"], machine, results)
        _remove_sessions([(n, i) for n, i in files if i.kind == "ray-session"], machine, results)
        for n, item in files:
            if n not in results:
                results[n] = CleanupResult(item.target, item.kind, "skipped", "unknown kind of file")
    return [results[n] for n in sorted(results)]


def _terminate(work: list[tuple[int, CleanupItem]], grace: float, results: dict[int, CleanupResult]) -> None:
    protected = protected_pids()
    uid = os.getuid()
    signalled: dict[int, tuple[int, CleanupItem, psutil.Process]] = {}
    for n, item in work:
        pid = int(item.target)

        def say(outcome: str, detail: str = "", n: int = n, item: CleanupItem = item) -> None:
            results[n] = CleanupResult(item.target, item.kind, outcome, detail)

        if pid in protected:
            say("skipped", "gkdtop itself, one of its parents, or PID 1")
            continue
        try:
            proc = psutil.Process(pid)
            if item.create_time and abs(proc.create_time() - item.create_time) > 0.05:
                say("already gone", "the PID now belongs to another process, left alone")
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                say("already gone", "exited; a zombie until its parent reaps it")
                continue
            if proc.uids().real != uid:
                say("skipped", "not the current user's process")
                continue
            proc.send_signal(signal.SIGTERM)  # psutil refuses if the PID was reused meanwhile
        except psutil.NoSuchProcess:
            say("already gone")
            continue
        except psutil.AccessDenied:
            say("permission denied")
            continue
        except OSError as exc:
            say("failed", str(exc))
            continue
        signalled[pid] = (n, item, proc)
    waiting = {pid: proc for pid, (_, _, proc) in signalled.items()}
    _wait_gone(waiting, grace)
    for pid, (n, item, _) in signalled.items():
        if pid not in waiting:
            results[n] = CleanupResult(item.target, item.kind, "terminated", "exited after SIGTERM")
    killed: dict[int, psutil.Process] = {}
    for pid, proc in waiting.items():
        n, item, _ = signalled[pid]
        try:
            proc.send_signal(signal.SIGKILL)
            killed[pid] = proc
        except psutil.NoSuchProcess:
            results[n] = CleanupResult(item.target, item.kind, "terminated", "exited after SIGTERM")
        except psutil.AccessDenied:
            results[n] = CleanupResult(item.target, item.kind, "permission denied", "SIGKILL refused")
    still = dict(killed)
    _wait_gone(still, 3.0)
    for pid in killed:
        n, item, _ = signalled[pid]
        if pid in still:
            results[n] = CleanupResult(item.target, item.kind, "failed",
                                       f"still running after SIGTERM, {grace:g} s and SIGKILL (stuck in the kernel?)")
        else:
            results[n] = CleanupResult(item.target, item.kind, "killed", f"ignored SIGTERM for {grace:g} s; SIGKILL")


def _remove_segments(work: list[tuple[int, CleanupItem]], machine: _Machine,
                     results: dict[int, CleanupResult]) -> None:
    if not work:
        return
    users = _file_users([Path(str(i.target)) for _, i in work], machine.procs)
    for n, item in work:
        path = Path(str(item.target))
        try:
            st = path.lstat()
        except FileNotFoundError:
            results[n] = CleanupResult(item.target, item.kind, "already gone")
            continue
        except OSError as exc:
            results[n] = CleanupResult(item.target, item.kind, "failed", str(exc))
            continue
        pids = users.users.get((st.st_dev, st.st_ino))
        if not stat.S_ISREG(st.st_mode) or st.st_uid != machine.uid:
            results[n] = CleanupResult(item.target, item.kind, "skipped", "no longer a file of the current user")
        elif pids:
            results[n] = CleanupResult(item.target, item.kind, "skipped",
                                       f"now in use by PID {', '.join(map(str, sorted(pids)))}")
        else:
            try:
                path.unlink()
                results[n] = CleanupResult(item.target, item.kind, "removed")
            except FileNotFoundError:
                results[n] = CleanupResult(item.target, item.kind, "already gone")
            except PermissionError as exc:
                results[n] = CleanupResult(item.target, item.kind, "permission denied", str(exc))
            except OSError as exc:
                results[n] = CleanupResult(item.target, item.kind, "failed", str(exc))


def _rmtree(path: Path) -> list[str]:
    """Remove a tree, going on past entries that fail; returns what failed and why."""
    errors: list[str] = []

    def failed(_func: Any, where: str, exc: Any) -> None:
        errors.append(f"{where}: {exc[1] if isinstance(exc, tuple) else exc}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=failed)
    else:
        shutil.rmtree(path, onerror=failed)
    return errors


def _remove_sessions(work: list[tuple[int, CleanupItem]], machine: _Machine,
                     results: dict[int, CleanupResult]) -> None:
    for n, item in work:
        path = Path(str(item.target))
        name = path.name
        if not path.is_dir() or path.is_symlink():
            results[n] = CleanupResult(item.target, item.kind, "already gone")
            continue
        if name in machine.live_sessions:
            results[n] = CleanupResult(item.target, item.kind, "skipped", "its cluster runs again")
            continue
        users = [p for p in machine.procs.values() if not p.zombie and machine.session_of(p)[0] == name]
        if users:
            results[n] = CleanupResult(item.target, item.kind, "skipped",
                                       f"PID {users[0].pid} ({users[0].label}) of this session still runs")
            continue
        errors = _rmtree(path)
        if errors:
            outcome = "permission denied" if "Permission denied" in errors[0] else "failed"
            results[n] = CleanupResult(item.target, item.kind, outcome,
                                       f"{len(errors)} entries left, first: {errors[0]}")
        else:
            results[n] = CleanupResult(item.target, item.kind, "removed")


# --- presenting -------------------------------------------------------------------------------------


def plan_json(items: list[CleanupItem], results: list[CleanupResult] | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "items": [{"kind": i.kind, "target": i.target, "reason": i.reason, "action": i.action,
                   "selected": i.selected} for i in items],
        "results": [{"target": r.target, "kind": r.kind, "outcome": r.outcome, "detail": r.detail}
                    for r in (results or [])],
    }


def target_text(item: CleanupItem) -> str:
    """`PID 123 VLLM::EngineCore` or the path: the same words in the CLI preview and the TUI modal."""
    return f"PID {item.target} {item.name}" if item.action == "terminate" else str(item.target)


def plan_text(items: list[CleanupItem]) -> str:
    """The preview a person reads before saying yes: one line per item, its reason below it."""
    if not items:
        return "Nothing to clean up: no debris of a crashed run found for this user.\n"
    selected = sum(1 for i in items if i.selected and i.action != "keep")
    lines = [f"Cleanup plan: {len(items)} item(s), {selected} selected "
             "([x] acted on; [ ] listed only: select by hand, or kept)"]
    for item in items:
        mark = "x" if item.selected and item.action != "keep" else " "
        lines.append(f"[{mark}] {item.action:<9} {item.kind:<15} {target_text(item)}")
        lines.append(f"      {item.reason}")
    return "\n".join(lines) + "\n"


def results_text(results: list[CleanupResult]) -> str:
    lines = [f"{r.outcome:<17} {r.kind:<15} {r.target}" + (f"  ({r.detail})" if r.detail else "") for r in results]
    return "\n".join(lines) + "\n" if lines else "Nothing was done.\n"


def _gpu_pids() -> set[int]:
    """The PIDs NVML says hold GPU memory; empty where there is no GPU or no NVML."""
    try:
        from gkdtop.collectors.gpu import GpuCollector

        collector = GpuCollector()
        try:
            state = collector.collect()
        finally:
            collector.close()
        return {p.pid for dev in state.devices for p in dev.processes}
    except Exception:
        return set()


def cleanup_command(dry_run: bool, yes: bool, as_json: bool, grace: float = 5.0, **plan_args: Any) -> int:
    """`gkdtop cleanup`: print the plan; act on it after `y` (on a terminal) or with --yes.

    Exit status: 0 done (or nothing to do, or --dry-run); 1 not confirmed, or some item failed.
    `plan_args` go to build_plan (tests point it at their own directories).
    """
    if "gpu_pids" not in plan_args:
        plan_args["gpu_pids"] = _gpu_pids()
    items = build_plan(**plan_args)
    out, err = sys.stdout, sys.stderr
    todo = [i for i in items if i.selected and i.action != "keep"]
    preview = err if as_json else out  # with --json, stdout carries the JSON document alone

    def finish(results: list[CleanupResult], code: int) -> int:
        if as_json:
            json.dump(plan_json(items, results), out, indent=1)
            out.write("\n")
        return code

    if not as_json or not (yes or dry_run):
        preview.write(plan_text(items))
    if dry_run:
        if not as_json:
            out.write("--dry-run: nothing was done.\n")
        return finish([], 0)
    if not todo:
        if items and not as_json:
            out.write("Nothing selected to act on.\n")
        return finish([], 0)
    if not yes:
        if not sys.stdin.isatty():
            err.write("gkdtop cleanup: not a terminal and no --yes: nothing was done "
                      "(review the plan above, then run again with --yes).\n")
            return finish([], 1)
        err.write(f"Proceed with the {len(todo)} selected item(s)? [y/N] ")
        err.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            err.write("Nothing was done.\n")
            return finish([], 1)
    results = execute(items, grace=grace)
    if not as_json:
        out.write(results_text(results))
    bad = any(r.outcome in ("failed", "permission denied") for r in results)
    return finish(results, 1 if bad else 0)
