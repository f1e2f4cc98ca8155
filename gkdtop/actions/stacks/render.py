"""A stack report as JSON (schema 1), as text a person reads, and saved as a timestamped pair of files.

Every dump is kept, because a hang is evidence worth keeping.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gkdtop.model.stacks import SCHEMA, StackFrame, StackReport, ThreadStack

if TYPE_CHECKING:
    from gkdtop.model.collectives import CollectiveReport


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
    from gkdtop.safeopen import private_dir, write_private

    if directory is None:  # ours: private (the bundle takes its dumps back as this user's files)
        folder = Path(private_dir(default_directory()))
    else:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
    stem = "stacks-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(report.time))
    path, n = folder / f"{stem}.json", 1
    while path.exists() or path.with_suffix(".txt").exists():  # two dumps in one second keep both
        path, n = folder / f"{stem}-{n}.json", n + 1
    if report.collectives is not None:  # the raw dumps first: the JSON names where they went
        from gkdtop.actions import collectives

        collectives.save_dumps(report.collectives, path.with_name(path.stem + "-fr"))
    write_private(path.with_suffix(".txt"), report_text(report).encode())
    write_private(path, (json.dumps(report_json(report), indent=1) + "\n").encode())
    return path
