"""SVG snapshots of the real app on fixed scenes (update with `pytest --snapshot-update`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.scenes import settle_then_pin, stalled_scene


@pytest.fixture(autouse=True)
def restore_clock(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    real_time = time.time
    monkeypatch.setenv("TZ", "UTC")
    yield
    time.time = real_time  # type: ignore[assignment]
    time.tzset()


def test_stalled_in_weight_sync_wide(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    app, now = stalled_scene(tmp_path)
    assert snap_compare(app, terminal_size=(150, 45), run_before=settle_then_pin(now))


def test_stalled_in_weight_sync_80x24(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    app, now = stalled_scene(tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle_then_pin(now))
