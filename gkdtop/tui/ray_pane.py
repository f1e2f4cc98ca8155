"""Ray: one status line (resources, pending demands); maximized, the cluster: nodes, actors, demands, and
the running tasks (Ray's task table: who runs which method where, since when; `o` orders them by age)."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from gkdtop.format import human_bytes, human_duration

if TYPE_CHECKING:
    from gkdtop.model import RayLogsState, RayState
    from gkdtop.model.tasks import RayTasksState, Straggler
    from gkdtop.store import Store

BYTE_RESOURCES = {"memory", "object_store_memory"}
STATE_STYLE = {"ALIVE": "green", "DEAD": "red", "PENDING_CREATION": "yellow", "RESTARTING": "yellow",
               "DEPENDENCIES_UNREADY": "yellow"}
MAX_GROUPS = 60
MAX_TASK_ROWS = 40  # running tasks listed; the rest counted
MAX_FAILED_ROWS = 5


class RayPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ("ray", "ray_tasks")
    BINDINGS = [Binding("o", "cycle_sort", "Sort", tooltip="Ray (maximized): order the running tasks by age, "
                        "oldest or newest first")]
    DEFAULT_CSS = """
    RayPane { height: 1; padding: 0 1; background: $boost; }
    RayPane.-maximized { height: 1fr; border: round $primary; overflow-y: auto; }
    RayPane.-pending { color: $warning; text-style: bold; }
    RayPane.-error { color: $error; }
    """
    BORDER_TITLE = "5 Ray"
    newest_first = False  # the running tasks' order (o)
    _store: Store | None = None

    def refresh_from(self, store: Store) -> None:
        self._store = store
        state = store.ray
        self.set_class(bool(state.pending), "-pending")
        error = store.collector_error("ray")
        self.set_class(bool(error), "-error")
        if self.has_class("-maximized"):
            text = render_cluster(state, store.ray_logs)
            text.append_text(render_tasks(store.ray_tasks, store.stragglers, time.time(), self.newest_first,
                                          store.collector_error("ray_tasks")))
            self.update(Text(error + "\n", "bold red") + text if error else text)
        else:
            line = f"Ray: {error} · last seen: {ray_line(state)}" if error else ray_line(state)
            self.update(line + straggler_line(store.stragglers, time.time()))

    def action_cycle_sort(self) -> None:
        """The running tasks oldest first (the one stuck longest on top) or newest first."""
        self.newest_first = not self.newest_first
        if self._store is not None:
            self.refresh_from(self._store)


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


def straggler_line(stragglers: list[Straggler], now: float) -> str:
    """The one-line pane's tail while a call is split: who is still in it (or left it), and for how long."""
    if not stragglers:
        return ""
    first = stragglers[0]
    if first.kind == "left early":
        who = first.finished[0]
        text = f" | {who.who.split(' (')[0]} left {who.method} early; {len(first.running)} still in it"
    else:
        late = first.running[0]
        text = (f" | straggler: pid {late.pid} still in {late.method} "
                f"({human_duration(late.running_for(now))}, {len(first.finished)} of {first.members} done)")
    return text + (f" (+{len(stragglers) - 1} more)" if len(stragglers) > 1 else "")


def render_tasks(tasks: RayTasksState, stragglers: list[Straggler], now: float, newest_first: bool = False,
                 error: str = "") -> Text:
    """The task table's part of the maximized pane: split calls, the running tasks by age, the failed ones."""
    text = Text()
    if error:
        text.append(f"\nRay tasks: {error}\n", "bold red")
    if tasks.status == "pending":
        return text
    if tasks.status != "connected":
        text.append(f"\nRay tasks: {tasks.status}" + (f": {tasks.reason}" if tasks.reason else "") + "\n", "yellow")
    for straggler in stragglers:
        text.append("\n" if straggler is stragglers[0] else "")
        text.append("  ⚑ ", "bold red")
        text.append(straggler.sentence(now) + "\n", "bold red" if straggler.kind == "left early" else "bold yellow")
    if tasks.status == "connected":
        shown = len(tasks.running)
        total = max(tasks.running_total, shown)
        order = "newest first" if newest_first else "oldest first"
        text.append(f"\nRunning tasks ({total}" + (f", {shown} listed" if total > shown else "")
                    + f") · {order} (o)\n", "bold")
        rows = sorted(tasks.running, key=lambda t: t.start or now, reverse=newest_first)
        if rows:
            text.append(f"  {'AGE':>8}  {'TASK':<48} {'PID':>8}  {'NODE':<16} ACTOR\n", "dim")
        late = {t.task_id for s in stragglers for t in (s.running if s.kind == "straggler" else ())}
        for task in rows[:MAX_TASK_ROWS]:
            actor = task.actor_name or task.actor_id[:8]
            line = (f"  {human_duration(task.running_for(now)):>8}  {(task.name or task.func)[:48]:<48} "
                    f"{task.pid or '-':>8}  {task.node[:16]:<16} {actor[:40]}\n")
            text.append(line, "bold yellow" if task.task_id in late else "")
        if len(rows) > MAX_TASK_ROWS:
            text.append(f"  … {len(rows) - MAX_TASK_ROWS} more\n", "dim")
    if tasks.failed:
        text.append(f"\nFailed tasks ({max(tasks.failed_total, len(tasks.failed))}, newest first)\n", "bold")
        for task in tasks.failed[:MAX_FAILED_ROWS]:
            ago = f"{human_duration(now - task.end)} ago" if task.end is not None else ""
            text.append(f"  {ago:>8}  {task.func[:48]:<48} {task.pid or '-':>8}  {task.node[:16]:<16} ", "red")
            text.append((task.error or task.error_type)[:160] + "\n", "red")
    return text
