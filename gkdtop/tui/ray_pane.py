"""Ray: one status line (resources, pending demands); maximized, the cluster: nodes, actors, demands."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.widgets import Static

from gkdtop.format import human_bytes

if TYPE_CHECKING:
    from gkdtop.model import RayLogsState, RayState
    from gkdtop.store import Store

BYTE_RESOURCES = {"memory", "object_store_memory"}
STATE_STYLE = {"ALIVE": "green", "DEAD": "red", "PENDING_CREATION": "yellow", "RESTARTING": "yellow",
               "DEPENDENCIES_UNREADY": "yellow"}
MAX_GROUPS = 60


class RayPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ("ray",)
    DEFAULT_CSS = """
    RayPane { height: 1; padding: 0 1; background: $boost; }
    RayPane.-maximized { height: 1fr; border: round $primary; overflow-y: auto; }
    RayPane.-pending { color: $warning; text-style: bold; }
    RayPane.-error { color: $error; }
    """
    BORDER_TITLE = "5 Ray"

    def refresh_from(self, store: Store) -> None:
        state = store.ray
        self.set_class(bool(state.pending), "-pending")
        error = store.collector_error("ray")
        self.set_class(bool(error), "-error")
        if self.has_class("-maximized"):
            text = render_cluster(state, store.ray_logs)
            self.update(Text(error + "\n", "bold red") + text if error else text)
        else:
            self.update(f"Ray: {error} · last seen: {ray_line(state)}" if error else ray_line(state))


def ray_line(state: RayState) -> str:
    """The one-line summary the dashboard shows."""
    if state.status != "connected":
        return f"Ray: {state.status}" + (f": {state.reason}" if state.reason else "")
    parts = [f"Ray: {state.nodes_alive} node{'s' if state.nodes_alive != 1 else ''}"]
    if state.nodes_dead:
        parts.append(f"{state.nodes_dead} dead")
    for key in ("CPU", "GPU"):
        if key in state.resources_total:
            tot = state.resources_total[key]
            used = tot - state.resources_available.get(key, tot)
            parts.append(f"{key} {used:g}/{tot:g}")
    if state.pending:
        demands = ", ".join(str({k: v for k, v in d.items()}) for d in state.pending[:2])
        parts.append(f"PENDING {len(state.pending)}: {demands} cannot be scheduled yet")
    return " | ".join(parts)


def _fmt(key: str, value: float) -> str:
    return human_bytes(value) if key in BYTE_RESOURCES else f"{value:g}"


def render_cluster(state: RayState, logs: RayLogsState | None = None) -> Text:
    text = Text(ray_line(state) + "\n", "bold" if state.status == "connected" else "yellow")
    if state.address:
        text.append(f"dashboard {state.address}  session {state.session or '-'}\n", "dim")
    if state.details_error:
        text.append(f"state API: {state.details_error}\n", "yellow")
    for demand in state.pending:
        text.append(f"PENDING {demand}: cannot be scheduled with what the cluster has\n", "bold yellow")
    if state.resources_total:
        text.append("\nResources            used / total      available\n", "bold")
        for key in sorted(state.resources_total):
            tot = state.resources_total[key]
            avail = state.resources_available.get(key, tot)
            text.append(f"  {key:<20} {_fmt(key, tot - avail):>7} / {_fmt(key, tot):<8} {_fmt(key, avail)}\n")
    if state.nodes:
        text.append(f"\nNodes ({state.nodes_alive} alive, {state.nodes_dead} dead)\n", "bold")
        for node in state.nodes:
            res = "  ".join(f"{k} {_fmt(k, v)}" for k, v in sorted(node.resources_total.items())
                            if k in ("CPU", "GPU"))
            text.append(f"  {'●' if node.state == 'ALIVE' else '○'} {node.ip:<16} {'head ' if node.is_head else ''}",
                        "green" if node.state == "ALIVE" else "red")
            text.append(f"{node.state:<6} {res}  {node.node_id[:8]}\n")
            for gpu in node.gpus:
                mem = f"{human_bytes(gpu.memory_used)}/{human_bytes(gpu.memory_total)}"
                text.append(f"      GPU {gpu.index} {gpu.name[:24]} util {gpu.utilization or 0:.0f}% mem {mem}\n",
                            "dim")
    if state.actors or state.actors_total:
        shown = len(state.actors)
        total = max(state.actors_total, shown)
        text.append(f"\nActors ({total}" + (f", first {shown} listed" if total > shown else "") + ")\n", "bold")
        groups = Counter((a.class_name, a.state) for a in state.actors)
        causes: dict[tuple[str, str], str] = {}
        needs: dict[tuple[str, str], dict[str, float]] = {}
        for actor in state.actors:
            key = (actor.class_name, actor.state)
            if actor.death_cause and key not in causes:
                causes[key] = actor.death_cause
            if actor.state != "ALIVE" and actor.required_resources and key not in needs:
                needs[key] = dict(sorted(actor.required_resources.items()))  # same order every poll
        ordered = sorted(groups.items(), key=lambda kv: (kv[0][1] == "ALIVE", kv[0][0]))
        for (cls, st), count in ordered[:MAX_GROUPS]:
            text.append(f"  {count:>6} × {cls[:32]:<32} ")
            text.append(st, STATE_STYLE.get(st, ""))
            if (cls, st) in needs:
                text.append(f"  needs {needs[(cls, st)]}", "yellow")
            if (cls, st) in causes:
                text.append(f"  {causes[(cls, st)][:160]}", "red")
            text.append("\n")
        if len(ordered) > MAX_GROUPS:
            text.append(f"  … {len(ordered) - MAX_GROUPS} more groups\n", "dim")
    if state.placement_groups:
        counts = Counter(pg["state"] for pg in state.placement_groups)
        text.append("\nPlacement groups: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + "\n",
                    "bold")
    if logs is not None and logs.files:
        text.append(f"\nRemote logs ({len(logs.files)} followed" + (f", {logs.skipped} over the cap" if logs.skipped
                                                                   else "") + ")\n", "bold")
        for f in logs.files[:20]:
            text.append(f"  {f.state:<9} {f.path[:100]}" + (f"  {f.error[:80]}" if f.error else "") + "\n",
                        "red" if f.state == "error" else "")
    if state.jobs:
        text.append("\nJobs\n", "bold")
        for job in state.jobs[-10:]:
            text.append(f"  {job['id']:<12} {job['status']:<10} {job['entrypoint'][:90]}\n")
    return text
