"""The plan: everything that looks like a crashed run's debris, each item with the reason it was chosen."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

from gkdtop import prockind
from gkdtop.actions.cleanup.machine import Machine, Proc, ancestors, file_users
from gkdtop.actions.cleanup.model import (
    FLIGHT_RECORDER_DEFAULT,
    FLIGHT_RECORDER_ENV,
    PROCESS_KINDS,
    CleanupItem,
)


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
    machine = Machine()
    items = _process_items(machine, set(gpu_pids))
    items += _shm_items(machine, Path(shm_dir), now)
    items += _session_items(machine, ray_tmp if ray_tmp is not None else ray_temp_dir(), now)
    items += _flight_recorder_items(trace_prefix or os.environ.get(FLIGHT_RECORDER_ENV) or FLIGHT_RECORDER_DEFAULT,
                                    machine.uid, now)
    return items


def _process_items(machine: Machine, gpu_pids: set[int]) -> list[CleanupItem]:
    procs = machine.procs
    chosen: dict[int, CleanupItem] = {}

    def add(proc: Proc, kind: str, reason: str, selected: bool = True) -> None:
        chosen[proc.pid] = CleanupItem(kind, proc.pid, reason, "terminate", selected, proc.label, proc.create_time)

    for proc in procs.values():
        if not machine.ours(proc):
            continue
        if proc.ray:
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
        elif proc.engine and machine.parent_gone(proc):
            live, _ = machine.liveness(proc)
            if not live:
                add(proc, "engine", f"inference engine process whose parent is gone (parent PID {proc.ppid}); "
                                    "`ray stop` does not match it and it keeps its GPU memory")

    # Children of debris go with it; otherwise they outlive it as orphans (often holding GPU memory).
    for proc in procs.values():
        if proc.pid in chosen or not machine.ours(proc):
            continue
        debris_parent = next((a for a in ancestors(proc.pid, procs) if a in chosen), None)
        if debris_parent is None:
            continue
        if machine.liveness(proc)[0]:
            continue
        parent = chosen[debris_parent]
        kind = "engine" if proc.engine else "child"
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
        if machine.parent_gone(proc) and prockind.helper(proc.cmdline):
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


def _shm_items(machine: Machine, shm_dir: Path, now: float) -> list[CleanupItem]:
    segments = _segments(shm_dir, machine.uid)
    if not segments:
        return []
    users = file_users([p for p, _ in segments], machine.procs)
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


def _session_items(machine: Machine, ray_tmp: Path, now: float) -> list[CleanupItem]:
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
    from gkdtop.capture.flight_recorder import dump_paths

    dumps, pipes, _others = dump_paths(prefix)
    items = []
    with contextlib.suppress(OSError):
        for path in sorted(dumps + pipes):  # the rank's files, nothing else the prefix happens to match
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
