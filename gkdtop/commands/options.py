"""Argument types and options shared by the dashboard and its subcommands (one definition each)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_SECONDS = 1e6  # ~11 days: past that, timers overflow (threading's TIMEOUT_MAX, select's timeout)
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no PID is larger


def float_in(low: float, high: float, low_ok: bool = False) -> Callable[[str], float]:
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


def int_in(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
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


SECONDS = float_in(0.0, MAX_SECONDS)  # a positive number of seconds
SECONDS_OR_ZERO = float_in(0.0, MAX_SECONDS, low_ok=True)
REFRESH = float_in(0.01, 3600.0, low_ok=True)  # as the config's refresh range


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options of everything that watches a job: the dashboard, snapshot, bundle, demo, run, serve."""
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


def add_refresh(parser: argparse.ArgumentParser) -> None:
    """--refresh, for the commands that draw the dashboard."""
    parser.add_argument("--refresh", type=REFRESH, metavar="SECONDS", help="UI refresh interval (default 1)")


def add_alerts(parser: argparse.ArgumentParser, watch: bool = False) -> None:
    """Telling others (docs/alerts.md): the dashboard, `serve` and `watch`."""
    parser.add_argument("--notify", action="append", default=[], metavar="URL",
                        help="send stalled/failed/recovered/finished events to this apprise URL (repeatable; "
                        "${VAR} is read from the environment; also the config's notify: and $GKDTOP_NOTIFY)")
    parser.add_argument("--metrics-port", type=int_in(0, 65535, "a port"), metavar="PORT",
                        help="serve Prometheus metrics on this port (0: any free port; see docs/alerts.md)")
    parser.add_argument("--metrics-host", metavar="ADDR", default="127.0.0.1",
                        help="address the metrics endpoint listens on (default 127.0.0.1: this machine only)")
    parser.add_argument("--job-name", metavar="NAME", help="the job's name in messages (default: the log's file name)")
    if watch:
        parser.add_argument("--heartbeat", type=SECONDS, metavar="SECONDS",
                            help="also send a 'still running' message every SECONDS")
