"""Metrics (key 6, shown maximized): the whole run's curves. Step time stacked by its `timing_s/*`
parts, then the chosen metrics (config `metrics:`, else the framework's defaults), `m` for the next
ones. Drawn from the store's Curves (analysis/curves.py: each point a bucket's min, max and last, so a
spike shows at any run length), only when a step landed, the page or the size changed; plotext is
imported when the pane is first shown, not for the first frame."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.widget import Widget

    from gkdtop.analysis.curves import Curves, Series
    from gkdtop.store import Store

# The charts a framework's run is read by, when the config names none (data/frameworks.yaml's names).
DEFAULTS = {
    "verl": ("critic/score/mean", "response_length/mean", "response_length/clip_ratio", "actor/entropy",
             "perf/throughput"),
    "hf-trainer": ("loss", "grad_norm", "learning_rate"),
    "trl": ("loss", "reward", "completions/mean_length", "grad_norm", "learning_rate"),
    "llamafactory": ("loss", "grad_norm", "learning_rate"),
}
FALLBACK = ("critic/score/mean", "response_length/mean", "response_length/clip_ratio", "actor/entropy",
            "perf/throughput", "loss", "grad_norm", "learning_rate")
MAX_POINTS = 240  # per chart, at most: two per column of a wide chart (braille draws two dots a column)
PART_COLORS = ("cyan", "green", "magenta", "yellow", "blue", "red")  # plotext's names, Rich's too
TALL = 40  # rows from which six charts fit (two columns of three), else four


def chosen(store: Store) -> list[str]:
    """The metrics to chart, in order: the config's or the framework's, then every other one the run printed."""
    names = list(store.phases.curves.series())
    first = store.config.metrics or list(DEFAULTS.get(store.framework().name or "", FALLBACK))
    picked = [m for m in first if m in names]
    return picked + [m for m in names if m not in picked and not m.startswith("timing_s/")]


def thinned(series: Series, points: int = MAX_POINTS) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps, lows, highs and lasts of a series in at most `points` points, each extreme kept."""
    found = series.as_json(points)["series"]
    steps = [p[0] for p in found]
    lows = [p[1] if p[1] is not None else float("nan") for p in found]
    highs = [p[2] if p[2] is not None else float("nan") for p in found]
    lasts = [p[3] if isinstance(p[3], float | int) else float("nan") for p in found]
    return steps, lows, highs, lasts


def stacked(curves: Curves, points: int = MAX_POINTS) -> list[tuple[str, list[int], list[float]]]:
    """Step time as its parts piled up (each line the sum of the parts below it), the parts every step
    printed; `timing_s/step` on top, its highest value of each point (a slow step shows at any length)."""
    found = curves.series()
    step = found.get("timing_s/step")
    parts = [(k, s) for k, s in found.items() if k.startswith("timing_s/") and k != "timing_s/step"
             and (step is None or s.count == step.count)]
    out: list[tuple[str, list[int], list[float]]] = []
    total: list[float] | None = None
    for key, series in parts:
        steps, _, _, lasts = thinned(series, points)
        total = lasts if total is None else [a + b for a, b in zip(total, lasts, strict=False)]
        out.append((key[len("timing_s/") :], steps, total))
    if step is not None:
        steps, _, highs, _ = thinned(step, points)
        out.append(("step", steps, highs))
    return out


def title(name: str, value: str, room: int) -> str:
    """`name value` cut to fit a chart's width (plotext drops a title that does not): the name's
    leading parts go first (`response_length/clip_ratio` -> `clip_ratio`), then the value."""
    parts = name.split("/")
    for i in range(len(parts)):
        short = "/".join(parts[i:])
        if len(short) + 1 + len(value) <= room:
            return f"{short} {value}"
    return parts[-1][: max(room, 1)]


