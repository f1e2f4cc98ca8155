"""Regenerate the SVGs in screenshots/: `make screenshots`.

Two kinds. `stalled*.svg` come from a fixed scene (a recorded 8-GPU node, a pinned clock): the
README's picture of a real cluster. `demo-*.svg` come from the real app running on the real demo
workload (`gkdtop demo`: Ray + torch on this machine's CPUs): a normal run, the hang-sync fault
stalled in weight sync, the stack viewer on it, and the cleanup plan after the leak fault. The
demo shots take about two minutes; `--scenes-only` skips them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.scenes import curves_scene, settle_then_pin, stalled_scene

SCENE_SHOTS = [("stalled.svg", (150, 45)), ("stalled-80x24.svg", (80, 24))]
METRICS_SHOTS = [("metrics.svg", (150, 45)), ("metrics-80x24.svg", (80, 24))]
DEMO_SIZE = (160, 48)


async def shoot_scenes(out_dir: Path) -> None:
    for name, size in SCENE_SHOTS:
        with tempfile.TemporaryDirectory() as tmp:
            app, now = stalled_scene(Path(tmp))
            async with app.run_test(size=size) as pilot:
                await settle_then_pin(now)(pilot)
                app.save_screenshot(filename=name, path=str(out_dir))
        print(out_dir / name)
    for name, size in METRICS_SHOTS:  # the Metrics pane (6) on a run whose generation got slower
        with tempfile.TemporaryDirectory() as tmp:
            app, now = curves_scene(Path(tmp))
            async with app.run_test(size=size) as pilot:
                await settle_then_pin(now)(pilot)
                await wait(pilot, "800 steps", lambda: pilot.app.store.phase_status().steps_done == 800, 60)
                await pilot.press("6")
                await pilot.pause(0.5)
                app.save_screenshot(filename=name, path=str(out_dir))
        print(out_dir / name)


async def wait(pilot: Any, what: str, predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            status = pilot.app.store.phase_status()
            raise SystemExit(f"screenshots: gave up waiting for {what} after {timeout:.0f}s "
                             f"(phase {status.current}, {status.state})")
        await pilot.pause(0.25)


def demo_app(run: Any, stall_after: float | None = None) -> Any:
    from gkdtop.analysis.rules import builtin_signatures
    from gkdtop.config import Config, builtin_phases
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp

    config = Config(phases=builtin_phases(), findings=builtin_signatures())  # the defaults, not a user's file
    if stall_after is not None:
        config.stall_after = stall_after
    monitor = Monitor(config, logs=[str(run.log_path)], ray_address=run.dashboard_url, root_pids=(run.pid,))
    return GkdtopApp(config, monitor)


def phases_text(app: Any) -> str:
    from gkdtop.tui.phases_pane import PhasesPane

    return str(app.query_one(PhasesPane).render())


async def shoot_demo(out_dir: Path) -> None:
    from gkdtop.demo.launcher import DemoOptions, remove_debris, start_demo
    from gkdtop.tui.cleanup_screen import CleanupScreen
    from gkdtop.tui.stacks_screen import StacksScreen

    def save(app: Any, name: str) -> None:
        app.save_screenshot(filename=name, path=str(out_dir))
        print(out_dir / name)

    run = start_demo(DemoOptions(steps=200))
    try:
        app = demo_app(run)
        async with app.run_test(size=DEMO_SIZE) as pilot:
            await wait(pilot, "step 4", lambda: app.store.phase_status().steps_done >= 4, 180)
            await wait(pilot, "the Ray pane", lambda: app.store.ray.status == "connected", 30)
            await pilot.pause(1.5)
            save(app, "demo-running.svg")
    finally:
        run.stop()

    run = start_demo(DemoOptions(steps=20, fault="hang-sync"))
    try:
        app = demo_app(run, stall_after=10)
        async with app.run_test(size=DEMO_SIZE) as pilot:
            await wait(pilot, "the stall-time stacks", lambda: "stacks taken at the stall" in phases_text(app), 300)
            save(app, "demo-stalled.svg")
            await pilot.press("s")
            await wait(pilot, "the stack viewer", lambda: isinstance(app.screen, StacksScreen)
                       and app.screen.report is not None, 30)
            await pilot.pause(0.5)
            save(app, "demo-stacks.svg")
    finally:
        run.stop()

    run = start_demo(DemoOptions(steps=20, fault="leak"))
    debris: dict[str, Any] = {}
    try:
        run.wait(timeout=180)
        debris = run.debris()
        app = demo_app(run)
        async with app.run_test(size=DEMO_SIZE) as pilot:
            await pilot.pause(1.0)
            await pilot.press("c")
            await wait(pilot, "the cleanup plan", lambda: isinstance(app.screen, CleanupScreen)
                       and bool(app.screen.items), 60)
            await pilot.pause(0.5)
            save(app, "demo-cleanup.svg")
    finally:
        run.stop()
        remove_debris(debris)


def shoot_browser(out_dir: Path) -> None:
    """`serve-browser.png`: `gkdtop serve` on a GKD start-up log, as headless Chromium shows it."""
    import os

    from tests.test_serve import CHROMIUM, Served, Tab, _no_browser

    if (missing := _no_browser()) is not None:
        print(f"serve-browser.png skipped: {missing}")
        return
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        server = Served(Path(tmp))
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                tab = Tab(browser, server.url)
                tab.first_frame()
                tab.wait_text("steps 3")
                tab.page.wait_for_timeout(1500)  # the log's lines and the fonts settle
                tab.page.screenshot(path=str(out_dir / "serve-browser.png"))
                browser.close()
        finally:
            server.stop()
    os.chmod(out_dir / "serve-browser.png", 0o644)
    print(out_dir / "serve-browser.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="screenshots")
    parser.add_argument("--scenes-only", action="store_true", help="skip the demo workload shots")
    args = parser.parse_args()
    target = Path(args.out_dir)
    target.mkdir(parents=True, exist_ok=True)
    if not args.scenes_only:
        asyncio.run(shoot_demo(target))
    shoot_browser(target)
    asyncio.run(shoot_scenes(target))  # last: a scene freezes the wall clock for good
    return 0


if __name__ == "__main__":
    sys.exit(main())
