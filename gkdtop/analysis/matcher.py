"""One multi-pattern matcher for every rule: which lines match which patterns, in one pass.

Every pattern (phase start/done/fail, findings and their extra fields, idle lines, the failure
pattern, user rules) is compiled once into one database. Hyperscan scans a chunk of lines for all
of them at once (~1 GB/s here); where it has no wheel (aarch64), RE2's set matcher tests each line.
Named groups are read by RE2 from the few lines that matched. Both engines run in linear time:
no pattern, however written, can make a line cost more than its length (`(a+)+$` included), and no
rule ever runs on Python's backtracking `re`.

Rules read a line's message, without its Ray prefix. In a chunk of raw lines, `^` therefore also
matches after a `(Worker pid=N, ip=...) ` head, no match may cross a line break, and the few hits
the scan cannot decide alone are confirmed by RE2 on the message (`for_chunks`, `confirm`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

try:  # the fast engine, where a wheel exists (x86_64)
    import hyperscan
except ImportError:  # pragma: no cover - exercised where Hyperscan has no wheel
    hyperscan = None

import re2

from gkdtop.analysis.lines import (
    CAPTURE_STAMP,
    COMPOSE_PREFIX,
    KUBECTL_STAMP,
    MPI_TAG,
    PREFIX_MAX,
    SRUN_LABEL,
    label_colon,
    may_be_labelled,
    plain_ascii,
)

MAX_PATTERN = 4096  # characters: a rule longer than this is a mistake, not a rule
# CPU seconds a user's rule may take Hyperscan to compile on its own (the slowest built-in rule, generation's
# 900-character alternation with two `^` branches, takes 0.41 s, brought to its lines' end; 40 rules of 1.2 KB of
# repeats before alternatives took 97 s to load). A rule over it is refused, in one line. CPU, not wall time: a
# busy machine slows a compile's wall time, not its CPU time, so a rule is refused or not alike.
RULE_COMPILE_S = 0.8
RE2_MAX_MEM = 8 << 20  # bytes of compiled program per pattern (RE2's default is 8 MiB too)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors are ours to report, as one line
_OPTIONS.max_mem = RE2_MAX_MEM

# What may stand before a message: `kubectl logs --timestamps`' capture stamp, a compose service's name, then Ray's
# prefix; or a capture stamp or srun's task label before Ray's prefix (lines.capture_end, lines._label_end).
_PAREN = f"\\([^()\\n]{{0,{PREFIX_MAX}}}\\) ?"
RAY_HEAD = (f"(?:{CAPTURE_STAMP}{_PAREN}|{SRUN_LABEL}{_PAREN}"
            f"|(?:{KUBECTL_STAMP})?(?:{COMPOSE_PREFIX})?(?:{MPI_TAG})?(?:{_PAREN})?)")
_QUOTED = re.compile(r"\\Q(.*?)(?:\\E|$)", re.DOTALL)  # RE2's quoted text
# Where a message may begin, as a superset of RAY_HEAD's ends: a line's start, or what each of its parts
# ends with (a parenthesis, an MPI tag's `>:`, a compose name's `| `, a kubectl stamp's zone and blank).
# Scanning `^X` as `HEAD_END X` costs Hyperscan a literal search, not a prefix machine at every line
# start: half the scan of a dense log (Matcher: a line it names this way is scanned again, exactly).
HEAD_END = r"(?:^|\) ?|>: ?|\| |[Z\d][ \t])"
_GLOBAL_FLAGS = re.compile(r"\(\?[a-zA-Z]*(?:-[a-zA-Z]+)?\)")  # `(?i)`, `(?-i)`, `(?i-s)`: for the rest of the pattern


class PatternError(ValueError):
    """A pattern neither engine takes, phrased as one line."""


class Pattern:
    """A compiled rule pattern: `search` / `groupdict` through RE2 (linear time)."""

    __slots__ = ("_compiled", "text")

    def __init__(self, text: str, lazy: bool = False) -> None:
        self.text = text
        self._compiled = None if lazy else _compile_re2(text)

    @property
    def compiled(self) -> Any:
        """Compiled on first use when lazy (the built-in rules: most never match a line of a run)."""
        if self._compiled is None:
            self._compiled = _compile_re2(self.text)
        return self._compiled

    def search(self, line: str) -> Any:
        return self.compiled.search(line)

    def finditer(self, line: str) -> Any:  # Rich highlights a filter's matches through this
        return self.compiled.finditer(line)

    @property
    def pattern(self) -> str:  # the name `re.Pattern` has, for code and tests that print it
        return self.text

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


@functools.lru_cache(maxsize=1024)
def _compile_re2(text: str) -> Any:
    if len(text) > MAX_PATTERN:
        raise PatternError(f"pattern is {len(text)} characters long (at most {MAX_PATTERN})")
    if "\0" in text:
        raise PatternError("pattern holds a NUL character (write \\x00 to match one)")
    try:
        return re2.compile(text, _OPTIONS)
    except re2.error as exc:
        raise PatternError(_explain(text, exc)) from None
    except (OverflowError, MemoryError, RecursionError, ValueError) as exc:
        raise PatternError(f"pattern too large: {exc}") from None


def _explain(text: str, exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    detail = str(detail).splitlines()[0] if str(detail) else type(exc).__name__
    if re.search(r"\(\?<?[=!]", text):
        detail += " (lookarounds are not supported: gkdtop's engines run in linear time)"
    elif re.search(r"\\[1-9]", text):
        detail += " (back-references are not supported: gkdtop's engines run in linear time)"
    return f"invalid regular expression: {detail}"


def compile_pattern(text: str, every_engine: bool = True, lazy: bool = False) -> Pattern:
    """A rule pattern, checked by every engine that will run it; PatternError (one line) if refused.
    Built-in rules, which the tests compile, skip the checks (`every_engine=False`, `lazy`): start-up
    stays fast; a pattern from a user is always checked by RE2 at once, and refused when it matches
    every line (an empty match) or takes Hyperscan over RULE_COMPILE_S to compile."""
    pattern = Pattern(text, lazy=lazy)
    if every_engine:
        if pattern.search("\x01 gkdtop") is not None and pattern.search("") is not None:
            raise PatternError("matches an empty string, so every line: write what the line holds")
        if hyperscan is not None:  # refused here, not at the first scan: the user sees why now
            _hyperscan_db([for_chunks(text)[0]], budget=RULE_COMPILE_S)
    return pattern


# Outside a class: an escape that matches any character but some ASCII ones, as the bytes of one
# character at most (never a newline): where the character is not ASCII, its UTF-8 tail bytes too.
_NOT_NEWLINE = {"s": "\\t\\x0b\\x0c\\r ", "D": "\\d\\n", "W": "\\w\\n", "S": "\\s\\n"}
_SPACE_IN_CLASS = "\\t\\x0b\\x0c\\r "
# The ASCII members of `\\D`, `\\W`, `\\S` in a class (without `\\n`): their other members are not ASCII.
_ASCII_OF = {"D": "\\x00-\\x09\\x0b-\\x2f\\x3a-\\x7f",
             "W": "\\x00-\\x09\\x0b-\\x2f\\x3a-\\x40\\x5b-\\x5e\\x60\\x7b-\\x7f",
             "S": "\\x00-\\x08\\x0e-\\x1f\\x21-\\x7f"}
_TAIL = "[\\x80-\\xbf]*"  # a UTF-8 character's tail bytes
_WIDE = "[\\x80-\\xff]" + _TAIL  # any character that is not ASCII (or, in bytes that are not UTF-8, any high byte)
_HEX = re.compile(r"\\x(?:([0-9a-fA-F]{2})|\{([0-9a-fA-F]{1,6})\})")
_BOUNDS = re.compile(r"\{(\d+)(,(\d*))?\}")


def _one_of(byte_class: str, text: str, at: int) -> tuple[str, int, bool]:
    """A class of bytes that stands for one character, the repeat after it at `text[at]`: (the bytes,
    where the pattern goes on, whether the bytes match more than RE2 on an ASCII line too). After `*`
    or `+` its bytes alone (any number of bytes is any number of characters); after `{m,n}` its bytes
    m to 4n times (UTF-8 takes up to 4 bytes a character; RE2 confirms every hit: a repeat of characters
    costs Hyperscan 20 times as long to compile); else one byte and a UTF-8 tail."""
    if text[at : at + 1] in ("*", "+"):
        return byte_class, at, False
    bounds = _BOUNDS.match(text, at)
    if bounds is not None:
        low, comma, high = bounds.groups()
        if comma is not None and not high:  # `{m,}`: m bytes at least, as exact as `+` on ASCII
            return f"{byte_class}{{{low},}}", bounds.end(), False
        most = 4 * int(high or low)
        return f"{byte_class}{{{low},{most if most <= 256 else ''}}}", bounds.end(), True
    return f"(?:{byte_class}{_TAIL})", at, False


def _utf8(char: str) -> str:
    return "(?:" + "".join(f"\\x{b:02x}" for b in char.encode("utf-8", "surrogatepass")) + ")"


# Characters whose case fold is a letter that does not map back to them (the Kelvin sign folds to k,
# the long s to s, final sigma to sigma): Python's str.casefold over the Basic Multilingual Plane.
_FOLDS_TO = dict(zip(
    "\u00b5\u017f\u0345\u03c2\u03d0\u03d1\u03d5\u03d6\u03f0\u03f1\u03f4\u03f5\u1c80\u1c81"
    "\u1c82\u1c83\u1c84\u1c85\u1c86\u1c87\u1c88\u1e9b\u1e9e\u1fbe\u2126\u212a\u212b",
    "\u03bc\u0073\u03b9\u03c3\u03b2\u03b8\u03c6\u03c0\u03ba\u03c1\u03b8\u03b5\u0432\u0434"
    "\u043e\u0441\u0442\u0442\u044a\u0463\ua64b\u1e61\u00df\u03b9\u03c9\u006b\u00e5",
    strict=True))


def _cases(char: str) -> str:
    """A letter under `(?i)` whose cases are not all ASCII: each of them (RE2 folds case, bytes cannot).
    A superset of RE2's fold at most (RE2 confirms on such a line)."""
    forms = {char}
    for _ in range(2):
        for c in list(forms):
            forms |= {f for f in (c.lower(), c.upper(), c.casefold(), c.title()) if len(f) == 1}
            forms.add(_FOLDS_TO.get(c, c))
        forms |= {c for c, fold in _FOLDS_TO.items() if fold in forms}
    return _utf8(char) if len(forms) == 1 else "(?:" + "|".join(_utf8(c) for c in sorted(forms)) + ")"


