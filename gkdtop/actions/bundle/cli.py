"""`gkdtop bundle` from the command line: one collection, one bundle, its path on stdout.

The output path is checked before the slow part, so a refused `-o` costs nothing; every refusal is one line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from gkdtop.actions.bundle.build import build_bundle
from gkdtop.actions.bundle.write import BundlePathError, output_path


def bundle_command(out: str | None, logs: list[str], config: Any, ray_address: str | None) -> int:
    """`gkdtop bundle`: collect once, write the bundle, print its path (progress on stderr)."""
    import asyncio

    from gkdtop.monitor import Monitor

    try:
        target = output_path(Path(out).expanduser(), time.time()) if out else None  # before the slow part
    except BundlePathError as exc:
        print(f"gkdtop bundle: {exc}", file=sys.stderr)
        return 1
    monitor = Monitor(config, logs=logs or None, ray_address=ray_address)

    async def collect() -> None:
        try:
            await monitor.collect_once()
        finally:
            await monitor.stop()

    def progress(step: str, done: int, total: int) -> None:
        if step != "done":
            print(f"[{done + 1}/{total}] {step}", file=sys.stderr, flush=True)

    print("collecting the current state…", file=sys.stderr, flush=True)
    asyncio.run(collect())
    try:
        path = build_bundle(monitor, target, progress=progress)
    except BundlePathError as exc:
        print(f"gkdtop bundle: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"gkdtop bundle: cannot write the bundle: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
