"""Entry point: `gkdtop`'s common options, the dashboard, and a subcommand per gkdtop/commands/ module.

Imports stay lazy: first frame first.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from gkdtop.config import Config
    from gkdtop.monitor import Monitor


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage block of a parser this size is a screenful)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from gkdtop import __version__, commands
    from gkdtop.commands.options import add_alerts, add_common, add_refresh

    parser = _Parser(prog="gkdtop", description="A terminal dashboard for distributed training jobs.",
                     allow_abbrev=False)  # `stacks --ray` is not an abbreviation of --ray-address
    parser.add_argument("--version", action="version", version=f"gkdtop {__version__}")
    add_common(parser)
    add_refresh(parser)
    add_alerts(parser)
    sub = parser.add_subparsers(dest="command")
    for name in commands.NAMES:
        commands.module(name).add_parser(sub)
    # `gkdtop --config X replay LOG` means what `gkdtop replay --config X LOG` does: an option the
    # subcommand shares with the dashboard keeps the value given before it unless given again after.
    shared = {action.dest for action in parser._actions if action.option_strings and action.dest != "help"}
    for subparser in sub.choices.values():
        for action in subparser._actions:
            if action.option_strings and action.dest in shared:
                action.default = argparse.SUPPRESS
    return parser


def load(args: argparse.Namespace) -> Config:
    """The config file, with what the command line says over it."""
    from gkdtop.config import load_config

    config = load_config(args.config)
    if getattr(args, "stall_after", None) is not None:
        config.stall_after, config.stall_fixed = args.stall_after, True
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
    from gkdtop import commands

    args = build_parser().parse_args(argv)  # --help and usage errors end here, before the config is imported
    command = commands.module(args.command) if args.command else None
    if command is None and not reads_config_first(args):
        return dashboard(args, None)  # the built-ins cannot be wrong: loaded after the first frame
    if getattr(command, "PIPE_FILTER", False):
        import signal

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends us quietly, like any filter
    from gkdtop.config import ConfigError

    try:
        config = load(args)
    except ConfigError as exc:
        print(f"gkdtop: {exc}", file=sys.stderr)
        return 2
    if command is not None:
        try:
            return command.run(args, config)
        except KeyboardInterrupt:  # Ctrl-C on a subcommand (a long replay, a snapshot): no traceback
            return 130
    return dashboard(args, config)


def reads_config_first(args: argparse.Namespace) -> bool:
    """Whether something the user wrote is read before the dashboard starts (a config file, a --filter),
    so that a mistake in it is a one-line error on the terminal, not a dashboard that flashes and quits."""
    from gkdtop.config import default_config_path

    return args.config is not None or getattr(args, "filter", None) is not None or default_config_path().is_file()


def dashboard(args: argparse.Namespace, config: Config | None, root_pids: tuple[int, ...] = ()) -> int:
    """The dashboard on this machine's job (`gkdtop`, `gkdtop demo`) until the user quits.

    With no config given (none to read), the first frame is drawn from the defaults and the config
    and the monitor are made just after it (tui/app.py `_wire`)."""
    from gkdtop.config import Config
    from gkdtop.tui.app import GkdtopApp

    def make_monitor() -> Monitor:
        from gkdtop.heap import steady_heap
        from gkdtop.monitor import Monitor

        steady_heap()
        return Monitor(config or load(args), logs=args.log or None, ray_address=args.ray_address,
                       root_pids=root_pids, ray_logs=getattr(args, "ray_logs", ()))

    GkdtopApp(config or Config(), make_monitor, refresh=getattr(args, "refresh", None), alert_args=args).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
