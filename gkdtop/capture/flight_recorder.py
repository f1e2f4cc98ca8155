"""Flight Recorder dumps from live ranks: torch's trigger pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`)
and gkdtop.probe's request FIFO, read back as each process's owner left them.

torch's watchdog reads the pipe and writes the rank's last collectives to a file; the probe answers
for any backend. Every file is read capped, never followed through a link, and unpickled as plain
data only; actions/collectives analyses the dumps.
"""

from __future__ import annotations

import glob
import io
import json
import os
import pickle
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gkdtop.capture.proc import owner, process_environ
from gkdtop.model.collectives import FrDump, who
from gkdtop.model.stacks import NcclTrace
from gkdtop.safeopen import Untrusted, read_owned

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo

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
        try:  # ENXIO when nobody reads it: no watchdog. Only the rank's own FIFO, never through a link.
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if not stat.S_ISFIFO(st.st_mode) or st.st_uid != owner(proc.pid):
                    raise OSError(0, "not a FIFO of the rank's user")
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


def dump_paths(prefix: str, limit: int = 1024) -> tuple[list[Path], list[Path], list[Path]]:
    """What a dump prefix matches: the files torch names `<prefix><rank>` (the prefix is a string, not a
    folder: `/d/` names `/d/0`), its trigger pipes `<prefix><rank>.pipe`, and anything else; `limit` each."""
    folder, stem = os.path.split(prefix)
    try:
        found = sorted(Path(folder or ".").glob(glob.escape(stem) + "*"))
    except (OSError, ValueError):
        return [], [], []
    dumps: list[Path] = []
    pipes: list[Path] = []
    others: list[Path] = []
    for path in found:
        rank = path.name[len(stem):]
        pipe = rank.removesuffix(".pipe")
        if rank.isascii() and rank.isdigit():
            dumps.append(path)
        elif pipe != rank and pipe.isascii() and pipe.isdigit():
            pipes.append(path)
        else:
            others.append(path)
    return dumps[:limit], pipes[:limit], others[:limit]


MAX_DUMP_BYTES = 32 << 20  # a 2,000-entry buffer with stack frames is a few MB; more is not a dump


def request_probe_dumps(procs: Sequence[ProcInfo], wait: float = 5.0) -> list[FrDump]:
    """Ask every process that runs gkdtop.probe for a Flight Recorder dump; wait for all answers together.

    A process whose FIFO has no reader (no probe, an earlier process's leftover FIFO) is skipped
    without a word: only processes that can answer are reported.
    """
    from gkdtop import probe

    token = secrets.token_hex(8)
    asked: list[tuple[ProcInfo, Path]] = []
    for proc in procs:
        env = process_environ(proc.pid)
        pipe = probe.fr_pipe(proc.pid, env)
        try:  # ENXIO: nobody waits on it. Never follow a link, never write to anything but the process's FIFO.
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISFIFO(st.st_mode) or st.st_uid != owner(proc.pid):
                continue
            os.write(fd, f"{token}\n".encode())
        except OSError:
            continue
        finally:
            os.close(fd)
        asked.append((proc, probe.fr_file(proc.pid, env)))
    out: list[FrDump] = []
    deadline = time.monotonic() + wait
    pending = list(asked)
    answers: dict[int, FrDump] = {}
    while pending:
        still = []
        for proc, path in pending:
            dump = _read_probe_answer(proc, path, token)
            if dump is None:
                still.append((proc, path))
            else:
                answers[proc.pid] = dump
        pending = still
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for proc, path in asked:
        out.append(answers.get(proc.pid) or FrDump(proc.pid, who(proc), "probe", False, source=str(path),
                                                   error=f"the probe did not answer within {wait:g} s"))
    return out


def _read_probe_answer(proc: ProcInfo, path: Path, token: str) -> FrDump | None:
    """The probe's answer to our request, or None while there is none; a file the process's user did not
    write, or one of the wrong shape, is a failed dump saying why (one line)."""
    try:
        raw = read_owned(path, owner(proc.pid), MAX_DUMP_BYTES)
    except Untrusted as exc:
        return FrDump(proc.pid, who(proc), "probe", False, str(exc), source=str(path))
    except OSError:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # an answer to another request being replaced, or not yet complete
    if not isinstance(doc, dict) or doc.get("token") != token:
        return None
    ident = doc.get("identity") if isinstance(doc.get("identity"), dict) else {}
    rank = ident.get("rank")
    try:
        trace = well_typed(doc["trace"]) if doc.get("trace") is not None else {}
        groups = _groups(doc.get("groups"))
    except ValueError as exc:
        return FrDump(proc.pid, who(proc), "probe", False, f"{path}: not a probe answer: {exc}", source=str(path))
    error = doc.get("error")
    dump = FrDump(proc.pid, who(proc), "probe", bool(trace) and not error, str(error or "")[:300],
                  rank=rank if type(rank) is int else None, groups=groups, trace=trace, raw=raw, source=str(path))
    if not dump.ok and not dump.error:
        dump.error = "the dump has no trace"
    return dump


