"""Recorded GPU data for view tests and screenshots (the real NVML path is tested through fake_nvml)."""

from __future__ import annotations

import json
import os
from pathlib import Path

GIB = 1024**3


def frames(pid: int | None = None) -> list[list[dict[str, object]]]:
    pid = pid or os.getpid()
    out = []
    for i in range(6):
        out.append([
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "utilization": 60 + 7 * i,
             "memory_used": 61 * GIB, "memory_total": 80 * GIB, "temperature": 61.0, "power": 420.0 + i,
             "power_limit": 700.0, "processes": [{"pid": pid, "used_memory": 30 * GIB}]},
            {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "utilization": 90 - 5 * i,
             "memory_used": 72 * GIB, "memory_total": 80 * GIB, "temperature": 66.0, "power": 610.0,
             "power_limit": 700.0, "processes": [{"pid": 999_999, "used_memory": 12 * GIB}]},
        ])
    return out


def recorded_gpus(directory: Path, pid: int | None = None) -> Path:
    path = directory / "gpus.json"
    path.write_text(json.dumps(frames(pid)))
    return path
