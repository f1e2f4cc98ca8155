"""The Logs pane's scrollback (tui/log_view.py) in a real Textual app: folding, trimming, scrolling."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gkdtop.tui.log_view import LogView, Note


class ViewApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogView(max_lines=50)


def rows(view: LogView) -> list[str]:
    """The view's visible rows as text, trailing blanks cut."""
    return ["".join(seg.text for seg in view.render_line(y)).rstrip() for y in range(view.size.height)]


async def test_long_lines_fold_at_the_width_and_the_view_follows_the_end() -> None:
    app = ViewApp()
    async with app.run_test(size=(42, 8)) as pilot:
        view = app.query_one(LogView)
        width = view.scrollable_content_region.width
        view.write_lines([Note("a" * (width * 2 + 3)), Note("short")])
        await pilot.pause()
        assert view.row_count == 4  # three rows and one
        assert rows(view)[:4] == ["a" * width, "a" * width, "aaa", "short"]
        view.write_lines([Note(f"line {i}") for i in range(20)])
        await pilot.pause()
        assert rows(view)[-1] == "line 19"  # following: the newest row is the last one shown
        assert view.scroll_y == view.max_scroll_y


async def test_oldest_lines_go_past_max_lines_and_a_reader_keeps_their_place() -> None:
    app = ViewApp()
    async with app.run_test(size=(42, 8)) as pilot:
        view = app.query_one(LogView)
        view.write_lines([Note(f"line {i}") for i in range(40)])
        await pilot.pause()
        view.auto_scroll = False
        view.scroll_to(y=30, animate=False, immediate=True)  # reading line 30
        await pilot.pause()
        assert rows(view)[0] == "line 30"
        view.write_lines([Note(f"new {i}") for i in range(20)])  # 10 of the oldest go
        await pilot.pause()
        assert len(view.lines) == 50 and view.lines[0] == "line 10" and view.lines[-1] == "new 19"
        assert rows(view)[0] == "line 30"  # still in place: the rows above it moved up


async def test_a_narrower_view_folds_again_and_keeps_the_top_line() -> None:
    app = ViewApp()
    async with app.run_test(size=(62, 8)) as pilot:
        view = app.query_one(LogView)
        view.write_lines([Note(f"{i:02d} " + "x" * 40) for i in range(20)])
        await pilot.pause()
        assert view.row_count == 20  # 43 cells: one row each at 60 wide
        view.auto_scroll = False
        view.scroll_to(y=5, animate=False, immediate=True)
        await pilot.pause()
        await pilot.resize_terminal(32, 8)
        await pilot.pause()
        width = view.scrollable_content_region.width
        assert width < 43 and view.row_count == 20 * -(-43 // width)
        assert rows(view)[0].startswith("05 ")  # the line at the top before is at the top now


async def test_clear_empties_the_view() -> None:
    app = ViewApp()
    async with app.run_test(size=(42, 8)) as pilot:
        view = app.query_one(LogView)
        view.write_lines([Note(f"line {i}") for i in range(30)])
        view.clear()
        await pilot.pause()
        assert view.lines == [] and view.row_count == 0 and rows(view) == [""] * view.size.height