def _groups(value: Any) -> list[dict[str, Any]]:
    """The probe's process groups, each with a str name, an int rank and a list of int ranks; others dropped."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"groups is {type(value).__name__}, not a list")
    out = []
    for g in value:
        if (isinstance(g, dict) and isinstance(g.get("name"), str) and type(g.get("rank")) is int
                and isinstance(g.get("ranks"), list) and all(type(r) is int for r in g["ranks"])):
            out.append({**g, "desc": str(g.get("desc") or ""), "size": g.get("size") if type(g.get("size")) is int
                        else len(g["ranks"])})
    return out


MAX_DEPTH = 64  # a Flight Recorder dump nests five or six levels; deeper is not one (and would blow a recursion)


def _check_depth(doc: Any) -> None:
    """Refuse a document nested deeper than MAX_DEPTH (iteratively: a deep one must not blow our stack)."""
    level = [doc]
    for _ in range(MAX_DEPTH):
        below = []
        for node in level:
            values = node.values() if type(node) is dict else node
            below += [v for v in values if type(v) in (dict, list, tuple)]
        if not below:
            return
        level = below
    raise ValueError(f"nested deeper than {MAX_DEPTH} levels")


def _scalar_key(value: Any) -> Any:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def well_typed(doc: Any) -> dict[str, Any]:
    """A Flight Recorder document with the fields the analysis reads in the types it expects.

    Raises ValueError for what is no dump at all (not a dict, entries not a list, too deep); entries
    without an int `collective_seq_id` and mistyped side fields are dropped, so a hostile or damaged
    dump can make the analysis wrong about that rank but never crash it.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"the trace is {type(doc).__name__}, not a mapping")
    _check_depth(doc)
    entries = doc.get("entries", [])
    if not isinstance(entries, list):
        raise ValueError("entries is not a list")
    clean: list[dict[str, Any]] = []
    for e in entries:
        if not isinstance(e, dict) or type(e.get("collective_seq_id")) is not int:
            continue
        pg = e.get("process_group")
        pg = [str(pg[0]), str(pg[1]) if len(pg) > 1 else ""] if isinstance(pg, (list, tuple)) and pg else ["", ""]
        frames = e.get("frames")
        clean.append({**e, "process_group": pg, "pg_id": _scalar_key(e.get("pg_id")),
                      "record_id": e.get("record_id") if type(e.get("record_id")) is int else 0,
                      "profiling_name": str(e.get("profiling_name") or "?"),
                      "frames": [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []})
    out = {**doc, "entries": clean}
    for name in ("pg_config", "pg_status"):
        value = doc.get(name)
        out[name] = {str(k): v for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}
    out["version"] = str(doc.get("version") or "")
    return out


class _DataOnly(pickle.Unpickler):
    """A Flight Recorder pickle holds dicts, lists and strings only: refuse anything that would run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a Flight Recorder dump holds plain data only")


def parse_trace(raw: bytes) -> dict[str, Any]:
    """A Flight Recorder dump (torch's pickle, or JSON) as well-typed plain data; ValueError (one line) if not one."""
    if len(raw) > MAX_DUMP_BYTES:
        raise ValueError(f"larger than {MAX_DUMP_BYTES >> 20} MB")
    try:  # after the size cap, so what a pickle builds is bounded by the file (memo GETs share, never copy)
        doc = json.loads(raw) if raw.lstrip()[:1] in (b"{", b"[") else _DataOnly(io.BytesIO(raw)).load()
    except (ValueError, pickle.UnpicklingError, EOFError, RecursionError, MemoryError, OverflowError, TypeError,
            KeyError, IndexError, AttributeError) as exc:
        reason = ("nested too deep" if isinstance(exc, RecursionError)
                  else "declares a string larger than memory (a length the file does not hold)"
                  if isinstance(exc, MemoryError) else str(exc) or type(exc).__name__)
        raise ValueError(f"not a Flight Recorder dump: {reason}"[:300]) from None
    try:
        return well_typed(doc)
    except ValueError as exc:
        raise ValueError(f"not a Flight Recorder dump: {exc}") from None


def read_pipe_dumps(traces: Sequence[Any], procs: Sequence[ProcInfo]) -> list[FrDump]:
    """The dumps torch wrote on a trigger-pipe request (stacks.NcclTrace), read at once: the next overwrites them."""
    by_pid = {p.pid: p for p in procs}
    out = []
    for trace in traces:
        if not trace.ok:
            continue
        proc = by_pid.get(trace.pid)
        label = who(proc) if proc else str(trace.pid)
        try:  # torch's default /tmp/nccl_trace_rank_N is anyone's to write: only the rank's user's file is its dump
            raw = read_owned(trace.file, owner(trace.pid), MAX_DUMP_BYTES)
            doc = parse_trace(raw)
        except (OSError, ValueError) as exc:
            why = str(exc) if isinstance(exc, Untrusted) else f"{trace.file}: {exc}"
            out.append(FrDump(trace.pid, label, "nccl-pipe", False, why, rank=trace.rank, source=trace.file))
            continue
        out.append(FrDump(trace.pid, label, "nccl-pipe", True, rank=trace.rank, trace=doc, raw=raw,
                          source=trace.file))
    return out


def is_rank(dump: FrDump) -> bool:
    """Is the process a rank of something? (not the driver, not a worker that never made a process group)"""
    from gkdtop import probe

    if not dump.ok:
        return dump.error != probe.NOT_DISTRIBUTED
    return bool(dump.trace.get("entries") or dump.groups)


def nccl_processes(procs: Sequence[ProcInfo]) -> list[ProcInfo]:
    """The processes that mapped an NCCL library: the ones NCCL's RAS knows."""
    from gkdtop.capture.nccl_ras import loaded_nccl

    return [p for p in procs if loaded_nccl(p.pid)]
