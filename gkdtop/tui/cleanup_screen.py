"""`c`: the cleanup plan, item by item with its reason; nothing runs until the user confirms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, SelectionList, Static
from textual.widgets.selection_list import Selection

if TYPE_CHECKING:
    from textual.app import ComposeResult


class CleanupScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    CleanupScreen { align: center middle; }
    CleanupScreen > Vertical { width: 96%; height: 90%; border: thick $warning; background: $surface; }
    CleanupScreen #status { height: auto; padding: 0 1; }
    CleanupScreen SelectionList { height: 1fr; }
    CleanupScreen Horizontal { height: auto; align: right middle; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Cancel"), Binding("r", "run", "Run selected")]

    def __init__(self, gpu_pids: set[int]) -> None:
        super().__init__()
        self.gpu_pids = gpu_pids
        self.items: list[Any] = []
        self.done = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Building the cleanup plan…", id="status")
            yield SelectionList[int](id="items")
            with Horizontal():
                yield Button("Run selected (r)", id="run", variant="warning", disabled=True)
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.run_worker(self._plan, thread=True, exclusive=True)

    def _plan(self) -> None:
        from gkdtop.actions.cleanup import build_plan

        try:
            items = build_plan(gpu_pids=self.gpu_pids)
        except Exception as exc:
            self.app.call_from_thread(self._say, Text(f"could not build the plan: {exc}", "bold red"))
            return
        self.app.call_from_thread(self._show_plan, items)

    def _say(self, text: Text | str) -> None:
        self.query_one("#status", Static).update(text)

    def _show_plan(self, items: list[Any]) -> None:
        from gkdtop.actions.cleanup import target_text

        self.items = items
        listing = self.query_one(SelectionList)
        listing.clear_options()
        for i, item in enumerate(items):
            prompt = Text(f"{item.action:<10} ", "bold")
            prompt.append(f"{item.kind} {target_text(item)}", "cyan")
            prompt.append(f"  {item.reason}")
            listing.add_option(Selection(prompt, i, bool(item.selected)))
        if not items:
            self._say("Nothing to clean up: no debris of a crashed run found for this user.")
            return
        self._say(Text(f"{len(items)} item(s). Space toggles one; r runs the selected ones; esc cancels. "
                       "Only your own processes and files; live jobs are never selected.", "bold"))
        self.query_one("#run", Button).disabled = False
        listing.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.action_run()
        else:
            self.dismiss()

    def action_run(self) -> None:
        if self.done or not self.items:
            return
        chosen = set(self.query_one(SelectionList).selected)
        for i, item in enumerate(self.items):
            item.selected = i in chosen
        self.done = True
        self.query_one("#run", Button).disabled = True
        self._say(f"Running {len(chosen)} item(s)…")
        self.run_worker(self._execute, thread=True, exclusive=True)

    def _execute(self) -> None:
        from gkdtop.actions.cleanup import execute

        try:
            results = execute(self.items)
        except Exception as exc:
            self.app.call_from_thread(self._say, Text(f"cleanup failed: {exc}", "bold red"))
            return
        self.app.call_from_thread(self._show_results, results)

    def _show_results(self, results: list[Any]) -> None:
        text = Text("Done:\n", "bold")
        for r in results:
            text.append(f"  {r.outcome:<14} {r.kind} {r.target}  {r.detail}\n")
        self._say(text)
