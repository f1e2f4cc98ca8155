"""The posted corpus (tests/corpus/posted/, issue 25) is well-formed: every fixture has its log, a parseable expectation
in the corpus format and a row in SOURCES.md; NAMES and the held-out lists (HELDOUT, HELDOUT2 ... HELDOUT21) agree with
the files and with their draws.

No assertions on gkdtop's scores here: the posted set is a measurement (`python -m tests.corpus_eval --set posted`).
"""

from __future__ import annotations

import random
import re

import pytest
import yaml

from tests import corpus_eval

POSTED = corpus_eval.SETS["posted"]
STATES = {"running", "stalled", "failed", "done"}
PHASES = {
    "config", "dataset", "worker-group creation", "waiting for resources", "model load", "nccl init", "rollout init",
    "reference init", "critic init", "reward init", "checkpoint load", "validation", "generation", "old log-prob",
    "reference log-prob", "advantage", "actor update", "critic update", "weight sync", "checkpoint save",
    "training loop", "finished",
}
FRAMEWORKS = {"", "verl", "verl-sft", "openrlhf", "easyr1", "trl", "llamafactory", "hf-trainer", "ray"}
FIXTURES = sorted(p.name.removesuffix(".expect.yaml") for p in POSTED.glob("*.expect.yaml"))
# NAMES' blocks, each the names one held-out list was drawn from:
# rows 1-47 (HELDOUT), 48-73 (HELDOUT2), 74-97 (HELDOUT3), 98-123 (HELDOUT4), 124-149 (HELDOUT5), 150-175 (HELDOUT6),
# 176-205 (HELDOUT7), 206-233 (HELDOUT8), 234-265 (HELDOUT9), 266-297 (HELDOUT10), 298-329 (HELDOUT11),
# 330-361 (HELDOUT12), 362-393 (HELDOUT13), 394-425 (HELDOUT14), 426-449 (HELDOUT15), 450-458 (HELDOUT16),
# 459-478 (HELDOUT17), 479-495 (HELDOUT18), 496-509 (HELDOUT19), 510-522 (HELDOUT20), 523-536 (HELDOUT21)
FIRST, SECOND, THIRD, FOURTH, FIFTH, SIXTH, SEVENTH, EIGHTH = 47, 73, 97, 123, 149, 175, 205, 233
NINTH, TENTH, ELEVENTH, TWELFTH, THIRTEENTH, FOURTEENTH, FIFTEENTH, SIXTEENTH, SEVENTEENTH, EIGHTEENTH, NINETEENTH = (
    265, 297, 329, 361, 393, 425, 449, 458, 478, 495, 509,
)
TWENTIETH = 522


