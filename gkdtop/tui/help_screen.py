"""`?`: every key, what it does (from the bindings' tooltips), and the config file in use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from collections.abc import Iterable

    from textual.app import ComposeResult
    from textual.binding import BindingType


def key_rows(bindings: Iterable[BindingType]) -> list[tuple[str, str]]:
    """(keys, what they do) for each binding with a tooltip, in order; keys with one description share
    a row (`1 2 3 4 5`, `tab / shift+tab`). A key without a tooltip is told in another key's row."""
    rows: dict[str, list[Binding]] = {}
    for binding in bindings:
        if isinstance(binding, Binding) and binding.tooltip:
            rows.setdefault(binding.tooltip, []).append(binding)
    out: list[tuple[str, str]] = []
    for what, same in rows.items():
        if len(same) == 1:
            keys = same[0].key_display or same[0].key
        else:
            names = [b.key for b in same]
            keys = (" " if all(len(n) == 1 for n in names) else " / ").join(names)
        out.append((keys, what))
    return out


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, config_source: str, bindings: Iterable[BindingType]) -> None:
        super().__init__()
        self.config_source = config_source
        self.keys = key_rows(bindings)

    def compose(self) -> ComposeResult:
        lines = ["[b]gkdtop keys[/b]", ""]
        lines += [f"  [b]{key:<16}[/b] {what}" for key, what in self.keys]
        lines += [
            "",
            "A phase is STALLED when no log line showed progress for its stall_after seconds.",
            f"Config: {self.config_source or 'built-in defaults (see docs/configuration.md)'}",
        ]
        with VerticalScroll():
            yield Static("\n".join(lines))