def _class(text: str, i: int, caseless: bool = False) -> tuple[str, int, bool, bool]:
    """The class at `text[i]` (`[`) for bytes: (its translation, where the pattern goes on, whether it
    stands for characters that are not ASCII, whether it matches more than RE2 on ASCII too).
    A byte engine holds only ASCII members: a negated class keeps out
    only those (a superset), a class with other members also takes any character that is not ASCII."""
    j = i + 1
    negated = text[j : j + 1] == "^"
    j += negated
    members: list[str] = []
    wide = False
    first = True
    while j < len(text) and (text[j] != "]" or first):
        first = False
        c = text[j]
        if c == "[" and text[j + 1 : j + 2] == ":" and (close := text.find(":]", j + 2)) > 0:
            members.append(text[j : close + 2])  # [:alpha:]: ASCII in both engines
            j = close + 2
            continue
        start: int | None = None  # the member's code point, where it may begin a range
        if c == "\\":
            m = _HEX.match(text, j)
            if m is not None:
                start, j = int(m.group(1) or m.group(2), 16), m.end()
                token = m.group(0) if start < 0x80 else ""
            else:
                escape = text[j + 1 : j + 2]
                j += 2
                if escape in _ASCII_OF:
                    token, wide = _ASCII_OF[escape], True
                elif escape == "s":
                    token = _SPACE_IN_CLASS
                elif escape in ("p", "P"):  # a Unicode class: any character stands for it (or, negated, none)
                    j = (text.find("}", j) + 1 or len(text)) if text[j : j + 1] == "{" else j + 1
                    token, wide = "" if negated else "\\x00-\\x09\\x0b-\\x7f", True
                else:
                    token = "\\" + escape
        else:
            start, token, j = ord(c), c, j + 1
        if start is not None:
            top = start
            if text[j : j + 1] == "-" and text[j + 1 : j + 2] not in ("]", ""):  # `a-z`, `\\x41-\\x5a`, `一-龥`
                m = _HEX.match(text, j + 1)
                top, j = (int(m.group(1) or m.group(2), 16), m.end()) if m is not None else (ord(text[j + 1]), j + 2)
                token = f"\\x{start:02x}-\\x{min(top, 0x7f):02x}" if start < 0x80 else ""
            elif start >= 0x80:
                token = ""
            wide |= top >= 0x80  # a byte engine holds the ASCII members only
        members.append(token)
    body = "".join(members)
    after = j + 1
    if negated:
        translated, after, loose = _one_of(f"[^{body}\\n]", text, after)
        return translated, after, True, loose
    if not wide and not caseless:  # (under `(?i)` a letter's other cases may not be ASCII: `K` for k)
        return f"[{body}]", after, False, False
    return (f"(?:[{body}]|{_WIDE})" if body else f"(?:{_WIDE})"), after, True, False


