"""When a text pane's update needs a layout pass, and when a repaint is enough."""

from __future__ import annotations

from rich.cells import cell_len


def reshaped(old: str, new: str, width: int) -> bool:
    """Whether `new` may take a different number of rows than `old` in a pane `width` cells wide.

    A layout pass re-measures the whole screen and makes every scrollbar repaint; the panes that
    tick every second (a phase's "for 35s", a GPU's sparkline) keep their shape, so a repaint
    does: same number of lines, and no changed line long enough to wrap.
    """
    old_lines, new_lines = old.split("\n"), new.split("\n")
    if len(old_lines) != len(new_lines):
        return True
    return any(a != b and max(cell_len(a), cell_len(b)) >= width for a, b in zip(old_lines, new_lines, strict=True))
