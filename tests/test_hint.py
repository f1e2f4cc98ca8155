"""The stall hint is laid out once (format.hint_lines): the Phases pane and the text outputs agree."""

from __future__ import annotations

from gkdtop.format import hint_lines, hint_text
from gkdtop.model import Hint, PhaseStatus
from gkdtop.tui.phases_pane import render_phases

HINT = Hint(causes=["a rank died before the broadcast", "NCCL picked docker0"],
            actions=["gkdtop stacks", "set NCCL_SOCKET_IFNAME"])


def test_causes_come_first_then_what_to_try() -> None:
    assert hint_lines(HINT.causes, HINT.actions) == [
        ("cause", "a rank died before the broadcast"), ("cause", "NCCL picked docker0"),
        ("try", "gkdtop stacks"), ("try", "set NCCL_SOCKET_IFNAME"),
    ]
    assert hint_text(HINT.causes, HINT.actions) == [
        "  cause: a rank died before the broadcast", "  cause: NCCL picked docker0",
        "  try: gkdtop stacks", "  try: set NCCL_SOCKET_IFNAME",
    ]


def test_the_phases_pane_aligns_the_same_rows() -> None:
    status = PhaseStatus("weight_sync", "stalled", since=0.0, last_progress=0.0, stalled_for=300.0,
                         stall_after=120.0, hint=HINT)
    pane = render_phases(status, now=300.0).plain
    assert ("  cause: a rank died before the broadcast\n  cause: NCCL picked docker0\n"
            "  try:   gkdtop stacks\n  try:   set NCCL_SOCKET_IFNAME\n") in pane


def test_the_maximized_phases_pane_cites_the_lines_of_its_verdict() -> None:
    """Issue 25: each statement cites its lines; maximized, the pane shows them under the verdict."""
    from gkdtop.model import Evidence

    status = PhaseStatus("actor update", "failed", since=0.0, last_progress=0.0, stalled_for=None, stall_after=60.0,
                         hint=None, failure="Watchdog caught collective",
                         evidence=[Evidence("failed", "/logs/train.log", 812, "[E ProcessGroupNCCL.cpp:475] Watchdog"),
                                   Evidence("actor update started", "/logs/train.log", 812, "[E ProcessGroupNCCL")])
    assert "  why:   failed: train.log:812  [E ProcessGroupNCCL.cpp:475] Watchdog\n" in render_phases(
        status, now=10.0, table=True).plain
    assert "why:" not in render_phases(status, now=10.0).plain  # the small pane keeps its rows
