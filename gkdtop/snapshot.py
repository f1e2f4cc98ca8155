"""`gkdtop snapshot --json`: the store as one JSON document (schema in docs/snapshot.md)."""

from __future__ import annotations

import socket
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gkdtop import __version__
from gkdtop.analysis.matcher import compile_pattern
from gkdtop.analysis.steps import bar_pace, step_pace
from gkdtop.model import UNRECOGNISED_SHOWN, EarlierRun, quotes_last_line

if TYPE_CHECKING:
    from gkdtop.store import Store

SCHEMA = 1


def build(store: Store, filter_pattern: str | None = None, now: float | None = None, lines: int = 50) -> dict[str, Any]:
    now = time.time() if now is None else now
    status = store.phase_status(now)
    pattern = compile_pattern(filter_pattern, every_engine=False) if filter_pattern else None
    matched = store.matching(pattern, limit=lines)
    verdict = status.as_json()
    verdict["steps"]["pace"] = step_pace(status.steps) or None  # where a step's time goes (replay says it too)
    return {
        "schema": SCHEMA,
        "gkdtop": __version__,
        "host": socket.gethostname(),
        "time": now,
        "framework": store.framework().as_json(),
        **source_sections(store),
        "ray": ray_section(store, now),
        "phases": {
            **verdict,
            "history_pending": store.history_pending,
            "stack_phase": store.stack_phase.as_json(now) if store.stack_phase else None,
            "task_phase": store.task_phase.as_json(now, status.current, store.task_phase_use(status, now))
            if store.task_phase else None,
        },
        "findings": [f.as_json() for f in store.findings()],
        "anomalies": [a.as_json() for a in store.anomalies()],
        "metrics": store.phases.curves.as_json(),
        "errors_seen": [asdict(g) for g in store.analysis.error_groups()],
        "logs": {
            "filter": filter_pattern or "",
            "files": [asdict(f) for f in store.log_files],
            "lines": [
                {"source": ln.source, "time": ln.time, "worker": ln.worker, "pid": ln.pid, "text": ln.text}
                for ln in matched
            ],
        },
        "errors": [
            {"source": h.name, "error": h.error, "failures": h.failures}
            for h in store.health.values()
            if not h.ok
        ],
    }


def source_sections(store: Store) -> dict[str, Any]:
    """The sections the collectors declare (collectors/registry.py: a spec's `snapshot`), in registry order."""
    from gkdtop.collectors.registry import SOURCES

    sections = {}
    for source in SOURCES:
        if (part := source.spec().snapshot) is not None:
            key, section = part
            sections[key] = section(store)
    return sections


