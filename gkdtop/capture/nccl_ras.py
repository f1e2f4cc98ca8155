"""A client of NCCL's RAS service: is each communicator still moving, and which ranks are missing or dead.

NCCL >= 2.24 runs a RAS thread in every process that listens on localhost:28028 (`NCCL_RAS_ADDR`,
off with `NCCL_RAS_ENABLE=0`) and answers a text protocol (NCCL's docs/userguide troubleshooting/ras.rst,
src/ras/client_support.cc): the client sends `CLIENT PROTOCOL 2`, the server `SERVER PROTOCOL 2`;
`TIMEOUT <s>` and `SET FORMAT json` (NCCL >= 2.28.7) are answered `OK` (or `ERROR: ...`); `STATUS` /
`VERBOSE STATUS` is answered with the whole report, and the server closes the connection. No
`ncclras` binary is needed.

Per-rank collective counts are only in the JSON report; two reports a few seconds apart say whether a
communicator makes progress (counts that did not move: stuck) and which ranks fall behind. Asked only
while a stall is suspected (the stall-time dump, `s`, `gkdtop stacks`): the query runs a collective
over the RAS network of every process.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ADDR = ("localhost", 28028)
PROTOCOL = 2
MAX_REPORT_BYTES = 16 << 20


class RasError(RuntimeError):
    """RAS did not answer, or answered something that is not the protocol (the message is one line)."""


@dataclass(slots=True)
class RasRank:
    rank: int
    pid: int
    host: str
    counts: dict[str, int] = field(default_factory=dict)  # collective type -> operations launched
    status: dict[str, Any] = field(default_factory=dict)
    missing: bool = False  # listed among the communicator's missing ranks
    dead: bool = False  # RAS considers the process dead (unreachable for 60 s)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(slots=True)
class RasComm:
    hash: str
    size: int
    ranks: list[RasRank]


@dataclass(slots=True)
class RasReport:
    address: str
    format: str  # "json", or "text" (NCCL before 2.28.7: no per-rank counts)
    time: float
    nccl_version: str = ""
    comms: list[RasComm] = field(default_factory=list)
    text: str = ""  # the text report as NCCL wrote it (text format)


@dataclass(slots=True)
class CommProgress:
    """One communicator between two reports."""

    hash: str
    size: int
    advanced: list[int]  # ranks whose counts moved
    still: list[int]  # ranks whose counts did not move
    missing: list[tuple[int, int, bool]]  # (rank, pid, dead) absent from the later report
    counts: dict[int, tuple[int, int]]  # rank -> (before, after) total operations
    errors: dict[int, str] = field(default_factory=dict)  # rank -> what its status says is wrong

    @property
    def stuck(self) -> bool:
        return not self.advanced

    def sentence(self) -> str:
        parts = []
        if self.stuck:
            ops = sorted({after for _, after in self.counts.values()})
            at = f" (at operation {ops[0]})" if len(ops) == 1 else ""
            parts.append(f"communicator {self.hash} ({self.size} ranks): no rank launched a collective between the "
                         f"two polls{at}: stuck")
        elif self.still:
            who = f"rank {self.still[0]}" if len(self.still) == 1 else "ranks " + ", ".join(map(str, self.still))
            parts.append(f"communicator {self.hash}: {who} launched no collective while {len(self.advanced)} "
                         f"other{'s' if len(self.advanced) != 1 else ''} did")
        else:
            parts.append(f"communicator {self.hash}: every rank moved")
        for rank, pid, dead in self.missing:
            parts.append(f"rank {rank} (pid {pid}) {'is dead' if dead else 'does not answer'}")
        parts += [f"rank {rank}: {what}" for rank, what in sorted(self.errors.items())]
        return "; ".join(parts)


def loaded_nccl(pid: int) -> str:
    """The NCCL library a process mapped (`libnccl.so.2.21.5`), "" when none or unreadable."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                name = line.rstrip().rsplit("/", 1)[-1]
                if name.startswith("libnccl.so"):
                    return name
    except OSError:
        pass
    return ""


