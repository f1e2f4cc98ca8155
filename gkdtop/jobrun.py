"""`gkdtop run -- CMD`: start a training job with a debug environment that works, log it, report how it ended.

The environment is the part people get wrong by hand (docs/run.md): NCCL_DEBUG, PyTorch's Flight
Recorder with its dump directory and trigger pipe, faulthandler, unbuffered output, and the probe.
Nothing nobody reads is set (no NCCL_TIMEOUT). The job runs in its own process group, like a shell
job: gkdtop forwards Ctrl-C / SIGTERM / SIGHUP to that group once, and the job's exit status becomes
gkdtop's (signal N -> 128+N). No Textual here: the dashboard only reads `JobRun`'s status.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gkdtop.format import human_duration, shown
from gkdtop.safeopen import Untrusted, private_dir, read_owned, write_private

NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
TRACE_BUFFER_SIZE = 2000  # entries kept per process group: torch's own default when enabled
STOP_GRACE_S = 10.0
LOG_NAME = "job.log"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SetupError(RuntimeError):
    """What gkdtop itself must create for the job (run directory, log file) can't be: the command is not to blame."""


@dataclass
class RunOptions:
    command: list[str]
    log_file: str | None = None
    nccl_debug: str | None = None  # None: WARN, unless the environment already sets NCCL_DEBUG
    probe: bool = True


@dataclass
class RunPlan:
    """Everything `start` will do, decided without side effects (so --dry-run shows exactly this)."""

    command: list[str]
    run_dir: Path
    log_path: Path
    env_set: dict[str, str]  # the variables gkdtop sets (or changes), in the order shown
    env_kept: dict[str, str] = field(default_factory=dict)  # defaults left at the user's own value
    env: dict[str, str] = field(default_factory=dict)  # the child's whole environment
    probe: bool = True

    @property
    def trace_prefix(self) -> str:
        return self.env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "")


