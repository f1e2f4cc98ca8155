"""Small text formatters shared by the TUI and the plain-text CLI output."""

from __future__ import annotations

import time
from collections.abc import Iterable

SPARK = "▁▂▃▄▅▆▇█"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit in ("B", "K") else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


COPIED_OFFSET = 86400.0  # a log's stamps this far off this machine's clock: no zone or drift is that large


def clock_why(offset: float) -> str:
    """Why a log's stamps stand `offset` seconds off this machine's clock, as far as the size tells."""
    if abs(offset) < COPIED_OFFSET:
        return "zone or skew"
    # (the offset is this machine's clock minus the stamps': below zero, they are ahead of it)
    return "a copy of an older log, or a clock set wrong" if offset > 0 else "ahead of this machine: a clock set wrong"


def clock(epoch: float | None) -> str:
    return "--:--:--" if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of `width` cells, with eighth-cell resolution."""
    if fraction is None:
        return "·" * width
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return text.ljust(width)


def sparkline(values: Iterable[float], width: int, top: float = 100.0) -> str:
    data = list(values)[-width:]
    if not data:
        return " " * width
    chars = [SPARK[min(7, max(0, int(v / top * 7.999)))] for v in data]
    return "".join(chars).rjust(width)


def hint_lines(causes: Iterable[str], actions: Iterable[str]) -> list[tuple[str, str]]:
    """A stall or failure hint as (label, text) rows, causes first, then what to try.

    The one place the hint's words are laid out: snapshot and replay print hint_text, the Phases
    pane styles these rows, so the three never drift apart.
    """
    return [("cause", c) for c in causes] + [("try", a) for a in actions]


def hint_text(causes: Iterable[str], actions: Iterable[str], indent: str = "  ") -> list[str]:
    """The hint as plain lines: `  cause: ...`, `  try: ...`."""
    return [f"{indent}{label}: {text}" for label, text in hint_lines(causes, actions)]


def shown(text: str) -> str:
    """A file name or message as it may reach a terminal or a JSON document: control characters (ESC, BEL,
    a line break) and undecodable bytes (lone surrogates from os.fsdecode) written as backslash escapes."""
    if text.isprintable() and text.isascii():
        return text
    out = []
    for c in text:
        code = ord(c)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as surrogateescape keeps it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif c.isprintable() or c == " ":
            out.append(c)
        else:
            out.append(c.encode("unicode_escape").decode("ascii"))
    return "".join(out)
