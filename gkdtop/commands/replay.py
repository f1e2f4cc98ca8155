"""`gkdtop replay LOG...`: judge finished logs after the fact (the work is in gkdtop/replay.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import SECONDS

if TYPE_CHECKING:
    from gkdtop.config import Config

PIPE_FILTER = True


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("replay", help="timeline, steps, errors and findings of finished logs")
    parser.add_argument("files", nargs="+", metavar="LOG")
    parser.add_argument("--config", metavar="FILE")
    parser.add_argument("--stall-after", type=SECONDS, metavar="SECONDS")
    parser.add_argument("--json", action="store_true", help="print JSON (schema in docs/replay.md)")
    parser.add_argument("--csv", metavar="FILE",
                        help="also write every step's metrics to FILE, one row per step (docs/replay.md)")
    parser.add_argument("--why", action="store_true",
                        help="also print the log lines each statement stands on (file:line and the line)")
    parser.add_argument("--show-secrets", action="store_true",
                        help="print the tokens and passwords quoted log lines hold (those with a secret's own shape, "
                        "a known token format or a URL's password, are redacted by default: a report is pasted into "
                        "issues and chats)")
    parser.add_argument("--alerts", action="store_true",
                        help="instead, the events `gkdtop watch` would have sent while each log was written, "
                        "at the pace of its own stamps (docs/alerts.md)")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """0, or 2 with one line naming the input that can't be replayed."""
    from gkdtop import jsonout
    from gkdtop import replay as rp

    for path in args.files:
        if (problem := rp.check_input(path)) is not None:
            print(f"gkdtop replay: {problem}", file=sys.stderr)
            return 2
        if (note := rp.input_note(path)) is not None:
            print(f"gkdtop replay: {note}", file=sys.stderr)
    if args.csv is not None:
        try:
            with open(args.csv, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            print(f"gkdtop replay: --csv {args.csv}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.alerts:
        return _alerts(args, config)
    try:
        report = rp.replay(args.files, config, ahead=True, csv_path=args.csv)
    except OSError as exc:
        print(f"gkdtop replay: {exc}", file=sys.stderr)
        return 2
    from gkdtop.actions.redact import redact_shapes

    show = (lambda doc: doc) if args.show_secrets else redact_shapes
    if args.json:
        jsonout.dump(show(rp.report_json(report)), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(show(rp.report_text(report, why=args.why)))
    return 0


def _alerts(args: argparse.Namespace, config: Config) -> int:
    from gkdtop import jsonout
    from gkdtop.alerts.paced import paced_events
    from gkdtop.commands.watch import print_event

    found = []
    for path in args.files:
        try:
            events = paced_events(path, config)
        except OSError as exc:
            print(f"gkdtop replay: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if args.json:
            found += [{"file": path, **event.as_json()} for event in events]
        else:
            for event in events:
                print_event(event, as_json=False)
            if not events:
                print(f"{path}: no event")
    if args.json:
        jsonout.dump(found, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0
