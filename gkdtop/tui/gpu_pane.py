"""GPUs: utilization and memory per device, with history, and which job process holds what."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.widgets import Static

from gkdtop.format import bar, human_bytes, sparkline
from gkdtop.tui.repaint import reshaped

if TYPE_CHECKING:
    from gkdtop.model import RayNode
    from gkdtop.store import Store


class GpuPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ("gpus", "procs")  # each GPU's processes, named from the process list
    DEFAULT_CSS = """
    GpuPane { border: round $primary; padding: 0 1; height: 1fr; overflow-y: auto; }
    """
    BORDER_TITLE = "2 GPUs"
    _shown: Text | None = None

    def refresh_from(self, store: Store) -> None:
        # No GPU anywhere (a laptop, the demo): a narrow pane, and the Phases pane gets the width.
        gpus = store.gpus
        none = gpus.status not in ("ok", "pending") and not gpus.devices and not any(n.gpus for n in store.ray.nodes)
        self.set_class(none, "-none")
        text = render_gpus(store, self.size.width - 4)
        if text != self._shown:  # without a GPU the state is the same every poll: no redraw
            layout = reshaped(self._shown.plain if self._shown else "", text.plain, self.content_size.width,
                              self.styles)
            self._shown = text
            self.update(text, layout=layout)


def summary(store: Store) -> str:
    """One line for the compact layout."""
    gpus = store.gpus
    if gpus.status != "ok":
        return f"GPUs: {gpus.status}" + (f": {gpus.reason}" if gpus.reason else "")
    utils = " ".join(
        "lost" if d.error else f"{d.utilization or 0:.0f}%" for d in gpus.devices
    )
    used = sum(d.memory_used or 0 for d in gpus.devices if not d.error)
    total = sum(d.memory_total or 0 for d in gpus.devices if not d.error)
    return f"GPUs: {len(gpus.devices)} · util {utils} · mem {human_bytes(used)}/{human_bytes(total)}"


def render_gpus(store: Store, width: int) -> Text:
    text = Text()
    if error := store.collector_error("gpus"):
        text.append(error + "\n", "bold red")
    gpus = store.gpus
    if gpus.status == "pending":
        text.append("reading NVML…", "dim")
        return text
    if gpus.status != "ok" and not gpus.devices:
        text.append(f"{gpus.status}: {gpus.reason}\n", "yellow")
        render_remote(store, text)
        return text
    procs = store.proc_by_pid()
    spark_w = max(0, min(40, width - 36))
    for dev in gpus.devices:
        text.append(f"{dev.index} ", "bold")
        text.append(f"{dev.name.removeprefix('NVIDIA ')[:24]}")
        if dev.error:
            text.append(f"  ✗ {dev.error}\n", "bold red")
            continue
        util = dev.utilization
        text.append("\n  util ")
        text.append(bar(None if util is None else util / 100, 10), "green")
        text.append(f" {'  -' if util is None else f'{util:3.0f}'}% ")
        if spark_w:
            text.append(sparkline(store.gpu_util.get(dev.index, []), spark_w), "green")
        frac = (dev.memory_used or 0) / dev.memory_total if dev.memory_total else None
        text.append("\n  mem  ")
        text.append(bar(frac, 10), "magenta")
        text.append(f" {human_bytes(dev.memory_used)}/{human_bytes(dev.memory_total)}")
        if dev.temperature is not None:
            text.append(f"  {dev.temperature:.0f}°C")
        if dev.power is not None:
            text.append(f"  {dev.power:.0f}" + (f"/{dev.power_limit:.0f}W" if dev.power_limit else "W"))
        text.append("\n")
        for gp in dev.processes:
            row = procs.get(gp.pid)
            who = (row.role + (f" {row.actor}" if row.actor else "")) if row else "not a job process"
            style = "yellow" if row is None or row.flags else "dim"
            flags = f" [{','.join(row.flags)}]" if row and row.flags else ""
            text.append(f"    pid {gp.pid:<7} {human_bytes(gp.used_memory):>7}  {who}{flags}\n", style)
    if gpus.status != "ok":
        text.append(f"{gpus.status}: {gpus.reason}\n", "yellow")
    render_remote(store, text)
    return text


def remote_nodes(store: Store) -> list[RayNode]:
    """Ray nodes whose GPUs local NVML does not already show (matched by GPU UUID), with GPUs.

    Local NVML stays the source for this node: finer, every second, with process owners. A node
    that reports one of our UUIDs is this node, and is left out.
    """
    local = {d.uuid for d in store.gpus.devices if d.uuid}
    return [n for n in store.ray.nodes if n.gpus and not (local & {g.uuid for g in n.gpus})]


def render_remote(store: Store, text: Text) -> None:
    """Other nodes' GPUs, as their Ray agents report them (one line each, labelled by node)."""
    for node in remote_nodes(store):
        dead = node.state != "ALIVE"
        text.append(f"node {node.ip} {node.node_id[:8]}" + (" (head)" if node.is_head else ""),
                    "bold red" if dead else "bold")
        text.append(f"  {node.state}\n" if dead else " · via Ray\n", "red" if dead else "dim")
        for dev in node.gpus:
            util = dev.utilization
            frac = (dev.memory_used or 0) / dev.memory_total if dev.memory_total else None
            text.append(f"  {dev.index} {dev.name.removeprefix('NVIDIA ')[:18]:<18} ")
            text.append(bar(None if util is None else util / 100, 6), "green")
            text.append(f" {'  -' if util is None else f'{util:3.0f}'}% ")
            text.append(bar(frac, 6), "magenta")
            text.append(f" {human_bytes(dev.memory_used)}/{human_bytes(dev.memory_total)}")
            if dev.temperature is not None:
                text.append(f" {dev.temperature:.0f}°C")
            text.append("\n")
