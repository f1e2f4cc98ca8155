"""What the Flight Recorder analysis is made of: one rank's dump, each rank's state, a group's finding, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo

# torch's MatchState names -> what the mismatch is about.
MISMATCH_KINDS = {
    "COLLECTIVE_TYPE_MISMATCH": "collective type",
    "SIZE_OR_SYNTAX_MISMATCH": "size",
    "COLLECTIVE_DTYPE_MISMATCH": "dtype",
    "COLLECTIVE_STATE_MISMATCH": "state",
}


@dataclass(slots=True)
class FrDump:
    """One process's Flight Recorder dump, or why there is none."""

    pid: int
    label: str  # what a person calls the process: the Ray actor class, else its role
    method: str  # "probe" (gkdtop.probe's FIFO) or "nccl-pipe" (torch's TORCH_NCCL_DEBUG_INFO_PIPE_FILE)
    ok: bool
    error: str = ""
    rank: int | None = None  # the global rank, when the process has one
    groups: list[dict[str, Any]] = field(default_factory=list)  # the probe's: name, desc, rank, size, ranks
    trace: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""  # the dump as it landed, kept for the saved report and the bundle
    source: str = ""  # the file it was read from
    saved: str = ""  # where write_report kept it

    @property
    def job(self) -> str:
        """Which run the dump belongs to: the run directory its file is in (two jobs may both have a
        `weight_sync` group, and their rank 0s are not the same rank)."""
        folder = Path(self.source).parent
        return str(folder.parent if folder.name == "probe" else folder) if self.source else ""


@dataclass(slots=True)
class RankState:
    """Where one rank is in one group, from its own dump."""

    rank: int
    pid: int
    label: str
    last_completed: int | None = None
    last_started: int | None = None
    last_enqueued: int | None = None
    current: str = ""  # "broadcast" of the oldest collective it entered and has not finished
    current_seq: int | None = None


@dataclass(slots=True)
class GroupFinding:
    """One process group: each rank's state and, when there is one, what is wrong and who is to blame."""

    name: str
    desc: str
    ranks: list[int]  # the members, as the group numbers them
    states: list[RankState]
    job: str = ""  # the run directory of its members' dumps
    kind: str = ""  # "" (nothing wrong found), "missing ranks", or a MISMATCH_KINDS value
    seq: int | None = None  # the collective's sequence number in the group
    op: str = ""  # what the ranks that are right called there
    missing: list[int] = field(default_factory=list)  # ranks that never entered it
    culprits: list[int] = field(default_factory=list)
    called: dict[int, str] = field(default_factory=dict)  # what each mismatched rank called at `seq`
    detail: str = ""  # torch's words for the mismatch
    sentence: str = ""


@dataclass(slots=True)
class CollectiveReport:
    dumps: list[FrDump]
    groups: list[GroupFinding]
    analyzer: str = ""  # "torch 2.13.0" or why torch's analyzer was not used
    error: str = ""
    sentence: str = ""  # the headline: the first group with a finding
    ras: dict[str, Any] | None = None  # NCCL RAS, two polls apart (nccl_ras.poll), when a rank loaded NCCL


def who(proc: ProcInfo) -> str:
    return proc.actor or proc.role or proc.name
