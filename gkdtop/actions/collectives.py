"""Which rank is in which collective: Flight Recorder dumps from every live rank, analysed per process group.

Python stacks show the odd rank out when it is elsewhere in Python; below Python every rank blocked
in NCCL or gloo looks alike. torch's Flight Recorder keeps, per process, the last collectives of every
process group with their sequence numbers and states. This module asks each rank for a dump while the
job runs (through gkdtop.probe's request FIFO, any backend; and through torch's own trigger pipe for
NCCL groups, which `actions/stacks.py` writes), keeps each dump as it lands (the next overwrites the
file), and analyses them with torch's own analyzer (`torch.distributed.flight_recorder`), as a library:
missing ranks, collective type / size / dtype / state mismatches. Own code does what the analyzer has
no answer for: which group a rank of a group made outside torch's registry is, each rank's last
completed and current collective, and the one sentence a person reads.

No Textual here; torch is imported only when there are dumps to analyse.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import pickle
import secrets
import stat
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gkdtop.collectors.procs import process_environ

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo

MAX_DUMP_BYTES = 32 << 20  # a 2,000-entry buffer with stack frames is a few MB; more is not a dump
# torch's MatchState names -> what the mismatch is about.
MISMATCH_KINDS = {
    "COLLECTIVE_TYPE_MISMATCH": "collective type",
    "SIZE_OR_SYNTAX_MISMATCH": "size",
    "COLLECTIVE_DTYPE_MISMATCH": "dtype",
    "COLLECTIVE_STATE_MISMATCH": "state",
}


@dataclass(slots=True)
class FrDump:
    """One process's Flight Recorder dump, or why there is none."""

    pid: int
    label: str  # what a person calls the process: the Ray actor class, else its role
    method: str  # "probe" (gkdtop.probe's FIFO) or "nccl-pipe" (torch's TORCH_NCCL_DEBUG_INFO_PIPE_FILE)
    ok: bool
    error: str = ""
    rank: int | None = None  # the global rank, when the process has one
    groups: list[dict[str, Any]] = field(default_factory=list)  # the probe's: name, desc, rank, size, ranks
    trace: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""  # the dump as it landed, kept for the saved report and the bundle
    source: str = ""  # the file it was read from
    saved: str = ""  # where write_report kept it

    @property
    def job(self) -> str:
        """Which run the dump belongs to: the run directory its file is in (two jobs may both have a
        `weight_sync` group, and their rank 0s are not the same rank)."""
        folder = Path(self.source).parent
        return str(folder.parent if folder.name == "probe" else folder) if self.source else ""


@dataclass(slots=True)
class RankState:
    """Where one rank is in one group, from its own dump."""

    rank: int
    pid: int
    label: str
    last_completed: int | None = None
    last_started: int | None = None
    last_enqueued: int | None = None
    current: str = ""  # "broadcast" of the oldest collective it entered and has not finished
    current_seq: int | None = None


@dataclass(slots=True)
class GroupFinding:
    """One process group: each rank's state and, when there is one, what is wrong and who is to blame."""

    name: str
    desc: str
    ranks: list[int]  # the members, as the group numbers them
    states: list[RankState]
    job: str = ""  # the run directory of its members' dumps
    kind: str = ""  # "" (nothing wrong found), "missing ranks", or a MISMATCH_KINDS value
    seq: int | None = None  # the collective's sequence number in the group
    op: str = ""  # what the ranks that are right called there
    missing: list[int] = field(default_factory=list)  # ranks that never entered it
    culprits: list[int] = field(default_factory=list)
    called: dict[int, str] = field(default_factory=dict)  # what each mismatched rank called at `seq`
    detail: str = ""  # torch's words for the mismatch
    sentence: str = ""


@dataclass(slots=True)
class CollectiveReport:
    dumps: list[FrDump]
    groups: list[GroupFinding]
    analyzer: str = ""  # "torch 2.13.0" or why torch's analyzer was not used
    error: str = ""
    sentence: str = ""  # the headline: the first group with a finding
    ras: dict[str, Any] | None = None  # NCCL RAS, two polls apart (nccl_ras.poll), when a rank loaded NCCL


# ---------------------------------------------------------------- collecting


def who(proc: ProcInfo) -> str:
    return proc.actor or proc.role or proc.name


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


# ---------------------------------------------------------------- analysing


def _op(entry: dict[str, Any]) -> str:
    """`nccl:all_reduce` -> `all_reduce`; `nccl:send 0->1` -> `send`."""
    name = str(entry.get("profiling_name") or "?")
    return name.split(":", 1)[-1].split(" ", 1)[0]


def _group_of(entry: dict[str, Any]) -> tuple[str, str]:
    pg = entry.get("process_group") or ("", "")
    return (str(pg[0]), str(pg[1]) if len(pg) > 1 else "")


