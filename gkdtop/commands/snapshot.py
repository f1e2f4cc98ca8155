"""`gkdtop snapshot`: collect once (or for --duration) and print the state, as text or JSON."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import SECONDS_OR_ZERO, add_common, int_in

if TYPE_CHECKING:
    from gkdtop.config import Config

PIPE_FILTER = True  # `| head` ends it quietly, like any filter


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("snapshot", help="print the current state once (or after --duration)")
    add_common(parser)
    parser.add_argument("--json", action="store_true", help="print JSON (schema in docs/snapshot.md)")
    parser.add_argument("--duration", type=SECONDS_OR_ZERO, default=0.0, metavar="S",
                        help="collect for S seconds first")
    parser.add_argument("--lines", type=int_in(0, 1_000_000), default=50,
                        help="how many matched log lines to include")
    parser.add_argument("--show-secrets", action="store_true",
                        help="print the tokens and passwords quoted log lines hold (redacted by default)")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
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
    if not args.show_secrets:  # (the text is built from the document: one pass covers both)
        from gkdtop.actions.redact import redact_shapes

        doc = redact_shapes(doc)
    if args.json:
        jsonout.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(snap.text_summary(doc))
    return 0
