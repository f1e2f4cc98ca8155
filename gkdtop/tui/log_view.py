"""The Logs pane's scrollback: lines kept as they came, folded at the pane's width only when shown.

A flood then costs an append per line, not a render: RichLog renders every line it is given
(wrapping, segments, strips) even when it scrolls past unseen, which at 1k lines/s was most of the
dashboard's CPU. Lines fold at the width like a terminal's `tail` (at the cell, not the word), so
a line's height is its width in cells over the pane's, known without rendering it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import TYPE_CHECKING, Protocol

from rich.cells import cell_len
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

if TYPE_CHECKING:
    from textual.events import Resize

FALLBACK_WIDTH = 80  # before the first layout: heights are recounted at the real width on resize


def _height(cells: int, width: int) -> int:
    """Rows a line `cells` wide takes when folded at `width` (an empty line takes one)."""
    return max(1, -(-cells // width))


class Shown(Protocol):
    """A line as the view holds it: its plain text (one line: no newlines, no tabs) and, when it
    comes into view, the same text styled."""

    @property
    def plain(self) -> str: ...

    def styled(self) -> Text: ...


class Note:
    """A line of the view's own (not from a log), styled as a whole."""

    __slots__ = ("plain", "style")

    def __init__(self, plain: str, style: str = "") -> None:
        self.plain = plain
        self.style = style

    def styled(self) -> Text:
        return Text(self.plain, self.style)


class LogView(ScrollView, can_focus=True):
    # A steady width (the scrollbar always there): lines fold, never scroll sideways.
    DEFAULT_CSS = "LogView { overflow-y: scroll; overflow-x: hidden; }"

    def __init__(self, max_lines: int = 5000, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.max_lines = max_lines
        self.auto_scroll = True
        self._lines: deque[Shown] = deque()
        self._cells: deque[int] = deque()  # each line's width in cells
        self._ends: list[int] = []  # per line: the row after its last, counted from the first line ever kept
        self._base = 0  # rows of the lines dropped from the front (where row 0 of the view starts)
        self._dropped = 0  # lines dropped from the front: a line's number is this plus its index
        self._fold = FALLBACK_WIDTH  # the width the heights were counted at
        # (line number, row, fold, width) -> strip
        self._rows: LRUCache[tuple[int, int, int, int], Strip] = LRUCache(1024)

    @property
    def lines(self) -> list[str]:
        """The lines held, as plain text (one per line written, however many rows it folds into)."""
        return [text.plain for text in self._lines]

    @property
    def row_count(self) -> int:
        return (self._ends[-1] - self._base) if self._ends else 0

    def write_lines(self, lines: list[Shown]) -> None:
        """Append lines; the oldest go past max_lines."""
        if not lines:
            return
        rows_before = self.row_count
        end = self._ends[-1] if self._ends else self._base
        fold = self._fold
        for text in lines:
            cells = cell_len(text.plain)
            end += _height(cells, fold)
            self._lines.append(text)
            self._cells.append(cells)
            self._ends.append(end)
        dropped_rows = self._trim()
        self._resized()
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif dropped_rows:  # keep the rows being read where they are
            self.scroll_to(y=max(0, self.scroll_y - dropped_rows), animate=False, immediate=True)
        if self.auto_scroll or rows_before - dropped_rows < self.scroll_y + self.size.height:
            self.refresh()  # the new rows may be in view

    def _trim(self) -> int:
        """Drop the lines over max_lines from the front; the rows they took."""
        over = len(self._lines) - self.max_lines
        if over <= 0:
            return 0
        for _ in range(over):
            self._lines.popleft()
            self._cells.popleft()
        before = self._base
        self._base = self._ends[over - 1]
        del self._ends[:over]
        self._dropped += over
        return self._base - before

    def clear(self) -> None:
        self._lines.clear()
        self._cells.clear()
        self._ends.clear()
        self._base = 0
        self._dropped = 0
        self._rows.clear()
        self._resized()
        self.scroll_to(y=0, animate=False, immediate=True)
        self.refresh()

    def on_resize(self, event: Resize) -> None:
        width = self.scrollable_content_region.width
        if width <= 0 or width == self._fold:
            return
        top = self._line_at(round(self.scroll_y))[0] if self._lines else 0
        self._fold = width
        end = 0
        for i, cells in enumerate(self._cells):
            end += _height(cells, width)
            self._ends[i] = end
        self._base = 0
        self._resized()
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:  # the line that was at the top stays there
            self.scroll_to(y=self._ends[top - 1] if top else 0, animate=False, immediate=True)
        self.refresh()

    def _resized(self) -> None:
        """The scrollback's new height, told to the scrollbar: a repaint. Setting virtual_size would
        make a layout pass of the whole screen at every write, and this view's own size is its pane's."""
        size = Size(self._fold, self.row_count)
        self.set_reactive(LogView.virtual_size, size)
        bar = self.vertical_scrollbar
        bar.window_virtual_size = size.height
        bar.window_size = self.scrollable_content_region.height

    def _line_at(self, row: int) -> tuple[int, int]:
        """(index of the line, which of its rows) shown at `row` of the scrollback."""
        absolute = row + self._base
        index = bisect_right(self._ends, absolute)
        start = self._ends[index - 1] if index else self._base
        return index, absolute - start

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        row = round(self.scroll_y) + y
        if row >= self.row_count or width <= 0:
            return Strip.blank(width, self.rich_style)
        index, part = self._line_at(row)
        fold = self._fold
        # The fold is in the key, not only the width: Textual draws a resized screen before this view hears
        # of its new size (on_resize), and rows cut at the old fold must not be kept as the new width's.
        key = (self._dropped + index, part, fold, width)
        strip = self._rows.get(key)
        if strip is None:
            whole = Strip(self._lines[index].styled().render(self.app.console), self._cells[index])
            strip = whole.crop_extend(part * fold, part * fold + fold, None).crop_extend(0, width, None)
            strip = strip.apply_style(self.rich_style)
            self._rows[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows.clear()
