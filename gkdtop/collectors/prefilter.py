"""A cheap first test in front of a big alternation of regular expressions.

Python's `re` tries every alternative at every position of a line, so a flood of log lines through
the phase rules' and the findings' combined patterns costs ~40 µs a line. Nearly every
alternative needs some literal text (`step:`, `Traceback`, `[SYNC] `): one search for those
literals (~2 µs) rules out almost every line, and only the rest meet the full pattern.
"""

from __future__ import annotations

import re
import re._constants as sre  # the parser's node names: the stdlib's own, stable since 3.11
import re._parser as sre_parse
from typing import Any


def _alternatives(items: list[Any]) -> list[list[Any]]:
    """The top-level alternatives of a parsed pattern, through groups that only wrap an alternation."""
    if len(items) == 1 and items[0][0] is sre.BRANCH:
        return [alt for branch in items[0][1][1] for alt in _alternatives(list(branch))]
    if len(items) == 1 and items[0][0] is sre.SUBPATTERN:
        return _alternatives(list(items[0][1][3]))
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
