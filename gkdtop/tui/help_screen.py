"""`?`: every key, what it does, and the config file in use."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("q", "quit"),
    ("?", "this help"),
    ("/", "edit the log filter (a regular expression; a preset name such as 'default' or 'all')"),
    ("f", "follow the newest log lines on / off"),
    ("space", "pause / resume the log view (lines keep being collected)"),
    ("tab / shift+tab", "move focus between panes"),
    ("1 2 3 4 5", "maximize Phases / GPUs / Processes / Logs / Ray; the same key or escape restores"),
    ("o", "Processes: cycle the sort column (or click a header)"),
    ("s", "dump the Python stacks of every job process (py-spy), grouped; odd ones out marked; "
          "while stalled, first the dump taken when the stall began (r: dump again)"),
    ("c", "clean up a crashed run's debris: shows the plan first, runs only what you confirm"),
    ("e", "export a diagnostic bundle (.tar.gz, secrets redacted)"),
    ("n", "pick log files of Ray nodes (remote workers) to follow in the Logs pane"),
    ("ctrl+c", "in `gkdtop run`: send SIGINT to the job, as a shell would"),
]


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, config_source: str) -> None:
        super().__init__()
        self.config_source = config_source

    def compose(self) -> ComposeResult:
        lines = ["[b]gkdtop keys[/b]", ""]
        lines += [f"  [b]{key:<16}[/b] {what}" for key, what in KEYS]
        lines += [
            "",
            "A phase is STALLED when no log line showed progress for its stall_after seconds.",
            f"Config: {self.config_source or 'built-in defaults (see docs/configuration.md)'}",
        ]
        with VerticalScroll():
            yield Static("\n".join(lines))
