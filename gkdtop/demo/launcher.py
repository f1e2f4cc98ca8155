"""Start and stop `gkdtop demo` runs from gkdtop, and find every process a run owns.

A run is the driver (`python -m gkdtop.demo.job`) in a session of its own, with its stdout and
stderr in the run's log. Unless it is given `--ray-address`, the driver starts a private Ray cluster
with `ray start --head --block` in a second session of its own, on free ports and under a short temp
dir of its own. So a run's processes are exactly: the members of those two sessions (Ray's workers
change their process group, never their session), plus processes whose command line names the
run's Ray temp dir, plus descendants of any of these. `stop()` kills exactly that set and never
touches another Ray cluster on the machine (`ray stop` would stop every cluster of the user).

While the driver lives, the whole cluster is also its process tree (driver -> `ray start` -> GCS,
raylet -> workers; dashboard, agents), so a view rooted at `DemoRun.pid` sees all of it.

Files in the run directory: `train.log` (unless `log_file` is given), `run.json` (written here:
pids, ports, temp dir), `cluster.json` (written by the driver once `ray start` runs: its session
id), `debris.json` (only `--fault leak`).

The one exception is `--fault leak`, whose debris escapes on purpose (see `faults.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from gkdtop import proctree
from gkdtop.demo import FAULT_HELP, FAULTS
from gkdtop.safeopen import private_dir, write_private

__all__ = ["FAULTS", "DemoOptions", "DemoRun", "find_processes", "free_port", "main_no_ui", "remove_debris",
           "runs_root", "short_temp_dir", "start_demo", "terminate"]

# Seconds the driver gets to tear its cluster down after SIGTERM before its session is SIGKILLed.
STOP_GRACE_S = 20.0


@dataclass
class DemoOptions:
    steps: int = 20
    log_file: str | None = None
    fault: str | None = None
    ray_address: str | None = None
    seed: int = 0
    pace: float = 1.0  # scale of the job's emulated accelerator time; 0 runs flat out
    markers: str = "verl"  # what the job prints: verl's real lines, or the old playbook's markers


# --------------------------------------------------------------------------- processes of a run


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _protected() -> set[int]:
    """This process and its ancestors: a sweep must never hit the caller (or PID 1)."""
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def find_processes(*, roots: Iterable[int] = (), sessions: Iterable[int] = (), markers: Iterable[str] = (),
                   since: float = 0.0) -> list[psutil.Process]:
    """Live processes of a run: `roots`, members of `sessions`, holders of a marker in their command line.

    Descendants of all of these count too.
    Only processes created at or after `since` (epoch seconds) count, so a recycled pid or session
    id can never pull in something older than the run. Zombies are dead and left out.
    """
    found: dict[int, psutil.Process] = {}
    sessions = {s for s in sessions if s and s > 1}
    markers = [m for m in markers if m]

    def add_tree(proc: psutil.Process) -> None:
        found[proc.pid] = proc
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                found[child.pid] = child

    for pid in roots:
        with contextlib.suppress(psutil.Error):
            add_tree(psutil.Process(pid))
    if sessions or markers:
        for proc in psutil.process_iter(["cmdline"]):
            if proc.pid in found:
                continue
            try:
                cmdline = proc.info["cmdline"] or () if markers else ()
                if _sid(proc.pid) in sessions or any(m in part for part in cmdline for m in markers):
                    add_tree(proc)
            except psutil.Error:
                continue
    protected = _protected()
    out = []
    for proc in found.values():
        try:
            if proc.pid in protected or proc.create_time() < since - 1.0:
                continue
        except psutil.Error:
            continue
        if _alive(proc):
            out.append(proc)
    return out


def terminate(procs: Iterable[psutil.Process], grace: float = 3.0) -> list[psutil.Process]:
    """SIGTERM, then SIGKILL whatever is left after `grace` seconds; returns the survivors (normally none)."""
    procs = [p for p in procs if _alive(p)]
    return proctree.survivors(procs, proctree.terminate(procs, grace, kill_wait=5.0))


# --------------------------------------------------------------------------- run directories


def remove_debris(debris: dict) -> None:
    """Undo `--fault leak` (DemoRun.debris()): kill its orphans, if the PID still runs the engine core,
    and unlink its segments. For tests and tools; a user runs `gkdtop cleanup` instead."""
    for orphan in debris.get("orphans", []):
        try:
            proc = psutil.Process(orphan["pid"])
            if "--engine-core" in proc.cmdline():
                terminate([proc], grace=2.0)
        except psutil.Error:
            pass
    for path in debris.get("shm", []):
        if os.path.basename(path).startswith("nccl-"):
            Path(path).unlink(missing_ok=True)


def runs_root() -> Path:
    """Where run directories go: the same place as `gkdtop run`'s ($XDG_CACHE_HOME/gkdtop/runs)."""
    from gkdtop.jobrun import runs_root as job_runs_root

    return job_runs_root()


