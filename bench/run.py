"""`make bench`: every benchmark in bench/, one after the other, printing one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["first_frame.py", "idle_cpu.py", "bench_logs.py", "bench_ray_pane.py", "bench_stacks.py"]

for script in SCRIPTS:
    if (HERE / script).exists():
        subprocess.run([sys.executable, str(HERE / script)], check=False)
