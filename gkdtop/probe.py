"""The in-process probe: phase lines gkdtop recognises, GPU facts per rank, and stacks on a signal.

Use it from the training code (standard library only; torch and Ray are looked up in `sys.modules`,
never imported)::

    from gkdtop import probe

    with probe.phase("rollout init"):      # logs START, then DONE in N s (or ✗ FAILED after N s: error)
        init_rollout()
    probe.log_gpu_info()                    # device, memory and CUDA_VISIBLE_DEVICES of this rank

How it is enabled. Importing is the opt-in: nothing is injected into processes that never import
it (no sitecustomize, no .pth, no import hooks), so a job is never changed behind its back.
`gkdtop run` sets `GKDTOP_PROBE=1` and `GKDTOP_RUN_DIR`, and puts a directory holding only a link
to this `gkdtop` package on `PYTHONPATH`, so the import works even when the job runs another
Python environment. With `GKDTOP_PROBE=1` the import also calls `install()`; other jobs may call
`probe.install()` themselves.

`install()` registers `faulthandler` on SIGUSR1 (`STACK_SIGNAL`): on that signal the interpreter
writes every thread's Python stack to `<probe dir>/faulthandler-<pid>.txt`, from the C signal
handler, so it works while the job hangs in a collective and while py-spy cannot attach (not
installed, ptrace denied). The file starts with one header line (pid, process start time, main
thread) that `gkdtop stacks` checks before it sends the signal: a process without that file, or a
recycled PID, is never signalled (SIGUSR1's default action would kill it). The probe directory is
`$GKDTOP_RUN_DIR/probe`, else `$XDG_CACHE_HOME/gkdtop/probe` (`~/.cache/gkdtop/probe`), read from
the target's own environment by `gkdtop stacks`.

`install()` also starts one thread (`gkdtop-probe-fr`) that sleeps in `open()` on a FIFO,
`<probe dir>/fr-<pid>.pipe`. A line written to it (`gkdtop stacks` writes the request's token) makes
the thread dump torch's Flight Recorder (`_dump_fr_trace_json`: the last collectives of every process
group, gloo included) with this process's rank in each group, and write it to `fr-<pid>.json`
(atomically). It is a thread and not a signal handler because a rank that hangs has its main thread
blocked in C: a Python signal handler would never run there, and the GIL is free for this thread.

Cost when nobody watches: two short lines per phase, one `faulthandler.register` call, one thread
blocked in the kernel.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from stat import S_IMODE, S_ISDIR
from typing import IO, Any

__all__ = ["STACK_SIGNAL", "flight_record", "fr_file", "fr_pipe", "install", "installed_file", "log", "log_gpu_info",
           "phase", "probe_dir", "stack_file"]

ENV_ENABLE = "GKDTOP_PROBE"
ENV_RUN_DIR = "GKDTOP_RUN_DIR"
ENV_ROLE = "GKDTOP_ROLE"
STACK_SIGNAL = signal.SIGUSR1
HEADER = "# gkdtop.probe faulthandler"
FR_THREAD = "gkdtop-probe-fr"
FR_MAX_REQUEST = 256
NOT_DISTRIBUTED = "no process group in this process"
TAG = "[gkdtop]"

_lock = threading.RLock()  # install() logs while it holds it
_stack_out: IO[str] | None = None  # kept open: faulthandler writes to its descriptor from the signal handler
_stack_path: Path | None = None
_signum: int = STACK_SIGNAL
_fr_pid: int = 0  # the PID whose request thread runs (a forked child starts its own)


# ------------------------------------------------------------------ where the stack file lives


def probe_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The probe's directory for a process with environment `environ` (the stacks action passes the target's)."""
    env = os.environ if environ is None else environ
    run_dir = env.get(ENV_RUN_DIR)
    if run_dir:
        return Path(run_dir) / "probe"
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(cache) / "gkdtop" / "probe"


def stack_file(pid: int, environ: Mapping[str, str] | None = None) -> Path:
    return probe_dir(environ) / f"faulthandler-{pid}.txt"


