"""`gkdtop cleanup`: print the plan; act on it after `y` (on a terminal) or with --yes."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from gkdtop.actions.cleanup.execute import execute
from gkdtop.actions.cleanup.plan import build_plan
from gkdtop.actions.cleanup.render import plan_json, plan_text, results_text

if TYPE_CHECKING:
    from gkdtop.actions.cleanup.model import (
        CleanupResult,
    )


def _gpu_pids() -> set[int]:
    """The PIDs NVML says hold GPU memory; empty where there is no GPU or no NVML."""
    try:
        from gkdtop.collectors.gpu import GpuCollector

        collector = GpuCollector()
        try:
            state = collector.collect()
        finally:
            collector.close()
        return {p.pid for dev in state.devices for p in dev.processes}
    except Exception:
        return set()


def run(dry_run: bool, yes: bool, as_json: bool, grace: float = 5.0, **plan_args: Any) -> int:
    """`gkdtop cleanup`: print the plan; act on it after `y` (on a terminal) or with --yes.

    Exit status: 0 done (or nothing to do, or --dry-run); 1 not confirmed, or some item failed.
    `plan_args` go to build_plan (tests point it at their own directories).
    """
    if "gpu_pids" not in plan_args:
        plan_args["gpu_pids"] = _gpu_pids()
    items = build_plan(**plan_args)
    out, err = sys.stdout, sys.stderr
    todo = [i for i in items if i.selected and i.action != "keep"]
    preview = err if as_json else out  # with --json, stdout carries the JSON document alone

    def finish(results: list[CleanupResult], code: int) -> int:
        if as_json:
            json.dump(plan_json(items, results), out, indent=1)
            out.write("\n")
        return code

    if not as_json or not (yes or dry_run):
        preview.write(plan_text(items))
    if dry_run:
        if not as_json:
            out.write("--dry-run: nothing was done.\n")
        return finish([], 0)
    if not todo:
        if items and not as_json:
            out.write("Nothing selected to act on.\n")
        return finish([], 0)
    if not yes:
        if not sys.stdin.isatty():
            err.write("gkdtop cleanup: not a terminal and no --yes: nothing was done "
                      "(review the plan above, then run again with --yes).\n")
            return finish([], 1)
        err.write(f"Proceed with the {len(todo)} selected item(s)? [y/N] ")
        err.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            err.write("Nothing was done.\n")
            return finish([], 1)
    results = execute(items, grace=grace)
    if not as_json:
        out.write(results_text(results))
    bad = any(r.outcome in ("failed", "permission denied") for r in results)
    return finish(results, 1 if bad else 0)
