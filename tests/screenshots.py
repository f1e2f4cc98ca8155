"""Regenerate the SVGs in screenshots/ from the real app on fixed scenes: `make screenshots`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tests.scenes import settle_then_pin, stalled_scene

SHOTS = [("stalled.svg", (150, 45)), ("stalled-80x24.svg", (80, 24))]


async def shoot(out_dir: Path) -> None:
    for name, size in SHOTS:
        with tempfile.TemporaryDirectory() as tmp:
            app, now = stalled_scene(Path(tmp))
            async with app.run_test(size=size) as pilot:
                await settle_then_pin(now)(pilot)
                app.save_screenshot(filename=name, path=str(out_dir))
        print(out_dir / name)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(target))
