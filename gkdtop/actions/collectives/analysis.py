"""Analysing the dumps per process group: torch's own analyzer for mismatches, own code for the rest.

Which group a rank is in, each rank's last completed and current collective, and the finding that
becomes the stall line's sentence (render.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import warnings
from collections.abc import Sequence
from typing import Any

from gkdtop.actions.collectives.render import sentence
from gkdtop.model.collectives import MISMATCH_KINDS, CollectiveReport, FrDump, GroupFinding, RankState


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
