"""Python stacks with py-spy: every target in parallel, the probe's faulthandler where py-spy cannot.

Which processes are targets (the Processes pane's Python roles), how one process is dumped, and
how a failure becomes one line a person can act on. Grouping them is actions/stacks' job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gkdtop.capture.faulthandler import faulthandler_dump
from gkdtop.capture.proc import alive, exe_path, maps_python, proc_info, rank_of
from gkdtop.model import ProcInfo
from gkdtop.model.stacks import StackDump, StackFrame, ThreadStack

# Roles of Python processes in the Processes pane: Ray's own daemons (C++ or not ours) are left out.
PYTHON_ROLES = frozenset({
    "driver", "worker", "actor", "rollout", "ref", "teacher", "critic", "reward", "ray-worker", "engine", "gpu-holder",
})


def find_py_spy(search: Iterable[str | Path] | None = None) -> str | None:
    """py-spy next to our interpreter (the venv it was installed into), else on PATH; `search` replaces both."""
    if search is not None:
        return shutil.which("py-spy", path=os.pathsep.join(str(d) for d in search) or os.devnull)
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def dump_processes(
    targets: Sequence[ProcInfo] | Sequence[int],
    native: bool = False,
    timeout: float = 10.0,
    workers: int = 16,
    py_spy: str | None = None,
    search: Iterable[str | Path] | None = None,
    nonblocking: bool = False,
) -> tuple[str, list[ProcInfo], list[StackDump]]:
    """Every target dumped in parallel (py-spy pauses each process only for its own dump): the py-spy
    used ("" when none was found), the targets as ProcInfo, and one dump per target in their order.

    A process py-spy cannot read (py-spy missing, ptrace denied, ...) is dumped by faulthandler when
    it runs gkdtop.probe. `nonblocking` (the periodic sampler, collectors/stackphase.py): py-spy reads
    without pausing the target, and a failure is only reported (no faulthandler signal every few seconds).
    """
    exe = py_spy or find_py_spy(search)
    procs = [t if isinstance(t, ProcInfo) else proc_info(t) for t in targets]
    pool_size = max(1, min(workers, len(procs)))
    if exe is None:
        missing = "py-spy not found (pip install py-spy, next to this Python or on PATH)"
        with ThreadPoolExecutor(max_workers=pool_size) as pool:
            dumps = list(pool.map(lambda p: _fallback(_failed(p, missing), p, timeout), procs))
    elif procs:
        with ThreadPoolExecutor(max_workers=pool_size) as pool:
            dumps = list(pool.map(lambda p: _dump_guarded(exe, p, native, timeout, nonblocking), procs))
    else:
        dumps = []
    return exe or "", procs, dumps


def _label(proc: ProcInfo, rank: int | None, world: int | None) -> str:
    parts = [proc.role, proc.actor or proc.name]
    if rank is not None:
        parts.append(f"rank {rank}" + (f"/{world}" if world else ""))
    return " ".join(p for p in parts if p)


def _failed(proc: ProcInfo, error: str) -> StackDump:
    rank, world = rank_of(proc.pid)
    return StackDump(proc.pid, proc.role, _label(proc, rank, world), False, error, actor=proc.actor, rank=rank,
                     world_size=world)


def _dump_guarded(exe: str, proc: ProcInfo, native: bool, timeout: float, nonblocking: bool = False) -> StackDump:
    """One process's failure, whatever it is, stays in that process's row."""
    try:
        dump = _dump_one(exe, proc, native, timeout, nonblocking)
    except Exception as exc:
        dump = _failed(proc, f"dump failed: {type(exc).__name__}: {exc}"[:200])
    return dump if dump.ok or nonblocking else _fallback(dump, proc, timeout)


def _dump_one(exe: str, proc: ProcInfo, native: bool, timeout: float, nonblocking: bool = False) -> StackDump:
    if not alive(proc):
        return _failed(proc, "process vanished (exited before the dump)")
    rank, world = rank_of(proc.pid)
    dump = StackDump(proc.pid, proc.role, _label(proc, rank, world), False, actor=proc.actor, rank=rank,
                     world_size=world)
    # --nonblocking would pause the target less but cannot be combined with --native; a consistent
    # snapshot matters more for a hang than a few milliseconds of pause.
    argv = [exe, "dump", "--pid", str(proc.pid), "--json"] + (["--native"] if native else [])
    if nonblocking and not native:
        argv.append("--nonblocking")
    env = {**os.environ, "RUST_BACKTRACE": "0"}  # else py-spy's errors come with a Rust backtrace
    began = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:  # subprocess.run killed py-spy; the kernel detaches it from the target
        dump.error = f"py-spy timed out after {timeout:g} s (it could not read the process in time)"
        dump.seconds = round(time.monotonic() - began, 3)
        return dump
    except OSError as exc:
        dump.error = f"cannot run py-spy ({exe}): {exc.strerror or exc}"
        return dump
    dump.seconds = round(time.monotonic() - began, 3)
    if done.returncode == 0:
        try:
            dump.threads = parse_py_spy_json(done.stdout)
        except ValueError as exc:
            dump.error = f"unreadable py-spy output: {exc}"
            return dump
        dump.ok, dump.method = True, "py-spy"
        return dump
    dump.error = _explain(proc, done.stderr.decode(errors="replace") + done.stdout.decode(errors="replace"))
    return dump


def parse_py_spy_json(raw: bytes | str) -> list[ThreadStack]:
    """py-spy's `dump --json` output (a list of threads) as ThreadStacks."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, list):
        raise ValueError("expected a list of threads")
    try:
        return [_thread(item) for item in data]
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"unexpected thread record: {exc}") from None


