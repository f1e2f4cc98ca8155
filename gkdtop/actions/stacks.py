"""Python stacks of every job process with py-spy, grouped, with the odd ones out singled out.

In a hang, most ranks wait in the same collective and one rank is somewhere else: that rank is
usually the culprit. So identical stacks are grouped ("6 processes: broadcast <- sync_weights <- fit")
and the processes that are not where their peers are get called out. Every dump is saved to a
timestamped file as well, because a hang is evidence worth keeping.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gkdtop.collectors.procs import process_environ
from gkdtop.model import ProcInfo

if TYPE_CHECKING:
    from gkdtop.actions.collectives import CollectiveReport

SCHEMA = 1
# Roles of Python processes in the Processes pane: Ray's own daemons (C++ or not ours) are left out.
PYTHON_ROLES = frozenset({
    "driver", "worker", "actor", "rollout", "ref", "teacher", "critic", "reward", "ray-worker", "engine", "gpu-holder",
})
# Functions that are a collective (or a point-to-point op) in the libraries a GKD/PPO job talks NCCL through.
COLLECTIVES = frozenset({
    "all_reduce", "allreduce", "broadcast", "all_gather", "allgather", "all_gather_into_tensor", "_all_gather_base",
    "reduce_scatter", "reducescatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "reduce", "gather", "scatter", "send", "recv", "isend",
    "irecv", "batch_isend_irecv", "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "send_object_list", "recv_object_list", "new_group", "init_process_group",
})
COLLECTIVE_PATHS = ("torch/distributed/", "vllm/distributed/", "sglang/srt/distributed/", "ray/util/collective/",
                    "deepspeed/comm/", "megatron/core/parallel_state", "cupy/cuda/nccl", "pynccl")
# Frames that only pass the call through: left out of the one-line summary (never out of the dump).
PASS_THROUGH_RE = re.compile(
    r"(?:^|\.)(?:wrapper|_wrapper|wrapped|inner|decorate_context|_call_impl|_wrapped_call_impl|span_wrapper"
    r"|_resume_span|actor_method_executor|_exception_logger|_fn)$|^<lambda>$"
)
PLUMBING_PATHS = ("ray/_private/", "ray/util/tracing/", "ray/actor.py", "ray/remote_function.py")
STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")
SUMMARY_DEPTH = 3
FR_THREAD = "gkdtop-probe-fr"  # gkdtop.probe.FR_THREAD (not imported: the probe module stays standalone)
PROBE_FILE = "gkdtop/probe.py"


@dataclass(slots=True)
class StackFrame:
    function: str
    file: str  # py-spy's short name (package-relative): the same on every node, so it groups
    line: int
    path: str = ""  # the full file name in the target
    native: bool = False  # a C/C++ frame (only with --native)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.function, self.file, self.line)


@dataclass(slots=True)
class ThreadStack:
    name: str
    thread_id: int
    idle: bool  # py-spy's "not active": blocked in a syscall; a rank stuck in a collective is idle too
    frames: list[StackFrame] = field(default_factory=list)  # innermost first, as py-spy gives them
    owns_gil: bool = False


@dataclass(slots=True)
class StackDump:
    """One process: its threads, or `ok=False` and a one-line `error`."""

    pid: int
    role: str
    label: str  # role, actor class, rank: what a person calls the process
    ok: bool
    error: str = ""
    threads: list[ThreadStack] = field(default_factory=list)
    actor: str = ""
    rank: int | None = None
    world_size: int | None = None
    seconds: float = 0.0  # how long the dump took
    method: str = ""  # what produced the threads: "py-spy" or "faulthandler" (gkdtop.probe); "" when nothing did
    note: str = ""  # why the fallback was used (py-spy's failure), when it was


@dataclass(slots=True)
class StackGroup:
    """Processes whose significant threads have the very same Python frames."""

    frames: list[StackFrame]  # the representative thread's frames, innermost first
    pids: list[int]
    summary: str  # "broadcast <- sync_rollout_weights <- fit"
    thread: str = ""  # the representative thread's name
    collective: bool = False  # the representative thread waits in a collective


@dataclass(slots=True)
class StackReport:
    time: float
    native: bool
    dumps: list[StackDump]
    groups: list[StackGroup]
    outliers: list[int]
    py_spy: str = ""
    seconds: float = 0.0
    nccl_traces: list[NcclTrace] = field(default_factory=list)
    collectives: CollectiveReport | None = None  # Flight Recorder: which rank is in which collective


@dataclass(slots=True)
class NcclTrace:
    """One Flight Recorder dump asked for through a rank's trigger pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`)."""

    pid: int
    rank: int | None
    pipe: str
    file: str  # where torch writes the dump: TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank
    ok: bool
    error: str = ""
    bytes: int = 0