def _config_ranks(trace: dict[str, Any], name: str) -> list[int] | None:
    config = (trace.get("pg_config") or {}).get(name)
    if not isinstance(config, dict):
        return None
    try:
        ranks = json.loads(str(config.get("ranks")))
    except ValueError:
        return None
    return [int(r) for r in ranks] if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks) else None


def _membership(dump: FrDump, name: str) -> tuple[int, list[int]] | None:
    """This process's rank in group `name`, as the group's member list numbers it, and that list."""
    for group in dump.groups:
        if group.get("name") == name and isinstance(group.get("rank"), int) and group.get("ranks"):
            ranks = [int(r) for r in group["ranks"]]
            if 0 <= group["rank"] < len(ranks):
                return ranks[group["rank"]], ranks
    ranks = _config_ranks(dump.trace, name)
    if ranks and dump.rank is not None and dump.rank in ranks:  # a registered group: global ranks
        return dump.rank, ranks
    return None


def _finished(entry: dict[str, Any]) -> bool:
    return bool(entry.get("retired")) or entry.get("state") == "completed"


def _int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _rank_state(rank: int, dump: FrDump, entries: list[dict[str, Any]]) -> RankState:
    state = RankState(rank, dump.pid, dump.label)
    pg_ids = {e.get("pg_id") for e in entries}
    status = dump.trace.get("pg_status") or {}
    if len(pg_ids) == 1 and isinstance(status.get(str(next(iter(pg_ids)))), dict):
        row = status[str(next(iter(pg_ids)))]
        state.last_completed = _int(row.get("last_completed_collective"))
        state.last_started = _int(row.get("last_started_collective"))
        state.last_enqueued = _int(row.get("last_enqueued_collective"))
    done = [e["collective_seq_id"] for e in entries if _finished(e) and not e.get("is_p2p")]
    if state.last_completed is None and done:
        state.last_completed = max(done)
    if state.last_enqueued is None and entries:
        state.last_enqueued = max(e["collective_seq_id"] for e in entries)
    pending = [e for e in entries if not _finished(e)]
    if pending:
        first = min(pending, key=lambda e: (e["collective_seq_id"], e.get("record_id", 0)))
        state.current, state.current_seq = _op(first), first["collective_seq_id"]
    return state


def _torch_analyzer() -> tuple[Any, str]:
    """torch's Flight Recorder analyzer (build_db), quiet, or (None, why not)."""
    logging.getLogger("Flight Recorder").disabled = True  # it logs every finding to stderr: we show them
    try:
        with warnings.catch_warnings():  # "Failed to initialize NumPy" and the like, on stderr under the TUI
            warnings.simplefilter("ignore")
            import torch
            from torch.distributed.flight_recorder.components.builder import build_db
    except Exception as exc:  # not installed, or a build without distributed
        return None, f"torch's Flight Recorder analyzer is not available ({type(exc).__name__}: {exc})"[:200]
    return build_db, f"torch {torch.__version__} flight_recorder"


def analyze(dumps: Sequence[FrDump]) -> CollectiveReport:
    """Per process group: the members' states, and torch's analyzer's first finding with its culprit."""
    report = CollectiveReport(dumps=list(dumps), groups=[])
    members: dict[tuple[str, str], dict[int, tuple[FrDump, list[dict[str, Any]]]]] = {}
    group_ranks: dict[tuple[str, str], list[int]] = {}
    descs: dict[str, str] = {}
    for dump in dumps:
        if not dump.ok:
            continue
        by_group: dict[str, list[dict[str, Any]]] = {}
        for entry in dump.trace.get("entries") or []:
            if isinstance(entry, dict) and isinstance(entry.get("collective_seq_id"), int):
                name, desc = _group_of(entry)
                by_group.setdefault(name, []).append(entry)
                descs.setdefault(name, desc)
        names = set(by_group) | {str(g.get("name")) for g in dump.groups if g.get("name")}
        for name in names:
            found = _membership(dump, name)
            if found is None:
                continue
            rank, ranks = found
            key = (dump.job, name)
            group_ranks.setdefault(key, ranks)
            members.setdefault(key, {}).setdefault(rank, (dump, by_group.get(name, [])))
    build_db = None
    if any(entries for group in members.values() for _, entries in group.values()):  # torch only for a reason
        build_db, report.analyzer = _torch_analyzer()
    for key in sorted(members, key=lambda k: (k[1] == "", k[1], k[0])):
        job, name = key
        if not any(entries for _, entries in members[key].values()):
            continue  # a group that never ran a collective says nothing
        finding = GroupFinding(name, descs.get(name, ""), group_ranks[key], [
            _rank_state(rank, dump, entries) for rank, (dump, entries) in sorted(members[key].items())], job=job)
        if build_db is not None:
            try:
                _torch_finding(build_db, finding, members[key])
            except Exception as exc:  # the analyzer asserts on what it cannot handle
                finding.detail = f"torch's analyzer failed: {type(exc).__name__}: {exc}"[:300]
        finding.sentence = sentence(finding)
        report.groups.append(finding)
    report.groups.sort(key=lambda g: (not g.kind, g.name == "", g.name))
    if not any(d.ok for d in dumps):
        report.error = "no Flight Recorder dump" + (f": {dumps[0].error}" if dumps else " (no rank runs gkdtop.probe "
                                                   "or has an NCCL trigger pipe)")
    report.sentence = next((g.sentence for g in report.groups if g.kind), "")
    if not report.sentence and report.groups:
        report.sentence = report.groups[0].sentence
    return report


