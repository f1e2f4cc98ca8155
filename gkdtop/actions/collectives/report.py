"""Which collective each rank is in, now: the dumps captured (capture/flight_recorder.py) and NCCL's RAS
polled meanwhile, analysed into one report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gkdtop.actions.collectives.analysis import analyze
from gkdtop.capture.flight_recorder import is_rank, nccl_processes, read_pipe_dumps, request_probe_dumps
from gkdtop.capture.proc import process_environ
from gkdtop.model.collectives import who

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo
    from gkdtop.model.collectives import CollectiveReport


def collect(procs: Sequence[ProcInfo], nccl_traces: Sequence[Any] = (), wait: float = 5.0,
            ras_interval: float = 2.0) -> CollectiveReport:
    """Dumps from every rank (probe and trigger pipe), analysed; a process answering both keeps the probe's.

    When a rank loaded NCCL, its RAS service is polled twice meanwhile (in a thread: the polls wait
    `ras_interval` between them, the dumps need not).
    """
    from concurrent.futures import ThreadPoolExecutor

    from gkdtop.capture import nccl_ras

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
