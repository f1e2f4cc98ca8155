"""Getting the dumps: each rank asked through gkdtop.probe's request FIFO, the trigger-pipe dumps read at once.

Every file is read as the process's owner left it, capped, never followed through a link, and
unpickled as plain data only.
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

from gkdtop.actions.collectives.analysis import analyze
from gkdtop.actions.collectives.model import CollectiveReport, FrDump, who
from gkdtop.collectors.procs import process_environ

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo

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
            if not stat.S_ISFIFO(st.st_mode) or st.st_uid != _owner(proc.pid):
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


def _owner(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


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
    from gkdtop.actions.nccl_ras import loaded_nccl

    return [p for p in procs if loaded_nccl(p.pid)]


def collect(procs: Sequence[ProcInfo], nccl_traces: Sequence[Any] = (), wait: float = 5.0,
            ras_interval: float = 2.0) -> CollectiveReport:
    """Dumps from every rank (probe and trigger pipe), analysed; a process answering both keeps the probe's.

    When a rank loaded NCCL, its RAS service is polled twice meanwhile (in a thread: the polls wait
    `ras_interval` between them, the dumps need not).
    """
    from concurrent.futures import ThreadPoolExecutor

    from gkdtop.actions import nccl_ras

    nccl = nccl_processes(procs)
    address = nccl_ras.address_from_env(process_environ(nccl[0].pid)) if nccl else None
    with ThreadPoolExecutor(max_workers=1) as pool:
        ras = pool.submit(nccl_ras.poll, address, ras_interval) if address else None
        dumps = [d for d in request_probe_dumps(procs, wait=wait) if is_rank(d)]
        have = {d.pid for d in dumps if d.ok}
        dumps += [d for d in read_pipe_dumps(nccl_traces, procs) if d.pid not in have]
        report = analyze(dumps)
        report.ras = ras.result() if ras is not None else None
    labels = {p.pid: who(p) for p in procs}
    for comm in (report.ras or {}).get("communicators", []):  # RAS knows PIDs; the Processes pane, who they are
        comm["labels"] = {rank: labels[pid] for rank, pid in comm["pids"].items() if pid in labels}
    stuck = [c["sentence"] for c in (report.ras or {}).get("communicators", []) if c["stuck"] or c["missing"]]
    if stuck and not any(g.kind for g in report.groups):
        report.sentence = "NCCL RAS: " + stuck[0]
    return report
