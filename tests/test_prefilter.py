"""The literal prefilter must never rule out a line the full pattern matches."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gkdtop.collectors.findings import FindingsEngine
from gkdtop.collectors.phases import PhaseEngine
from gkdtop.collectors.prefilter import Prefiltered, required_literals
from gkdtop.config import load_config
from tests.gkdlog import startup


@pytest.mark.parametrize(("pattern", "expected"), [
    (r"step:\d+ -|Training Progress", (["Training Progress", "step:"], False)),
    # re's parser factors `Error|Exception` into "E" + (rror|xception); multiplied out again, each
    # alternative needs its whole word, not just "E".
    (r"\bActorDiedError\b|(?:Error|Exception)\b", (["ActorDiedError", "Exception", "Error"], False)),
    (r"(?:Waiting for|Attempting to acquire) (?:the )?lock .*(?:datasets|hf)",
     (["Attempting to acquire ", "Waiting for "], False)),
    (r"(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)xyz", (["xyz"], False)),  # 64 alternatives: too many to multiply out
    (r"(?i)nccl.*timeout", (["timeout"], True)),
    (r"Weight synchroni[sz]ation completed", (["Weight synchroni"], False)),
    (r"[\w.]*Error|\d+", None),  # an alternative without any literal: no prefilter
    (r"(unclosed", None),
])
def test_required_literals(pattern: str, expected: object) -> None:
    assert required_literals(pattern) == expected


def engines_patterns() -> list[re.Pattern[str]]:
    config = load_config(None)
    phases = PhaseEngine(config)
    findings = FindingsEngine(config.findings)
    assert isinstance(phases.any_re, Prefiltered) and phases.any_re.literals is not None
    assert findings.any_re is not None and findings.any_re.literals is not None
    return [phases.any_re.pattern, findings.any_re.pattern]


def test_agrees_with_the_full_pattern_on_a_real_log() -> None:
    lines, _ = startup(time.time() - 600, steps=5)
    for pattern in engines_patterns():
        fast = Prefiltered(pattern)
        for line in lines:
            assert (fast.search(line) is None) == (pattern.search(line) is None), line


PIECES = ["step:", "3 - ", "Traceback (most recent call last)", "✗", "[SYNC] ✓", "ERROR", "NCCL", "timeout",
          "ActorDiedError", "Error", "OutOfMemoryError", "CUDA out of memory", "\x1b[31m", "\r", " ", "x",
          "No available node types can fulfill resource request {'GPU': 8.0}", "Initializing Actor Worker"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=12))
def test_agrees_with_the_full_pattern_on_random_lines(parts: list[str]) -> None:
    line = "".join(parts)
    for pattern in PATTERNS:
        assert (Prefiltered(pattern).search(line) is None) == (pattern.search(line) is None), line


PATTERNS = engines_patterns()
