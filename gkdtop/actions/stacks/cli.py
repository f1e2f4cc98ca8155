"""`gkdtop stacks`: dump the job's processes (or the PIDs given; or, with --ray, every actor of a Ray cluster),
save the report, print it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gkdtop.actions.stacks.remote import dump_ray_stacks
from gkdtop.actions.stacks.render import report_json, report_text, write_report
from gkdtop.actions.stacks.report import dump_stacks, job_targets

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo
    from gkdtop.model.stacks import StackReport


def run(pids: list[int], native: bool, as_json: bool, timeout: float, out_dir: str | None,
        driver_patterns: Iterable[str] | None = None) -> int:
    """`gkdtop stacks`: 0 when at least one process was dumped, 1 when none could be, 2 for a bad argument."""
    if not timeout > 0:
        print("gkdtop stacks: --timeout must be positive", file=sys.stderr)
        return 2
    targets: Sequence[ProcInfo] | Sequence[int] = pids or job_targets(driver_patterns)
    if not targets:
        print("gkdtop stacks: no job processes found (name PIDs: gkdtop stacks PID ...)", file=sys.stderr)
        return 1
    report = dump_stacks(targets, native=native, timeout=timeout)
    return save_and_print(report, as_json, out_dir)


def save_and_print(report: StackReport, as_json: bool, out_dir: str | None) -> int:
    """Save the report, print it (text or JSON with the file's path); 0 when at least one process was dumped."""
    path: Path | None = None
    try:
        path = write_report(report, out_dir)
    except OSError as exc:
        print(f"gkdtop stacks: could not save the dump: {exc}", file=sys.stderr)
    if as_json:
        data = report_json(report)
        data["file"] = str(path) if path else None
        print(json.dumps(data, indent=1))
    else:
        sys.stdout.write(report_text(report))
    if path is not None:
        print(f"saved {path} (and {path.with_suffix('.txt').name})", file=sys.stderr)
    return 0 if any(d.ok for d in report.dumps) else 1


def run_ray(address: str | None, native: bool, as_json: bool, timeout: float, out_dir: str | None,
            agent: bool = False, classes: list[str] | None = None) -> int:
    """`gkdtop stacks --ray`: 0 when at least one actor was dumped, 1 when none could be."""
    try:
        report = dump_ray_stacks(address, native=native, timeout=timeout, agent=agent, classes=classes)
    except Exception as exc:
        print(f"gkdtop stacks --ray: {exc}", file=sys.stderr)
        return 1
    if not report.dumps:
        print("gkdtop stacks --ray: no ALIVE actors with a PID in the cluster", file=sys.stderr)
        return 1
    return save_and_print(report, as_json, out_dir)