def for_chunks(text: str, anchor: str = "^" + RAY_HEAD) -> tuple[bytes, str]:
    """The pattern as Hyperscan runs it on a chunk of raw lines, and when its hits need confirming.
    (`anchor`: what each `^` becomes; HEAD_END for the quick scan's superset, see Matcher.)

    - each `^` may be followed by a Ray prefix (rules read the message after it);
    - nothing may match a newline (`.`, `\\s`, `\\S`, `\\D`, `\\W`, `[^...]` are kept off it), so no
      match runs from one line into the next;
    - Hyperscan matches bytes, RE2 characters: what stands for one character (`.`, `\\S`, `\\W`,
      `\\D`, `[^...]`, a class) also takes a character's UTF-8 tail bytes, a character that is not
      ASCII is one unit (`训{2}`), `\\xe8` its UTF-8 bytes, and under `(?i)` such a letter each of its
      cases, so a line RE2 matches is never missed; the scan is exact on ASCII lines and a superset on
      others, which RE2 confirms ("utf8");
    - `[^\\n]*$` takes the match to the end of its line: Hyperscan reports each end offset once, so a
      line reports each pattern once, at its end, however many matches it holds.
    Hits need confirming by RE2 on the message where these do not make the answer exact (the flags
    returned): "always" for `(?s)` and `\\n`-like escapes; "utf8" on a message that is not ASCII; "^"
    for a `^` anchor, only on a message that itself begins with `(` (it could pass for a prefix). "$" says
    that a hit may end inside its line: a `$` inside a group or mid-branch, which `_to_line_end` cannot move.
    """
    text = _QUOTED.sub(lambda m: re.escape(m.group(1)), text)  # RE2's quoted text: each character as itself
    out: list[str] = []
    depth = 0  # of groups, at `i`
    splits: list[int] = []  # where in `out` the top-level `|`s are
    dollars: list[tuple[int, int]] = []  # where in `out` each `$` is, and its depth
    always = bool(re.search(r"\(\?[a-z]*s|\\[nAZzx]", text))
    caseless = "(?i" in text or re.search(r"\(\?[a-z]*i", text) is not None
    wide = not text.isascii()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            m = _HEX.match(text, i)
            if m is not None:
                value = int(m.group(1) or m.group(2), 16)
                char = chr(min(value, 0x10FFFF))
                if value < 0x80 and not (caseless and char in "kKsS"):
                    out.append(m.group(0))
                else:
                    out.append(_cases(char) if caseless else _utf8(char))
                    wide = True
                i = m.end()
                continue
            escape = text[i + 1 : i + 2]
            i += 2
            if escape in ("p", "P"):  # a Unicode class: any one character (RE2 confirms)
                i = (text.find("}", i) + 1 or len(text)) if text[i : i + 1] == "{" else i + 1
                translated, i, loose = _one_of("[^\\n]", text, i)
                out.append(translated)
                wide, always = True, always or loose
            elif escape == "s":
                out.append(f"[{_NOT_NEWLINE[escape]}]")
            elif escape == "w" and caseless:  # RE2 folds k and s in \w to the Kelvin sign and the long s
                out.append(f"(?:\\w|{_cases('k')}|{_cases('s')})")
                wide = True
            elif escape in _NOT_NEWLINE:
                translated, i, loose = _one_of(f"[^{_NOT_NEWLINE[escape]}]", text, i)
                out.append(translated)
                wide, always = True, always or loose
            else:
                out.append("\\" + escape)
            continue
        if c == "[":
            translated, i, is_wide, loose = _class(text, i, caseless)
            out.append(translated)
            wide, always = wide or is_wide, always or loose
            continue
        if c == ".":
            translated, i, loose = _one_of("[^\\n]", text, i + 1)
            out.append(translated)
            wide, always = True, always or loose
            continue
        if c in "()|$":
            depth += (c == "(") - (c == ")")
            if c == "|" and not depth:
                splits.append(len(out))
            elif c == "$":
                dollars.append((len(out), depth))
        if c == "^":
            out.append(anchor)
        elif not c.isascii():
            out.append(_cases(c) if caseless else _utf8(c))
        elif caseless and c in "kKsS":  # the Kelvin sign and the long s fold to k and s in RE2
            out.append(_cases(c))
            wide = True
        else:
            out.append(c)
        i += 1
    chunked = "".join(out)
    inside = False  # hits may end inside a line (a `$` the expression could not be brought to the line's end around)
    if not dollars:
        chunked = f"(?:{chunked})[^\\n]*$"
    else:
        ended = _to_line_end(out, splits, dollars)
        inside = ended is None
        chunked = chunked if ended is None else ended
    if always:
        return chunked.encode(), "always" + ("$" if inside else "")
    return chunked.encode(), ("utf8" if wide else "") + ("^" if "^" in text else "") + ("$" if inside else "")