# ---------------------------------------------------------------- running py-spy


def find_py_spy(search: Iterable[str | Path] | None = None) -> str | None:
    """py-spy next to our interpreter (the venv it was installed into), else on PATH; `search` replaces both."""
    if search is not None:
        return shutil.which("py-spy", path=os.pathsep.join(str(d) for d in search) or os.devnull)
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def dump_stacks(
    targets: Sequence[ProcInfo] | Sequence[int],
    native: bool = False,
    timeout: float = 10.0,
    workers: int = 16,
    py_spy: str | None = None,
    search: Iterable[str | Path] | None = None,
    nccl_trace: bool = True,
    nonblocking: bool = False,
) -> StackReport:
    """Dump every target in parallel (py-spy pauses each process only for its own dump), then group.

    A process py-spy cannot read (py-spy missing, ptrace denied, ...) is dumped by faulthandler when
    it runs gkdtop.probe; with `nccl_trace`, every rank that can (gkdtop.probe's request FIFO, torch's
    NCCL trigger pipe) dumps its Flight Recorder too, and the dumps are analysed (actions/collectives.py).
    `nonblocking` (the periodic sampler, collectors/stackphase.py): py-spy reads without pausing the
    target, and a failure is only reported (no faulthandler signal every few seconds).
    """
    start = time.time()
    exe = py_spy or find_py_spy(search)
    procs = [t if isinstance(t, ProcInfo) else _proc_info(t) for t in targets]
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
    traces = trigger_nccl_traces(procs, wait=min(timeout, 5.0)) if nccl_trace and procs else []
    colls = None
    if nccl_trace and procs:
        from gkdtop.actions import collectives

        colls = collectives.collect(procs, traces, wait=min(timeout, 5.0))
        colls = colls if colls.dumps else None
    groups = group_stacks(dumps)
    return StackReport(time=start, native=native, dumps=dumps, groups=groups, outliers=outliers(dumps, groups),
                       py_spy=exe or "", seconds=round(time.time() - start, 3), nccl_traces=traces,
                       collectives=colls)


def _proc_info(pid: int) -> ProcInfo:
    """A ProcInfo for a bare PID, with a role from the same rules as the Processes pane."""
    import psutil

    from gkdtop.collectors.procs import classify, display_name

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


def _rank(pid: int) -> tuple[int | None, int | None]:
    """RANK (else LOCAL_RANK) and WORLD_SIZE from the process's environment, when /proc lets us read it."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None, None
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)

    def number(name: bytes) -> int | None:
        value = env.get(name, b"")
        return int(value) if value.isdigit() else None

    rank = number(b"RANK")
    return (number(b"LOCAL_RANK") if rank is None else rank), number(b"WORLD_SIZE")


def _label(proc: ProcInfo, rank: int | None, world: int | None) -> str:
    parts = [proc.role, proc.actor or proc.name]
    if rank is not None:
        parts.append(f"rank {rank}" + (f"/{world}" if world else ""))
    return " ".join(p for p in parts if p)


def _failed(proc: ProcInfo, error: str) -> StackDump:
    rank, world = _rank(proc.pid)
    return StackDump(proc.pid, proc.role, _label(proc, rank, world), False, error, actor=proc.actor, rank=rank,
                     world_size=world)


def _alive(proc: ProcInfo) -> bool:
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


def _dump_guarded(exe: str, proc: ProcInfo, native: bool, timeout: float, nonblocking: bool = False) -> StackDump:
    """One process's failure, whatever it is, stays in that process's row."""
    try:
        dump = _dump_one(exe, proc, native, timeout, nonblocking)
    except Exception as exc:
        dump = _failed(proc, f"dump failed: {type(exc).__name__}: {exc}"[:200])
    return dump if dump.ok or nonblocking else _fallback(dump, proc, timeout)


def _dump_one(exe: str, proc: ProcInfo, native: bool, timeout: float, nonblocking: bool = False) -> StackDump:
    if not _alive(proc):
        return _failed(proc, "process vanished (exited before the dump)")
    rank, world = _rank(proc.pid)
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
    if not _alive(proc):
        return "process vanished (exited during the dump)"
    if "Permission Denied" in output or "Operation not permitted" in output:
        return "permission denied by ptrace (run as its user or root; check kernel.yama.ptrace_scope, CAP_SYS_PTRACE)"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    first = next((ln[len("Error:"):].strip() for ln in lines if ln.startswith("Error:")), lines[0] if lines else "")
    if re.search(r"unsupported.*version|version.*not supported", output, re.I):
        return f"unsupported Python: {first}"[:200]
    exe = _exe(proc.pid)
    if exe is not None and not _maps_python(proc.pid) and "python" not in Path(exe).name:
        return f"not a Python process ({Path(exe).name})"
    return f"py-spy failed: {first or 'exit status nonzero'}"[:200]


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _maps_python(pid: int) -> bool:
    """Does the process map an interpreter (libpython, or a python binary)? Unknown counts as yes."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return any("python" in line.rsplit("/", 1)[-1] for line in maps if "/" in line)
    except OSError:
        return True


