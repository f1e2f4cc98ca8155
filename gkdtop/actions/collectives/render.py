"""A collective report as the one sentence a person reads, as JSON and text lines, and its dumps saved."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gkdtop.model.collectives import CollectiveReport, GroupFinding, RankState


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
        from gkdtop.safeopen import write_private

        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"fr-{dump.pid}.json" if dump.method == "probe" else f"{Path(dump.source).name}-{dump.pid}"
        path = folder / name
        write_private(path, dump.raw)
        dump.saved = str(path)
