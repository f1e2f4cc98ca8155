"""The collector registry: one line per source feeds the monitor, the store, the config, the snapshot
and the panes' redraws (collectors/registry.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from textual.app import ComposeResult
from textual.widgets import Static

from gkdtop import snapshot
from gkdtop.collectors import registry
from gkdtop.collectors.registry import CollectorSpec, Source, Wiring
from gkdtop.config import Config, ConfigError, builtin_phases, load_config
from gkdtop.model import GpuState
from gkdtop.monitor import Monitor
from gkdtop.store import Store
from gkdtop.tui.app import GkdtopApp
from tests.test_app import settle

ROOT = Path(__file__).resolve().parents[1]


def test_every_line_names_a_module_whose_spec_fits_it(tmp_path: Path) -> None:
    names = [s.name for s in registry.SOURCES]
    assert len(names) == len(set(names)) and "ui" not in names
    config = Config()
    wiring = Wiring([str(tmp_path / "none.log")], config.backlog, config.max_line, ray_address="http://127.0.0.1:9")
    for source in registry.SOURCES:
        spec = source.spec()
        assert isinstance(spec, CollectorSpec), source
        assert (spec.build is not None) == source.polled, f"{source.name}: polled says one thing, SPEC another"
        assert all(after in names for after in spec.after), source
        if source.polled:
            collector = source.collector(wiring, 7.0)
            try:
                assert (collector.name, collector.interval) == (source.name, 7.0)
            finally:
                collector.close()


def test_config_refresh_has_one_key_per_source_and_the_ui() -> None:
    assert set(Config().refresh) == {s.name for s in registry.SOURCES} | {"ui"}
    assert Config().refresh["ray_logs"] == registry.find("ray_logs").interval


def test_refresh_ray_logs_loads_and_reaches_the_monitor(tmp_path: Path) -> None:
    """It used to be read by the monitor but refused by the config: `refresh.ray_logs: unknown key`."""
    path = tmp_path / "c.yaml"
    path.write_text("refresh: {ray_logs: 5, stack_phase: 3}\n")
    config = load_config(path)
    monitor = Monitor(config, logs=[str(tmp_path / "none.log")], ray_address="http://127.0.0.1:9")
    intervals = {c.name: c.interval for c in monitor.collectors}
    assert intervals["ray_logs"] == 5.0 and intervals["logs"] == registry.find("logs").interval
    assert [c.name for c in monitor.collectors] == [s.name for s in registry.polled()]
    path.write_text("refresh:\n  ray_log: 5\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:2: refresh\.ray_log: unknown key \(expected one of: .*ray_logs"):
        load_config(path)


def test_the_store_names_a_result_of_the_wrong_type_and_an_unknown_source() -> None:
    store = Store(Config())
    with pytest.raises(TypeError, match=r"^gpus returned str, not GpuState$"):
        store.put("gpus", "garbage")
    assert "gpus" not in store.versions
    store.put("gpus", GpuState(status="unavailable", reason="no NVML"))
    assert store.gpus.reason == "no NVML" and store.versions["gpus"] == store.version
    with pytest.raises(KeyError, match=r"no source 'gpu' .*known: gpus, logs"):
        store.put("gpu", GpuState())


def test_the_monitor_imports_no_action() -> None:
    """The stall-time dump is handed in (Monitor.start's stall_dump), not imported."""
    tree = ast.parse((ROOT / "gkdtop" / "monitor.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m.startswith("gkdtop.actions")]


# --- a new source: one module (tests/tinysource.py) plus one registry line ----------------------------


class TinyPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ("tiny",)
    draws = 0

    def refresh_from(self, store: Store) -> None:
        self.draws += 1
        self.update(f"tiny: {getattr(store, 'tiny_bytes', '-')} bytes")


class TickPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ()
    TICKS: ClassVar[float] = 0.05  # drawn every tick (ui: 0.05), as the Phases pane
    draws = 0

    def refresh_from(self, store: Store) -> None:
        self.draws += 1


class TinyApp(GkdtopApp):
    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield TinyPane(id="tiny")
        yield TickPane(id="ticker")


@pytest.fixture
def tiny_line(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "SOURCES", [*registry.SOURCES, Source("tiny", 0.05, "tests.tinysource")])
    yield


async def test_a_new_collector_reaches_the_store_the_snapshot_and_its_pane(tmp_path: Path, tiny_line: None) -> None:
    log = tmp_path / "train.log"
    log.write_text("hello\n")
    config_file = tmp_path / "c.yaml"
    config_file.write_text("refresh: {tiny: 0.05, ui: 0.05, gpus: 60, procs: 60, ray: 60}\n")
    config = load_config(config_file)  # its refresh key is allowed: it came with the registry line
    config.phases, config.stack_phase, config.stall_stacks = builtin_phases(), False, False
    monitor = Monitor(config, logs=[str(log)], ray_address="http://127.0.0.1:9")
    tiny = next(c for c in monitor.collectors if c.name == "tiny")
    app = TinyApp(config, monitor)
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(TinyPane)
        await settle(pilot, lambda: str(pane.render()) == "tiny: 6 bytes")
        assert snapshot.build(app.store)["tiny"] == {"bytes": 6}

        # Routed by its SOURCES: polls that find nothing new draw nothing, while a TICKS pane draws each tick.
        ticker = app.query_one(TickPane)
        draws, calls, ticks = pane.draws, tiny.calls, ticker.draws
        await settle(pilot, lambda: tiny.calls >= calls + 3 and ticker.draws >= ticks + 3)
        assert pane.draws == draws

        with log.open("a") as fh:
            fh.write("world\n")
        await settle(pilot, lambda: str(pane.render()) == "tiny: 12 bytes")
        assert pane.draws > draws
    assert snapshot.build(app.store)["tiny"] == {"bytes": 12}
    assert app.store.health["tiny"].ok
