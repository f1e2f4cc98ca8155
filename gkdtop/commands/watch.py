"""`gkdtop watch`: the dashboard's monitor with no screen, telling others (docs/alerts.md).

For a head node, a `nohup`, a systemd unit or a Kubernetes sidecar: an event per line on stdout
(JSON with --json), notifications through apprise, a Prometheus endpoint; SIGTERM ends it cleanly."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import add_alerts, add_common

if TYPE_CHECKING:
    from gkdtop.alerts.events import AlertEvent
    from gkdtop.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("watch", help="watch the job with no screen: events on stdout, notifications, metrics")
    add_common(parser)
    add_alerts(parser, watch=True)
    parser.add_argument("--json", action="store_true", help="one JSON object per event (docs/alerts.md)")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    import asyncio

    from gkdtop.alerts.notify import NotifyError

    try:
        return asyncio.run(_watch(args, config))
    except NotifyError as exc:
        print(f"gkdtop watch: {exc}", file=sys.stderr)
        return 2


def print_event(event: AlertEvent, as_json: bool) -> None:
    import time

    if as_json:
        from gkdtop import jsonout

        jsonout.dump(event.as_json(), sys.stdout)
        sys.stdout.write("\n")
    else:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
        if event.at_least:
            stamp = f"≥{stamp} (steps' own times)"  # no earlier than that: the steps after the last stamp took it
        text = f"{stamp} {event.kind:<9} {event.title.removeprefix('gkdtop: ')}"
        if event.culprit and event.kind != "anomaly":  # (an anomaly's title is its text)
            text += f" · {event.culprit}"
        sys.stdout.write(" ".join(text.split()) + "\n")  # one line, whatever the culprit holds
    sys.stdout.flush()


async def _watch(args: argparse.Namespace, config: Config) -> int:
    import asyncio
    import signal

    from gkdtop.actions.stall_stacks import StallStacker
    from gkdtop.alerts import loop as alerts_loop
    from gkdtop.monitor import Monitor

    options = alerts_loop.options_from(args, config)
    monitor = Monitor(config, logs=args.log or None, ray_address=args.ray_address, ray_logs=args.ray_logs)
    try:
        alerts = alerts_loop.start(monitor.store, options, config.stall_stacks,
                                   on_event=lambda event: print_event(event, args.json),
                                   on_error=lambda line: print(f"gkdtop watch: {line}", file=sys.stderr))
    except OSError as exc:
        print(f"gkdtop watch: cannot serve metrics on {options.metrics_host}:{options.metrics_port}: "
              f"{(exc.strerror or str(exc)).lower()}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    monitor.start(stall_dump=StallStacker)
    told = [f"{len(monitor.log_sources)} log source(s)"]
    if options.urls:
        told.append(f"notifying {len(options.urls)} URL(s)")
    if alerts.metrics is not None:
        told.append(f"metrics on {alerts.metrics.url}")
        if alerts.metrics.exposed:
            told.append("reachable from other machines (phase, step metrics, GPU use; no log line)")
    print(f"gkdtop watch: {', '.join(told)} (SIGTERM or Ctrl+C stops)", file=sys.stderr, flush=True)
    ticking = asyncio.create_task(alerts.run())
    try:
        await stop.wait()
    finally:
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
        await monitor.stop()
        await asyncio.to_thread(alerts.close)
    print("gkdtop watch: stopped", file=sys.stderr)
    return 0
