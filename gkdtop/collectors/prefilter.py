"""A cheap first test in front of a big alternation of regular expressions.

Python's `re` tries every alternative at every position of a line, so a flood of log lines through
the phase rules' and the findings' combined patterns costs ~40 µs a line. Nearly every
alternative needs some literal text (`step:`, `Traceback`, `[SYNC] `): one search for those
literals (~2 µs) rules out almost every line, and only the rest meet the full pattern.
"""

from __future__ import annotations

import functools
import re
import re._constants as sre  # the parser's node names: the stdlib's own, stable since 3.11
import re._parser as sre_parse
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

MAX_EXPANDED = 32  # alternatives one alternative may be multiplied out into (see _alternatives)


def _alternatives(items: list[Any]) -> list[list[Any]]:
    """The top-level alternatives of a parsed pattern, through groups that only wrap an alternation.

    An alternation inside a sequence is multiplied out while that stays small, so
    `(?:Waiting for|Attempting to acquire) the lock` needs "Waiting for the lock" or
    "Attempting to acquire the lock", not merely " the lock" (a literal noise lines share).
    """
    if len(items) == 1 and items[0][0] is sre.BRANCH:
        return [alt for branch in items[0][1][1] for alt in _alternatives(list(branch))]
    if len(items) == 1 and items[0][0] is sre.SUBPATTERN:
        return _alternatives(list(items[0][1][3]))
    for i, (op, av) in enumerate(items):
        if op is sre.BRANCH:
            inner = [alt for branch in av[1] for alt in _alternatives(list(branch))]
        elif op is sre.SUBPATTERN and any(o is sre.BRANCH for o, _ in av[3]):
            inner = _alternatives(list(av[3]))
        else:
            continue
        rest = _alternatives(items[i + 1 :])
        if len(inner) * len(rest) > MAX_EXPANDED:
            return [items]
        return [items[:i] + alt + tail for alt in inner for tail in rest]
    return [items]


def _longest_required(items: list[Any]) -> str:
    """The longest run of literal characters every match of this sequence contains."""
    best, run = "", ""
    for op, av in items:
        if op is sre.LITERAL:
            run += chr(av)
            continue
        best, run = max(best, run, key=len), ""
        if op is sre.SUBPATTERN:
            inner = _alternatives(list(av[3]))
            if len(inner) == 1:  # a group that is not an alternation: its literals are required too
                best = max(best, _longest_required(inner[0]), key=len)
    return max(best, run, key=len)


def _ignores_case(items: Any) -> bool:
    for op, av in items:
        if op is sre.SUBPATTERN and (av[1] & re.IGNORECASE or _ignores_case(av[3])):
            return True
        if op is sre.BRANCH and any(_ignores_case(b) for b in av[1]):
            return True
    return False


def required_literals(pattern: str, flags: int = 0) -> tuple[list[str], bool] | None:
    """One literal per alternative that every match of it contains, and whether case is ignored;
    None when some alternative needs no literal at all (then nothing can be ruled out cheaply)."""
    try:
        parsed = sre_parse.parse(pattern, flags & ~re.UNICODE)
    except (re.error, RecursionError, OverflowError):
        return None
    literals = []
    for alternative in _alternatives(list(parsed)):
        literal = _longest_required(alternative)
        if not literal:
            return None
        literals.append(literal)
    ignore_case = bool((parsed.state.flags | flags) & re.IGNORECASE) or _ignores_case(parsed)
    return sorted(set(literals), key=len, reverse=True), ignore_case


class Prefiltered:
    """`pattern.search`, answered by a search for its required literals first when it has them."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.literals: re.Pattern[str] | None = None
        found = required_literals(pattern.pattern, pattern.flags)
        if found is not None:
            words, ignore_case = found
            self.literals = re.compile("|".join(map(re.escape, words)), re.IGNORECASE if ignore_case else 0)

    def search(self, text: str) -> re.Match[str] | None:
        if self.literals is not None and self.literals.search(text) is None:
            return None
        return self.pattern.search(text)



class FloodSieve:
    """The lines of a flood that the phase and finding rules would react to; the rest are only counted.

    In a 100k lines/s flood, parsing every line and testing it against the rules costs more than a
    core, and so does scanning for their ~100 literals in Python (a pass over the chunk per
    literal). GNU grep finds lines holding any of them in one pass (Aho-Corasick, in another
    process, ~1 ms a MB); only those lines meet the rules' full patterns. Kept: the lines a gate
    matches, the lines holding a `marker`, and the `window` lines after a line that `opens` one
    (findings look there for extra fields). The verdicts are the same as testing every line.
    """

    def __init__(self, gates: list[Prefiltered], markers: list[str], opens: Prefiltered | None = None,
                 window: int = 0) -> None:
        self.gates = gates
        self.markers = markers
        self.opens = opens
        self.window = window

    @functools.cached_property
    def grep_args(self) -> list[str] | None:
        """The grep command that finds candidate lines; None when a gate has no literals, a literal
        can't be passed, or there is no grep (then nothing can be ruled out). Made on first use."""
        words, fold = list(self.markers), False
        for gate in self.gates:
            found = required_literals(gate.pattern.pattern, gate.pattern.flags)
            if found is None:
                return None
            words += found[0]
            fold = fold or found[1]
        grep = shutil.which("grep")
        # -i folds only ASCII letters in the C locale: a folded non-ASCII literal could be missed.
        if grep is None or any("\0" in w or (fold and not w.isascii()) for w in words):
            return None
        return [grep, "-n", "-a", "-F", *(["-i"] if fold else []), *(a for w in words for a in ("-e", w))]

    def keep(self, lines: list[str], data: bytes, head: int, message: Callable[[str], str]) -> set[int] | None:
        """Which of `lines[:head]` to keep, by index; None when none can be ruled out. `data` is the
        same lines as bytes, `\n`-separated (what grep reads); `message(line)` is the part of a line
        the rules read (without its Ray prefix)."""
        args = self.grep_args
        if args is None:
            return None
        try:
            # From a file, not a pipe: feeding a pipe costs a poll + write per 4 KB in this process.
            with tempfile.TemporaryFile() as chunk:
                chunk.write(data)
                chunk.seek(0)
                found = subprocess.run(args, stdin=chunk, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       env={"LC_ALL": "C"}, check=False)
        except OSError:
            return None
        if found.returncode > 1:  # an error, not "no match"
            return None
        kept: set[int] = set()
        for i in sorted({int(hit[: hit.index(b":")]) - 1 for hit in found.stdout.splitlines()}):
            if i >= head:
                break
            line = message(lines[i])
            if any(marker in line for marker in self.markers):
                kept.add(i)
            elif any(gate.search(line) for gate in self.gates):
                kept.add(i)
                if self.opens is not None and self.opens.search(line):
                    kept.update(range(i + 1, min(i + 1 + self.window, head)))
        return kept
