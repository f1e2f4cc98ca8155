"""A real Ray cluster for tests: `ray start --head` on loopback in its own temp dir, torn down after.

Teardown kills only this cluster's processes (matched by its temp dir, plus their descendants),
never another Ray on the machine: `ray stop` would stop every cluster of the user.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))


_HANDED_OUT: set[int] = set()  # this process's answers: a port closed after the check comes back soon


def free_port() -> int:
    """A port free now and not handed out before in this process: the kernel gives a just-closed port
    again, and `ray start` refuses two components on one port (gcs_server and the agent got 41969)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_free(port: int) -> bool:
    """Nothing listens on the port (loopback or any address) and it can be bound now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@dataclass
class RayCluster:
    temp_root: Path  # RAY_TMPDIR: Ray uses <it>/ray
    gcs_port: int
    dashboard_port: int
    own_temp_dir: bool = False  # started with `ray start --temp-dir`, no RAY_TMPDIR in its environment
    client_port: int = 0  # its Ray client server's: that process names neither the temp dir nor a parent of ours
    _starting: subprocess.Popen[str] | None = field(default=None, repr=False)  # begin_start's `ray start`

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self) -> dict[str, str]:
        if self.own_temp_dir:
            base = {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"}
            return {**base, "RAY_USAGE_STATS_ENABLED": "0"}
        return {**os.environ, "RAY_TMPDIR": str(self.temp_root), "RAY_USAGE_STATS_ENABLED": "0"}

    @property
    def session(self) -> str:
        """The session name of this cluster (its newest)."""
        return (self.temp_root / "ray" / "session_latest").resolve().name

    def start(self, num_cpus: int = 2, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.begin_start(num_cpus, extra, env)
        self.wait_started()

    def begin_start(self, num_cpus: int = 2, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        """`ray start --head`, not waited for: `wait_started()` waits (the session's cluster comes up
        meanwhile, while the first tests run: conftest.py)."""
        # Every port of its own: with Ray's defaults (agent 52365, client server 10001, ...) a second
        # cluster on the machine (another test run's, someone else's) loses its agent and then its raylet.
        ports = own_ports(head=True)
        self.client_port = int(ports[-1].split("=", 1)[1])
        cmd = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.gcs_port}",
               f"--dashboard-port={self.dashboard_port}", "--dashboard-host=127.0.0.1", f"--num-cpus={num_cpus}",
               "--num-gpus=0", "--disable-usage-stats", "--include-dashboard=true", *ports, *extra]
        if self.own_temp_dir:
            cmd.append(f"--temp-dir={self.temp_root / 'ray'}")
        self._starting = subprocess.Popen(cmd, env={**self.env(), **(env or {})}, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)

    def wait_started(self, timeout: float = 180.0) -> None:
        """Until the `ray start` of `begin_start()` has exited; RuntimeError with its stderr if it failed."""
        proc, self._starting = self._starting, None
        if proc is None:
            return
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise RuntimeError(f"ray start took over {timeout:g} s: {err[-2000:]}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed: {err[-2000:]}")

    def add_node(self, num_cpus: int = 1, resources: dict[str, float] | None = None,
                 env: dict[str, str] | None = None) -> int:
        """A second node on this machine; returns its metrics export port (it names the node's raylet).

        Its agent needs ports of its own: with the defaults, its HTTP server cannot bind the head's
        52365, and the dashboard then answers "Agent for node id ... doesn't exist" for its logs.
        """
        ports = own_ports(head=False)
        metrics = int(ports[1].split("=", 1)[1])
        cmd = [RAY, "start", f"--address={self.address}", "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
               "--num-gpus=0", *ports, "--disable-usage-stats"]
        if resources:
            cmd.append("--resources=" + json.dumps(resources))
        proc = subprocess.run(cmd, env={**self.env(), **(env or {})}, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start (second node) failed: {proc.stderr[-2000:]}")
        return metrics

    def kill_node(self, metrics_port: int, sig_timeout: float = 5.0) -> None:
        """Kill one node of this cluster (its raylet and everything under it), SIGKILL: a node dying."""
        marker = f"--metrics_export_port={metrics_port}"
        procs: dict[int, psutil.Process] = {}
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                if proc.name() == "raylet" and marker in " ".join(proc.cmdline()):
                    procs[proc.pid] = proc
                    procs.update({c.pid: c for c in proc.children(recursive=True)})
        if not procs:
            raise RuntimeError(f"no raylet with {marker}")
        for proc in procs.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        wait_dead(list(procs.values()), timeout=sig_timeout)

    def processes(self) -> list[psutil.Process]:
        marker = str(self.temp_root)
        # The client server proxy `ray start` leaves behind (its parent exits): known by its port.
        client = f"--port={self.client_port}" if self.client_port else None
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                cmdline = proc.info["cmdline"] or []
                if (any(marker in part for part in cmdline)
                        or (client in cmdline and "ray.util.client.server" in cmdline)):
                    found[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return list(found.values())

    def kill(self, sig_timeout: float = 1.0) -> None:
        """Stop this cluster only: SIGTERM, then SIGKILL what is left after `sig_timeout` seconds.

        Short: gcs_server, raylet, the autoscaler monitor and the runtime-env agent do not exit on SIGTERM
        (still there 8 s later, measured with Ray 2.60 here), so a longer grace only delays every teardown;
        the dashboard's processes and the agent are gone within a second."""
        procs = self.processes()
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        alive = wait_dead(procs, timeout=sig_timeout)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        wait_dead(alive, timeout=5.0)

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.wait_started()  # a cluster still coming up is taken down once it is up
        self.kill()
        shutil.rmtree(self.temp_root, ignore_errors=True)


def wait_dead(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process has ended; those still running after `timeout`. A zombie has ended:
    psutil.wait_procs waits out its whole timeout on one, and a killed raylet's or gcs_server's parent
    (`ray start`) is gone, so PID 1 reaps them, late here."""
    def running(proc: psutil.Process) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    while (alive := [p for p in procs if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def own_ports(head: bool) -> list[str]:
    """`ray start` options giving a node free ports of its own (the metrics export port second)."""
    ports = [f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
    return ports + ([f"--ray-client-server-port={free_port()}"] if head else [])


def new_cluster(own_temp_dir: bool = False, gcs_port: int | None = None,
                dashboard_port: int | None = None) -> RayCluster:
    # Short path: Ray's unix sockets live under it and must stay under the 107-byte limit.
    root = Path(tempfile.mkdtemp(prefix="gkr", dir="/tmp"))
    return RayCluster(root, gcs_port or free_port(), dashboard_port or free_port(), own_temp_dir)


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.5,  # type: ignore[no-untyped-def]
             what: str = "the condition"):
    """Poll until `predicate()` is truthy; its value. Deadlines are generous: a busy 2-core machine."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


DRIVER_MARK = "GKD-DRIVER"  # a driver script's own line: `sys.stdout.write(f"{DRIVER_MARK} ...\n")`


def start_driver(cluster: RayCluster, code: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """A Ray driver script (`code`, given the cluster's address and `args`) and the words it wrote after
    DRIVER_MARK. Ray's log monitor writes `(raylet) ...` lines to the same stdout from its own thread, so
    they can land before, after or (between two writes of one print) inside the driver's line: the driver
    writes its line in one call, and the mark finds it wherever it is."""
    proc = subprocess.Popen([sys.executable, "-c", code, cluster.address, *args], env=cluster.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(DRIVER_MARK + r" ([0-9A-Za-z ]*[0-9A-Za-z])", line)
        if found:
            return proc, found.group(1)
    raise AssertionError("driver ended without its line")
