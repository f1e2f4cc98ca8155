"""`gkdtop bundle`: collect once and write the diagnostic .tar.gz (actions/bundle/)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gkdtop.commands.options import add_common

if TYPE_CHECKING:
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("bundle", help="write a diagnostic .tar.gz (secrets redacted, mode 0600)")
    add_common(parser)
    parser.add_argument("-o", "--output", metavar="PATH")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    from gkdtop.actions.bundle import bundle_command

    return bundle_command(args.output, args.log, config, args.ray_address)
