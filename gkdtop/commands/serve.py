"""`gkdtop serve`: the dashboard in a browser, for the team that has no ssh session (docs/serve.md).

One monitor for the server; each browser tab is a view of it (gkdtop/web/). Safe by default:
loopback only, a per-run token in the one URL printed, Host and Origin checked, read-only views.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

from gkdtop.commands.options import add_alerts, add_common, add_refresh, float_in, int_in

if TYPE_CHECKING:
    from gkdtop.alerts.loop import Alerts
    from gkdtop.config import Config
    from gkdtop.store import Store
    from gkdtop.web.guard import Guard
    from gkdtop.web.server import ServeOptions

DEFAULT_PORT = 8765


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """The `serve` subparser: the dashboard's options (--log, --config, ...) and where to listen."""
    parser = sub.add_parser("serve", help="serve the dashboard to browsers (read-only; docs/serve.md)")
    add_common(parser)
    add_refresh(parser)
    add_alerts(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; reach it through an ssh "
                        "tunnel)")
    parser.add_argument("--port", type=int_in(0, 65535, "a port"), default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--public-url", metavar="URL",
                        help="the address browsers use when a reverse proxy stands in between, e.g. "
                        "https://proxy.example/gkdtop/ (its host and origin are then accepted)")
    parser.add_argument("--allow-actions", action="store_true",
                        help="let browser views take stacks, clean up, export bundles and pick log sources "
                        "(default: read-only)")
    parser.add_argument("--show-secrets", action="store_true",
                        help="show log lines as written, secrets included (default: redacted as in a bundle); only "
                        "with the default --host 127.0.0.1 and no --public-url: for a user alone on this machine")
    parser.add_argument("--max-viewers", type=int_in(1, 100, "a number of tabs"), default=16, metavar="N",
                        help="most browser tabs served at once (default 16); each is a view, not a monitor")
    parser.add_argument("--idle-timeout", type=float_in(0.0, 3600.0), default=10.0, metavar="SECONDS",
                        help="seconds a connection may take to send its request's headers, or sit idle between "
                        "requests, before it is closed (default 10)")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """Serve until SIGINT or SIGTERM; 2 with a one-line error when it cannot start."""
    try:
        import aiohttp  # noqa: F401
        import textual_serve  # noqa: F401
    except ImportError as exc:
        print(f"gkdtop serve: needs the 'serve' extra ({exc.name} is missing): pip install 'gkdtop[serve]'",
              file=sys.stderr)
        return 2
    from gkdtop.web.guard import Guard, bind_address, check_public_url, is_loopback

    try:
        args.host = bind_address(args.host)
    except ValueError as exc:
        print(f"gkdtop serve: --host: {exc}", file=sys.stderr)
        return 2
    public_url = None
    if args.public_url:
        try:
            public_url = check_public_url(args.public_url)
        except ValueError as exc:
            print(f"gkdtop serve: --public-url: {exc}", file=sys.stderr)
            return 2
    if args.show_secrets and (not is_loopback(args.host) or public_url):
        print("gkdtop serve: --show-secrets is only for a view on loopback (--host 127.0.0.1, no --public-url): "
              "others could read the secrets in the logs", file=sys.stderr)
        return 2
    guard = Guard.for_server(args.host, public_url)
    # The views draw for xterm.js, which shows 24-bit colour whatever this process's terminal is.
    os.environ.setdefault("COLORTERM", "truecolor")
    import asyncio

    from gkdtop.web.server import ServeOptions

    options = ServeOptions(host=args.host, port=args.port, public_url=public_url, allow_actions=args.allow_actions,
                           max_viewers=args.max_viewers, idle_timeout=args.idle_timeout)
    try:
        return asyncio.run(_serve(args, config, options, guard))
    except KeyboardInterrupt:
        return 130


async def _serve(args: argparse.Namespace, config: Config, options: ServeOptions, guard: Guard) -> int:
    import asyncio

    from gkdtop.heap import steady_heap
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp, stall_stacker
    from gkdtop.web.guard import is_loopback
    from gkdtop.web.server import Server

    steady_heap()
    monitor = Monitor(config, logs=args.log or None, ray_address=args.ray_address, ray_logs=args.ray_logs)

    def view() -> GkdtopApp:
        return GkdtopApp(config, monitor, refresh=args.refresh, read_only=not options.allow_actions,
                         owns_monitor=False, redact=not args.show_secrets)

    try:
        server = Server(view, options, guard)
        await server.start()
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)  # aiohttp's text repeats the address
        print(f"gkdtop serve: cannot listen on {options.host}:{options.port}: {reason}", file=sys.stderr)
        return 2
    monitor.start(stall_dump=stall_stacker)  # the views share it: they do not start it
    alerts = _start_alerts(args, config, monitor.store)
    ticking = asyncio.create_task(alerts.run()) if alerts is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    mode = ("actions allowed" if options.allow_actions else "read-only") + \
        ("; secrets shown" if args.show_secrets else "; secrets redacted")
    if not is_loopback(options.host):
        print(f"gkdtop serve: listening on {options.host}: anyone who can reach port {server.port} and has the URL "
              "can view", file=sys.stderr)
    print(f"gkdtop serve: {server.url()}  ({mode}; Ctrl+C stops)", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await monitor.stop()
        if alerts is not None and ticking is not None:
            ticking.cancel()
            await asyncio.to_thread(alerts.close)
        # The views redirect sys.stdout while they run; what prints after us must reach the terminal.
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    print("gkdtop serve: stopped", file=sys.stderr)
    return 0


def _start_alerts(args: argparse.Namespace, config: Config, store: Store) -> Alerts | None:
    """--notify and --metrics-port for the server's one monitor (docs/alerts.md); a bad URL or a busy
    port is said in one line and the views are served anyway."""
    from gkdtop.alerts import loop
    from gkdtop.alerts.notify import NotifyError

    try:
        options = loop.options_from(args, config)
        if not options.wanted:
            return None
        alerts = loop.start(store, options, config.stall_stacks,
                            on_error=lambda line: print(f"gkdtop serve: {line}", file=sys.stderr))
    except (NotifyError, OSError) as exc:
        print(f"gkdtop serve: alerts are off: {exc}", file=sys.stderr)
        return None
    if alerts.metrics is not None:
        print(f"gkdtop serve: metrics on {alerts.metrics.url}", file=sys.stderr)
    return alerts
