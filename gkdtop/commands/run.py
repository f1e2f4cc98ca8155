"""`gkdtop run -- CMD`: start a job with a working debug environment, log it and watch it (docs/run.md)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import add_alerts, add_common, add_refresh

if TYPE_CHECKING:
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("run", help="run a job with a working debug environment, log it and watch it "
                            "(docs/run.md)", usage="gkdtop run [options] -- CMD [ARG ...]")
    add_common(parser)
    add_refresh(parser)
    add_alerts(parser)
    parser.add_argument("--log-file", metavar="PATH", help="the job's log (default: job.log in a new run directory)")
    parser.add_argument("--nccl-debug", metavar="LEVEL", type=str.upper,
                        choices=("VERSION", "WARN", "INFO", "TRACE"),
                        help="NCCL_DEBUG for the job (default WARN, or your own NCCL_DEBUG)")
    parser.add_argument("--no-probe", action="store_true", help="do not enable gkdtop.probe in the job")
    parser.add_argument("--no-ui", action="store_true", help="just run and log (for sbatch scripts)")
    parser.add_argument("--dry-run", action="store_true", help="print the environment it would set, start nothing")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the job's command line")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """The job's exit status is ours; quitting the dashboard asks whether to stop the job."""
    from gkdtop import jobrun
    from gkdtop.heap import steady_heap

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
        if getattr(args, "notify", None) or getattr(args, "metrics_port", None) is not None:
            print("gkdtop run: --notify and --metrics-port need the dashboard; with --no-ui run `gkdtop watch --log "
                  f"{plan.log_path} --notify URL` beside the job (docs/alerts.md)", file=sys.stderr)
            return 2
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
        choice = GkdtopApp(config, monitor, refresh=args.refresh, job=job, alert_args=args).run()
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
            if left := job.survivors():
                print(f"gkdtop run: {jobrun.survivors_line(left)}", file=sys.stderr)
    return job.exit_status or 0
