"""`gkdtop cleanup`: the debris of a crashed run, previewed, confirmed, removed (actions/cleanup.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gkdtop.commands.options import SECONDS_OR_ZERO

if TYPE_CHECKING:
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("cleanup", help="find the debris of a crashed run; preview it, confirm, remove it")
    parser.add_argument("--config", metavar="FILE")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and do nothing")
    parser.add_argument("-y", "--yes", action="store_true", help="act without asking")
    parser.add_argument("--json", action="store_true", help="print the plan and the results as JSON")
    parser.add_argument("--grace", type=SECONDS_OR_ZERO, default=5.0, metavar="SECONDS")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """0 done or nothing to do; 1 not confirmed, or an item failed."""
    from gkdtop.actions.cleanup import cli as cleanup_cli

    return cleanup_cli.run(args.dry_run, args.yes, args.json, args.grace)