# ---------------------------------------------------------------- the faulthandler fallback (gkdtop.probe)

FH_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? \(most recent call first\):$")
FH_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
FH_HEADER_RE = re.compile(r"pid=(\d+) start=(\d*) signal=(\d+) main=(0x[0-9a-fA-F]+)")


def short_path(path: str) -> str:
    """py-spy-like short file name: below site-packages, or the stdlib directory, else the base name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if m := STDLIB_RE.search(path):
        return path[m.end():]
    return path.rsplit("/", 1)[-1]


def parse_faulthandler(text: str, main_thread: int = 0) -> list[ThreadStack]:
    """faulthandler's all-threads text (innermost frame first) as ThreadStacks; raises ValueError if none."""
    threads: list[ThreadStack] = []
    for line in text.splitlines():
        if m := FH_THREAD_RE.match(line.rstrip()):
            tid = int(m.group(2), 16)
            name = m.group(3) or ("MainThread" if tid == main_thread else f"Thread {m.group(2)}")
            # Whether a thread runs or waits is not in the text; the one that took the signal was running.
            threads.append(ThreadStack(name=name, thread_id=tid, idle=m.group(1) != "Current thread"))
        elif threads and (m := FH_FRAME_RE.match(line)):
            path = m.group(1)
            threads[-1].frames.append(StackFrame(function=m.group(3).strip(), file=short_path(path),
                                                 line=int(m.group(2)), path=path))
    if not threads:
        raise ValueError("no thread in faulthandler's output")
    return threads


def faulthandler_dump(pid: int, timeout: float = 5.0) -> tuple[list[ThreadStack], str]:
    """Ask a process running gkdtop.probe for its stacks (its signal) and read them from its stack file.

    Returns (threads, "") or ([], why not). The header of the file must name this very process (PID
    and start time): a process without the probe would be killed by the signal, so it is never sent one.
    """
    from gkdtop import probe

    path = probe.stack_file(pid, process_environ(pid))
    try:
        with open(path, "rb") as f:
            header = f.readline().decode(errors="replace")
            before = f.seek(0, os.SEEK_END)
    except OSError:
        return [], "no gkdtop.probe stack file (the job does not import gkdtop.probe)"
    m = FH_HEADER_RE.search(header)
    if not header.startswith(probe.HEADER) or m is None or int(m.group(1)) != pid:
        return [], f"{path}: not this process's probe file"
    if m.group(2) != probe.process_start(pid):
        return [], f"{path}: left by an earlier process with the same PID"
    try:
        os.kill(pid, int(m.group(3)))
    except OSError as exc:
        return [], f"cannot signal the process: {exc.strerror or exc}"
    # The C handler writes at once, even while Python is blocked; wait until the file stops growing.
    deadline, size, stable_since = time.monotonic() + timeout, before, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            now = path.stat().st_size
        except OSError:
            return [], f"{path} vanished during the dump"
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > before and time.monotonic() - stable_since >= 0.2:
            break
    if size <= before:
        return [], f"faulthandler wrote nothing within {timeout:g} s"
    with open(path, "rb") as f:
        f.seek(before)
        text = f.read(size - before).decode(errors="replace")
    try:
        return parse_faulthandler(text, int(m.group(4), 16)), ""
    except ValueError as exc:
        return [], f"unreadable faulthandler output: {exc}"


