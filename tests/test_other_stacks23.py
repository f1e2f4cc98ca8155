"""Audit 23's shapes from other stacks (SGLang, datasets/DeepSpeed, vLLM offline, Lightning, torchrun elastic,
fairseq, HF Trainer): what each line says, with invented values."""

from __future__ import annotations

from pathlib import Path

from gkdtop.replay import report_text
from tests.test_phase_nesting import run


def test_sglangs_soft_watchdog_reports_a_hang_and_kills_nothing(tmp_path: Path) -> None:
    """SGLang's `self.soft=True` watchdog only reports: the server lives on, hung in its graph capture, and its health
    check retries. Before: 'FAILED in engine init' and a failed alert. Its hard watchdog (`self.soft=False`) and the
    older form without the flag still end the run."""
    start = [
        "[2026-03-04 09:00:10 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=50 GB",
        "Capturing batches (bs=256 avail_mem=49.80 GB):   3%|▎         | 1/36 [00:03<01:50,  3.16s/it]",
    ]
    soft = [f"[2026-03-04 09:{m:02d}:13 DP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)"
            for m in (5, 10, 15)]
    retry = "[2026-03-04 09:16:40] Health check failed: server not ready after 990 s. Retrying..."
    report = run(tmp_path, [*start, *soft, retry])
    assert report.status.state == "stalled" and report.status.current == "engine init", report.status
    said = report_text(report, why=True)
    assert "FAILED" not in said and "Capturing batches" in said.split("last known line:")[1].splitlines()[0]
    for hard in ("[2026-03-04 09:05:13 DP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                 "self.soft=False)", "[2026-03-04 09:05:13 TP1] Watchdog timeout (self.watchdog_timeout=300)"):
        assert run(tmp_path, [*start, hard]).status.state == "failed", hard
