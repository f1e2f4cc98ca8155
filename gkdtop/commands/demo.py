"""`gkdtop demo`: start the built-in miniature GKD job (gkdtop/demo/) and watch it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import add_common, int_in

if TYPE_CHECKING:
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    from gkdtop.demo import FAULTS  # names only: importing it imports neither ray nor torch

    parser = sub.add_parser("demo", help="run the built-in miniature GKD job and watch it")
    add_common(parser)
    parser.add_argument("--steps", type=int_in(1, 1_000_000), default=20)
    parser.add_argument("--log-file", metavar="PATH", help="where the job logs (default: a new run directory)")
    parser.add_argument("--fault", metavar="NAME", help=", ".join(FAULTS))
    parser.add_argument("--no-ui", action="store_true", help="run the job alone, without the dashboard")
    parser.add_argument("--markers", choices=("verl", "playbook"), default="verl",
                        help="what the job prints: verl's real lines (default) or the old playbook's markers")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    from gkdtop.cli import dashboard
    from gkdtop.demo.launcher import DemoOptions, main_no_ui, start_demo
    from gkdtop.safeopen import Untrusted

    opts = DemoOptions(steps=args.steps, log_file=args.log_file, fault=args.fault, ray_address=args.ray_address,
                       markers=args.markers)
    try:
        if args.no_ui:
            return main_no_ui(opts)
        job = start_demo(opts)
    except Untrusted as exc:  # the runs folder is another user's, or open to them
        print(f"gkdtop demo: cannot create the run directory: {exc}", file=sys.stderr)
        return 2
    print(f"gkdtop demo: run directory {job.run_dir}, log {job.log_path}", file=sys.stderr)
    try:
        args.log = [str(job.log_path), *list(args.log)]
        args.ray_address = args.ray_address or job.dashboard_url or job.ray_address
        os.environ.setdefault("GKDTOP_DEMO", "1")
        dashboard(args, config, root_pids=(job.pid,))
    finally:
        job.stop()
    return 0