def _fallback(dump: StackDump, proc: ProcInfo, timeout: float) -> StackDump:
    """A failed py-spy dump retried through faulthandler; the result says which method produced it."""
    if dump.ok or dump.error.startswith(("process vanished", "not a Python process")) or not _alive(proc):
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


# ---------------------------------------------------------------- Flight Recorder dumps through the trigger pipe

TRACE_PIPE_ENVS = ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DEBUG_INFO_PIPE_FILE")
TRACE_FILE_ENVS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
TRACE_FILE_DEFAULT = "/tmp/nccl_trace_rank_"


def _open_pipe(pid: int, prefix: str) -> str:
    """The trigger FIFO the process holds open (torch's watchdog opens `<prefix><rank>.pipe` for reading)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return ""
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix) and target.endswith(".pipe"):
            return target
    return ""


def trigger_nccl_traces(procs: Sequence[ProcInfo], wait: float = 5.0) -> list[NcclTrace]:
    """Write to each rank's Flight Recorder FIFO (`<pipe prefix><rank>.pipe`) and wait for its dump file.

    torch's watchdog creates and opens the FIFO (ProcessGroupNCCL's DumpPipe) when the pipe prefix is
    set and the trace buffer is on; the FIFO a process holds open names its rank. Processes without
    the variable are skipped; one without a FIFO (CPU/gloo, no NCCL group yet) gets an entry saying so.
    """
    asked: list[tuple[NcclTrace, int]] = []  # (trace, the dump's mtime before; -1: nothing asked)
    seen: set[str] = set()
    for proc in procs:
        env = process_environ(proc.pid)
        prefix = next((env[k] for k in TRACE_PIPE_ENVS if env.get(k)), "")
        if not prefix:
            continue
        stem = next((env[k] for k in TRACE_FILE_ENVS if env.get(k)), TRACE_FILE_DEFAULT)
        pipe = _open_pipe(proc.pid, prefix)
        rank_text = pipe[len(prefix):-len(".pipe")] if pipe else env.get("RANK", "")
        rank = int(rank_text) if rank_text.isdigit() else None
        trace = NcclTrace(proc.pid, rank, pipe or f"{prefix}<rank>.pipe", f"{stem}{rank if rank is not None else ''}",
                          False)
        if not pipe:
            trace.error = "no trigger pipe (no NCCL process group in this process, e.g. CPU/gloo, or not created yet)"
            asked.append((trace, -1))
            continue
        if pipe in seen:
            continue
        seen.add(pipe)
        try:
            before = os.stat(trace.file).st_mtime_ns
        except OSError:
            before = 0
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody reads it: no watchdog
            try:
                os.write(fd, b"1\n")
            finally:
                os.close(fd)
        except OSError as exc:
            trace.error = f"cannot write the trigger pipe: {exc.strerror or exc} (is the rank's watchdog alive?)"
            asked.append((trace, -1))
            continue
        asked.append((trace, before))
    deadline = time.monotonic() + wait
    for trace, before in asked:
        if before < 0:
            continue
        while True:
            try:
                st = os.stat(trace.file)
                if st.st_mtime_ns != before and st.st_size > 0:
                    trace.ok, trace.bytes = True, st.st_size
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                trace.error = f"no dump at {trace.file} within {wait:g} s"
                break
            time.sleep(0.1)
    return [t for t, _ in asked]


# ---------------------------------------------------------------- grouping


def is_collective(frame: StackFrame) -> bool:
    name = frame.function.rsplit(".", 1)[-1]
    return name in COLLECTIVES and any(p in frame.path or p in frame.file for p in COLLECTIVE_PATHS)


def _library(frame: StackFrame) -> bool:
    return bool(STDLIB_RE.search(frame.path)) or "/ray/" in frame.path or frame.file.startswith("ray/")


def is_background(thread: ThreadStack) -> bool:
    """A helper thread of the runtime (stdlib pools, Ray's GC / event loops) or Ray's idle `main_loop` thread.

    Such threads look alike in every process and never say where the job is; a thread that has a
    single frame of the job's own code (or a collective) is never background.
    """
    frames = [f for f in thread.frames if not f.native]
    if not frames:
        return True
    if any(is_collective(f) for f in frames):
        return False
    if thread.name == FR_THREAD or any(f.function == "_fr_loop" and f.path.endswith(PROBE_FILE) for f in frames):
        return True  # gkdtop.probe's own thread, waiting for a Flight Recorder request
    if frames[0].function.endswith("main_loop") and _library(frames[0]):
        return True  # a Ray worker's main thread between tasks: the work, if any, is on another thread
    return thread.name != "MainThread" and all(_library(f) for f in frames)


def significant_threads(dump: StackDump) -> list[ThreadStack]:
    """The threads that say where the process is: every thread when all of them are background."""
    threads = [t for t in dump.threads if not is_background(t)]
    return threads or [t for t in dump.threads if any(not f.native for f in t.frames)] or dump.threads


def stack_key(dump: StackDump) -> tuple[tuple[tuple[str, str, int], ...], ...]:
    """Identity of a process's stack: Python frames (function, short file, line) of its significant threads.

    Native frames are left out (addresses differ per process), and so are thread names and ids.
    """
    stacks = {tuple(f.key for f in t.frames if not f.native) for t in significant_threads(dump)}
    return tuple(sorted(stacks))


def _representative(dump: StackDump) -> ThreadStack | None:
    threads = significant_threads(dump)
    if not threads:
        return None
    for thread in threads:
        if any(is_collective(f) for f in thread.frames if not f.native):
            return thread
    main = [t for t in threads if t.name == "MainThread"]
    return main[0] if main else max(threads, key=lambda t: len(t.frames))


def summarize(thread: ThreadStack | None) -> str:
    """`broadcast <- sync_rollout_weights <- fit`: from the collective (or innermost frame) outwards."""
    if thread is None:
        return ""
    frames = [f for f in thread.frames if not f.native]
    start = next((i for i, f in enumerate(frames) if is_collective(f)), 0)
    names = []
    for frame in frames[start:]:
        name = frame.function.rsplit(".<locals>.", 1)[-1]
        if names and (PASS_THROUGH_RE.search(frame.function) or any(p in frame.file for p in PLUMBING_PATHS)):
            continue
        if not names or names[-1] != name:
            names.append(name)
        if len(names) == SUMMARY_DEPTH:
            break
    return " <- ".join(names)


def group_stacks(dumps: Sequence[StackDump]) -> list[StackGroup]:
    """Group the dumped processes by stack_key; largest group first."""
    by_key: dict[tuple, list[StackDump]] = {}
    for dump in dumps:
        if dump.ok:
            by_key.setdefault(stack_key(dump), []).append(dump)
    groups = []
    for members in by_key.values():
        thread = _representative(members[0])
        frames = [f for f in thread.frames if not f.native] if thread else []
        groups.append(StackGroup(
            frames=frames, pids=sorted(d.pid for d in members), summary=summarize(thread) or "(no Python frames)",
            thread=thread.name if thread else "", collective=any(is_collective(f) for f in frames),
        ))
    groups.sort(key=lambda g: (-len(g.pids), g.pids[0]))
    return groups


def outliers(dumps: Sequence[StackDump], groups: Sequence[StackGroup]) -> list[int]:
    """Processes that are not where their peers are: in a hang, usually the culprit.

    Peers are processes of the same role (every target, when none has a role). Among peers, when some
    wait in a collective, the ones outside any collective are the outliers; when all are in collectives
    but not the same one, those outside the largest such group; when some are inside the job's code and
    others idle between calls (a Ray worker in `main_loop`: the rank that never made the call), the idle
    ones; otherwise those outside a strict majority group of at least two.
    """
    group_of = {pid: i for i, g in enumerate(groups) for pid in g.pids}
    idle = {d.pid for d in dumps if d.ok and not any(not is_background(t) for t in d.threads)}
    peers: dict[str, list[int]] = {}
    for dump in dumps:
        if dump.ok and dump.pid in group_of:
            peers.setdefault(dump.role, []).append(dump.pid)
    odd: list[int] = []
    for pids in peers.values():
        if len(pids) < 2:
            continue
        sizes: dict[int, int] = {}
        for pid in pids:
            sizes[group_of[pid]] = sizes.get(group_of[pid], 0) + 1
        if len(sizes) < 2:
            continue
        in_collective = [gi for gi in sizes if groups[gi].collective]
        if in_collective and len(in_collective) < len(sizes):
            odd += [pid for pid in pids if not groups[group_of[pid]].collective]
            continue
        idle_peers = [pid for pid in pids if pid in idle]
        if idle_peers and len(idle_peers) < len(pids):
            odd += idle_peers
            continue
        ranked = sorted(sizes.items(), key=lambda kv: -kv[1])
        top, count = ranked[0]
        # Every peer in a collective: the biggest collective wins; none in one: a strict majority of 2+ wins.
        majority = count > ranked[1][1] if in_collective else count >= 2 and count * 2 > len(pids)
        if majority:
            odd += [pid for pid in pids if group_of[pid] != top]
    return sorted(odd)


# ---------------------------------------------------------------- output


def _frame_json(frame: StackFrame) -> dict[str, object]:
    out: dict[str, object] = {"function": frame.function, "file": frame.file, "line": frame.line, "path": frame.path}
    if frame.native:
        out["native"] = True
    return out


def report_json(report: StackReport) -> dict[str, object]:
    """The report as JSON-ready data (schema 1; frames innermost first)."""
    return {
        "schema": SCHEMA,
        "time": report.time,
        "native": report.native,
        "py_spy": report.py_spy,
        "seconds": report.seconds,
        "dumps": [
            {
                "pid": d.pid, "role": d.role, "label": d.label, "actor": d.actor, "rank": d.rank,
                "world_size": d.world_size, "ok": d.ok, "error": d.error, "seconds": d.seconds,
                "method": d.method, "note": d.note,
                "threads": [
                    {"name": t.name, "thread_id": t.thread_id, "idle": t.idle, "owns_gil": t.owns_gil,
                     "frames": [_frame_json(f) for f in t.frames]}
                    for t in d.threads
                ],
            }
            for d in report.dumps
        ],
        "groups": [
            {"frames": [_frame_json(f) for f in g.frames], "pids": g.pids, "summary": g.summary, "thread": g.thread,
             "collective": g.collective}
            for g in report.groups
        ],
        "outliers": report.outliers,
        "nccl_traces": [
            {"pid": t.pid, "rank": t.rank, "pipe": t.pipe, "file": t.file, "ok": t.ok, "error": t.error,
             "bytes": t.bytes}
            for t in report.nccl_traces
        ],
        "collectives": _collectives_json(report.collectives),
    }


def _collectives_json(report: CollectiveReport | None) -> dict[str, object] | None:
    from gkdtop.actions import collectives

    return collectives.report_json(report) if report is not None else None


def _plural(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _frame_text(frame: StackFrame) -> str:
    name = frame.function if len(frame.function) <= 160 else frame.function[:157] + "..."  # C++ templates
    return f"{name} ({frame.file})" if frame.native else f"{name} ({frame.file}:{frame.line})"


def _thread_text(thread: ThreadStack, indent: str) -> list[str]:
    head = f"{indent}Thread {thread.thread_id} ({'idle' if thread.idle else 'active'}): {thread.name!r}"
    return [head] + [f"{indent}    {_frame_text(f)}" for f in thread.frames]


def report_text(report: StackReport) -> str:
    """Readable text: the groups (outliers marked), then what failed, then every process in full."""
    dumps = {d.pid: d for d in report.dumps}
    odd = set(report.outliers)
    ok = sum(1 for d in report.dumps if d.ok)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.time))
    out = [f"gkdtop stacks  {stamp}  {_plural(len(report.dumps))}, {ok} dumped, "
           f"{len(report.groups)} distinct stack{'s' if len(report.groups) != 1 else ''}"
           + ("  (native)" if report.native else "")]
    if odd:
        out.append("NOT WHERE THE OTHERS ARE: " + ", ".join(f"{p} ({dumps[p].label})" for p in report.outliers))
    if report.collectives is not None and report.collectives.sentence:
        out.append("COLLECTIVES (Flight Recorder): " + report.collectives.sentence)
    for group in report.groups:
        mark = ("  [collective]" if group.collective else "") + ("  <-- OUTLIER" if odd & set(group.pids) else "")
        out += ["", f"== {_plural(len(group.pids))}: {group.summary}{mark}"]
        for pid in group.pids:
            out.append(f"   {pid:>7}  {dumps[pid].label}" + ("  <-- outlier" if pid in odd else ""))
        if group.frames:
            out.append(f"   thread {group.thread!r}:")
            out += [f"       {_frame_text(f)}" for f in group.frames]
    failed = [d for d in report.dumps if not d.ok]
    if failed:
        out += ["", f"== {_plural(len(failed))} could not be dumped"]
        out += [f"   {d.pid:>7}  {d.label}: {d.error}" for d in failed]
    if report.nccl_traces:
        out += ["", f"== Flight Recorder dumps asked for: {sum(t.ok for t in report.nccl_traces)} written"]
        out += [f"   {t.pid:>7}  rank {t.rank}: " + (f"{t.file} ({t.bytes} bytes)" if t.ok else t.error)
                for t in report.nccl_traces]
    if report.collectives is not None:
        from gkdtop.actions import collectives

        out += ["", *collectives.report_lines(report.collectives)]
    if ok:
        out += ["", "== every process, all threads"]
    for dump in report.dumps:
        if dump.ok:
            via = f"  [{dump.method}" + (f"; py-spy: {dump.note}" if dump.note else "") + "]"
            out += ["", f"Process {dump.pid}: {dump.label}" + ("  <-- outlier" if dump.pid in odd else "") + via]
            for thread in dump.threads:
                out += _thread_text(thread, "  ")
    return "\n".join(out) + "\n"


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gkdtop" / "stacks"


def write_report(report: StackReport, directory: Path | str | None = None) -> Path:
    """Save `stacks-YYYYmmdd-HHMMSS.json` and its `.txt` twin; returns the JSON file's path."""
    folder = Path(directory) if directory is not None else default_directory()
    folder.mkdir(parents=True, exist_ok=True)
    stem = "stacks-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(report.time))
    path, n = folder / f"{stem}.json", 1
    while path.exists() or path.with_suffix(".txt").exists():  # two dumps in one second keep both
        path, n = folder / f"{stem}-{n}.json", n + 1
    if report.collectives is not None:  # the raw dumps first: the JSON names where they went
        from gkdtop.actions import collectives

        collectives.save_dumps(report.collectives, path.with_name(path.stem + "-fr"))
    path.with_suffix(".txt").write_text(report_text(report), encoding="utf-8")
    path.write_text(json.dumps(report_json(report), indent=1) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- `gkdtop stacks`


def stack_targets(processes: Sequence[ProcInfo]) -> list[ProcInfo]:
    """The Python processes of the job (Ray's C++ daemons have no Python stack to show)."""
    return [p for p in processes if p.role in PYTHON_ROLES and p.status != "zombie"]


def job_targets(driver_patterns: Iterable[str] | None = None) -> list[ProcInfo]:
    """The Processes pane's Python processes (one scan; no NVML, so GPU-only holders are not among them)."""
    from gkdtop.collectors.procs import ProcCollector
    from gkdtop.config import DRIVER_PATTERNS

    rows = ProcCollector(DRIVER_PATTERNS if driver_patterns is None else driver_patterns).collect()
    return stack_targets(rows)


def stacks_command(pids: list[int], native: bool, as_json: bool, timeout: float, out_dir: str | None,
                   driver_patterns: Iterable[str] | None = None) -> int:
    """`gkdtop stacks`: 0 when at least one process was dumped, 1 when none could be, 2 for a bad argument."""
    if not timeout > 0:
        print("gkdtop stacks: --timeout must be positive", file=sys.stderr)
        return 2
    targets: Sequence[ProcInfo] | Sequence[int] = pids or job_targets(driver_patterns)
    if not targets:
        print("gkdtop stacks: no job processes found (name PIDs: gkdtop stacks PID ...)", file=sys.stderr)
        return 1
    report = dump_stacks(targets, native=native, timeout=timeout)
    return save_and_print(report, as_json, out_dir)


def save_and_print(report: StackReport, as_json: bool, out_dir: str | None) -> int:
    """Save the report, print it (text or JSON with the file's path); 0 when at least one process was dumped."""
    path: Path | None = None
    try:
        path = write_report(report, out_dir)
    except OSError as exc:
        print(f"gkdtop stacks: could not save the dump: {exc}", file=sys.stderr)
    if as_json:
        data = report_json(report)
        data["file"] = str(path) if path else None
        print(json.dumps(data, indent=1))
    else:
        sys.stdout.write(report_text(report))
    if path is not None:
        print(f"saved {path} (and {path.with_suffix('.txt').name})", file=sys.stderr)
    return 0 if any(d.ok for d in report.dumps) else 1