def _new_run_dir() -> Path:
    """A new 0700 run directory in this user's private runs folder (Untrusted, one line, if it is not private)."""
    root = Path(private_dir(runs_root()))
    stamp = time.strftime("demo-%Y%m%d-%H%M%S")
    for n in range(1000):
        path = root / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {root}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(avoid: Iterable[int] = ()) -> int:
    """A free TCP port below the kernel's ephemeral range and above Ray's worker ports (10002-19999).

    A port from the ephemeral range (what bind(0) hands out) can be taken by any outgoing connection
    before the server binds it, and Ray opens plenty of those while it starts.
    """
    avoid = set(avoid)
    low, high = 20000, _ephemeral_low()
    for _ in range(500 if high - low >= 100 else 0):
        port = random.randrange(low, high)
        if port in avoid:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    with socket.socket() as s:  # an odd port range: fall back to what the kernel picks
        s.bind(("", 0))
        return s.getsockname()[1]


def short_temp_dir() -> Path:
    """Ray's temp dir: short, because its unix sockets live below it and paths stop at 107 bytes."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    return Path(tempfile.mkdtemp(prefix="gkd", dir=base))


# --------------------------------------------------------------------------- the run


class DemoRun:
    """A running (or finished) demo job: its driver process, log, run directory and private Ray cluster."""

    def __init__(self, proc: subprocess.Popen[bytes], opts: DemoOptions, log_path: Path, run_dir: Path,
                 ray_temp_dir: Path | None, ray_address: str | None, dashboard_url: str | None,
                 started: float) -> None:
        self._proc = proc
        self.opts = opts
        self.pid = proc.pid
        self.log_path = log_path
        self.run_dir = run_dir
        self.ray_temp_dir = ray_temp_dir  # None when the job joined an existing cluster
        self.ray_address = ray_address
        self.dashboard_url = dashboard_url
        self.started = started
        self._lock = threading.Lock()
        self._sessions: set[int] = {proc.pid}  # the driver leads its own session
        self.stopped = False

    def __repr__(self) -> str:
        return f"DemoRun(pid={self.pid}, fault={self.opts.fault!r}, log={str(self.log_path)!r})"

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def running(self) -> bool:
        return self._proc.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """The driver's exit code, or None if it still runs after `timeout` seconds."""
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def cluster_info(self) -> dict:
        """What the driver wrote to cluster.json after starting its Ray cluster (empty before that)."""
        try:
            return json.loads((self.run_dir / "cluster.json").read_text())
        except (OSError, ValueError):
            return {}

    def debris(self) -> dict:
        """What `--fault leak` left behind (debris.json: orphan pids, /dev/shm paths); empty otherwise."""
        try:
            return json.loads((self.run_dir / "debris.json").read_text())
        except (OSError, ValueError):
            return {}

    def _all_sessions(self) -> set[int]:
        sessions = set(self._sessions)
        sid = self.cluster_info().get("session_id")
        if isinstance(sid, int):
            sessions.add(sid)
        if self.running():  # the pid is ours until reaped: its descendants' sessions are ours too
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(self.pid).children(recursive=True):
                    if (s := _sid(child.pid)) is not None:
                        sessions.add(s)
        self._sessions = sessions
        return sessions

    def processes(self) -> list[psutil.Process]:
        """All live processes of the run: the driver, its Ray cluster (GCS, raylet, workers), children."""
        roots = [self.pid] if self.running() else []
        markers = [str(self.ray_temp_dir)] if self.ray_temp_dir else []
        return find_processes(roots=roots, sessions=self._all_sessions(), markers=markers, since=self.started)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Tear down everything the run started; idempotent, safe after Ctrl-C and after the job ended.

        SIGTERM lets the driver disconnect and stop its own cluster; after `grace` seconds the
        driver's session is SIGKILLed; then a sweep kills what is left of the run's sessions, of its
        Ray temp dir and of their descendants, and removes that temp dir.
        """
        with self._lock:
            sessions = self._all_sessions()
            if self.running():
                with contextlib.suppress(psutil.Error):
                    proctree.terminate([psutil.Process(self.pid)], grace, kill_wait=10.0, group=self.pid,
                                       term_group=False)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(10.0)
            markers = [str(self.ray_temp_dir)] if self.ray_temp_dir else []
            left = find_processes(sessions=sessions, markers=markers, since=self.started)
            terminate(left, grace=3.0)
            if self.ray_temp_dir is not None:
                shutil.rmtree(self.ray_temp_dir, ignore_errors=True)
            self.stopped = True

    def _stop_at_exit(self) -> None:
        if not self.stopped:
            with contextlib.suppress(Exception):
                self.stop(grace=10.0)


def _job_command(opts: DemoOptions, run_dir: Path, ray_temp_dir: Path | None,
                 ports: dict[str, int]) -> list[str]:
    cmd = [sys.executable, "-m", "gkdtop.demo.job", "--steps", str(opts.steps), "--seed", str(opts.seed),
           "--pace", str(opts.pace), "--run-dir", str(run_dir), "--parent-pid", str(os.getpid()),
           "--markers", opts.markers]
    if opts.fault:
        cmd += ["--fault", opts.fault]
    if opts.ray_address:
        cmd += ["--ray-address", opts.ray_address]
    else:
        cmd += ["--ray-temp-dir", str(ray_temp_dir)]
        cmd += [f"--{name}={port}" for name, port in ports.items()]
    return cmd


def start_demo(opts: DemoOptions) -> DemoRun:
    """Start the demo job as a child in its own session, logging to the run's log file; returns at once."""
    if opts.fault is not None and opts.fault not in FAULTS:
        raise ValueError(f"unknown fault {opts.fault!r}; choose one of: {', '.join(FAULTS)}")
    if opts.steps < 1:
        raise ValueError("steps must be at least 1")
    started = time.time()
    run_dir = _new_run_dir()
    log_path = Path(opts.log_file).expanduser().resolve() if opts.log_file else run_dir / "train.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    ray_temp_dir = None if opts.ray_address else short_temp_dir()
    ports: dict[str, int] = {}
    if not opts.ray_address:
        for name in ("gcs-port", "dashboard-port", "client-port", "agent-port"):
            ports[name] = free_port(avoid=ports.values())
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # The job must import this very gkdtop, also when it runs from a source tree that is not installed.
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    if not opts.ray_address:
        env.pop("RAY_ADDRESS", None)
    # As `gkdtop run` would: the Flight Recorder on, and the probe (which job.py and actors.py import)
    # answering for it.
    from gkdtop.jobrun import flight_recorder_env

    env = {**flight_recorder_env(run_dir), **env, "GKDTOP_PROBE": "1", "GKDTOP_RUN_DIR": str(run_dir)}
    with open(log_path, "ab", buffering=0) as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(_job_command(opts, run_dir, ray_temp_dir, ports), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, cwd=run_dir, env=env,
                                start_new_session=True)
    ray_address = opts.ray_address or f"127.0.0.1:{ports['gcs-port']}"
    dashboard = None if opts.ray_address else f"http://127.0.0.1:{ports['dashboard-port']}"
    run = DemoRun(proc, opts, log_path, run_dir, ray_temp_dir, ray_address, dashboard, started)
    info = {"pid": proc.pid, "log": str(log_path), "run_dir": str(run_dir), "fault": opts.fault,
            "steps": opts.steps, "ray_address": ray_address, "dashboard_url": dashboard,
            "ray_temp_dir": str(ray_temp_dir) if ray_temp_dir else None, "started": started,
            "launcher_pid": os.getpid(), "options": asdict(opts)}
    write_private(run_dir / "run.json", (json.dumps(info, indent=1) + "\n").encode())
    atexit.register(run._stop_at_exit)  # a demo must not outlive the gkdtop that started it
    return run


