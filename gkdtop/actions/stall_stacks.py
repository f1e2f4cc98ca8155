"""One stack dump, taken by itself, when the phase engine declares a stall.

The evidence of a hang is best while it is fresh, and the user who comes back to a stalled job an
hour later should not have to remember to press `s` first: the dump is kept in the store (the `s`
key opens it, the stall banner says it is there) and written beside the manual dumps, where the
bundle picks it up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gkdtop.actions.stacks import StackReport, dump_stacks, stack_targets, write_report
from gkdtop.model.stacks import StallStacks

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo
    from gkdtop.store import Store


class StallStacker:
    """Decides when a stall deserves a dump (once per stall) and takes it."""

    def __init__(self, store: Store, directory: Path | str | None = None,
                 dump: Callable[[list[ProcInfo]], StackReport] = dump_stacks) -> None:
        self.store = store
        self.directory = directory
        self.dump = dump
        self._handled: tuple[str | None, float | None] | None = None

    def due(self, now: float | None = None) -> list[ProcInfo]:
        """The processes to dump if a new stall was declared since the last look, else []."""
        if self.store.history_pending or self.store.log_polls < 2:
            return []  # a log's clock offset shows in its first live lines: a stall before them may be none
        if "procs" not in self.store.health:
            return []  # the job's processes are not listed yet: a stall handled now would be handled with no dump
        status = self.store.phase_status(now)
        if status.state != "stalled":
            return []
        key = (status.current, status.last_progress)
        if key == self._handled:
            return []
        self._handled = key  # once per stall, even when there is nothing to dump
        return stack_targets(self.store.stack_candidates(status.clock_offset))

    def take(self, targets: list[ProcInfo]) -> StallStacks:
        status = self.store.phase_status()
        report = self.dump(targets)
        path, error = "", ""
        try:
            path = str(write_report(report, self.directory))
        except OSError as exc:
            error = f"could not save the stall-time dump: {exc}"
        return StallStacks(phase=status.current or "?", stalled_since=status.last_progress or 0.0,
                           taken=time.time(), path=path, report=report, error=error)
