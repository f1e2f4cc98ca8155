"""The stack report: every target's stacks (capture/pyspy.py), its Flight Recorder dumps where it can
give them (capture/flight_recorder.py, analysed by actions/collectives), grouped, odd ones out named."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gkdtop.actions.stacks.analysis import group_stacks, outliers
from gkdtop.capture.flight_recorder import trigger_nccl_traces
from gkdtop.capture.pyspy import dump_processes, stack_targets
from gkdtop.model.stacks import StackReport

if TYPE_CHECKING:
    from pathlib import Path

    from gkdtop.model import ProcInfo


def dump_stacks(
    targets: Sequence[ProcInfo] | Sequence[int],
    native: bool = False,
    timeout: float = 10.0,
    workers: int = 16,
    py_spy: str | None = None,
    search: Iterable[str | Path] | None = None,
    nccl_trace: bool = True,
    nonblocking: bool = False,
) -> StackReport:
    """Dump every target in parallel, then group (capture/pyspy.py says how one process is dumped).

    With `nccl_trace`, every rank that can (gkdtop.probe's request FIFO, torch's NCCL trigger pipe)
    dumps its Flight Recorder too, and the dumps are analysed (actions/collectives).
    """
    start = time.time()
    exe, procs, dumps = dump_processes(targets, native, timeout, workers, py_spy, search, nonblocking)
    traces = trigger_nccl_traces(procs, wait=min(timeout, 5.0)) if nccl_trace and procs else []
    colls = None
    if nccl_trace and procs:
        from gkdtop.actions import collectives

        colls = collectives.collect(procs, traces, wait=min(timeout, 5.0))
        colls = colls if colls.dumps else None
    groups = group_stacks(dumps)
    return StackReport(time=start, native=native, dumps=dumps, groups=groups, outliers=outliers(dumps, groups),
                       py_spy=exe, seconds=round(time.time() - start, 3), nccl_traces=traces, collectives=colls)


def job_targets(driver_patterns: Iterable[str] | None = None) -> list[ProcInfo]:
    """The Processes pane's Python processes (one scan; no NVML, so GPU-only holders are not among them)."""
    from gkdtop.collectors.procs import ProcCollector
    from gkdtop.config import DRIVER_PATTERNS

    rows = ProcCollector(DRIVER_PATTERNS if driver_patterns is None else driver_patterns).collect()
    return stack_targets(rows)