def fr_pipe(pid: int, environ: Mapping[str, str] | None = None) -> Path:
    """The FIFO on which the probe of process `pid` waits for Flight Recorder dump requests."""
    return probe_dir(environ) / f"fr-{pid}.pipe"


def fr_file(pid: int, environ: Mapping[str, str] | None = None) -> Path:
    """Where the probe of process `pid` writes its answer (replaced by each dump)."""
    return probe_dir(environ) / f"fr-{pid}.json"


def process_start(pid: int | str = "self") -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22): tells a recycled PID apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def install(signum: int = STACK_SIGNAL) -> Path | None:
    """Register faulthandler on `signum`, writing all threads' stacks to this PID's file; idempotent.

    Returns the file, or None when the signal already has a handler of the job's own (left alone)
    or the directory cannot be written (the job must never fail because of its probe).
    """
    global _stack_out, _stack_path, _signum
    with _lock:
        pid = os.getpid()
        if _stack_out is not None and _stack_path is not None and _stack_path.name == f"faulthandler-{pid}.txt":
            return _stack_path
        _start_fr_listener(pid)
        current = signal.getsignal(signum)
        if _stack_out is None and current not in (signal.SIG_DFL, None):
            return None  # the job uses this signal itself
        path = stack_file(pid)
        _signum = signum
        if not _private_dir(path.parent):
            return None
        try:
            with suppress(FileNotFoundError):
                path.unlink()  # an earlier process's file with this PID
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            out = open(fd, "w", encoding="utf-8")  # noqa: SIM115 - must stay open for the signal handler
            out.write(f"{HEADER} pid={pid} start={process_start()} signal={int(signum)} "
                      f"main=0x{threading.main_thread().ident or 0:016x}\n")
            out.flush()
            faulthandler.register(signum, file=out, all_threads=True, chain=False)
        except (OSError, ValueError, RuntimeError):
            return None
        if _stack_out is not None:  # a forked child: the parent's file stays the parent's
            _stack_out.close()
        else:  # forked workers (multiprocessing, DataLoader) get a file of their own
            os.register_at_fork(after_in_child=_after_fork)
        _stack_out, _stack_path = out, path
        return path


def _after_fork() -> None:
    with suppress(Exception):
        install(_signum)


def installed_file() -> Path | None:
    """This process's stack file, if `install()` ran here."""
    return _stack_path if _stack_path is not None and _stack_path.name == f"faulthandler-{os.getpid()}.txt" else None


# ------------------------------------------------------------------ Flight Recorder on request


def _start_fr_listener(pid: int) -> None:
    """Make this PID's request FIFO and the thread that waits on it (threads do not survive a fork)."""
    global _fr_pid
    if _fr_pid == pid:
        return
    _fr_pid = pid
    path = fr_pipe(pid)
    if not _private_dir(path.parent):
        return
    try:
        with suppress(FileNotFoundError):
            path.unlink()  # an earlier process's FIFO with this PID
        os.mkfifo(path, 0o600)
    except OSError:
        return
    threading.Thread(target=_fr_loop, args=(path, pid), name=FR_THREAD, daemon=True).start()


def _fr_loop(path: Path, pid: int) -> None:
    while os.getpid() == pid:
        try:
            fd = os.open(path, os.O_RDONLY)  # blocks, GIL released, until gkdtop opens it for writing
        except OSError:
            return  # the FIFO was removed: nobody can ask any more
        try:
            request = os.read(fd, FR_MAX_REQUEST)
        except OSError:
            request = b""
        finally:
            os.close(fd)
        token = request.decode(errors="replace").strip()[:64]
        if token:
            with suppress(Exception):  # the job must never fail because of its probe
                _write_atomically(fr_file(pid), json.dumps(flight_record(token)))