def anchored_split(text: str) -> tuple[str, str] | None:
    """`text`'s top-level branches as (those with no `^`, those with one), each an alternation ('' for
    none), for the quick scan (Matcher); None where they cannot stand apart: a quoted part, or inline
    flags anywhere but the very start (which then go before both)."""
    if "\\Q" in text:
        return None
    flags = _GLOBAL_FLAGS.match(text)
    lead = flags.group(0) if flags else ""
    branches: list[tuple[str, bool]] = []
    depth, begin, caret = 0, len(lead), False
    i = len(lead)
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class: its `^`, `|` and parentheses are members
            i += 1 + (text[i + 1 : i + 2] == "^")
            i += text[i : i + 1] == "]"
            while i < len(text) and text[i] != "]":
                if text[i] == "[" and text[i + 1 : i + 2] == ":" and (close := text.find(":]", i + 2)) > 0:
                    i = close + 2
                    continue
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "(" and depth == 0 and _GLOBAL_FLAGS.match(text, i):
            return None  # flags for the rest of the pattern: not split
        depth += (c == "(") - (c == ")")
        caret |= c == "^"
        if c == "|" and depth == 0:
            branches.append((text[begin:i], caret))
            begin, caret = i + 1, False
        i += 1
    branches.append((text[begin:], caret))
    plain = "|".join(b for b, anchored in branches if not anchored)
    anchored = "|".join(b for b, anchored in branches if anchored)
    return (lead + plain if plain else ""), (lead + anchored if anchored else "")


