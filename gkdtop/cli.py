"""Entry point: `gkdtop` (the dashboard) and its subcommands. Imports stay lazy: first frame first."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage block of a parser this size is a screenful)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


MAX_SECONDS = 1e6  # ~11 days: past that, timers overflow (threading's TIMEOUT_MAX, select's timeout)
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no PID is larger


def _float_in(low: float, high: float, low_ok: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in (low, high] (or [low, high]); inf, nan, -5 are usage errors."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not (math.isfinite(value) and (value >= low if low_ok else value > low) and value <= high):
            bound = f"at least {low:,.10g}" if low_ok else f"more than {low:,.10g}"
            raise argparse.ArgumentTypeError(f"expected {bound} and at most {high:,.10g} seconds, got {text!r}")
        return value

    parse.__name__ = "seconds"
    return parse


def _int_in(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


SECONDS = _float_in(0.0, MAX_SECONDS)  # a positive number of seconds
SECONDS_OR_ZERO = _float_in(0.0, MAX_SECONDS, low_ok=True)
REFRESH = _float_in(0.01, 3600.0, low_ok=True)  # as the config's refresh range


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", action="append", default=[], metavar="PATH",
                        help="log file or glob to follow (repeatable); "
                        "default: ./train.log and the newest Ray session's logs")
    parser.add_argument("--config", metavar="FILE", help="YAML config (default: $XDG_CONFIG_HOME/gkdtop/config.yaml)")
    parser.add_argument("--stall-after", type=SECONDS, metavar="SECONDS",
                        help="seconds without progress before a phase is STALLED, for every phase "
                        "(default: 120, longer for slow phases such as actor init)")
    parser.add_argument("--ray-address", metavar="ADDR", help="Ray cluster (GCS host:port or dashboard URL)")
    parser.add_argument("--filter", metavar="REGEX", help="log filter (default: the config's 'default' preset)")
    parser.add_argument("--ray-logs", action="append", default=[], metavar="GLOB",
                        help="follow Ray log files matching GLOB on every node, e.g. 'worker-*.out' (repeatable; "
                        "docs/multinode.md)")


def build_parser() -> argparse.ArgumentParser:
    from gkdtop import __version__

    parser = _Parser(prog="gkdtop", description="A terminal dashboard for distributed training jobs.",
                                     allow_abbrev=False)  # `stacks --ray` is not an abbreviation of --ray-address
    parser.add_argument("--version", action="version", version=f"gkdtop {__version__}")
    _common(parser)
    parser.add_argument("--refresh", type=REFRESH, metavar="SECONDS", help="UI refresh interval (default 1)")
    sub = parser.add_subparsers(dest="command")
    snap = sub.add_parser("snapshot", help="print the current state once (or after --duration)")
    _common(snap)
    snap.add_argument("--json", action="store_true", help="print JSON (schema in docs/snapshot.md)")
    snap.add_argument("--duration", type=SECONDS_OR_ZERO, default=0.0, metavar="S", help="collect for S seconds first")
    snap.add_argument("--lines", type=_int_in(0, 1_000_000), default=50, help="how many matched log lines to include")
    rep = sub.add_parser("replay", help="timeline, steps, errors and findings of finished logs")
    rep.add_argument("files", nargs="+", metavar="LOG")
    rep.add_argument("--config", metavar="FILE")
    rep.add_argument("--stall-after", type=SECONDS, metavar="SECONDS")
    rep.add_argument("--json", action="store_true", help="print JSON (schema in docs/replay.md)")
    stk = sub.add_parser("stacks", help="dump the Python stacks of the job's processes (py-spy), grouped")
    stk.add_argument("pids", nargs="*", type=_int_in(1, PID_MAX, "a process id"), metavar="PID")
    stk.add_argument("--native", action="store_true", help="include C/C++ frames")
    stk.add_argument("--json", action="store_true", help="print JSON (schema 1)")
    stk.add_argument("--timeout", type=SECONDS, default=10.0, metavar="S", help="per-process py-spy timeout")
    stk.add_argument("--out-dir", metavar="DIR", help="where to save it (default: $XDG_CACHE_HOME/gkdtop/stacks)")
    stk.add_argument("--config", metavar="FILE")
    stk.add_argument("--ray", action="store_true", help="the Ray actors on every node, via the dashboard")
    stk.add_argument("--ray-agent", action="store_true",
                     help="with --ray: where the dashboard refuses, dump through a temporary gkdtop actor per node")
    stk.add_argument("--ray-address", metavar="ADDR", help="with --ray: dashboard URL or GCS host:port")
    stk.add_argument("--actor", action="append", metavar="CLASS", help="with --ray: only actors of this class")
    clean = sub.add_parser("cleanup", help="find the debris of a crashed run; preview it, confirm, remove it")
    clean.add_argument("--config", metavar="FILE")
    clean.add_argument("--dry-run", action="store_true", help="print the plan and do nothing")
    clean.add_argument("-y", "--yes", action="store_true", help="act without asking")
    clean.add_argument("--json", action="store_true", help="print the plan and the results as JSON")
    clean.add_argument("--grace", type=SECONDS_OR_ZERO, default=5.0, metavar="SECONDS")
    bun = sub.add_parser("bundle", help="write a diagnostic .tar.gz (secrets redacted, mode 0600)")
    _common(bun)
    bun.add_argument("-o", "--output", metavar="PATH")
    doc = sub.add_parser("doctor", help="check this node and environment before a run")
    doc.add_argument("--config", metavar="FILE")
    doc.add_argument("--ray-address", metavar="ADDR")
    doc.add_argument("--json", action="store_true", help="print JSON (schema in docs/schemas.md)")
    doc.add_argument("--actor-gpus", type=_int_in(0, 1_000_000), metavar="N")
    doc.add_argument("--rollout-gpus", type=_int_in(0, 1_000_000), metavar="M")
    doc.add_argument("--teacher-gpus", type=_int_in(0, 1_000_000), metavar="K")
    doc.add_argument("--nodes", type=_int_in(1, 100_000), metavar="X")
    demo = sub.add_parser("demo", help="run the built-in miniature GKD job and watch it")
    _common(demo)
    demo.add_argument("--steps", type=_int_in(1, 1_000_000), default=20)
    demo.add_argument("--log-file", metavar="PATH", help="where the job logs (default: a new run directory)")
    from gkdtop.demo import FAULTS  # names only: importing it imports neither ray nor torch

    demo.add_argument("--fault", metavar="NAME", help=", ".join(FAULTS))
    demo.add_argument("--no-ui", action="store_true", help="run the job alone, without the dashboard")
    demo.add_argument("--markers", choices=("verl", "playbook"), default="verl",
                      help="what the job prints: verl's real lines (default) or the old playbook's markers")
    run = sub.add_parser("run", help="run a job with a working debug environment, log it and watch it (docs/run.md)",
                         usage="gkdtop run [options] -- CMD [ARG ...]")
    _common(run)
    run.add_argument("--refresh", type=REFRESH, metavar="SECONDS", help="UI refresh interval (default 1)")
    run.add_argument("--log-file", metavar="PATH", help="the job's log (default: job.log in a new run directory)")
    run.add_argument("--nccl-debug", metavar="LEVEL", type=str.upper, choices=("VERSION", "WARN", "INFO", "TRACE"),
                     help="NCCL_DEBUG for the job (default WARN, or your own NCCL_DEBUG)")
    run.add_argument("--no-probe", action="store_true", help="do not enable gkdtop.probe in the job")
    run.add_argument("--no-ui", action="store_true", help="just run and log (for sbatch scripts)")
    run.add_argument("--dry-run", action="store_true", help="print the environment it would set, start nothing")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the job's command line")
    from gkdtop.commands import serve

    serve.add_parser(sub, _common, _int_in, REFRESH)
    return parser


def load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from gkdtop.config import load_config

    config = load_config(args.config)
    if getattr(args, "stall_after", None) is not None:
        config.stall_after = args.stall_after
        for rule in config.phases:  # said on the command line: it holds for every phase, the slow ones too
            rule.stall_after = None
    if getattr(args, "filter", None) is not None:
        from gkdtop.analysis.matcher import PatternError, compile_pattern

        try:
            compile_pattern(args.filter, every_engine=False)
        except PatternError as exc:
            raise SystemExit(f"gkdtop: --filter: {exc}") from None
        config.filters["default"] = args.filter
    return config


def main(argv: list[str] | None = None) -> int:
    from gkdtop.config import ConfigError

    args = build_parser().parse_args(argv)
    if args.command in ("snapshot", "replay", "doctor"):
        import signal

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends us quietly, like any filter
    try:
        config = load(args)
    except ConfigError as exc:
        print(f"gkdtop: {exc}", file=sys.stderr)
        return 2
    if args.command == "snapshot":
        return snapshot(args, config)
    if args.command == "replay":
        return replay(args, config)
    if args.command == "stacks":
        from gkdtop.actions.stacks import cli as stacks_cli

        if args.ray:
            return stacks_cli.run_ray(args.ray_address, args.native, args.json, args.timeout, args.out_dir,
                                  agent=args.ray_agent, classes=args.actor)
        return stacks_cli.run(args.pids, args.native, args.json, args.timeout, args.out_dir, config.driver_patterns)
    if args.command == "cleanup":
        from gkdtop.actions.cleanup import cli as cleanup_cli

        return cleanup_cli.run(args.dry_run, args.yes, args.json, args.grace)
    if args.command == "bundle":
        from gkdtop.actions.bundle import bundle_command

        return bundle_command(args.output, args.log, config, args.ray_address)
    if args.command == "doctor":
        from gkdtop.doctor import doctor_command, plan_from_args

        return doctor_command(args.ray_address, plan_from_args(args), args.json)
    if args.command == "demo":
        return demo(args, config)
    if args.command == "run":
        return run_job(args, config)
    if args.command == "serve":
        from gkdtop.commands import serve

        return serve.run(args, config)
    return dashboard(args, config)


def steady_heap() -> None:
    """Keep a long-running dashboard's RSS flat (glibc only; elsewhere nothing happens).

    glibc raises its mmap threshold each time a large block is freed, so the log follower's 1 MB
    chunks end up on the heap, and each worker thread gets its own arena: the heap fragments and
    RSS crept up ~0.5 MiB a minute in a 30-minute soak with no Python object growing. A fixed
    threshold (big chunks come from and go back to the OS) and two arenas stop that.
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-8, 2)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def dashboard(args: argparse.Namespace, config, root_pids: tuple[int, ...] = ()) -> int:  # type: ignore[no-untyped-def]
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp

    steady_heap()
    monitor = Monitor(config, logs=args.log or None, ray_address=args.ray_address, root_pids=root_pids,
                      ray_logs=getattr(args, "ray_logs", ()))
    GkdtopApp(config, monitor, refresh=getattr(args, "refresh", None)).run()
    return 0