def _rows() -> list[list[str]]:
    """SOURCES.md's table rows as cells (number, thread, framework, outcome, phase, cause, fixture)."""
    rows = []
    for line in (POSTED / "SOURCES.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].isdigit():
            rows.append(cells)
    return rows


def _sources() -> dict[str, str]:
    """fixture name -> thread URL, from SOURCES.md's table (rows whose fixture cell is a name)."""
    return {c[6]: c[1] for c in _rows() if re.fullmatch(r"[a-z0-9_]+", c[6])}


def _skipped() -> list[str]:
    """Planned names of threads with no fixture: their fixture cell says why and names the plan ('planned as NAME')."""
    return [m[1] for c in _rows() if (m := re.search(r"planned as ([a-z0-9_]+)\)$", c[6]))]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_is_well_formed(name: str) -> None:
    exp = yaml.safe_load((POSTED / f"{name}.expect.yaml").read_text())
    assert (POSTED / f"{name}.log").read_text().strip(), "empty log"
    assert exp["framework"] in FRAMEWORKS
    assert exp["state"] in STATES
    assert exp["phase"] in PHASES
    assert isinstance(exp["culprit"], str) and exp["culprit"]
    assert exp["culprit"] == "none" or exp["culprit_any"], "a culprit needs strings to find it by"
    for key in ("culprit_any", "fix", "wrong_claims"):
        assert isinstance(exp[key], list) and all(isinstance(x, str) and x for x in exp[key]), key
    assert isinstance(exp["quiet_for"], int) and exp["quiet_for"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", exp["clock"]["ends_at"])
    assert exp["source"] == _sources().get(name), "SOURCES.md has no row for this fixture, or another thread"


def test_names_heldout_and_sources_agree() -> None:
    names = corpus_eval._names(POSTED / "NAMES")
    held = corpus_eval._names(POSTED / "HELDOUT")
    held2 = corpus_eval._names(POSTED / "HELDOUT2")
    held3 = corpus_eval._names(POSTED / "HELDOUT3")
    held4 = corpus_eval._names(POSTED / "HELDOUT4")
    held5 = corpus_eval._names(POSTED / "HELDOUT5")
    held6 = corpus_eval._names(POSTED / "HELDOUT6")
    held7 = corpus_eval._names(POSTED / "HELDOUT7")
    held8 = corpus_eval._names(POSTED / "HELDOUT8")
    held9 = corpus_eval._names(POSTED / "HELDOUT9")
    held10 = corpus_eval._names(POSTED / "HELDOUT10")
    held11 = corpus_eval._names(POSTED / "HELDOUT11")
    held12 = corpus_eval._names(POSTED / "HELDOUT12")
    held13 = corpus_eval._names(POSTED / "HELDOUT13")
    held14 = corpus_eval._names(POSTED / "HELDOUT14")
    held15 = corpus_eval._names(POSTED / "HELDOUT15")
    held16 = corpus_eval._names(POSTED / "HELDOUT16")
    held17 = corpus_eval._names(POSTED / "HELDOUT17")
    held18 = corpus_eval._names(POSTED / "HELDOUT18")
    held19 = corpus_eval._names(POSTED / "HELDOUT19")
    held20 = corpus_eval._names(POSTED / "HELDOUT20")
    held21 = corpus_eval._names(POSTED / "HELDOUT21")
    # Every planned name has its fixture, or its SOURCES.md row says why none could be written.
    assert sorted(names) == sorted(FIXTURES + _skipped())
    assert not set(FIXTURES) & set(_skipped())
    # Each held-out list is the seeded draw its header names, over its block of NAMES: nobody picked them by hand.
    assert held == random.Random(25).sample(names[:FIRST], FIRST // 3)
    assert held2 == random.Random(2511).sample(names[FIRST:SECOND], (SECOND - FIRST) // 3)
    assert held3 == random.Random(2612).sample(names[SECOND:THIRD], (THIRD - SECOND) // 3)
    assert held4 == random.Random(2711).sample(names[THIRD:FOURTH], (FOURTH - THIRD) // 3)
    # HELDOUT5 to HELDOUT21 hold half of their blocks, not a third.
    assert held5 == random.Random(2811).sample(names[FOURTH:FIFTH], (FIFTH - FOURTH) // 2)
    assert held6 == random.Random(2911).sample(names[FIFTH:SIXTH], (SIXTH - FIFTH) // 2)
    assert held7 == random.Random(3011).sample(names[SIXTH:SEVENTH], (SEVENTH - SIXTH) // 2)
    assert held8 == random.Random(3111).sample(names[SEVENTH:EIGHTH], (EIGHTH - SEVENTH) // 2)
    assert held9 == random.Random(3211).sample(names[EIGHTH:NINTH], (NINTH - EIGHTH) // 2)
    assert held10 == random.Random(3311).sample(names[NINTH:TENTH], (TENTH - NINTH) // 2)
    assert held11 == random.Random(3411).sample(names[TENTH:ELEVENTH], (ELEVENTH - TENTH) // 2)
    assert held12 == random.Random(3511).sample(names[ELEVENTH:TWELFTH], (TWELFTH - ELEVENTH) // 2)
    assert held13 == random.Random(3611).sample(names[TWELFTH:THIRTEENTH], (THIRTEENTH - TWELFTH) // 2)
    assert held14 == random.Random(3711).sample(names[THIRTEENTH:FOURTEENTH], (FOURTEENTH - THIRTEENTH) // 2)
    assert held15 == random.Random(3811).sample(names[FOURTEENTH:FIFTEENTH], (FIFTEENTH - FOURTEENTH) // 2)
    assert held16 == random.Random(3911).sample(names[FIFTEENTH:SIXTEENTH], (SIXTEENTH - FIFTEENTH) // 2)
    assert held17 == random.Random(4011).sample(names[SIXTEENTH:SEVENTEENTH], (SEVENTEENTH - SIXTEENTH) // 2)
    assert held18 == random.Random(4111).sample(names[SEVENTEENTH:EIGHTEENTH], (EIGHTEENTH - SEVENTEENTH) // 2)
    assert held19 == random.Random(4211).sample(names[EIGHTEENTH:NINETEENTH], (NINETEENTH - EIGHTEENTH) // 2)
    assert held20 == random.Random(4311).sample(names[NINETEENTH:TWENTIETH], (TWENTIETH - NINETEENTH) // 2)
    assert held21 == random.Random(4411).sample(names[TWENTIETH:], len(names[TWENTIETH:]) // 2)
    assert len(names) - TWENTIETH == 14, "HELDOUT21 was drawn over rows 523-536's 14 names; a new block needs its draw"
    assert set(_sources()) == set(FIXTURES)
    urls = [c[1] for c in _rows()]
    assert len(urls) == len(set(urls)) >= 50, "one row per thread, at least 50 threads"
    written = set(FIXTURES)
    # A retired list's logs are training logs; the lists still held out are scored only with --heldout.
    retired = corpus_eval._names(POSTED / "RETIRED")
    lists = {f"HELDOUT{n}" for n in ("", 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21)}
    assert lists <= set(corpus_eval.HELDOUT_LISTS)
    assert set(retired) <= set(corpus_eval.HELDOUT_LISTS)
    draws = {
        "HELDOUT": held, "HELDOUT2": held2, "HELDOUT3": held3, "HELDOUT4": held4, "HELDOUT5": held5, "HELDOUT6": held6,
        "HELDOUT7": held7, "HELDOUT8": held8, "HELDOUT9": held9, "HELDOUT10": held10,
        "HELDOUT11": held11, "HELDOUT12": held12, "HELDOUT13": held13, "HELDOUT14": held14,
        "HELDOUT15": held15, "HELDOUT16": held16, "HELDOUT17": held17, "HELDOUT18": held18,
        "HELDOUT19": held19, "HELDOUT20": held20, "HELDOUT21": held21,
    }
    still_held = {name for which, listed in draws.items() if which not in retired for name in listed}
    assert {c.name for c in corpus_eval.load_cases(heldout=False, corpus_set="posted")} == written - still_held
    held_out = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted")}
    assert held_out == still_held & written
    only2 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT2")}
    assert only2 == set(held2) & written
    only3 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT3")}
    assert only3 == set(held3) & written and len(only3) == len(held3)
    only4 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT4")}
    assert only4 == set(held4) & written and len(only4) == len(held4)
    only5 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT5")}
    # A HELDOUT5 name may be a thread with no fixture (its SOURCES.md row says why): it scores nothing.
    assert only5 == set(held5) & written and len(only5) == len(set(held5) - set(_skipped()))
    only6 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT6")}
    assert only6 == set(held6) & written and len(only6) == len(set(held6) - set(_skipped()))
    only7 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT7")}
    assert only7 == set(held7) & written and len(only7) == len(set(held7) - set(_skipped()))
    only8 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT8")}
    assert only8 == set(held8) & written and len(only8) == len(set(held8) - set(_skipped()))
    only9 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT9")}
    assert only9 == set(held9) & written and len(only9) == len(set(held9) - set(_skipped()))
    only10 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT10")}
    assert only10 == set(held10) & written and len(only10) == len(set(held10) - set(_skipped()))
    only11 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT11")}
    assert only11 == set(held11) & written and len(only11) == len(set(held11) - set(_skipped()))
    only12 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT12")}
    assert only12 == set(held12) & written and len(only12) == len(set(held12) - set(_skipped()))
    only13 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT13")}
    assert only13 == set(held13) & written and len(only13) == len(set(held13) - set(_skipped()))
    only14 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT14")}
    assert only14 == set(held14) & written and len(only14) == len(set(held14) - set(_skipped()))
    only15 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT15")}
    assert only15 == set(held15) & written and len(only15) == len(set(held15) - set(_skipped()))
    only16 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT16")}
    assert only16 == set(held16) & written and len(only16) == len(set(held16) - set(_skipped()))
    only17 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT17")}
    assert only17 == set(held17) & written and len(only17) == len(set(held17) - set(_skipped()))
    only18 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT18")}
    assert only18 == set(held18) & written and len(only18) == len(set(held18) - set(_skipped()))
    only19 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT19")}
    assert only19 == set(held19) & written and len(only19) == len(set(held19) - set(_skipped()))
    only20 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT20")}
    assert only20 == set(held20) & written and len(only20) == len(set(held20) - set(_skipped()))
    only21 = {c.name for c in corpus_eval.load_cases(heldout=True, corpus_set="posted", only="HELDOUT21")}
    assert only21 == set(held21) & written and len(only21) == len(set(held21) - set(_skipped()))
