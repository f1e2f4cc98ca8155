"""Processes: the job's processes with role, resources and flags, as a sortable table."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from gkdtop.format import human_bytes, human_duration

if TYPE_CHECKING:
    from textual.geometry import Region

    from gkdtop.model import ProcInfo
    from gkdtop.store import Store

COLUMNS = [("pid", "PID"), ("role", "ROLE"), ("what", "ACTOR / NAME"), ("cpu", "CPU%"), ("rss", "RSS"),
           ("gpu", "GPU MEM"), ("state", "STATE"), ("age", "AGE"), ("flags", "FLAGS")]
SORTS = {
    "cpu": lambda p: -p.cpu_percent,
    "rss": lambda p: -p.rss,
    "gpu": lambda p: -(p.gpu_memory or 0),
    "pid": lambda p: p.pid,
    "role": lambda p: (p.role, p.pid),
    "age": lambda p: p.create_time,
}


def cells(p: ProcInfo, now: float) -> dict[str, str]:
    return {
        "pid": str(p.pid),
        "role": p.role,
        "what": (p.actor or p.name)[:40],
        "cpu": f"{p.cpu_percent:.0f}",
        "rss": human_bytes(p.rss),
        "gpu": human_bytes(p.gpu_memory) if p.gpu_memory is not None else "",
        "state": p.status,
        "age": coarse_age(now - p.create_time) if p.create_time else "?",
        "flags": ",".join(p.flags),
    }


def coarse_age(seconds: float) -> str:
    """10 s steps in the first minute, minutes after: a finer clock would redraw every row every poll
    (with fresh processes that was a third of the idle dashboard's CPU)."""
    if seconds < 60:
        return human_duration(seconds - seconds % 10)
    return human_duration(seconds - seconds % 60).removesuffix("00s")


def summary(store: Store) -> str:
    flagged = sum(1 for p in store.processes if p.flags)
    roles: dict[str, int] = {}
    for p in store.processes:
        roles[p.role] = roles.get(p.role, 0) + 1
    parts = ", ".join(f"{n} {r}" for r, n in sorted(roles.items()))
    return f"Processes: {len(store.processes)} ({parts})" + (f" · {flagged} flagged" if flagged else "")


class ProcsPane(DataTable[str]):
    SOURCES: ClassVar[tuple[str, ...]] = ("procs",)  # Ray's actors label its rows: the store bumps procs then
    TICKS: ClassVar[float] = 10.0  # AGE moves in 10 s steps (coarse_age) while no poll changes a row
    DEFAULT_CSS = """
    ProcsPane { border: round $primary; height: 1fr; }
    """
    BORDER_TITLE = "3 Processes"
    BINDINGS = [Binding("o", "cycle_sort", "Sort", tooltip="Processes: cycle the sort column (or click a header)")]
    _rows_repaint_themselves = False  # set while refresh_from updates cells (see refresh)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.sort_key = "role"
        self._rows: dict[int, dict[str, str]] = {}
        self._procs: list[ProcInfo] = []
        self._order: list[int] = []
        self._error = ""  # the collector's, while it fails
        # DataTable keys its render caches by a counter that every cell update bumps, so each poll
        # adds a screenful of entries that are never read again, kept up to the caps (10,000 cells,
        # 1,000 rows and lines): ~10 MB that a 30-minute soak saw fill slowly. Two screenfuls do.
        for name, cap in (("_cell_render_cache", 2000), ("_row_render_cache", 200), ("_row_renderable_cache", 200),
                          ("_line_cache", 200)):
            if (cache := getattr(self, name, None)) is not None:
                cache.maxsize = cap

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)
        self._show_subtitle()

    def _show_subtitle(self) -> None:
        sort = f"sort: {self.sort_key} (o)"
        self.border_subtitle = Text(f"{self._error} · {sort}", "bold red") if self._error else sort

    def refresh_from(self, store: Store) -> None:
        now = time.time()
        error = store.collector_error("procs")  # the rows stay as last read, under the error
        if error != self._error:
            self._error = error
            self._show_subtitle()
        self._procs = store.processes
        fresh = {p.pid: cells(p, now) for p in store.processes}
        added = False
        changed: list[str] = []
        with self.app.batch_update():
            for pid in [pid for pid in self._rows if pid not in fresh]:
                self.remove_row(str(pid))
                del self._rows[pid]
            for pid, row in fresh.items():
                old = self._rows.get(pid)
                if old is None:
                    self.add_row(*(row[k] for k, _ in COLUMNS), key=str(pid))
                    added = True
                elif old != row:
                    changed.append(str(pid))
                    self._rows_repaint_themselves = True
                    try:
                        for key, value in row.items():
                            if old[key] != value:
                                self.update_cell(str(pid), key, value)
                    finally:
                        self._rows_repaint_themselves = False
                self._rows[pid] = row
            for key in changed:
                self.refresh_row(self.get_row_index(key))  # only rows in view repaint
            self._apply_sort(force=added)

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> ProcsPane:
        """While refresh_from updates cells, the rows it changed repaint, not the whole table.

        `update_cell` repaints every visible row (~2.5 ms each), so a busy process's CPU cell would
        redraw a screenful of idle ones on every poll.
        """
        if self._rows_repaint_themselves:
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _apply_sort(self, force: bool = False) -> None:
        ordered = [p.pid for p in sorted(self._procs, key=SORTS[self.sort_key])]
        if ordered == self._order and not force:
            return  # re-sorting redraws the whole table: only when the order really changed
        self._order = ordered
        position = {pid: i for i, pid in enumerate(ordered)}
        self.sort("pid", key=lambda pid: position.get(int(pid), len(position)))

    def action_cycle_sort(self) -> None:
        keys = list(SORTS)
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self._show_subtitle()
        self._apply_sort(force=True)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key in SORTS:
            self.sort_key = key
            self._show_subtitle()
            self._apply_sort(force=True)