def _to_line_end(out: list[str], splits: list[int], dollars: list[tuple[int, int]]) -> str | None:
    """`(?:A|(?:B)[^\\n]*)$` for `A$|B` (`out`: the translated pattern's pieces, `splits`: where its top-level `|`s are,
    `dollars`: where its `$`s are, with their depth): each top-level branch runs on to its line's end unless it ends
    in its own `$`, so a line reports the pattern once, at its end, as a pattern with no `$` does (Hyperscan takes
    nothing after a `$`). None where a `$` stands elsewhere (in a group, mid-branch): its hits may end inside a line."""
    if any(depth for _, depth in dollars):
        return None
    at = {index for index, _ in dollars}
    ended, open_ended = [], []  # (the rest run on together: one `[^\\n]*` for them all compiles faster than one each)
    for start, end in pairwise([-1, *splits, len(out)]):
        inner = [k for k in range(start + 1, end) if k in at]
        if not inner:
            open_ended.append("".join(out[start + 1 : end]))
        elif inner == [end - 1]:
            ended.append("".join(out[start + 1 : end - 1]))
        else:
            return None
    if open_ended:
        ended.append("(?:" + "|".join(open_ended) + ")[^\\n]*")
    return "(?:" + "|".join(ended) + ")$"


# Not rules: whether a chunk holds bytes that cleaning changes (controls) or non-ASCII text, found in
# the same pass, once per chunk (SINGLEMATCH), so a plain chunk costs no pass of its own.
_NOT_PLAIN = [rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", rb"[\x80-\xff]"]


def _cpu_clock(thread: threading.Thread) -> Callable[[], float]:
    """The CPU seconds `thread` has used so far (wall seconds since now where the OS cannot say)."""
    started = time.monotonic()
    try:
        clock = time.pthread_getcpuclockid(thread.ident or 0)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return lambda: time.monotonic() - started

    def spent() -> float:
        try:
            return time.clock_gettime(clock)
        except OSError:  # it ended a moment ago
            return 0.0

    return spent


def _hyperscan_db(expressions: Sequence[bytes | None], plain_check: bool = False, budget: float | None = None,
                  single: frozenset[int] = frozenset(), markers: tuple[bytes, ...] = (),
                  after: Sequence[bytes] = ()) -> Any:
    """The compiled database. Compiled in a thread while this one waits (Hyperscan lets go of the GIL):
    Ctrl-C here stops gkdtop at once rather than after the compile; a compile over `budget` seconds is
    refused (its thread is left to finish: Hyperscan cannot be stopped). An expression's id is its
    place (None: no expression has that id). The ids in `single` report their first match of a scan
    only (SINGLEMATCH); so do `plain_check`'s two tests and the literal `markers`, after the
    expressions, in that order; `after` (matched in full) last."""
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    every = hyperscan.HS_FLAG_MULTILINE | hyperscan.HS_FLAG_ALLOWEMPTY
    ids = [i for i, expression in enumerate(expressions) if expression is not None]
    flags = [every | (hyperscan.HS_FLAG_SINGLEMATCH if i in single else 0) for i in ids]
    extras = (_NOT_PLAIN if plain_check else []) + [re.escape(marker) for marker in markers]
    listed = [expressions[i] for i in ids] + extras + list(after)
    ids += range(len(expressions), len(expressions) + len(extras) + len(after))
    flags += [hyperscan.HS_FLAG_SINGLEMATCH] * len(extras) + [every] * len(after)
    failed: list[Exception] = []

    def compile_db() -> None:
        try:
            db.compile(expressions=listed, ids=ids, elements=len(listed), flags=flags)
        except Exception as exc:  # hyperscan.error, MemoryError: said in the waiting thread
            failed.append(exc)

    worker = threading.Thread(target=compile_db, name="gkdtop-compile", daemon=True)
    worker.start()
    spent = _cpu_clock(worker)
    while worker.is_alive():
        worker.join(0.05)  # a timed wait: SIGINT's KeyboardInterrupt is raised here
        if budget is not None and worker.is_alive() and spent() > budget:
            raise PatternError(f"too costly to compile (over {budget:g} s of CPU for Hyperscan): "
                               "use fewer repeats and alternatives, or split it into rules")
    if failed:
        exc = failed[0]
        if isinstance(exc, hyperscan.error):
            raise PatternError(f"invalid regular expression: {_hs_reason(exc)}") from None
        raise exc
    return db


def _cached_db(expressions: Sequence[bytes | None], single: frozenset[int] = frozenset(),
               markers: tuple[bytes, ...] = (), after: Sequence[bytes] = (), plain_check: bool = True) -> Any:
    """The database for these expressions, from the cache when it was compiled before: compiling
    takes ~0.15 s for the built-in rules, loading a few milliseconds (start-up is a feature).

    The cache is this user's private state (safeopen.cache_load): an entry another user could have
    planted or changed is never loaded, and a cache folder that is not private is not used at all."""
    from gkdtop.safeopen import cache_load, cache_store

    once = ",".join(map(str, sorted(single))).encode()
    key = hashlib.sha256(b"\0".join([str(getattr(hyperscan, "__version__", "")).encode(),
                                      b"plain" if plain_check else b"exact", once,
                                      *(e if e is not None else b"\1" for e in expressions), b"markers", *markers,
                                      b"after", *after]))
    name = key.hexdigest()[:32] + ".db"
    with contextlib.suppress(OSError, hyperscan.error):
        blob = cache_load("hyperscan", name, CACHE_MAX_BYTES)
        if blob is not None:
            return hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
    db = _hyperscan_db(expressions, plain_check=plain_check, single=single, markers=markers, after=after)
    with contextlib.suppress(OSError):
        cache_store("hyperscan", name, hyperscan.dumpb(db))
    return db


CACHE_MAX_BYTES = 256 << 20  # a compiled database larger than this is not a rule set's


def _hs_reason(exc: Exception) -> str:
    text = str(exc.args[0] if exc.args else exc)
    return text.split(": ", 1)[-1] if text else type(exc).__name__


class AnyOf:
    """`search` true when any of several patterns matches: each compiled on its own (so `(?i)` holds
    for its pattern only), RE2's set tests them in one pass."""

    def __init__(self, patterns: list[Pattern]) -> None:
        self.patterns = patterns
        self._set = re2.Set.SearchSet(_OPTIONS)
        for p in patterns:
            self._set.Add(p.text)
        self._set.Compile()

    def search(self, text: str) -> bool:
        return bool(self._set.Match(text))


def any_of(texts: list[str]) -> AnyOf | None:
    """Several user patterns as one test (driver patterns, filters); None for none."""
    return AnyOf([compile_pattern(t, every_engine=False) for t in texts]) if texts else None


class Matcher:
    """All the patterns of a rule set, compiled once. Ids are positions in the list given.

    `scan(chunk)` finds, for a chunk of `\\n`-separated raw lines, which line matches which ids;
    `scan_texts(texts)` does the same for messages already split off their prefix. The ids in `once`
    (evidence a rule needs to have seen once, not on every line) report one line per scan, where
    Hyperscan scans: a flood of such lines costs no Python per line.
    """

    def __init__(self, patterns: list[Pattern], message: Callable[[str], str] | None = None,
                 once: frozenset[int] = frozenset(), markers: tuple[bytes, ...] = ()) -> None:
        self.patterns = patterns
        self.markers = markers  # literals whose presence anywhere in a chunk its scan reports (scan_plain)
        self.engine = "hyperscan" if hyperscan is not None else "re2"
        # A raw line's message (without its Ray prefix), for confirming hits of `^` patterns.
        self._message = message or (lambda raw: raw)
        chunked = [for_chunks(p.text) for p in patterns]
        self._confirm = frozenset(i for i, (_, when) in enumerate(chunked) if when.startswith("always"))
        self._ends_inside = frozenset(i for i, (_, when) in enumerate(chunked) if "$" in when)
        self._confirm_paren = self._confirm | {i for i, (_, when) in enumerate(chunked) if "^" in when}
        # ids whose scan is a superset on a line that is not ASCII (for_chunks): RE2 confirms them there
        self._confirm_utf8 = frozenset(i for i, (_, when) in enumerate(chunked) if "utf8" in when)
        # (Ray prefix, message begins with "(", *ids) -> the ids to check on the message: those that
        # match inside the prefix itself, and those for_chunks says need it
        self._in_prefix: dict[tuple[Any, ...], list[int]] = {}
        self._local = threading.local()  # Hyperscan scratch space is per thread
        self._db: Any = None
        self._exact: Any = None
        self._anchored: list[int] = []
        self._after = 0
        self._set: Any = None
        if not patterns:
            return
        if hyperscan is not None:
            # Not an id whose hit a message check may drop (that line's would be the scan's only one of it).
            once = once - self._confirm_paren - self._confirm_utf8
            quick, anchored = self._quick_parts(chunked)
            self._db = _cached_db(quick, once, markers, after=[loose for _, loose, _ in anchored])
            self._anchored = [i for i, _, _ in anchored]  # the pattern each `after` expression stands for
            # the id of the first of them: _hyperscan_db lists them after the expressions, _NOT_PLAIN's and the markers
            self._after = len(patterns) + len(_NOT_PLAIN) + len(markers)
            if anchored:  # the lines those name are scanned again by those branches after a full RAY_HEAD
                exact: list[bytes | None] = [None] * len(patterns)
                for i, _, expression in anchored:
                    exact[i] = expression
                self._exact = _cached_db(exact, plain_check=False)
        else:
            self._set = re2.Set.SearchSet(_OPTIONS)
            for p in patterns:
                self._set.Add(p.text)
            self._set.Compile()

    def _quick_parts(self, chunked: list[tuple[bytes, str]]
                     ) -> tuple[list[bytes | None], list[tuple[int, bytes, bytes]]]:
        """The scan's expressions: a pattern's branches with no `^` as they are; those with one, where
        they can stand apart, as (pattern id, with HEAD_END for each `^` (a superset), with RAY_HEAD (as
        exact as the whole pattern: the lines the first names are scanned again with it, see scan_plain))."""
        quick: list[bytes | None] = []
        anchored: list[tuple[int, bytes, bytes]] = []
        for i, (expression, when) in enumerate(chunked):
            parts = anchored_split(self.patterns[i].text) if "^" in when and "$" not in when else None
            if parts is None or not parts[1]:  # no `^` outside a class, or branches that cannot stand apart
                quick.append(expression)
                continue
            plain, anchors = parts
            loose, exact = for_chunks(anchors, anchor=HEAD_END), for_chunks(anchors)
            rest = for_chunks(plain) if plain else None
            if "$" in loose[1] + exact[1] + (rest[1] if rest else ""):  # a hit could end inside its line
                quick.append(expression)
                continue
            quick.append(rest[0] if rest else None)
            anchored.append((i, loose[0], exact[0]))
        return quick, anchored

    def _scratch(self, exact: bool = False) -> Any:
        """This thread's scratch space for the quick scan's database, or (`exact`) the rescan's."""
        if getattr(self._local, "scratch", None) is None:
            self._local.scratch = hyperscan.Scratch(self._db)
            self._local.exact = hyperscan.Scratch(self._exact) if self._exact is not None else None
        return self._local.exact if exact else self._local.scratch

    def scan(self, chunk: bytes) -> list[tuple[int, int, list[int]]]:
        """Candidates: (line start, line end, ids) for each line of `chunk` some pattern may match, in
        order. Offsets are byte offsets into `chunk`; `end` is the line's `\\n` (or the chunk's end).
        The rules read messages: `confirm` then gives the ids that really match a line's message."""
        return self.scan_plain(chunk)[0]

    def scan_plain(self, chunk: bytes) -> tuple[list[tuple[int, int, list[int]]], bool, set[int]]:
        """`scan`, whether the chunk is plain: ASCII with no control bytes but tab, `\\n`, `\\r`
        (then each line is as cleaning leaves it: lines.plain_ascii), and which of `markers` it holds."""
        if not self.patterns or not chunk:
            return [], plain_ascii(chunk), self._markers_in(chunk)
        if self._db is None:
            return self._scan_set(chunk), plain_ascii(chunk), self._markers_in(chunk)
        ends: dict[int, list[int]] = {}
        rules = len(self.patterns)
        plain = [True]
        marked: set[int] = set()
        own_dollar = self._ends_inside
        inside = [False]  # a hit of a pattern with its own `$`, which may end inside a line
        after, anchored = self._after, self._anchored
        loose: dict[int, list[int]] = {}  # line end -> patterns whose `^` branches may match it (HEAD_END)

        def hit(pattern_id: int, start: int, end: int, flags: int, context: Any) -> None:
            if pattern_id >= rules:
                if pattern_id >= after:
                    found = loose.get(end)
                    if found is None:
                        loose[end] = [anchored[pattern_id - after]]
                    else:
                        found.append(anchored[pattern_id - after])
                elif pattern_id < rules + len(_NOT_PLAIN):
                    plain[0] = False
                else:
                    marked.add(pattern_id - rules - len(_NOT_PLAIN))
                return
            found = ends.get(end)
            if found is None:
                ends[end] = [pattern_id]
            else:
                found.append(pattern_id)
            if pattern_id in own_dollar:
                inside[0] = True

        self._db.scan(chunk, match_event_handler=hit, scratch=self._scratch())
        if loose:
            self._rescan(chunk, loose, ends)
        if not inside[0]:  # every hit ends its line (`[^\n]*$`, see for_chunks): one hit list per line
            rfind = chunk.rfind
            return [(rfind(b"\n", 0, end) + 1, end, ends[end]) for end in sorted(ends)], plain[0], marked
        size = len(chunk)
        lines: dict[int, list[int]] = {}
        for end in sorted(ends):
            ids = ends[end]
            if end < size and chunk[end] != 10:  # a pattern with its own `$` may end inside a line
                found = chunk.find(b"\n", end)
                end = size if found < 0 else found
            known = lines.get(end)
            if known is None:
                lines[end] = ids
            else:
                known.extend(i for i in ids if i not in set(known))
        return [(chunk.rfind(b"\n", 0, end) + 1, end, ids) for end, ids in lines.items()], plain[0], marked

    def _rescan(self, chunk: bytes, loose: dict[int, list[int]], ends: dict[int, list[int]]) -> None:
        """The lines the quick scan's HEAD_END named, scanned again with those branches as they are
        (their `^` after a full RAY_HEAD), all in one call: a pattern stays on a line only where that says so."""
        lines: list[tuple[int, int]] = []  # (start, end) of each line to scan again
        for end, ids in loose.items():
            known = ends.get(end)
            if known is None or any(i not in known for i in ids):
                lines.append((chunk.rfind(b"\n", 0, end) + 1, end))
        if not lines:
            return
        at: dict[int, int] = {}  # the end of each line in the joined text -> its end in the chunk
        pos = -1
        for start, end in lines:
            pos += end - start + 1
            at[pos] = end
        joined = b"\n".join([chunk[start:end] for start, end in lines])

        def exact(pattern_id: int, start: int, end: int, flags: int, context: Any) -> None:
            line_end = at[end]
            if pattern_id not in loose[line_end]:
                return
            known = ends.get(line_end)
            if known is None:
                ends[line_end] = [pattern_id]
            elif pattern_id not in known:
                known.append(pattern_id)
                known.sort()

        self._exact.scan(joined, match_event_handler=exact, scratch=self._scratch(exact=True))

    def _markers_in(self, chunk: bytes) -> set[int]:
        """Which markers `chunk` holds, where Hyperscan did not say (no wheel, an empty rule set)."""
        return {i for i, marker in enumerate(self.markers) if marker in chunk}

    def confirm(self, message: str, ids: list[int], prefix: str = "", everything: bool = False) -> list[int]:
        """The ids of a candidate line that match its message (the line without its Ray `prefix`).
        Only ids whose answer the chunk scan could get wrong are checked: patterns `for_chunks` says
        need it, and on a prefixed line those that match inside the prefix itself (known per prefix);
        `everything` when the scanned bytes were not the message's (controls, `\\r` rewrites, UTF-8)."""
        if everything:  # the message is not what was scanned: scan the message itself (one call, all ids)
            return self.scan_texts([message]).get(0, [])
        # (or srun's label before a parenthesis no Ray prefix: the scan took them for a label and a prefix)
        paren = message[:1] == "(" or may_be_labelled(message)
        confirm = self._confirm_paren if paren else self._confirm
        if prefix:  # which ids to check depends on the prefix and the ids alone: known once per such line
            check = self._in_prefix.get((prefix, paren, *ids))
            if check is None:
                check = self._prefix_check(prefix, paren, ids, prefix)
        elif confirm.isdisjoint(ids) and (self._confirm_utf8.isdisjoint(ids) or message.isascii()):
            return ids
        else:
            check = [i for i in ids if i in confirm]
        if self._confirm_utf8 and not message.isascii() and not self._confirm_utf8.isdisjoint(ids):
            check = check + [i for i in ids if i in self._confirm_utf8 and i not in check]
        if not check:
            return ids
        patterns = self.patterns
        return [i for i in ids if i not in check or patterns[i].search(message) is not None]

    def _prefix_check(self, key: str | bytes, paren: bool, ids: list[int], prefix: str) -> list[int]:
        """Which of `ids` to check on a message after `prefix` (`key`: the prefix, as text or bytes): those
        for_chunks says need it, and those that match inside the prefix itself."""
        if len(self._in_prefix) > 10_000:
            self._in_prefix.clear()
        confirm = self._confirm_paren if paren else self._confirm
        check = self._in_prefix[(key, paren, *ids)] = [i for i in ids if i in confirm
                                                         or self.patterns[i].search(prefix) is not None]
        return check

    def confirm_ascii(self, raw: bytes, msg: int, ids: list[int]) -> list[int]:
        """`confirm` for a raw ASCII line whose message begins at `msg` (history's fast path, for every
        step and bar line of a run): its message is decoded only where a pattern must be run on it."""
        paren = raw[msg : msg + 1] == b"(" or label_colon(raw, msg) > 0
        if msg:
            prefix = raw[:msg]
            check = self._in_prefix.get((prefix, paren, *ids))
            if check is None:
                check = self._prefix_check(prefix, paren, ids, prefix.decode("ascii"))
        else:
            confirm = self._confirm_paren if paren else self._confirm
            if confirm.isdisjoint(ids):
                return ids
            check = [i for i in ids if i in confirm]
        if not check:
            return ids
        message = raw[msg:].decode("ascii")
        patterns = self.patterns
        return [i for i in ids if i not in check or patterns[i].search(message) is not None]

    def _scan_set(self, chunk: bytes) -> list[tuple[int, int, list[int]]]:
        """RE2 only: each line's message through the set (a Python call per line: slower, the same answer)."""
        out = []
        start = 0
        size = len(chunk)
        match = self._set.Match
        while start <= size:
            end = chunk.find(b"\n", start)
            if end < 0:
                end = size
            ids = match(self._message(chunk[start:end].decode("utf-8", "replace")))
            if ids:
                out.append((start, end, sorted(ids)))
            start = end + 1
        return out

    def scan_texts(self, texts: list[str]) -> dict[int, list[int]]:
        """Line index -> ids, for messages (no Ray prefix) given one per item."""
        if not self.patterns or not texts:
            return {}
        if self._db is None:
            match = self._set.Match
            return {i: sorted(ids) for i, text in enumerate(texts) if (ids := match(text))}
        blob = "\n".join(texts)
        data = blob.encode("utf-8", "surrogatepass")
        index: dict[int, int] = {}
        if len(data) == len(blob):  # ASCII: the byte offset of each line's end is its character offset
            pos = -1
            for i, text in enumerate(texts):
                pos += len(text) + 1
                index[pos] = i
        else:
            pos = -1
            for i, text in enumerate(texts):
                pos += len(text.encode("utf-8", "surrogatepass")) + 1
                index[pos] = i
        found: dict[int, list[int]] = {}
        for _start, end, ids in self.scan(data):
            line = index[end]
            ids = self.confirm(texts[line], ids)
            if ids:
                found[line] = ids
        return found