class MetricsPane(Vertical):
    SOURCES: ClassVar[tuple[str, ...]] = ("logs", "ray_logs")  # steps arrive as log lines
    BINDINGS = [Binding("m", "next_metrics", "Next", tooltip="Metrics (maximized): chart the next metrics")]
    DEFAULT_CSS = """
    MetricsPane { display: none; border: round $primary; padding: 0 1; }
    MetricsPane.-maximized { display: block; height: 1fr; }
    MetricsPane #metrics-head { height: 1; color: $text-muted; }
    MetricsPane Grid { grid-size: 2; grid-gutter: 0 1; }
    """
    BORDER_TITLE = "6 Metrics"
    page = 0
    _drawn: tuple[Any, ...] | None = None
    _store: Store | None = None

    def compose(self) -> Any:
        yield Static("", id="metrics-head")

    def refresh_from(self, store: Store) -> None:
        self._store = store
        if not self.has_class("-maximized"):
            return
        curves = store.phases.curves
        names = chosen(store)
        charts = 5 if self.size.height >= TALL else 3
        pages = max(1, -(-len(names) // charts))
        self.page %= pages
        shown = names[self.page * charts : (self.page + 1) * charts]
        key = (curves.count, tuple(shown), charts, self.size)
        if key == self._drawn:
            return  # no step landed: nothing to draw
        self._drawn = key
        head = Text(f"{curves.count} steps · {self.page + 1}/{pages} (m: next)" if names else
                    "no step metrics yet: charts appear when the job prints its first step line")
        plots = self._plots(charts + 1)
        room = (self.size.width - 4) // 2 - 10  # a chart's title row, less its y axis' labels
        points = min(MAX_POINTS, max(20, 2 * room))
        if names:
            parts = self._draw_steps(plots[0], curves, points)
            head.append(" · parts:" if parts else "")
            for label, color in parts:
                head.append(f" {label}", color)
        self.query_one("#metrics-head", Static).update(head)
        if not names:
            return
        for plot, name in zip(plots[1:], [*shown, *[""] * charts], strict=False):
            self._draw_metric(plot, name, curves.get(name) if name else None, room, points)

    def _plots(self, count: int) -> list[Any]:
        """The chart widgets (textual-plotext, imported here: the first frame does without it)."""
        from textual_plotext import PlotextPlot

        grid = self.query(Grid)
        if not grid:
            grid_widget = Grid()
            self.mount(grid_widget)
            grid_widget.mount_all([PlotextPlot() for _ in range(6)])
            plots: list[Widget] = list(grid_widget.children)
        else:
            plots = list(grid.first().children)
        for i, plot in enumerate(plots):
            plot.display = i < count
        return plots[:count]

    @staticmethod
    def _draw_steps(plot: Any, curves: Curves, points: int) -> list[tuple[str, str]]:
        """The stacked step time; its lines' names and colours, for the pane's head (a legend inside
        the chart would hide its top left)."""
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        lines = stacked(curves, points)
        plt.title("step time (s), parts stacked" if lines else "step time: no timing_s/* keys")
        if lines:  # (plotext fails drawing an empty chart on a log scale: HF's steps print no timing_s/*)
            plt.yscale("log")  # a slow step of 300 s and parts of 2 s and 20 s, each readable
        shown = [(label, PART_COLORS[i % len(PART_COLORS)]) for i, (label, _, _) in enumerate(lines)]
        for (_, steps, values), (_, color) in reversed(list(zip(lines, shown, strict=True))):  # parts over the total
            plt.plot(steps, values, marker="braille", color=color)
        plot.refresh()
        return shown

    @staticmethod
    def _draw_metric(plot: Any, name: str, series: Series | None, room: int, points: int) -> None:
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        if series is None:
            plt.title(name or "")
            plot.refresh()
            return
        steps, lows, highs, lasts = thinned(series, points)
        last = lasts[-1] if lasts else float("nan")
        plt.title(title(name, f"{last:.4g}", room))
        if series.width > 1 or len(steps) < series.count:  # a point stands for several steps: show their range
            plt.plot(steps, highs, marker="braille", color="gray")
            plt.plot(steps, lows, marker="braille", color="gray")
        plt.plot(steps, lasts, marker="braille")
        plot.refresh()

    def on_resize(self) -> None:
        """Maximized (it had no size before) or the terminal resized: how many charts fit, their titles."""
        if self._store is not None:
            self.refresh_from(self._store)

    def action_next_metrics(self) -> None:
        self.page += 1
        if self._store is not None:
            self.refresh_from(self._store)