def _torch_finding(build_db: Any, finding: GroupFinding, members: dict[int, tuple[FrDump, list[dict]]]) -> None:
    """Run torch's analyzer on one group, its members keyed by their rank in it; take its first finding.

    Each rank's entries are cut to this group and their record ids set to the sequence number: record ids
    count every group's collectives in a process, and the analyzer aligns ring buffers by them.
    """
    name = finding.name
    details: dict[str, dict[str, Any]] = {}
    version = ""
    for rank, (dump, entries) in sorted(members.items()):
        version = version or str(dump.trace.get("version") or "")
        rows = [{**e, "record_id": e["collective_seq_id"], "process_group": tuple(_group_of(e)),
                 "frames": e.get("frames") or []} for e in sorted(entries, key=lambda e: e.get("record_id", 0))]
        details[f"rank{rank}"] = {"host_name": f"pid{dump.pid}", "rank": rank, "entries": rows,
                                  "version": str(dump.trace.get("version") or ""),
                                  "pg_config": {name: {"name": name, "desc": finding.desc,
                                                       "ranks": json.dumps(finding.ranks)}}}
    args = argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True, mismatch_cap=10,
                              selected_ranks=None, pg_filters=None, print_stack_trace=False)
    db = build_db(details, args, version)
    for coll in db.collectives:
        mismatched = coll.mismatch_collectives or {}
        if not coll.missing_ranks and not mismatched:
            continue
        finding.seq, finding.op = coll.collective_seq_id, coll.collective_name.split(":", 1)[-1].split(" ")[0]
        if coll.missing_ranks:
            finding.kind, finding.missing = "missing ranks", sorted(coll.missing_ranks)
            finding.culprits = list(finding.missing)
        if mismatched:
            info = next(iter(mismatched.values())).type_of_mismatch
            state = getattr(getattr(info, "state", None), "name", "")
            finding.kind = finding.kind or MISMATCH_KINDS.get(state, state.lower())
            finding.detail = str(getattr(info, "culprit", "") or "")
            blamed = sorted(mismatched)
            finding.called = {r: _op({"profiling_name": c.collective_name}) for r, c in mismatched.items()}
            finding.called.update({r: coll.collective_name.split(":", 1)[-1].split(" ")[0]
                                   for r in members if r not in mismatched})
            present = [r for r in finding.ranks if r in members and r not in finding.missing]
            # torch takes the first rank it reads as right: when most ranks are "wrong", that rank is the odd one.
            if len(blamed) * 2 > len(present) and len(present) - len(blamed) == 1:
                right = next(r for r in present if r not in blamed)
                finding.culprits = sorted(set(finding.culprits) | {right})
                finding.op = _op({"profiling_name": mismatched[blamed[0]].collective_name})
            else:
                finding.culprits = sorted(set(finding.culprits) | set(blamed))
        return


# ---------------------------------------------------------------- one sentence


def _ranks_text(ranks: Sequence[int]) -> str:
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"


def _group_text(finding: GroupFinding) -> str:
    if finding.desc and finding.desc not in (finding.name, "undefined"):
        return f"{finding.desc} (group {finding.name})" if finding.name else finding.desc
    return finding.name or f"the unnamed {len(finding.ranks)}-rank group"


def _where(states: Sequence[RankState], op: str, seq: int | None) -> str:
    """'ranks 0 and 2 wait in it' or 'rank 0 waits in all_reduce #6, rank 2 in broadcast #1'."""
    waiting = [s for s in states if s.current]
    if not waiting:
        return "the others finished every collective they entered"
    if all(s.current == op and s.current_seq == seq for s in waiting):
        verb = "waits" if len(waiting) == 1 else "wait"
        return f"{_ranks_text([s.rank for s in waiting])} {verb} in it"
    parts = [f"rank {s.rank} {'waits in ' if i == 0 else 'in '}{s.current} #{s.current_seq}"
             for i, s in enumerate(waiting)]
    return ", ".join(parts)