def _thread(item: dict) -> ThreadStack:
    frames = [
        StackFrame(function=str(f.get("name", "?")), file=str(f.get("short_filename") or f.get("filename", "?")),
                   line=int(f.get("line") or 0), path=str(f.get("filename") or ""), native=f.get("module") is not None)
        for f in item.get("frames") or []
    ]
    tid = int(item.get("os_thread_id") or item.get("thread_id") or 0)
    return ThreadStack(name=str(item.get("thread_name") or f"Thread {tid}"), thread_id=tid,
                       idle=not item.get("active", False), frames=frames, owns_gil=bool(item.get("owns_gil", False)))


def _explain(proc: ProcInfo, output: str) -> str:
    """py-spy's failure as one line a person can act on."""
    if not alive(proc):
        return "process vanished (exited during the dump)"
    if "Permission Denied" in output or "Operation not permitted" in output:
        return "permission denied by ptrace (run as its user or root; check kernel.yama.ptrace_scope, CAP_SYS_PTRACE)"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    first = next((ln[len("Error:"):].strip() for ln in lines if ln.startswith("Error:")), lines[0] if lines else "")
    if re.search(r"unsupported.*version|version.*not supported", output, re.I):
        return f"unsupported Python: {first}"[:200]
    exe = exe_path(proc.pid)
    if exe is not None and not maps_python(proc.pid) and "python" not in Path(exe).name:
        return f"not a Python process ({Path(exe).name})"
    return f"py-spy failed: {first or 'exit status nonzero'}"[:200]


def _fallback(dump: StackDump, proc: ProcInfo, timeout: float) -> StackDump:
    """A failed py-spy dump retried through faulthandler; the result says which method produced it."""
    if dump.ok or dump.error.startswith(("process vanished", "not a Python process")) or not alive(proc):
        return dump
    began = time.monotonic()
    threads, why = faulthandler_dump(proc.pid, timeout=min(timeout, 5.0))
    if not threads:
        dump.error = f"{dump.error}; faulthandler: {why}"[:300]
        return dump
    dump.note, dump.error = dump.error, ""
    dump.threads, dump.ok, dump.method = threads, True, "faulthandler"
    dump.seconds = round(time.monotonic() - began, 3)
    return dump


def stack_targets(processes: Sequence[ProcInfo]) -> list[ProcInfo]:
    """The Python processes of the job (Ray's C++ daemons have no Python stack to show)."""
    return [p for p in processes if p.role in PYTHON_ROLES and p.status != "zombie"]
