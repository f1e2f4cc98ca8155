"""`s`: dump every job process's Python stacks, grouped, with the odd ones out singled out."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, Tree

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from gkdtop.model import ProcInfo


class StacksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    StacksScreen { align: center middle; }
    StacksScreen > Vertical { width: 96%; height: 92%; border: thick $primary; background: $surface; }
    StacksScreen #status { height: auto; padding: 0 1; }
    StacksScreen Tree { height: 1fr; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Close"), Binding("r", "redump", "Dump again")]

    def __init__(self, procs: list[ProcInfo], native: bool = False, taken: Any = None) -> None:
        """taken: a StallStacks to show first (the dump from when the stall began) instead of dumping now."""
        super().__init__()
        self.procs = procs
        self.native = native
        self.taken = taken
        self.report: Any = None
        self.path: str = ""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Dumping the stacks of {len(self.procs)} job processes with py-spy…", id="status")
            yield Tree("stacks", id="tree")

    def on_mount(self) -> None:
        self.query_one(Tree).show_root = False
        if self.taken is not None:
            when = time.strftime("%H:%M:%S", time.localtime(self.taken.taken))
            self._show(self.taken.report, self.taken.path or self.taken.error,
                       f"taken at {when}, when '{self.taken.phase}' stalled · r: dump again now")
        else:
            self.run_worker(self._dump, thread=True, exclusive=True)

    def action_redump(self) -> None:
        if not self.procs:
            self.query_one("#status", Static).update(Text("no job processes to dump", "yellow"))
            return
        self.query_one("#status", Static).update(f"Dumping the stacks of {len(self.procs)} job processes…")
        self.run_worker(self._dump, thread=True, exclusive=True)

    def _dump(self) -> None:
        from gkdtop.actions.stacks import dump_stacks, write_report

        try:
            report = dump_stacks(self.procs, native=self.native)
            path = str(write_report(report))
        except Exception as exc:
            self.app.call_from_thread(self._failed, f"{type(exc).__name__}: {exc}")
            return
        self.app.call_from_thread(self._show, report, path)

    def _failed(self, message: str) -> None:
        self.query_one("#status", Static).update(Text(f"stack dump failed: {message}", "bold red"))

    def _show(self, report: Any, path: str, when: str = "") -> None:
        self.report, self.path = report, path
        dumps = {d.pid: d for d in report.dumps}
        outliers = set(report.outliers)
        ok = sum(1 for d in report.dumps if d.ok)
        status = Text(f"{ok}/{len(report.dumps)} processes dumped, {len(report.groups)} distinct stacks · saved {path}")
        if when:
            status.append(f"\n{when}", "bold")
        if outliers:
            status.append(f"\nnot where the others are: {', '.join(map(str, sorted(outliers)))}", "bold red")
        colls = getattr(report, "collectives", None)
        if colls is not None and colls.sentence:
            status.append("\ncollectives: ", "bold")
            status.append(colls.sentence, "bold red" if any(g.kind for g in colls.groups) else "")
        self.query_one("#status", Static).update(status)
        tree = self.query_one(Tree)
        tree.clear()
        if colls is not None:
            _add_collectives(tree.root, colls)
        for group in report.groups:
            odd = any(pid in outliers for pid in group.pids)
            label = Text(f"{len(group.pids)} process{'es' if len(group.pids) != 1 else ''}", "bold")
            who = sorted({dumps[p].label or dumps[p].role for p in group.pids if p in dumps})
            if who:
                label.append(f" ({', '.join(who[:2])}{', …' if len(who) > 2 else ''})", "cyan")
            label.append(": ", "bold")
            label.append(group.summary or "(no Python frames)", "bold red" if odd else "")
            node = tree.root.add(label, expand=odd or len(report.groups) <= 3)
            for pid in group.pids:
                dump = dumps.get(pid)
                _add_dump(node, dump, pid, pid in outliers)
        failed = [d for d in report.dumps if not d.ok]
        if failed:
            node = tree.root.add(Text(f"{len(failed)} could not be dumped", "yellow"), expand=True)
            for dump in failed:
                node.add_leaf(Text(f"{dump.pid} {dump.label or dump.role}: {dump.error}", "yellow"))


def _add_dump(parent: Any, dump: Any, pid: int, odd: bool) -> None:
    title = Text(f"pid {pid} ")
    if dump is not None:
        title.append(dump.label or dump.role, "cyan")
    if odd:
        title.append("  ← not where the others are", "bold red")
    node = parent.add(title, expand=odd)
    if dump is None:
        return
    for thread in dump.threads:
        tnode = node.add(Text(f"thread {thread.name}" + (" (idle)" if thread.idle else ""),
                              "dim" if thread.idle else "bold"), expand=not thread.idle and odd)
        for frame in thread.frames:
            tnode.add_leaf(Text(f"{frame.function}  {frame.file}:{frame.line}"))


def _add_collectives(parent: Any, report: Any) -> None:
    """The Flight Recorder's view beside the py-spy groups: per group, where each rank is."""
    ok = sum(d.ok for d in report.dumps)
    node = parent.add(Text(f"Flight Recorder: {ok} of {len(report.dumps)} ranks dumped"
                           + (f" · {report.error}" if report.error else ""), "bold"),
                      expand=any(g.kind for g in report.groups))
    for group in report.groups:
        gnode = node.add(Text(group.sentence, "bold red" if group.kind else ""), expand=bool(group.kind))
        for s in group.states:
            where = f"in {s.current} #{s.current_seq}" if s.current else "in no collective"
            done = "-" if s.last_completed is None else str(s.last_completed)
            style = "bold red" if s.rank in group.culprits else ""
            gnode.add_leaf(Text(f"rank {s.rank}  pid {s.pid}  {s.label}: last completed #{done}, {where}", style))
        if group.detail:
            gnode.add_leaf(Text(f"torch: {group.detail}", "dim"))
    for dump in report.dumps:
        if not dump.ok:
            node.add_leaf(Text(f"pid {dump.pid} {dump.label}: {dump.error}", "yellow"))
    if report.ras is not None:
        ras = report.ras
        rnode = node.add(Text(f"NCCL RAS at {ras['address']}" + (f": {ras['error']}" if ras["error"] else ""),
                              "bold"), expand=True)
        for comm in ras["communicators"]:
            rnode.add_leaf(Text(comm["sentence"], "bold red" if comm["stuck"] or comm["missing"] else ""))