def runs_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where run directories go: $XDG_CACHE_HOME/gkdtop/runs, else ~/.cache/gkdtop/runs (as the demo's)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gkdtop" / "runs"


def _free_run_dir(root: Path, now: float) -> Path:
    stamp = time.strftime("run-%Y%m%d-%H%M%S", time.localtime(now))
    for n in range(1000):
        path = root / (stamp if n == 0 else f"{stamp}-{n}")
        if not path.exists():
            return path
    raise RuntimeError(f"no free run directory name under {root}")


def flight_recorder_env(run_dir: Path) -> dict[str, str]:
    """PyTorch's Flight Recorder on, its dumps and trigger pipes in the run directory.

    Both names of each setting: torch 2.13 reads TORCH_FR_BUFFER_SIZE for any backend (gloo too), but
    creates the NCCL trigger pipe only when the old TORCH_NCCL_TRACE_BUFFER_SIZE is set, and releases
    before 2.5 know only the old names. `doctor` checks these arrived in every Ray worker (FR_ENV_NAMES).
    """
    dump = str(run_dir / "nccl_trace_rank_")
    return {"TORCH_FR_BUFFER_SIZE": str(TRACE_BUFFER_SIZE), "TORCH_NCCL_TRACE_BUFFER_SIZE": str(TRACE_BUFFER_SIZE),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": dump,
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": dump,
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(run_dir / "nccl_trace_pipe_rank_")}


FR_ENV_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE")


def plan_run(opts: RunOptions, environ: Mapping[str, str] | None = None, run_dir: Path | None = None) -> RunPlan:
    """The run directory, the log and the environment for `opts.command`; creates nothing."""
    if not opts.command:
        raise ValueError("no command to run (gkdtop run [options] -- CMD ...)")
    base = dict(os.environ if environ is None else environ)
    if opts.nccl_debug is not None and opts.nccl_debug.upper() not in NCCL_DEBUG_LEVELS:
        raise ValueError(f"--nccl-debug must be one of {', '.join(NCCL_DEBUG_LEVELS)}")
    run_dir = (run_dir or _free_run_dir(runs_root(base), time.time())).resolve()
    log_path = Path(opts.log_file).expanduser().resolve() if opts.log_file else run_dir / LOG_NAME
    # (name, value, explicit): a default gives way to the user's own value; an explicit option does not.
    wanted: list[tuple[str, str, bool]] = [
        ("NCCL_DEBUG", (opts.nccl_debug or "WARN").upper(), opts.nccl_debug is not None),
        *((name, value, False) for name, value in flight_recorder_env(run_dir).items()),
        ("PYTHONFAULTHANDLER", "1", False),
        ("PYTHONUNBUFFERED", "1", False),  # the log is a pipe or a file: without it Python holds lines back
    ]
    if opts.probe:
        bootstrap = str(run_dir / "python")
        path = os.pathsep.join(p for p in (bootstrap, base.get("PYTHONPATH", "")) if p)
        wanted += [("GKDTOP_PROBE", "1", True), ("GKDTOP_RUN_DIR", str(run_dir), True), ("PYTHONPATH", path, True)]
    env_set: dict[str, str] = {}
    env_kept: dict[str, str] = {}
    for name, value, explicit in wanted:
        if not explicit and base.get(name):
            env_kept[name] = base[name]
        else:
            env_set[name] = value
    return RunPlan(command=list(opts.command), run_dir=run_dir, log_path=log_path, env_set=env_set,
                   env_kept=env_kept, env={**base, **env_set}, probe=opts.probe)


def dry_run_text(plan: RunPlan) -> str:
    """What `--dry-run` prints: comments, then one NAME=value line per variable gkdtop would set."""
    out = ["# gkdtop run --dry-run: nothing started, nothing created",
           f"# command: {shlex.join(plan.command)}",
           f"# run directory: {plan.run_dir}",
           f"# log: {plan.log_path}",
           "# environment gkdtop would set:"]
    out += [f"{name}={shlex.quote(value)}" for name, value in plan.env_set.items()]
    if plan.env_kept:
        out.append("# left at your own value: " + ", ".join(f"{k}={v}" for k, v in plan.env_kept.items()))
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ how a job ended


def oom_kills(pid: int | str = "self") -> int | None:
    """The OOM-kill counter of the process's cgroup (v2 memory.events), or None where there is none."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        rel = next(line.split("::", 1)[1] for line in lines if line.startswith("0::"))
        events = (Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.events").read_text()
    except (OSError, StopIteration):
        return None
    for line in events.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def shell_status(returncode: int) -> int:
    """Popen's returncode as a shell reports it: -N (killed by signal N) -> 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int, oom_killed: bool = False) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}" + (" (success)" if returncode == 0 else "")
    sig = -returncode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    text = f"killed by {name} (signal {sig}, exit status {128 + sig})"
    if oom_killed:
        text += ": OOM-killed (the kernel's OOM killer fired in its cgroup during the run)"
    return text


# ------------------------------------------------------------------ the running job


class _Tee:
    """The job's stdout and stderr into one log, whole lines at a time (a `\\r` bar counts as a line end)."""

    def __init__(self, log: IO[bytes]) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.pending: dict[str, bytes] = {}
        self.closed = False

    def feed(self, stream: str, data: bytes, final: bool = False) -> None:
        with self.lock:
            if self.closed:
                return
            buf = self.pending.get(stream, b"") + data
            cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
            if final or len(buf) - cut > 65536:
                cut = len(buf)
            if cut:
                with contextlib.suppress(OSError, ValueError):
                    self.log.write(buf[:cut])
                    self.log.flush()
            self.pending[stream] = buf[cut:]

    def close(self) -> None:
        for stream in list(self.pending):
            self.feed(stream, b"", final=True)
        with self.lock:
            self.closed = True
            with contextlib.suppress(OSError):
                self.log.close()


def _pump(fd: int, stream: str, echo: IO[bytes] | None, tee: _Tee) -> None:
    """Copy one pipe of the job to the terminal (as it comes) and to the log (by line) until EOF."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        if echo is not None:
            try:
                echo.write(chunk)
                echo.flush()
            except (OSError, ValueError):
                echo = None  # our stdout went away (`| head`): keep logging
        tee.feed(stream, chunk)
    tee.feed(stream, b"", final=True)
    with contextlib.suppress(OSError):
        os.close(fd)


class JobRun:
    """A job started by `start`: its process group, how it ended, and a one-line status for the dashboard."""

    def __init__(self, plan: RunPlan, proc: subprocess.Popen[bytes], started: float, oom_before: int | None,
                 pumps: Sequence[threading.Thread] = (), tee: _Tee | None = None) -> None:
        self.plan = plan
        self._proc = proc
        self.pid = proc.pid
        self.started = started
        self.ended: float | None = None
        self._oom_before = oom_before
        self._oom_after: int | None = None
        self._pumps = list(pumps)
        self._tee = tee
        self.stopped_by_us = False

    def __repr__(self) -> str:
        return f"JobRun(pid={self.pid}, returncode={self.returncode}, log={str(self.plan.log_path)!r})"

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        code = self._proc.poll()
        if code is not None and self.ended is None:
            self.ended = time.time()
            self._oom_after = oom_kills()
        return code

    def running(self) -> bool:
        return self.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    @property
    def oom_killed(self) -> bool:
        """Killed by SIGKILL while the cgroup's OOM-kill counter went up."""
        return (self.poll() == -signal.SIGKILL and self._oom_before is not None and self._oom_after is not None
                and self._oom_after > self._oom_before)

    @property
    def exit_status(self) -> int | None:
        code = self.poll()
        return None if code is None else shell_status(code)

    def outcome(self) -> str:
        code = self.poll()
        return "running" if code is None else describe_exit(code, self.oom_killed)

    def status_line(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        cmd = shlex.join(self.plan.command)
        cmd = cmd if len(cmd) <= 80 else cmd[:77] + "..."
        if self.running():
            return f"job {self.pid} running for {human_duration(now - self.started)}: {cmd}   (ctrl+c interrupts it)"
        end = self.ended or now
        stamp = time.strftime("%H:%M:%S", time.localtime(end))
        return (f"job {self.pid} {self.outcome()} at {stamp} after {human_duration(end - self.started)}: {cmd}"
                "   (last state kept; q quits)")

    def send_signal(self, signum: int) -> bool:
        """Signal the job's process group, as a shell does for its foreground job; False if it is gone."""
        if not self.running():
            return False
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def interrupt(self) -> bool:
        return self.send_signal(signal.SIGINT)

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the job's group, SIGKILL after `grace` s, then its descendants that left the group."""
        import psutil

        from gkdtop import proctree

        self.stopped_by_us = True
        job: list[psutil.Process] = []
        kids: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            job = [psutil.Process(self.pid)]
            kids = job[0].children(recursive=True)
        if self.running():
            proctree.terminate(job, grace, kill_wait=10.0, group=self.pid)
        self.wait(10.0)  # reaps the job: its exit status is ours to report
        left = []
        for kid in kids:
            with contextlib.suppress(psutil.Error):
                if kid.create_time() >= self.started - 1 and not proctree.gone(kid):
                    left.append(kid)
        proctree.terminate(left, grace=3.0)
        return self.exit_status

    def survivors(self) -> list[tuple[int, str]]:
        """(PID, name) of this user's processes still running from the job after it ended: its process group,
        and any process whose environment names the run directory (a daemon that left the group with setsid)."""
        import psutil

        run_dir = str(self.plan.run_dir)
        found = []
        for proc in psutil.process_iter(["pid", "name", "uids", "create_time"]):
            info = proc.info
            if info["pid"] == os.getpid() or not info["uids"] or info["uids"].real != os.getuid() \
                    or (info["create_time"] or 0) < self.started - 1:
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if os.getpgid(info["pid"]) == self.pid or any(v.startswith(run_dir) for v in proc.environ().values()):
                    found.append((info["pid"], info["name"] or "?"))
        return found

    def finish_output(self, timeout: float = 5.0) -> None:
        """Wait for the log pumps (the job's output after its exit), then close the log."""
        deadline = time.monotonic() + timeout
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))
        if self._tee is not None:
            self._tee.close()


