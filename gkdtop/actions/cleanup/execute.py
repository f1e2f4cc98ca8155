"""Acting on a plan: every target checked again right before it is touched, then ended or removed.

Processes go through gkdtop/proctree.py (SIGTERM, grace, SIGKILL); files only while no process
has them open or mapped, sessions only while their cluster stays dead.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import psutil

from gkdtop import proctree
from gkdtop.actions.cleanup.machine import Machine, file_users, protected_pids
from gkdtop.actions.cleanup.model import (
    CleanupItem,
    CleanupResult,
)


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
        machine = Machine()  # after the processes went: what still runs now
        _remove_segments([(n, i) for n, i in files if i.kind == "nccl-shm"], machine, results)
        _remove_sessions([(n, i) for n, i in files if i.kind == "ray-session"], machine, results)
        for n, item in files:
            if n not in results:
                results[n] = CleanupResult(item.target, item.kind, "skipped", "unknown kind of file")
    return [results[n] for n in sorted(results)]


def _terminate(work: list[tuple[int, CleanupItem]], grace: float, results: dict[int, CleanupResult]) -> None:
    """Check each process again (ours, the same one, not gkdtop's own line), then end them together."""
    protected = protected_pids()
    uid = os.getuid()
    targets: list[tuple[int, CleanupItem, psutil.Process]] = []
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
        except psutil.NoSuchProcess:
            say("already gone")
            continue
        except psutil.AccessDenied:
            say("permission denied")
            continue
        except OSError as exc:
            say("failed", str(exc))
            continue
        targets.append((n, item, proc))
    endings = proctree.terminate([proc for _, _, proc in targets], grace, kill_wait=3.0)
    for (n, item, _), ending in zip(targets, endings, strict=True):
        results[n] = CleanupResult(item.target, item.kind, ending.outcome, ending.detail)


def _remove_segments(work: list[tuple[int, CleanupItem]], machine: Machine,
                     results: dict[int, CleanupResult]) -> None:
    if not work:
        return
    users = file_users([Path(str(i.target)) for _, i in work], machine.procs)
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


def _remove_sessions(work: list[tuple[int, CleanupItem]], machine: Machine,
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
