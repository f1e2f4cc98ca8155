"""Ray: a one-line cluster status (resources, pending demands); maximized, the full resource list."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gkdtop.collectors.ray import ray_line
from gkdtop.format import human_bytes
from gkdtop.store import Store

BYTE_RESOURCES = {"memory", "object_store_memory"}


class RayLine(Static):
    DEFAULT_CSS = """
    RayLine { height: 1; padding: 0 1; background: $boost; }
    RayLine.-maximized { height: 1fr; border: round $primary; }
    RayLine.-pending { color: $warning; text-style: bold; }
    """
    BORDER_TITLE = "5 Ray"

    def refresh_from(self, store: Store) -> None:
        state = store.ray
        self.set_class(bool(state.pending), "-pending")
        if not self.has_class("-maximized"):
            self.update(ray_line(state))
            return
        text = Text(ray_line(state) + "\n\n")
        if state.address:
            text.append(f"dashboard {state.address}  session {state.session or '-'}\n\n", "dim")
        for key in sorted(state.resources_total):
            tot = state.resources_total[key]
            avail = state.resources_available.get(key, tot)
            fmt = human_bytes if key in BYTE_RESOURCES else (lambda v: f"{v:g}")
            text.append(f"  {key:<22} used {fmt(tot - avail):>8} / {fmt(tot):>8}   available {fmt(avail)}\n")
        for demand in state.pending:
            text.append(f"  pending demand {demand}: cannot be scheduled with the resources above\n", "bold yellow")
        self.update(text)
