"""Logs: the followed files, filtered, with follow / pause, scrollback and the matches highlighted."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from gkdtop.format import clock
from gkdtop.tui.log_view import LogView, Note
from gkdtop.tui.repaint import reshaped

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from gkdtop.analysis.matcher import Pattern
    from gkdtop.model import LogLine
    from gkdtop.store import Store
    from gkdtop.tui.log_view import Shown

MAX_PER_REFRESH = 200  # lines drawn per refresh (4 a second); more than this is a flood
BLOCK = "block"  # ShownLine's redact for a line inside a secret YAML block scalar: the whole body hidden
BLOCK_IDS_MAX = 100_000  # ids of such lines kept; then the oldest half go (a stale id hides too much, not too little)
LEVEL_STYLES = [
    (re.compile(r"Traceback|ERROR|Error|✗|FATAL|CRITICAL"), "red"),
    (re.compile(r"WARN"), "yellow"),
    (re.compile(r"✓|step:\d+ -"), "green"),
]


def hide_secrets(text: str) -> str:
    """A line as a browser view shows it: its secrets redacted (actions/redact.py, the bundle's rules)."""
    from gkdtop.actions.redact import redact_text

    return redact_text(text)[0]


def hide_secrets_styled(text: Text) -> Text:
    """A styled text with its secrets redacted, line by line, the styles around them kept."""
    from gkdtop.actions.redact import REDACTED, secret_spans

    found = [secret_spans(line) for line in text.plain.split("\n")]
    if not any(found):
        return text
    out = Text(end=text.end)
    for i, (line, spans) in enumerate(zip(text.split("\n", allow_blank=True), found, strict=True)):
        if i:
            out.append("\n")
        pos = 0
        for start, end in spans:
            out.append_text(line[pos:start])
            out.append(REDACTED, "dim")
            pos = end
        out.append_text(line[pos:])
    return out


def _parts(line: LogLine, redact: bool | str = False) -> tuple[str, str, str, str]:
    """(clock, worker prefix, body, cut note) as shown; tabs as spaces, so the width is known before styling.
    `redact`: a browser view's, the secrets in the body redacted; BLOCK: the whole body (a line of a secret
    YAML block scalar, whose name was on a line before it)."""
    prefix = f"({line.worker or 'pid'}{f' {line.pid}' if line.pid else ''}) " if line.worker or line.pid else ""
    cut = f" …[+{line.truncated} bytes cut]" if line.truncated else ""
    body = (_hidden_body(line.text) if redact == BLOCK else hide_secrets(line.text)) if redact else line.text
    body = body.expandtabs(4) if "\t" in body else body
    return clock(line.time) + " ", prefix, body, cut  # (raylet): a worker, no pid


def _hidden_body(text: str) -> str:
    from gkdtop.actions.redact import REDACTED

    indent = len(text) - len(text.lstrip(" \t"))
    return text[:indent] + REDACTED if text.strip() else text


def render_line(line: LogLine, pattern: re.Pattern[str] | None, redact: bool | str = False) -> Text:
    stamp, prefix, body_text, cut = _parts(line, redact)
    text = Text(stamp, "dim", no_wrap=False)
    if prefix:
        text.append(prefix, "cyan")
    style = ""
    for regex, candidate in LEVEL_STYLES:
        if regex.search(body_text):
            style = candidate
            break
    body = Text(body_text, style=style)
    if cut:
        body.append(cut, "dim italic")
    if pattern is not None and pattern.pattern:
        body.highlight_regex(pattern, "reverse")
    text.append_text(body)
    return text


class ShownLine:
    """A log line in the scrollback: its plain text now (how many rows it takes), its styles only
    when it scrolls into view (most lines of a flood never do)."""

    __slots__ = ("line", "pattern", "plain", "redact")

    def __init__(self, line: LogLine, pattern: re.Pattern[str] | None, redact: bool | str = False) -> None:
        self.line = line
        self.pattern = pattern
        self.redact = redact
        self.plain = "".join(_parts(line, redact))

    def styled(self) -> Text:
        return render_line(self.line, self.pattern, self.redact)


class LogsPane(Vertical):
    SOURCES: ClassVar[tuple[str, ...]] = ("logs",)  # remote lines too: the store bumps logs for them
    QUICK: ClassVar[bool] = True  # drawn on the quick timer: a followed log keeps up
    DEFAULT_CSS = """
    LogsPane { border: round $primary; height: 2fr; }
    LogsPane LogView { height: 1fr; scrollbar-size-vertical: 1; }
    LogsPane #progress { height: auto; max-height: 3; color: $accent; }
    """
    BORDER_TITLE = "4 Logs"

    def __init__(self, filter_text: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.filter_text = filter_text
        self._pattern: Pattern | bool | None = False  # compiled when first needed: after the first frame
        self.paused = False
        self.follow = True
        self._seen = 0
        self._skipped_seen = 0  # store.skipped_lines at the last look
        self._held = 0  # lines that arrived while paused
        self._bars = ""  # the progress bars shown
        self._subtitle = ""
        self._open_blocks: dict[tuple[str, str, int | None], int] = {}  # per writer: an open secret block's indent
        self._block_ids: dict[int, None] = {}  # the lines inside one (ids of the store's LogLines), oldest first

    def compose(self) -> ComposeResult:
        yield LogView(max_lines=5000)
        yield Static("", id="progress", markup=False)  # log text: "[rank0]:" is not a tag

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    @property
    def redact(self) -> bool:
        """A browser view (`gkdtop serve`) shows lines redacted: what a filter matches, too, so a filter
        cannot be used to guess a secret a character at a time."""
        return bool(getattr(self.app, "redact", False))

    def _matches(self, line: LogLine, pattern: Pattern | None) -> bool:
        if pattern is None:
            return True
        text = line.raw or line.text  # the raw line first (a flood is mostly misses): redaction only for a hit
        if pattern.search(text) is None or not self.redact:
            return pattern.search(text) is not None
        shown = _hidden_body(text) if id(line) in self._block_ids else hide_secrets(text)
        return pattern.search(shown) is not None

    def _redaction(self, line: LogLine) -> bool | str:
        return BLOCK if self.redact and id(line) in self._block_ids else self.redact

    def _track_blocks(self, lines: list[LogLine]) -> None:
        """Lines in arrival order: those inside a YAML block scalar under a secret name (`password: |`
        on a line before them, from the same writer) are marked, since line-by-line redaction cannot see
        the name above them."""
        from gkdtop.actions.redact import secret_block_indent

        for line in lines:
            writer = (line.source, line.worker, line.pid)
            text = line.text
            opened = self._open_blocks.get(writer)
            if opened is not None:
                if not text.strip() or len(text) - len(text.lstrip(" \t")) > opened:
                    self._block_ids[id(line)] = None
                    continue
                del self._open_blocks[writer]
            if (indent := secret_block_indent(text)) is not None:
                self._open_blocks[writer] = indent
        if len(self._block_ids) > BLOCK_IDS_MAX:
            self._block_ids = dict.fromkeys(list(self._block_ids)[BLOCK_IDS_MAX // 2:])

    @property
    def pattern(self) -> Pattern | None:
        if self._pattern is False:
            from gkdtop.analysis.matcher import compile_pattern

            self._pattern = compile_pattern(self.filter_text, every_engine=False) if self.filter_text else None
        return self._pattern  # type: ignore[return-value]

    def set_filter(self, filter_text: str, store: Store) -> None:
        """Apply a new filter to the scrollback too: the history is kept, only the view changes."""
        self.filter_text = filter_text
        self._pattern = False
        view = self.log_view
        view.clear()
        found = store.matching(self.pattern, limit=2000)
        if self.redact:
            found = [line for line in found if self._matches(line, self.pattern)]
        if found:
            view.write_lines([ShownLine(line, self.pattern, self._redaction(line)) for line in found])
        self._seen, self._skipped_seen = store.total_lines, store.skipped_lines
        self._held = 0
        self._update_title(store)

    def toggle_pause(self, store: Store) -> None:
        self.paused = not self.paused
        if not self.paused:
            self.refresh_from(store)
        self._update_title(store)

    def toggle_follow(self, store: Store) -> None:
        self.follow = not self.follow
        self.log_view.auto_scroll = self.follow
        if self.follow:
            self.log_view.scroll_end(animate=False)
        self._update_title(store)

    def refresh_from(self, store: Store) -> None:
        if self.paused:
            self._held = store.total_lines - self._seen
            self._update_title(store)
            return
        new = store.lines_since(self._seen)
        if self.redact:
            self._track_blocks(new)
        self._seen = store.total_lines
        self._held = 0
        sieved, self._skipped_seen = store.skipped_lines - self._skipped_seen, store.skipped_lines
        if new or sieved:
            pattern = self.pattern
            matched = [ln for ln in new if self._matches(ln, pattern)]
            notes = []
            # A flood (more than MAX_PER_REFRESH since the last look, or sieved): a screenful is all
            # anyone can read, and drawing more costs the UI its responsiveness (~0.15 ms a line).
            most = MAX_PER_REFRESH if len(matched) <= MAX_PER_REFRESH and not sieved else max(20, self.size.height)
            if len(matched) > most:
                notes.append(f"{len(matched) - most:,} matching lines")
                matched = matched[-most:]
            if sieved:  # lines the flood sieve dropped: checked against every phase and finding rule
                notes.append(f"{sieved:,} lines no rule needs")
            shown: list[Shown] = [ShownLine(line, pattern, self._redaction(line)) for line in matched]
            if notes:
                shown.insert(0, Note(f"… {' and '.join(notes)} not shown (flood; `gkdtop replay` reads them all)",
                                     "dim italic"))
            self.log_view.write_lines(shown)
        bars = "\n".join(f"⟳ {hide_secrets(ln.text) if self.redact else ln.text[:200]}"[:202]
                         for ln in list(store.progress.values())[-3:])
        if bars != self._bars:
            progress = self.query_one("#progress", Static)
            progress.update(bars, layout=reshaped(self._bars, bars, progress.content_size.width, progress.styles))
            self._bars = bars
        self._update_title(store)

    def _update_title(self, store: Store) -> None:
        files = store.log_files + store.ray_logs.files  # remote files (Ray nodes) count like local ones
        states: dict[str, int] = {}
        for f in files:
            states[f.state] = states.get(f.state, 0) + 1
        parts = [f"{len(files)} file{'s' if len(files) != 1 else ''}"]
        if store.ray_logs.files:
            parts.append(f"{len(store.ray_logs.files)} on Ray nodes (n)")
        parts += [f"{n} {s}" for s, n in sorted(states.items()) if s != "following"]
        errors = [f for f in files if f.state == "error"]
        if errors:
            parts.append(f"{errors[0].path}: {errors[0].error}"[:80])
        if error := store.collector_error("logs"):  # the collector itself failed: said until it recovers
            parts.insert(0, error[:100])
        mode = f"PAUSED · {self._held} new" if self.paused else ("follow" if self.follow else "scroll")
        shown = self.filter_text if len(self.filter_text) < 40 else self.filter_text[:37] + "…"
        subtitle = f"{mode} · filter: {shown or '(all)'} · " + " · ".join(parts)
        if subtitle != self._subtitle:  # a new subtitle repaints the whole pane, every row of the scrollback
            self._subtitle = subtitle
            self.border_subtitle = Text(subtitle)  # a Text, not a str: a filter full of `\[` is not markup
