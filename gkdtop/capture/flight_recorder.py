"""Flight Recorder dumps from live ranks: torch's trigger pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`)
and gkdtop.probe's request FIFO, read back as each process's owner left them.

torch's watchdog reads the pipe and writes the rank's last collectives to a file; the probe answers
for any backend. Every file is read capped, never followed through a link, and unpickled as plain
data only; actions/collectives analyses the dumps.
"""

from __future__ import annotations

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


def _read_regular(path: str | Path) -> bytes:
    """A regular file's first MAX_DUMP_BYTES + 1 bytes; a FIFO or device put in its place never blocks the read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return f.read(MAX_DUMP_BYTES + 1)


def _read_probe_answer(proc: ProcInfo, path: Path, token: str) -> FrDump | None:
    try:
        raw = _read_regular(path)
    except OSError:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None  # an answer to another request being replaced, or not yet complete
    if not isinstance(doc, dict) or doc.get("token") != token:
        return None
    if len(raw) > MAX_DUMP_BYTES:
        return FrDump(proc.pid, who(proc), "probe", False, source=str(path),
                      error=f"dump larger than {MAX_DUMP_BYTES >> 20} MB, not read")
    ident = doc.get("identity") or {}
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else {}
    dump = FrDump(proc.pid, who(proc), "probe", bool(trace) and not doc.get("error"), str(doc.get("error") or ""),
                  rank=ident.get("rank") if isinstance(ident.get("rank"), int) else None,
                  groups=[g for g in doc.get("groups") or [] if isinstance(g, dict)], trace=trace or {},
                  raw=raw, source=str(path))
    if not dump.ok and not dump.error:
        dump.error = "the dump has no trace"
    return dump


class _DataOnly(pickle.Unpickler):
    """A Flight Recorder pickle holds dicts, lists and strings only: refuse anything that would run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a Flight Recorder dump holds plain data only")


def parse_trace(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_DUMP_BYTES:
        raise ValueError(f"larger than {MAX_DUMP_BYTES >> 20} MB")
    try:
        doc = json.loads(raw) if raw[:1] in (b"{", b" ", b"\n") else _DataOnly(io.BytesIO(raw)).load()
    except (ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise ValueError(f"not a Flight Recorder dump: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise ValueError("not a Flight Recorder dump: no entries")
    return doc


def read_pipe_dumps(traces: Sequence[Any], procs: Sequence[ProcInfo]) -> list[FrDump]:
    """The dumps torch wrote on a trigger-pipe request (stacks.NcclTrace), read at once: the next overwrites them."""
    by_pid = {p.pid: p for p in procs}
    out = []
    for trace in traces:
        if not trace.ok:
            continue
        proc = by_pid.get(trace.pid)
        label = who(proc) if proc else str(trace.pid)
        try:
            raw = _read_regular(trace.file)
            doc = parse_trace(raw)
        except (OSError, ValueError) as exc:
            out.append(FrDump(trace.pid, label, "nccl-pipe", False, f"{trace.file}: {exc}", rank=trace.rank,
                              source=trace.file))
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