def sentence(finding: GroupFinding) -> str:
    """What a person reads first: who is not where the others are, in which collective of which group."""
    states = {s.rank: s for s in finding.states}
    group = _group_text(finding)

    def named(rank: int) -> str:
        label = states[rank].label if rank in states else "no dump"
        return f"rank {rank} ({label})" if label else f"rank {rank}"

    if finding.kind == "missing ranks":
        others = [s for s in finding.states if s.rank not in finding.missing]
        culprits = ", ".join(named(r) for r in finding.missing)
        where = _where(others, finding.op, finding.seq)
        return f"{culprits} never entered {finding.op} #{finding.seq} of {group}; {where}"
    if finding.kind:
        culprits = [r for r in finding.culprits if r in states]
        rest = [r for r in sorted(states) if r not in culprits]
        theirs = ", ".join(f"{named(r)} called {finding.called.get(r) or states[r].current or '?'}"
                           for r in culprits)
        return (f"{finding.kind} mismatch at collective #{finding.seq} of {group}: {theirs} where "
                f"{_ranks_text(rest)} called {finding.op}" if rest else
                f"{finding.kind} mismatch at collective #{finding.seq} of {group}: {theirs}")
    waiting = [s for s in finding.states if s.current]
    if not waiting:
        last = max((s.last_completed or 0) for s in finding.states)
        return f"{group}: every rank finished every collective it entered (last #{last}): the wait is elsewhere"
    first = min(waiting, key=lambda s: s.current_seq or 0)
    if len(waiting) == len(finding.ranks) and all(s.current_seq == first.current_seq for s in waiting):
        return (f"{group}: all {len(waiting)} ranks are in {first.current} #{first.current_seq} and none finished it: "
                "no rank is missing; the wait is below Python (network, GPU)")
    return f"{group}: {_where(waiting, first.current, first.current_seq)}"


# ---------------------------------------------------------------- output


def report_json(report: CollectiveReport) -> dict[str, Any]:
    return {
        "sentence": report.sentence,
        "analyzer": report.analyzer,
        "error": report.error,
        "groups": [
            {"name": g.name, "desc": g.desc, "job": g.job, "ranks": g.ranks, "kind": g.kind, "seq": g.seq, "op": g.op,
             "missing": g.missing, "culprits": g.culprits, "called": {str(r): op for r, op in g.called.items()},
             "detail": g.detail, "sentence": g.sentence,
             "states": [{"rank": s.rank, "pid": s.pid, "label": s.label, "last_completed": s.last_completed,
                         "last_started": s.last_started, "last_enqueued": s.last_enqueued, "current": s.current,
                         "current_seq": s.current_seq} for s in g.states]}
            for g in report.groups
        ],
        "ras": report.ras,
        "dumps": [{"pid": d.pid, "label": d.label, "method": d.method, "ok": d.ok, "error": d.error,
                   "rank": d.rank, "entries": len(d.trace.get("entries") or []), "source": d.source,
                   "file": d.saved} for d in report.dumps],
    }


def report_lines(report: CollectiveReport) -> list[str]:
    """The collective view as text: one line per group, each rank's state under it."""
    ok = sum(d.ok for d in report.dumps)
    out = [f"== Flight Recorder: {ok} of {len(report.dumps)} ranks dumped" + (f"; {report.error}" if report.error
                                                                               else "")]
    for g in report.groups:
        out.append(f"   {g.sentence}")
        for s in g.states:
            where = f"in {s.current} #{s.current_seq}" if s.current else "in no collective"
            out.append(f"     rank {s.rank:>3}  {s.pid:>7}  {s.label:<24} last completed "
                       f"{'-' if s.last_completed is None else s.last_completed}, {where}")
        if g.detail:
            out.append(f"     torch: {g.detail}")
    out += [f"   {d.pid:>7}  {d.label}: {d.error}" for d in report.dumps if not d.ok]
    if report.ras is not None:
        ras = report.ras
        out.append(f"== NCCL RAS at {ras['address']}" + (f" (NCCL {ras['nccl_version']})" if ras["nccl_version"]
                                                         else "") + (f": {ras['error']}" if ras["error"] else ""))
        out += [f"   {c['sentence']}" for c in ras["communicators"]]
    return out


def save_dumps(report: CollectiveReport, folder: Path) -> None:
    """Keep every dump as it landed (the rank's next dump overwrites its file) beside the stacks report."""
    for dump in report.dumps:
        if not dump.raw:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        name = f"fr-{dump.pid}.json" if dump.method == "probe" else f"{Path(dump.source).name}-{dump.pid}"
        path = folder / name
        path.write_bytes(dump.raw)
        dump.saved = str(path)
