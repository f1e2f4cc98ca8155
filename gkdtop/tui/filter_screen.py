"""`/`: edit the log filter live; a bad regular expression is said, not applied."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

if TYPE_CHECKING:
    from textual.app import ComposeResult


class FilterScreen(ModalScreen[str | None]):
    DEFAULT_CSS = """
    FilterScreen { align: center bottom; }
    FilterScreen > Vertical { width: 100%; height: auto; border: thick $primary; background: $surface;
        padding: 0 1; }
    FilterScreen #error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str, presets: dict[str, str]) -> None:
        super().__init__()
        self.current = current
        self.presets = presets

    def compose(self) -> ComposeResult:
        names = ", ".join([*sorted(self.presets), "all"])
        with Vertical():
            yield Static(f"Filter (regular expression, or a preset: {names}). Enter applies, Escape cancels.")
            yield Input(value=self.current, id="filter")
            yield Static("", id="error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if value == "all":
            self.dismiss("")
            return
        value = self.presets.get(value, value)
        from gkdtop.analysis.matcher import PatternError, compile_pattern

        try:
            compile_pattern(value, every_engine=False)  # RE2 runs it: `(a+)+$` costs no more than `a`
        except PatternError as exc:
            self.query_one("#error", Static).update(str(exc))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)