def address_from_env(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """Where a process's RAS listens (`NCCL_RAS_ADDR` host:port), or None when RAS is off there."""
    if environ.get("NCCL_RAS_ENABLE", "1").strip() == "0":
        return None
    raw = environ.get("NCCL_RAS_ADDR", "").strip()
    if not raw:
        return DEFAULT_ADDR
    host, _, port = raw.rpartition(":")
    return (host.strip("[]") or "localhost", int(port)) if port.isdigit() else DEFAULT_ADDR


def query(address: tuple[str, int] = DEFAULT_ADDR, timeout: float = 10.0, verbose: bool = False,
          want_json: bool = True) -> RasReport:
    """One RAS report; JSON where the NCCL knows it, else its text. Raises RasError with one line."""
    where = f"{address[0]}:{address[1]}"
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError as exc:
        raise RasError(f"NCCL RAS does not answer at {where}: {exc.strerror or exc} (NCCL < 2.24, "
                       "NCCL_RAS_ENABLE=0, or no NCCL communicator in this node)") from None
    with sock:
        reader = sock.makefile("rb")
        try:
            _send(sock, f"CLIENT PROTOCOL {PROTOCOL}")
            reply = _line(reader)
            if not reply.upper().startswith("SERVER PROTOCOL "):
                raise RasError(f"{where} is not NCCL RAS (it answered {reply[:80]!r})")
            _send(sock, f"TIMEOUT {max(1, int(timeout))}")
            _expect_ok(reader, where, "TIMEOUT")
            fmt = "text"
            if want_json:
                _send(sock, "SET FORMAT json")
                fmt = "json" if _line(reader).upper() == "OK" else "text"  # older NCCL: ERROR: Unknown command
            _send(sock, "VERBOSE STATUS" if verbose else "STATUS")
            raw = reader.read(MAX_REPORT_BYTES + 1)
        except TimeoutError:
            raise RasError(f"NCCL RAS at {where} did not answer within {timeout:g} s") from None
        except OSError as exc:
            raise RasError(f"NCCL RAS at {where}: {exc.strerror or exc}") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise RasError(f"NCCL RAS at {where}: report over {MAX_REPORT_BYTES >> 20} MB, not read")
    text = raw.decode(errors="replace")
    report = RasReport(address=where, format=fmt, time=time.time())
    if fmt == "text":
        report.text = text
        return report
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RasError(f"NCCL RAS at {where}: unreadable JSON report ({exc})") from None
    return _parse(report, doc)


def _send(sock: socket.socket, line: str) -> None:
    sock.sendall(line.encode() + b"\n")


def _line(reader: Any) -> str:
    data = reader.readline(4096)
    if not data:
        raise RasError("NCCL RAS closed the connection")
    return data.decode(errors="replace").strip()


def _expect_ok(reader: Any, where: str, what: str) -> None:
    reply = _line(reader)
    if reply.upper() != "OK":
        raise RasError(f"NCCL RAS at {where} refused {what}: {reply[:120]}")


def _parse(report: RasReport, doc: Any) -> RasReport:
    if not isinstance(doc, dict):
        raise RasError(f"NCCL RAS at {report.address}: the report is not a JSON object")
    report.nccl_version = str(doc.get("nccl_version") or "")
    for comm in doc.get("communicators") or []:
        if not isinstance(comm, dict):
            continue
        ranks = []
        for row in comm.get("ranks") or []:
            counts = {str(k): int(v) for k, v in (row.get("collective_counts") or {}).items()
                      if isinstance(v, int)}
            ranks.append(RasRank(int(row.get("rank", -1)), int(row.get("pid", 0)), str(row.get("host", "")),
                                 counts, dict(row.get("status") or {})))
        for row in comm.get("missing_ranks") or []:
            status = dict(row.get("status") or {})
            ranks.append(RasRank(int(row.get("rank", -1)), int(row.get("pid", 0)), str(row.get("host", "")),
                                 status=status, missing=True, dead=bool(status.get("considered_dead"))))
        report.comms.append(RasComm(str(comm.get("hash", "?")), int(comm.get("size", len(ranks))), ranks))
    return report


def progress(before: RasReport, after: RasReport) -> list[CommProgress]:
    """Each communicator of `after`: which ranks launched collectives since `before`, which are missing."""
    earlier = {c.hash: {r.rank: r for r in c.ranks if not r.missing} for c in before.comms}
    out = []
    for comm in after.comms:
        old = earlier.get(comm.hash, {})
        advanced, still, counts = [], [], {}
        for rank in comm.ranks:
            if rank.missing or rank.rank not in old:
                continue
            counts[rank.rank] = (old[rank.rank].total, rank.total)
            (advanced if rank.total > old[rank.rank].total else still).append(rank.rank)
        missing = [(r.rank, r.pid, r.dead) for r in comm.ranks if r.missing]
        errors = {r.rank: why for r in comm.ranks if not r.missing and (why := _status_error(r.status))}
        out.append(CommProgress(comm.hash, comm.size, sorted(advanced), sorted(still), missing, counts, errors))
    return out


def _status_error(status: dict[str, Any]) -> str:
    """A rank's RAS status in words when something is wrong (init_state 7 is "still initialising")."""
    parts = []
    init = status.get("init_state", 0)
    if init == 7:
        parts.append("still initialising")
    elif init:
        parts.append(f"init failed (ncclResult {init})")
    if status.get("async_error"):
        parts.append(f"async error (ncclResult {status['async_error']})")
    if status.get("abort_flag"):
        parts.append("aborted")
    if status.get("finalize_called") or status.get("destroy_flag"):
        parts.append("being torn down")
    return ", ".join(parts)


def poll(address: tuple[str, int] = DEFAULT_ADDR, interval: float = 2.0, timeout: float = 10.0) -> dict[str, Any]:
    """Two reports `interval` apart and what changed, as JSON-ready data; an error is one line in it."""
    out: dict[str, Any] = {"address": f"{address[0]}:{address[1]}", "format": "", "nccl_version": "",
                           "error": "", "communicators": [], "text": ""}
    try:
        first = query(address, timeout)
        if first.format == "json":
            time.sleep(interval)  # the point: the counts a few seconds later
        second = query(address, timeout) if first.format == "json" else first
    except RasError as exc:
        out["error"] = str(exc)
        return out
    out.update(format=second.format, nccl_version=second.nccl_version, text=second.text[:20000])
    if second.format != "json":
        out["error"] = "NCCL before 2.28.7 reports text only: no per-rank counts to compare"
        return out
    pids = {c.hash: {r.rank: r.pid for r in c.ranks} for c in second.comms}
    out["communicators"] = [
        {"hash": p.hash, "size": p.size, "stuck": p.stuck, "advanced": p.advanced, "still": p.still,
         "missing": [{"rank": r, "pid": pid, "dead": dead} for r, pid, dead in p.missing],
         "pids": {str(r): pid for r, pid in pids.get(p.hash, {}).items()},
         "counts": {str(r): list(c) for r, c in p.counts.items()},
         "errors": {str(r): why for r, why in p.errors.items()}, "sentence": p.sentence()}
        for p in progress(first, second)
    ]
    return out