def ray_section(store: Store, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    ray = store.ray
    tasks = store.ray_tasks
    return {
        "status": ray.status,
        "reason": ray.reason,
        "address": ray.address,
        "session": ray.session,
        "resources": {"total": ray.resources_total, "available": ray.resources_available},
        "nodes_alive": ray.nodes_alive,
        "nodes_dead": ray.nodes_dead,
        "nodes": [asdict(n) for n in ray.nodes],
        "actors_total": ray.actors_total,
        "actors": [asdict(a) for a in ray.actors],
        "pending": ray.pending,
        "placement_groups": ray.placement_groups,
        "jobs": ray.jobs,
        "details_error": ray.details_error,
        # Ray's task table (collectors/ray_tasks.py, docs/ray-tasks.md): the running tasks, oldest first,
        # who is still in a call the others left, and the failed tasks, newest first.
        "task_view": {"status": tasks.status, "reason": tasks.reason, "polled": tasks.polled or None,
                      "running_total": tasks.running_total, "failed_total": tasks.failed_total},
        "tasks": [t.as_json(now) for t in tasks.running],
        "stragglers": [s.as_json(now) for s in store.stragglers],
        "failed_tasks": [t.as_json(now) for t in tasks.failed],
        # Remote log files followed through the dashboard (collectors/ray_logs); GPUs: nodes[].gpus.
        "log_sources": {
            "status": store.ray_logs.status,
            "reason": store.ray_logs.reason,
            "patterns": store.ray_logs.patterns,
            "files": [asdict(f) for f in store.ray_logs.files],
            "followed": [{"node_id": s.node_id, "node_ip": s.node_ip, "filename": s.filename, "source": s.source}
                         for s in store.ray_logs.followed],
            "skipped": store.ray_logs.skipped,
        },
    }


def text_summary(doc: dict[str, Any]) -> str:
    """The snapshot for a person: a few lines, the same facts as the JSON."""
    from gkdtop.format import clock_why, hint_text, human_duration

    ph = doc["phases"]
    last = ph["timeline"][-1] if ph["timeline"] else None
    phase = ph["current"] or "-"
    if ph["state"] in ("stalled", "running") and last and last["name"] == ph["current"] and last["status"] == "done":
        phase = f"after {phase}" + (f" (next expected: {ph['expected']})" if ph["expected"] else "")  # it finished
    guess = " (a guess)" if ph.get("phase_from") == "words" else ""  # read from a line's words: worded_note says which
    stopped = " (interrupted: Ctrl+C or a signal)" if ph.get("interrupted") else ""
    lines = [f"phase: {phase}{guess}  state: {ph['state']}{stopped}"]
    if ph.get("worded_note"):
        lines.append(ph["worded_note"])
    if ph["stalled_for"] is not None:
        lines[-1] += f"  (no progress for {human_duration(ph['stalled_for'])})"
    for run in ph.get("earlier_runs", [])[-1:]:  # the job started again into the log: the verdict is the last run's
        lines.append(f"earlier run in this log: {EarlierRun.from_json(run).told()}; this run from line "
                     f"{run['evidence']['line']}")
    if ph["failure"]:
        lines.append(f"failure: {ph['failure']}")
    if ph["state"] not in ("running", "done") and ph["unrecognised"]["lines"] >= UNRECOGNISED_SHOWN and not ph.get(
            "worded_note"):
        after = ph["unrecognised"]["after"].strip()[:100]
        lines.append(f"{'after `' + after + '`' if after else 'from the start'}: "
                     f"{ph['unrecognised']['lines']} lines no rule knows")
    if quotes_last_line(ph["state"]) and ph["unrecognised"]["last"]:  # as the Phases pane quotes it
        lines.append(f"last line: `{ph['unrecognised']['last'][:200]}`")
    if ph["last_known"]:
        lines.append(f"last known line: `{ph['last_known']}`")
    if ph["finished_by"] and ph["state"] != "done":
        lines.append(ph["finished_by"])
    if ph.get("stack_phase"):
        sp = ph["stack_phase"]
        lines.append(f"stacks: {sp['text']}  pid {sp['pid']}, {sp['age']:.0f}s ago ({sp['reason']})"
                     + (f"  note: {sp['note']}" if sp["note"] else ""))
    if ph.get("task_phase"):
        tp = ph["task_phase"]
        lines.append(f"ray tasks: {tp['text']}" + (f", for {human_duration(tp['running_for'])}"
                                                    if tp["running_for"] is not None else "")
                     + (f" ({tp['use']})" if tp["use"] != "evidence" else ""))
    if ph["hint"]:
        lines += hint_text(ph["hint"]["causes"], ph["hint"]["actions"])
    if ph["clock_offset"] is not None:
        lines.append(f"clock: {ph['clock_source']} is stamped {ph['clock_offset']:+.0f} s off this machine's clock"
                     f" ({clock_why(ph['clock_offset'])}): silence is measured by arrival")
    if ph["steps"]["done"]:
        run = ph["steps"]["run"]
        first, last = run.get("first") or 0, run.get("last") or 0
        printed = " with metrics" if first > 1 or run["count"] < last - first + 1 else ""  # others ran unprinted
        line = f"steps: {ph['steps']['done']}{printed} (last {ph['steps']['last']})"
        bar = run.get("bar")
        if run.get("p50_s") is not None:
            line += f", p50 {run['p50_s']:.2f}s, p95 {run['p95_s']:.2f}s, max {run['max_s']:.2f}s"
        elif bar_pace(bar):  # no step line measured its time (no stamps of their own): the bar's pace
            line += f", {bar_pace(bar)} by its bar"
        if bar and bar["n"] > (ph["steps"]["last"] or 0):  # records without the loop's count
            line = (f"steps: {ph['steps']['done']} with metrics; the loop's bar is at {bar['n']}/{bar['total']}"
                    + (f", {bar_pace(bar)}" if bar_pace(bar) else ""))
        lines.append(line)
        if ph["steps"].get("pace"):
            lines.append(f"  {ph['steps']['pace']}")
        if ph["state"] == "running" and ph["unrecognised"]["after"].strip():
            lines.append(f"  latest: `{ph['unrecognised']['after'].strip()[:200]}`")  # the job's own numbers, now
    if doc["framework"]["label"]:
        lines.append(f"framework: {doc['framework']['label']} (from the {doc['framework']['source']})")
    gpus = doc["gpus"]
    lines.append(f"gpus: {gpus['status']} {gpus['reason']}".rstrip() + f" ({len(gpus['devices'])} devices)")
    lines.append(f"processes: {len(doc['processes'])}")
    ray = doc["ray"]
    lines.append(f"ray: {ray['status']} {ray['reason']}".rstrip())
    view = ray["task_view"]
    if view["status"] not in ("connected", "pending"):
        lines.append(f"ray tasks: {view['status']}: {view['reason']}".rstrip(": "))
    elif ray["tasks"] or view["failed_total"]:
        lines.append(f"ray tasks: {view['running_total']} running, {view['failed_total']} failed")
    lines += [f"ray tasks: {s['sentence']}" for s in ray["stragglers"]]
    lines += [f"ray task failed: {t['name']} on node {t['node'] or '?'} (pid {t['pid']}): "
              f"{t['error'] or t['error_type']}" for t in ray["failed_tasks"][:3]]
    for f in doc.get("findings", [])[:10]:
        lines.append(f"finding: {f['name']} x{f['count']} {f['fields']}")
        lines.append(f"  cause: {f['cause']}")
        lines.append(f"  fix: {f['fix']}")
    for err in doc["errors"]:
        lines.append(f"error in {err['source']}: {err['error']}")
    return "\n".join(lines) + "\n"