def _bootstrap(run_dir: Path) -> None:
    """`<run dir>/python/gkdtop`: a link to this gkdtop package, the only thing PYTHONPATH gains."""
    folder = run_dir / "python"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "gkdtop"
    if not link.exists():
        link.symlink_to(Path(__file__).resolve().parent, target_is_directory=True)


def open_log(path: Path) -> IO[bytes]:
    """The job's log, opened for appending (its directory made); SetupError naming it if it can't be.

    Non-blocking, so a FIFO with no reader at that path is refused (ENXIO) rather than waited on; only
    a regular file is taken, since the dashboard follows the log by reading it back.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SetupError(f"cannot write the log file {path}: {path.parent} is not a directory") from None
    except OSError as exc:
        raise SetupError(f"cannot write the log file {path}: cannot create {path.parent}: "
                         f"{exc.strerror or exc}") from None
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        reason = "a FIFO nobody reads" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        raise SetupError(f"cannot write the log file {path}: {reason}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SetupError(f"cannot write the log file {path}: not a regular file")
        os.set_blocking(fd, True)  # the job writes through it: a full disk should block, not fail EAGAIN
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab", buffering=0)


def start(plan: RunPlan, tee: bool = False) -> JobRun:
    """Start the job in its own process group; returns at once.

    With `tee`, its stdout/stderr pass through to ours and into the log (`--no-ui`). Without, they go
    straight into the log file, so the job keeps running if the dashboard quits and leaves it.
    The job's stdin is /dev/null: it is not the terminal's foreground job, so reading it would stop it.
    """
    started = time.time()
    try:  # the job's dumps and probe answers are read back as this user's: nobody else may write here
        private_dir(plan.run_dir)
        if plan.probe:
            _bootstrap(plan.run_dir)
    except Untrusted as exc:  # (another user's folder, or one others can write: not ours to trust)
        raise SetupError(f"cannot create the run directory {plan.run_dir}: {exc}") from None
    except OSError as exc:
        raise SetupError(f"cannot create the run directory {plan.run_dir}: {exc.strerror or exc}") from None
    log = open_log(plan.log_path)
    oom_before = oom_kills()
    common = {"stdin": subprocess.DEVNULL, "env": plan.env, "process_group": 0}
    pumps: list[threading.Thread] = []
    sink: _Tee | None = None
    try:
        if tee:
            sink = _Tee(log)
            proc = subprocess.Popen(plan.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **common)
            assert proc.stdout is not None and proc.stderr is not None
            for name, pipe, echo in (("stdout", proc.stdout, sys.stdout), ("stderr", proc.stderr, sys.stderr)):
                out = getattr(echo, "buffer", None)
                pump = threading.Thread(target=_pump, args=(os.dup(pipe.fileno()), name, out, sink),
                                        name=f"gkdtop-tee-{name}", daemon=True)
                pipe.close()
                pump.start()
                pumps.append(pump)
        else:
            with log:  # the child keeps its own descriptor
                proc = subprocess.Popen(plan.command, stdout=log, stderr=log, **common)
    except OSError:
        if sink is not None:
            sink.close()
        log.close()
        raise
    job = JobRun(plan, proc, started, oom_before, pumps, sink)
    info = {"pid": proc.pid, "command": plan.command, "log": str(plan.log_path), "run_dir": str(plan.run_dir),
            "started": started, "env_set": plan.env_set, "env_kept": plan.env_kept,
            "trace_prefix": plan.trace_prefix, "launcher_pid": os.getpid()}
    with contextlib.suppress(OSError):
        write_private(plan.run_dir / "run.json", (json.dumps(info, indent=1) + "\n").encode())
    return job


def record_end(job: JobRun) -> None:
    """Add how the job ended to run.json (for the bundle and for whoever looks at the run later)."""
    path = job.plan.run_dir / "run.json"
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(read_owned(path, os.geteuid(), 1 << 20))
        info.update(ended=job.ended, returncode=job.returncode, exit_status=job.exit_status, outcome=job.outcome(),
                    stopped_by_gkdtop=job.stopped_by_us)
        write_private(path, (json.dumps(info, indent=1) + "\n").encode())


def run_no_ui(plan: RunPlan) -> int:
    """`gkdtop run --no-ui`: run and log in the foreground; signals go to the job; its status is ours."""
    in_main = threading.current_thread() is threading.main_thread()
    try:
        job = start(plan, tee=True)
    except SetupError as exc:
        print(f"gkdtop run: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gkdtop run: cannot start {plan.command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    previous: dict[int, object] = {}
    interrupts: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        """Each signal to the job's group, as a shell does; a second Ctrl-C the job ignored stops it."""
        if signum == signal.SIGINT and interrupts and job.running():
            if len(interrupts) == 1:
                print(f"gkdtop run: Ctrl-C again, and the job is still running: SIGTERM to its processes, SIGKILL "
                      f"in {STOP_GRACE_S:g} s", file=sys.stderr)
                threading.Thread(target=job.stop, name="gkdtop-run-stop", daemon=True).start()
            interrupts.append(signum)
            return
        if signum == signal.SIGINT and job.send_signal(signum):
            interrupts.append(signum)
            print("gkdtop run: Ctrl-C passed to the job; press it again to stop the job", file=sys.stderr)
            return
        job.send_signal(signum)

    if in_main:
        for signum in FORWARDED_SIGNALS:
            previous[signum] = signal.signal(signum, forward)
    print(f"gkdtop run: job pid {job.pid}, run directory {plan.run_dir}, log {plan.log_path}", file=sys.stderr)
    try:
        job.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
    job.finish_output()
    record_end(job)
    print(f"gkdtop run: job {job.outcome()}; log {plan.log_path}", file=sys.stderr)
    left = job.survivors()
    if left:
        print(f"gkdtop run: {survivors_line(left)}", file=sys.stderr)
    return job.exit_status or 0


def survivors_line(procs: Sequence[tuple[int, str]]) -> str:
    """One line naming what the job left running (a daemon, a server started with setsid)."""
    named = ", ".join(f"{pid} ({shown(name)})" for pid, name in procs[:8])
    more = f" and {len(procs) - 8} more" if len(procs) > 8 else ""
    return (f"the job left {len(procs)} process{'es' if len(procs) > 1 else ''} running: {named}{more} "
            "(still running; `kill` them, or `gkdtop cleanup` for Ray and engine debris)")
