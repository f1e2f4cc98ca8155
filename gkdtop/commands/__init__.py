"""One module per subcommand: its argparse parser (`add_parser`) and its entry point (`run`).

A new subcommand is a module here with those two functions and its name in NAMES. Each module
imports only argparse at the top; what `run` needs it imports when it runs, so `gkdtop --help` and
the dashboard's first frame pay for none of it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# --help's order
NAMES = ("snapshot", "watch", "replay", "stacks", "cleanup", "bundle", "doctor", "demo", "run", "serve")


def module(name: str) -> ModuleType:
    """The module of subcommand `name` (gkdtop/commands/<name>.py)."""
    return importlib.import_module(f"gkdtop.commands.{name}")