def snapshot(args: argparse.Namespace, config) -> int:  # type: ignore[no-untyped-def]
    import asyncio

    from gkdtop import jsonout
    from gkdtop import snapshot as snap
    from gkdtop.monitor import Monitor

    monitor = Monitor(config, logs=args.log or None, ray_address=args.ray_address, ray_logs=args.ray_logs)

    async def collect() -> None:
        if args.duration > 0:
            from gkdtop.actions.stall_stacks import StallStacker

            monitor.start(stall_dump=StallStacker)
            await asyncio.sleep(args.duration)
            await monitor.stop()
        else:
            await monitor.collect_once()
            await monitor.stop()

    asyncio.run(collect())
    doc = snap.build(monitor.store, config.default_filter, lines=args.lines)
    if args.json:
        jsonout.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(snap.text_summary(doc))
    return 0


def replay(args: argparse.Namespace, config) -> int:  # type: ignore[no-untyped-def]
    from gkdtop import jsonout
    from gkdtop import replay as rp

    for path in args.files:
        if (problem := rp.check_input(path)) is not None:
            print(f"gkdtop replay: {problem}", file=sys.stderr)
            return 2
    try:
        report = rp.replay(args.files, config)
    except OSError as exc:
        print(f"gkdtop replay: {exc}", file=sys.stderr)
        return 2
    if args.json:
        jsonout.dump(rp.report_json(report), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(rp.report_text(report))
    return 0


def demo(args: argparse.Namespace, config) -> int:  # type: ignore[no-untyped-def]
    from gkdtop.demo.launcher import DemoOptions, main_no_ui, start_demo

    opts = DemoOptions(steps=args.steps, log_file=args.log_file, fault=args.fault, ray_address=args.ray_address,
                       markers=args.markers)
    if args.no_ui:
        return main_no_ui(opts)
    run = start_demo(opts)
    print(f"gkdtop demo: run directory {run.run_dir}, log {run.log_path}", file=sys.stderr)
    try:
        args.log = [str(run.log_path), *list(args.log)]
        args.ray_address = args.ray_address or run.dashboard_url or run.ray_address
        os.environ.setdefault("GKDTOP_DEMO", "1")
        dashboard(args, config, root_pids=(run.pid,))
    finally:
        run.stop()
    return 0


def run_job(args: argparse.Namespace, config) -> int:  # type: ignore[no-untyped-def]
    """`gkdtop run`: the job's exit status is ours; quitting the dashboard asks whether to stop the job."""
    from gkdtop import jobrun

    cmd = list(args.cmd)[1:] if list(args.cmd)[:1] == ["--"] else list(args.cmd)
    opts = jobrun.RunOptions(command=cmd, log_file=args.log_file, nccl_debug=args.nccl_debug, probe=not args.no_probe)
    try:
        plan = jobrun.plan_run(opts)
    except (ValueError, RuntimeError) as exc:
        print(f"gkdtop run: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        sys.stdout.write(jobrun.dry_run_text(plan))
        return 0
    if args.no_ui:
        return jobrun.run_no_ui(plan)
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp

    try:
        job = jobrun.start(plan)
    except jobrun.SetupError as exc:
        print(f"gkdtop run: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gkdtop run: cannot start {cmd[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    monitor = Monitor(config, logs=[str(plan.log_path), *args.log], ray_address=args.ray_address,
                      root_pids=(job.pid,))
    choice = None
    steady_heap()
    try:
        choice = GkdtopApp(config, monitor, refresh=args.refresh, job=job).run()
    finally:
        if choice == "stop" and job.running():
            print(f"gkdtop run: stopping job {job.pid} (SIGTERM, SIGKILL after {jobrun.STOP_GRACE_S:g} s) ...",
                  file=sys.stderr)
            job.stop()
        if job.running():
            print(f"gkdtop run: job {job.pid} left running; log {plan.log_path}; stop it with: kill -TERM -{job.pid}",
                  file=sys.stderr)
        else:
            jobrun.record_end(job)
            print(f"gkdtop run: job {job.outcome()}; log {plan.log_path}", file=sys.stderr)
    return job.exit_status or 0


if __name__ == "__main__":
    raise SystemExit(main())