def main_no_ui(opts: DemoOptions) -> int:
    """`gkdtop demo --no-ui`: run the job in the foreground, tear it down on its end, Ctrl-C or SIGTERM."""
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if in_main else None
    run = start_demo(opts)
    print(f"gkdtop demo: run directory {run.run_dir}", file=sys.stderr)
    print(f"gkdtop demo: log {run.log_path}", file=sys.stderr)
    if opts.fault:
        print(f"gkdtop demo: fault {opts.fault}: {FAULT_HELP[opts.fault]}", file=sys.stderr)
    print(f"gkdtop demo: driver pid {run.pid}, Ray at {run.ray_address}"
          + (f", dashboard {run.dashboard_url}" if run.dashboard_url else ""), file=sys.stderr)
    code: int | None
    try:
        code = run.wait()
    except KeyboardInterrupt:
        print("gkdtop demo: interrupted, stopping the job and its Ray cluster ...", file=sys.stderr)
        code = 130
    finally:
        old_int = None
        if in_main:  # a second Ctrl-C must not cut the teardown short
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            run.stop()
        finally:
            if in_main:
                signal.signal(signal.SIGINT, old_int)
                signal.signal(signal.SIGTERM, previous)
    if code is None:
        code = 130
    elif code < 0:  # killed by a signal: report it the way a shell does
        code = 128 - code
    print(f"gkdtop demo: exit code {code}; log {run.log_path}", file=sys.stderr)
    return code
