"""`n`: pick which Ray nodes' log files the Logs pane follows (remote files, through the dashboard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, SelectionList, Static

from gkdtop.model import RemoteLogSource

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from gkdtop.store import Store

MAX_SHOWN = 500  # options in the list; narrow with the filter box


class SourceScreen(ModalScreen[list[RemoteLogSource] | None]):
    """Every node's log files as the dashboard lists them; the checked ones are followed.

    Opening it asks the collector for a listing (`request`); the list fills in when it arrives.
    """

    DEFAULT_CSS = """
    SourceScreen { align: center middle; }
    SourceScreen > Vertical { width: 90%; height: 80%; border: thick $primary; background: $surface; padding: 0 1; }
    SourceScreen SelectionList { height: 1fr; }
    SourceScreen #status { height: auto; color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "apply", "Apply")]

    def __init__(self, store: Store, request: Callable[[], None] | None) -> None:
        super().__init__()
        self.store = store
        self.request = request
        self.choices: dict[str, RemoteLogSource] = {}
        self.checked: set[str] = {f.source for f in store.ray_logs.followed}
        self._shown_for: tuple[int, str] | None = None
        self._shown: set[str] = set()
        self._filling = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Remote log files (Ray nodes). Space toggles, Ctrl+S follows the checked ones, "
                         "Escape cancels. Type to narrow the list.")
            yield Input(placeholder="filter, e.g. worker-*.out or an IP", id="narrow")
            yield SelectionList[str](id="files")
            yield Static("listing the nodes' files…", id="status")

    def on_mount(self) -> None:
        if self.request is None:
            self.query_one("#status", Static).update("remote logs are not available (no Ray log collector)")
            return
        self.request()
        self._fill()
        self.set_interval(0.5, self._fill)

    def _fill(self) -> None:
        """(Re)build the options when the listing changed or the filter did."""
        state = self.store.ray_logs
        narrow = self.query_one("#narrow", Input).value.strip().lower()
        key = (id(state.available), narrow)
        if key == self._shown_for:
            return
        self._shown_for = key
        files = self.query_one("#files", SelectionList)
        for item in state.followed + state.available:
            self.choices.setdefault(item.source, item)
        shown = [src for src in sorted(self.choices) if not narrow or _matches(narrow, src)][:MAX_SHOWN]
        self._filling = True
        try:
            files.clear_options()
            files.add_options([(src, src, src in self.checked) for src in shown])
        finally:
            self._filling = False
        self._shown = set(shown)
        status = f"{state.status}: {len(state.available)} files listed on the nodes, {len(self.checked)} followed"
        if state.reason:
            status += f" · {state.reason}"
        self.query_one("#status", Static).update(status)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        """Checks of the shown options replace theirs; those hidden by the filter stay as they were."""
        if not self._filling:
            self.checked = (self.checked - self._shown) | {str(v) for v in event.selection_list.selected}

    def action_apply(self) -> None:
        self.dismiss([self.choices[src] for src in sorted(self.checked) if src in self.choices])

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#files", SelectionList).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)


def _matches(narrow: str, source: str) -> bool:
    import fnmatch

    low = source.lower()
    return fnmatch.fnmatchcase(low.rsplit(":", 1)[-1], narrow) if any(c in narrow for c in "*?[") else narrow in low
