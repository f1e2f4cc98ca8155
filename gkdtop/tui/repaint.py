"""When a text pane's update needs a layout pass, and which rows a repaint must cover otherwise."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from textual.content import Content
from textual.geometry import Region

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


def line_rows(line: str, width: int, rules: RulesMap) -> int:
    """Rows one line of a text pane takes at `width`, wrapped by the pane's own rules (as Textual does)."""
    get = rules.get
    return _rows(line, width, get("line_pad", 0), get("text_overflow", "fold"), get("text_wrap", "wrap"))


@functools.lru_cache(maxsize=4096)
def _rows(line: str, width: int, line_pad: int, overflow: str, wrap: str) -> int:
    rules = {"line_pad": line_pad, "text_overflow": overflow, "text_wrap": wrap}
    return Content(line).get_height(rules, width)  # type: ignore[arg-type]


def repaint_rows(old: str, new: str, width: int, rules: RulesMap) -> list[Region] | None:
    """The rows to repaint when a pane's text `old` becomes `new`; None when its shape changed.

    A layout pass re-measures the whole screen and repaints every scrollbar: ~9 ms, every second,
    for a stalled job whose timeline wraps ("‖ weight sync 14m01s" ticks). A changed line that
    wraps to as many rows as before keeps the shape, so only its rows repaint.
    """
    old_lines, new_lines = old.split("\n"), new.split("\n")
    if len(old_lines) != len(new_lines) or width <= 0:
        return None
    regions = []
    y = 0
    for before, after in zip(old_lines, new_lines, strict=True):
        rows = line_rows(after, width, rules)
        if before != after:
            if line_rows(before, width, rules) != rows:
                return None
            regions.append(Region(0, y, width, rows))
        y += rows
    return regions


def reshaped(old: str, new: str, width: int, rules: RulesMap) -> bool:
    """Whether `new` takes a different shape than `old` in a pane `width` cells wide (a layout pass)."""
    return repaint_rows(old, new, width, rules) is None