def _write_atomically(path: Path, text: str) -> None:
    """A new 0600 file of a random name, never through a link, then renamed over `path`."""
    tmp = path.with_name(f"{path.name}.{os.urandom(8).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


_refused: set[str] = set()


def _private_dir(path: Path) -> bool:
    """Make the probe directory 0700, or check the one there is ours and private; one line in the log if not.

    gkdtop reads the probe's answers as this user's, so they must live where no other user can write.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
        why = ("not a directory (a link?)" if not S_ISDIR(st.st_mode)
               else f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})" if st.st_uid != os.geteuid()
               else f"writable by other users (mode {S_IMODE(st.st_mode):04o})" if st.st_mode & 0o022 else "")
        if not why and st.st_mode & 0o077:
            os.chmod(path, 0o700, follow_symlinks=False)  # ours, only readable by others: made private
    except OSError as exc:
        why = exc.strerror or str(exc)
    if why and str(path) not in _refused:
        _refused.add(str(path))
        log(f"probe off: {path}: {why}")
    return not why


def flight_record(token: str = "") -> dict[str, Any]:
    """This process's Flight Recorder dump, with who it is and its rank in each process group it holds.

    The dump itself names groups but not this process's rank in them, and a group made outside
    torch.distributed's registry (a bare ProcessGroupGloo over a TCPStore, as vLLM and verl build
    their weight-sync groups) is in no registry at all: those are found among the objects Python holds.
    """
    out: dict[str, Any] = {"pid": os.getpid(), "start": process_start(), "token": token, "time": time.time(),
                           "identity": identity(), "groups": [], "trace": None, "error": ""}
    if "torch.distributed" not in sys.modules:  # never imported here: nothing to look at
        out["error"] = NOT_DISTRIBUTED
        return out
    torch = sys.modules["torch"]
    with suppress(Exception):
        out["groups"] = _process_groups(torch)
    if not out["groups"]:
        # No group, no collective to record; and the first dump in a process creates the recorder, which
        # may print a warning into the job's log: a line that the phase engine would take for progress.
        out["error"] = NOT_DISTRIBUTED
        return out
    try:
        raw = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
        out["trace"] = json.loads(raw)
    except Exception as exc:
        out["error"] = f"Flight Recorder dump failed: {type(exc).__name__}: {exc}"[:300]
        return out
    if not out["trace"].get("entries") and not (os.environ.get("TORCH_FR_BUFFER_SIZE")
                                                or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")):
        out["error"] = "Flight Recorder is off in this process (TORCH_FR_BUFFER_SIZE is not set)"
    return out


def _subclasses(cls: type) -> set[type]:
    found, todo = {cls}, [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _process_groups(torch: Any) -> list[dict[str, Any]]:
    """The process groups this process is in: name, description, its rank, size, and members' ranks.

    torch.distributed's registry, then the heap: a rank that never ran a collective in a group has no
    entry naming it, yet it is the member the others wait for.
    """
    import gc

    c10d = torch._C._distributed_c10d
    dist_c10d = sys.modules.get("torch.distributed.distributed_c10d")
    groups: list[dict[str, Any]] = []
    seen: set[int] = set()
    if dist_c10d is not None:
        world = dist_c10d._world
        for pg, name in list(world.pg_names.items()):
            seen.add(id(pg))
            with suppress(Exception):
                ranks = sorted(world.pg_group_ranks.get(pg, {}))
                groups.append({"name": name, "desc": getattr(pg, "group_desc", "") or "", "rank": int(pg.rank()),
                               "size": int(pg.size()), "ranks": ranks, "registered": True})
    kinds = _subclasses(c10d.ProcessGroup) | _subclasses(c10d.Backend)
    # pybind objects are not tracked by the GC themselves, but what holds them is (an actor's attributes
    # live inline in the object since Python 3.11, so look at every object's referents, not only dicts).
    # One C call gathers the referents; the Python loop only compares types.
    for value in gc.get_referents(*gc.get_objects()):
        if type(value) in kinds and id(value) not in seen:
            seen.add(id(value))
            with suppress(Exception):
                size = int(value.size())
                groups.append({"name": str(getattr(value, "group_name", "") or ""),
                               "desc": str(getattr(value, "group_desc", "") or ""), "rank": int(value.rank()),
                               "size": size, "ranks": list(range(size)), "registered": False})
    return groups


# ------------------------------------------------------------------ identity and lines


def identity() -> dict[str, Any]:
    """Rank, world size and role of this process: torch.distributed, then RANK/WORLD_SIZE, then Ray."""
    rank: int | None = None
    world: int | None = None
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, world = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        pass
    if rank is None and os.environ.get("RANK", "").isdigit():
        rank = int(os.environ["RANK"])
    if world is None and os.environ.get("WORLD_SIZE", "").isdigit():
        world = int(os.environ["WORLD_SIZE"])
    return {"rank": rank, "world_size": world, "role": _role()}


def _role() -> str:
    if os.environ.get(ENV_ROLE):
        return os.environ[ENV_ROLE]
    if "ray" not in sys.modules:
        return ""
    try:  # Ray titles an actor's process `ray::ClassName` (`ray::ClassName.method` while it runs one)
        title = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        title = ""
    if title.startswith("ray::"):
        return title[5:].split(".")[0].split()[0] if len(title) > 5 else "ray-worker"
    ray = sys.modules["ray"]
    try:
        return "driver" if ray.is_initialized() else ""
    except Exception:
        return ""


def _who() -> str:
    ident = identity()
    parts = []
    if ident["rank"] is not None:
        parts.append(f"rank {ident['rank']}" + (f"/{ident['world_size']}" if ident["world_size"] else ""))
    if ident["role"]:
        parts.append(ident["role"])
    return f"[{' '.join(parts)}] " if parts else ""


def log(message: str) -> str:
    """Write one timestamped `[gkdtop]` line to stderr (the job's log); returns the line."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
    line = f"{stamp} {TAG} {_who()}{message}"
    with _lock:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must not break the job
    return line


@contextmanager
def phase(name: str) -> Iterator[None]:
    """`with phase("rollout init"):` logs START, then `✓ ... DONE in S s` or `✗ ... FAILED after S s: error`.

    The lines match the built-in phase rules for the built-in phase names (gkdtop/data/phases.yaml);
    for a name of your own add a rule with `start: "phase 'NAME' START"` and `done: "phase 'NAME' DONE"`.
    """
    began = time.monotonic()
    log(f"phase '{name}' START")
    try:
        yield
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        log(f"✗ phase '{name}' FAILED after {time.monotonic() - began:.3f} s: {detail.splitlines()[0][:300]}")
        raise
    log(f"✓ phase '{name}' DONE in {time.monotonic() - began:.3f} s")


def gpu_info() -> dict[str, Any]:
    """This rank's device, its memory and CUDA_VISIBLE_DEVICES; torch only if the job imported it."""
    info: dict[str, Any] = {**identity(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "device": None}
    torch = sys.modules.get("torch")
    if torch is None:
        info["note"] = "torch not imported"
        return info
    try:
        if not torch.cuda.is_available():
            info["device"] = "cpu"
            info["note"] = "no CUDA device"
            return info
        index = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        info.update(device=f"cuda:{index}", name=torch.cuda.get_device_name(index), memory_total=int(total),
                    memory_used=int(total - free), torch_allocated=int(torch.cuda.memory_allocated(index)),
                    torch_reserved=int(torch.cuda.memory_reserved(index)))
    except Exception as exc:
        info["note"] = f"CUDA query failed: {type(exc).__name__}: {exc}"[:200]
    return info


def log_gpu_info() -> dict[str, Any]:
    """Log gpu_info() as one line; returns it."""
    info = gpu_info()
    mib = 1 << 20
    cvd = info["cuda_visible_devices"]
    parts = [f"device {info['device'] or '?'}"]
    if info.get("name"):
        parts[0] += f" ({info['name']})"
    if "memory_total" in info:
        parts.append(f"memory {info['memory_used'] // mib} / {info['memory_total'] // mib} MiB used "
                     f"(torch allocated {info['torch_allocated'] // mib} MiB, "
                     f"reserved {info['torch_reserved'] // mib} MiB)")
    if info.get("note"):
        parts.append(info["note"])
    parts.append(f"CUDA_VISIBLE_DEVICES={'(unset)' if cvd is None else cvd}")
    log("gpu: " + ", ".join(parts))
    return info


if os.environ.get(ENV_ENABLE) == "1":
    install()
