"""gkdtop's verdicts on the real-format corpus (tests/corpus/, docs/real-logs.md) must not regress.

Runs the evaluator's scoring (tests/corpus_eval.py) on the TRAINING logs only (never the held-out
third) through the real CLI, `gkdtop replay --json` and `gkdtop snapshot --json`, and holds each
column to the pass count the rules reach today. A rule change that loses a log fails here; one
that wins more should raise the floor.
"""

from __future__ import annotations

import pytest

from tests import corpus_eval

# Pass counts out of 31 training logs, per mode and column (`python -m tests.corpus_eval`);
# fix and claims count only the logs that name a fix / wrong claims.
FLOORS = {
    "replay": {"state": 27, "phase": 31, "culprit": 31, "fix": 26, "claims": 24, "framework": 31, "all": 27},
    "snapshot": {"state": 31, "phase": 31, "culprit": 31, "fix": 26, "claims": 24, "framework": 31, "all": 31},
}

# Replay has no clock: it judges a log at its last line, so a job that went silent in a hang reads
# as running there while a snapshot (which compares with now) says stalled. The state may differ
# only that way; the phase must be the same.
REPLAY_CANNOT_SEE_SILENCE = ("running", "stalled")


@pytest.fixture(scope="module")
def scores() -> list[corpus_eval.Score]:
    cases = corpus_eval.load_cases(heldout=False)
    assert len(cases) == 31 and not {c.name for c in cases} & set(corpus_eval._names(corpus_eval.CORPUS / "HELDOUT"))
    return corpus_eval.evaluate(cases, jobs=4)


@pytest.mark.parametrize("mode", ["replay", "snapshot"])
def test_pass_counts_hold(scores: list[corpus_eval.Score], mode: str) -> None:
    mine = [s for s in scores if s.mode == mode]
    assert not [s.error for s in mine if s.error], "gkdtop failed on a corpus log"
    got = corpus_eval.totals(mine)
    low = {col: (got[col][0], floor) for col, floor in FLOORS[mode].items() if got[col][0] < floor}
    assert not low, f"{mode}: (got, floor) per column below its floor: {low}"


def test_snapshot_and_replay_agree(scores: list[corpus_eval.Score]) -> None:
    by = {(s.case, s.mode): s for s in scores}
    differ = []
    for case in sorted({s.case for s in scores}):
        rep, snap = by[(case, "replay")], by[(case, "snapshot")]
        same_state = rep.got_state == snap.got_state or (rep.got_state, snap.got_state) == REPLAY_CANNOT_SEE_SILENCE
        if rep.got_phase != snap.got_phase or not same_state:
            differ.append((case, (rep.got_state, rep.got_phase), (snap.got_state, snap.got_phase)))
    assert not differ, differ
