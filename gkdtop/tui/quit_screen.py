"""`q` while the job that `gkdtop run` started still runs: stop it, or leave it running?

Quitting the dashboard must never kill a training run by surprise, nor leave one behind unnoticed:
the answer is asked, and `gkdtop run` acts on it after the dashboard has closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

if TYPE_CHECKING:
    from textual.app import ComposeResult


class QuitScreen(ModalScreen[str | None]):
    """Dismissed with "stop", "leave", or None (stay in the dashboard)."""

    DEFAULT_CSS = """
    QuitScreen { align: center middle; }
    QuitScreen > Vertical { width: 72; height: auto; border: thick $warning; background: $surface; padding: 1 2; }
    QuitScreen Horizontal { height: auto; margin-top: 1; }
    QuitScreen Button { margin-right: 2; }
    """
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop the job"),
        Binding("l", "choose('leave')", "Leave it running"),
        Binding("escape,n", "choose('')", "Cancel"),
    ]

    def __init__(self, pid: int, command: str) -> None:
        super().__init__()
        self.pid = pid
        self.command = command

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"[b]The job is still running[/b] (pid {self.pid}):\n{self.command}\n\n"
                         "[b]s[/b]  stop it (SIGTERM to its process group, SIGKILL after a grace period)\n"
                         "[b]l[/b]  leave it running (its log keeps growing; gkdtop exits)\n"
                         "[b]esc[/b] back to the dashboard", id="question")
            with Horizontal():
                yield Button("Stop job", variant="error", id="stop")
                yield Button("Leave running", variant="primary", id="leave")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose({"stop": "stop", "leave": "leave"}.get(event.button.id or "", ""))

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice or None)
