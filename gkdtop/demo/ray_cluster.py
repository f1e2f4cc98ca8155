"""The demo's private Ray cluster: `ray start --head --block` in a session of its own, and its teardown.

The driver starts one unless it is given `--ray-address`, on free ports and under a short temp dir
(unix socket paths are short), so that stopping it touches no other Ray cluster on the machine:
`ray stop` would stop every cluster of the user. Its processes are found and ended by the same
rules the launcher uses for a whole run (launcher.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


class LocalRayCluster:
    """`ray start --head --block` in a session of its own: everything Ray starts is in that session."""

    def __init__(self, temp_dir: Path, gcs_port: int, dashboard_port: int, client_port: int, agent_port: int,
                 num_cpus: int = 4) -> None:
        self.temp_dir = temp_dir
        self.gcs_port, self.dashboard_port = gcs_port, dashboard_port
        self.client_port, self.agent_port = client_port, agent_port
        self.num_cpus = num_cpus
        self.proc: subprocess.Popen[str] | None = None
        self.started = time.time()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self, run_dir: Path | None, timeout: float = 120.0) -> None:
        ray_exe = Path(sys.executable).with_name("ray")
        exe = [str(ray_exe)] if ray_exe.exists() else [shutil.which("ray") or "ray"]
        cmd = [*exe, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={self.gcs_port}",
               f"--num-cpus={self.num_cpus}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
               f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={self.client_port}",
               f"--dashboard-agent-listen-port={self.agent_port}", "--object-store-memory=100000000",
               f"--temp-dir={self.temp_dir}", "--disable-usage-stats", "--log-style=record",
               "--log-color=false"]
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        if run_dir is not None:
            info = {"ray_start_pid": self.proc.pid, "session_id": self.proc.pid,
                    "temp_dir": str(self.temp_dir), "gcs_address": self.address,
                    "dashboard_url": self.dashboard_url, "driver_pid": os.getpid()}
            (run_dir / "cluster.json").write_text(json.dumps(info, indent=1) + "\n")
        ready = threading.Event()
        threading.Thread(target=self._forward, args=(ready,), name="ray-start-output", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"`ray start` exited ({self.proc.returncode}) before the cluster was up")
            if time.monotonic() > deadline:
                raise RuntimeError("`ray start` did not bring the cluster up in time")

    def _forward(self, ready: threading.Event) -> None:
        """Copy `ray start`'s output into the job's log; flag the moment it reports the runtime started."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if "Ray runtime started" in line:
                ready.set()

    def processes(self) -> list[Any]:
        """This cluster's live processes: the `ray start` session, the temp dir's users, their descendants."""
        from gkdtop.demo.launcher import find_processes

        if self.proc is None:
            return []
        roots = [self.proc.pid] if self.proc.poll() is None else []
        return find_processes(roots=roots, sessions=[self.proc.pid], markers=[str(self.temp_dir)],
                              since=self.started)

    def stop(self) -> None:
        """Drain and stop this cluster only: SIGTERM to `ray start`, then kill what is left of its session."""
        from gkdtop.demo.launcher import terminate

        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # `ray start --block` drains the node and stops its processes
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15.0)
        deadline = time.monotonic() + 2.0  # stragglers (multiprocessing's resource tracker) go by themselves
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        terminate(left, grace=2.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
