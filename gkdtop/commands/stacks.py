"""`gkdtop stacks`: the job's Python stacks through py-spy, here or (--ray) on every Ray node."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gkdtop.commands.options import PID_MAX, SECONDS, int_in

if TYPE_CHECKING:
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("stacks", help="dump the Python stacks of the job's processes (py-spy), grouped")
    parser.add_argument("pids", nargs="*", type=int_in(1, PID_MAX, "a process id"), metavar="PID")
    parser.add_argument("--native", action="store_true", help="include C/C++ frames")
    parser.add_argument("--json", action="store_true", help="print JSON (schema 1)")
    parser.add_argument("--timeout", type=SECONDS, default=10.0, metavar="S", help="per-process py-spy timeout")
    parser.add_argument("--out-dir", metavar="DIR",
                        help="where to save it (default: $XDG_CACHE_HOME/gkdtop/stacks)")
    parser.add_argument("--config", metavar="FILE")
    parser.add_argument("--ray", action="store_true", help="the Ray actors on every node, via the dashboard")
    parser.add_argument("--ray-agent", action="store_true",
                        help="with --ray: where the dashboard refuses, dump through a temporary gkdtop actor per node")
    parser.add_argument("--ray-address", metavar="ADDR", help="with --ray: dashboard URL or GCS host:port")
    parser.add_argument("--actor", action="append", metavar="CLASS", help="with --ray: only actors of this class")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """0 when a process (or actor) was dumped, 1 when none could be, 2 for a bad argument."""
    from gkdtop.actions.stacks import cli as stacks_cli

    if args.ray:
        return stacks_cli.run_ray(args.ray_address, args.native, args.json, args.timeout, args.out_dir,
                                  agent=args.ray_agent, classes=args.actor)
    return stacks_cli.run(args.pids, args.native, args.json, args.timeout, args.out_dir, config.driver_patterns)
