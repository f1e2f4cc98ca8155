"""Ending processes: SIGTERM, a grace period, SIGKILL for what is left, and what happened to each.

One terminator for cleanup's debris, `gkdtop run`'s job and the demo's cluster, so they all give a
process the same chance to tear itself down and all report the same outcomes. A zombie counts as
gone and is never reaped here: its parent (often a subprocess.Popen of ours) still collects its
exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

# What happened to one process: its own words are the ones cleanup prints.
TERMINATED, KILLED, ALREADY_GONE, DENIED, FAILED = "terminated", "killed", "already gone", "permission denied", "failed"


@dataclass(slots=True)
class Ending:
    """outcome: terminated | killed | already gone | permission denied | failed; detail says why, in words."""

    pid: int
    outcome: str
    detail: str = ""


def gone(proc: psutil.Process) -> bool:
    """Exited, or a zombie waiting for its parent; a process we may not look at counts as running."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


def wait_gone(procs: dict[int, psutil.Process], timeout: float) -> None:
    """Drop the processes that exit (or turn zombie) from `procs`, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while procs:
        for pid in [pid for pid, p in procs.items() if gone(p)]:
            del procs[pid]
        if not procs or time.monotonic() >= deadline:
            return
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def _signal_group(group: int | None, signum: int) -> None:
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


def terminate(procs: Iterable[psutil.Process], grace: float = 3.0, kill_wait: float = 3.0,
              group: int | None = None, term_group: bool = True) -> list[Ending]:
    """SIGTERM each process, wait up to `grace` s for all, SIGKILL the rest, wait up to `kill_wait` s.

    `group`: a process group signalled along with them (a job's children that share its group), with
    SIGTERM too unless `term_group` is False (a driver that tears its own cluster down gets the
    SIGTERM alone; its group is only SIGKILLed when it does not finish in time). psutil refuses to
    signal a PID that now belongs to another process, so a recycled PID is never hit.
    Returns one Ending per process, in the order given.
    """
    grace = max(0.0, grace)
    endings: dict[int, Ending] = {}
    signalled: dict[int, psutil.Process] = {}
    order: list[int] = []
    for proc in procs:
        order.append(proc.pid)
        try:
            if gone(proc):
                endings[proc.pid] = Ending(proc.pid, ALREADY_GONE)
                continue
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            endings[proc.pid] = Ending(proc.pid, ALREADY_GONE)
            continue
        except psutil.AccessDenied:
            endings[proc.pid] = Ending(proc.pid, DENIED)
            continue
        except OSError as exc:
            endings[proc.pid] = Ending(proc.pid, FAILED, str(exc))
            continue
        signalled[proc.pid] = proc
    if term_group:
        _signal_group(group, signal.SIGTERM)
    waiting = dict(signalled)
    wait_gone(waiting, grace)
    for pid in signalled.keys() - waiting.keys():
        endings[pid] = Ending(pid, TERMINATED, "exited after SIGTERM")
    if waiting:
        _signal_group(group, signal.SIGKILL)
    killed: dict[int, psutil.Process] = {}
    for pid, proc in waiting.items():
        try:
            proc.send_signal(signal.SIGKILL)
            killed[pid] = proc
        except psutil.NoSuchProcess:
            endings[pid] = Ending(pid, TERMINATED, "exited after SIGTERM")
        except psutil.AccessDenied:
            endings[pid] = Ending(pid, DENIED, "SIGKILL refused")
    still = dict(killed)
    wait_gone(still, kill_wait)
    for pid in killed:
        if pid in still:
            endings[pid] = Ending(pid, FAILED, f"still running after SIGTERM, {grace:g} s and SIGKILL "
                                               "(stuck in the kernel?)")
        else:
            endings[pid] = Ending(pid, KILLED, f"ignored SIGTERM for {grace:g} s; SIGKILL")
    return [endings[pid] for pid in dict.fromkeys(order)]


def survivors(procs: Iterable[psutil.Process], endings: Iterable[Ending]) -> list[psutil.Process]:
    """The processes that outlived terminate(): SIGKILL failed or was refused."""
    left = {e.pid for e in endings if e.outcome in (FAILED, DENIED)}
    return [p for p in procs if p.pid in left and not gone(p)]
