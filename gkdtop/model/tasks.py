"""Ray's task table as gkdtop reads it (collectors/ray_tasks.py), and what the analysis makes of it
(analysis/taskphases.py: the phase; analysis/stragglers.py: who is still in a call the others left).

Every phase of an RL step on Ray is an actor method call, so the task table says where each worker
is without a log line or a stack: `WorkerDict.actor_rollout_update_actor` RUNNING on pid 4242 since
10:02:11. These types carry that, with their one `as_json` for snapshot and the bundle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gkdtop.format import human_duration

RUNNING = "RUNNING"


@dataclass(slots=True)
class RayTask:
    """One attempt of a task, as the state API lists it (times in epoch seconds)."""

    task_id: str
    func: str  # Ray's func_or_class_name: `Class.method` for an actor task, else the function's name
    state: str  # RUNNING | FINISHED | FAILED | PENDING_... (Ray's names)
    name: str = ""  # Ray's task name: `func`, or `<the actor's repr>.method` when the actor class has a __repr__
    actor_id: str = ""
    actor_name: str = ""  # the actor's name, joined from the actor table (verl: `a1b2c3WorkerDict_0:3`)
    rank: int | None = None  # told by that name (analysis/stragglers.rank_of), when it says one
    pid: int | None = None
    node_id: str = ""
    node_ip: str = ""
    parent_task_id: str = ""  # the caller's task: one call on a worker group shares it
    created: float | None = None  # submitted
    start: float | None = None  # began running
    end: float | None = None  # finished or failed
    error_type: str = ""  # Ray's: TASK_EXECUTION_EXCEPTION, ACTOR_DIED, WORKER_DIED, TASK_CANCELLED, ...
    error: str = ""  # one line: the exception as Python printed it last (`ValueError: bad shard 7`)

    @property
    def class_name(self) -> str:
        """The actor's class (`WorkerDict`); "" for a plain task."""
        return self.func.rpartition(".")[0] if self.actor_id else ""

    @property
    def method(self) -> str:
        """The method (`actor_rollout_update_actor`), or a plain task's function name."""
        return self.func.rpartition(".")[2] if self.actor_id else self.func

    @property
    def node(self) -> str:
        """The node as a person names it: its IP, else the start of its id."""
        return self.node_ip or self.node_id[:8]

    @property
    def who(self) -> str:
        """`rank 2 (pid 4242 on node 10.0.0.3)`, `pid 4242 on node 10.0.0.3`: a member of a round, in a sentence."""
        where = f"pid {self.pid}" if self.pid else f"actor {self.actor_id[:8]}" if self.actor_id else self.task_id[:8]
        if self.node:
            where += f" on node {self.node}"
        return f"rank {self.rank} ({where})" if self.rank is not None else where

    def running_for(self, now: float) -> float | None:
        return max(0.0, now - self.start) if self.start is not None and self.state == RUNNING else None

    def took(self) -> float | None:
        """How long it ran, once it ended."""
        return max(0.0, self.end - self.start) if self.end is not None and self.start is not None else None

    def as_json(self, now: float) -> dict[str, Any]:
        running = self.running_for(now)
        doc: dict[str, Any] = {
            "name": self.name or self.func, "class": self.class_name, "method": self.method, "state": self.state,
            "actor_id": self.actor_id, "actor_name": self.actor_name, "rank": self.rank, "pid": self.pid,
            "node": self.node, "node_id": self.node_id, "task_id": self.task_id, "start": self.start,
            "running_for": round(running, 1) if running is not None else None,
        }
        if self.state != RUNNING:
            doc |= {"end": self.end, "error_type": self.error_type, "error": self.error}
        return doc


@dataclass(slots=True)
class RayTasksState:
    """What the task collector read. status: connected | not connected | no task events | unsupported | pending."""

    status: str = "pending"
    reason: str = ""  # one line: why not connected, why no task view
    address: str = ""
    running: list[RayTask] = field(default_factory=list)  # oldest first, capped
    running_total: int = 0  # the cluster's count; `running` is capped
    finished: list[RayTask] = field(default_factory=list)  # each peer's newest return from a method a task is still in
    failed: list[RayTask] = field(default_factory=list)  # newest first, capped
    failed_total: int = 0
    polled: float = field(default=0.0, compare=False)  # when (epoch seconds); a poll that found the same is no change


@dataclass(slots=True)
class Straggler:
    """One call on a group of actors, split: some members returned, the others are still in it.

    kind `straggler`: most returned and these are still in it. kind `left early`: these returned
    at once while the rest wait, as a rank that skipped a collective the others are blocked in.
    """

    kind: str
    method: str  # the method of a one-class round; the phase of a round across classes (`weight sync`)
    class_name: str  # "" across classes
    finished: list[RayTask] = field(default_factory=list)
    running: list[RayTask] = field(default_factory=list)

    @property
    def members(self) -> int:
        return len(self.finished) + len(self.running)

    def sentence(self, now: float) -> str:
        """One sentence a person reads in the Phases pane, the stall hint and snapshot."""
        if self.kind == "left early":
            return self._left_early(now)
        ended = max((t.end for t in self.finished if t.end is not None), default=None)
        ago = f" {human_duration(now - ended)} ago" if ended is not None else ""
        group = self.class_name or f"members of {self.method}"
        what = self.finished[0].method if self.class_name else f"their part of {self.method}"
        late = _and([f"{t.who}" + ("" if self.class_name else f" ({t.func})") for t in self.running])
        times = ", ".join(human_duration(t.running_for(now)) for t in self.running)
        verb = "is" if len(self.running) == 1 else "are"
        done = f"{len(self.finished)} of {self.members} {group} finished {what}{ago}"
        return f"{done}; {late} {verb} still in it ({times})"

    def _left_early(self, now: float) -> str:
        left = self.finished[0]
        ended = f" {human_duration(now - left.end)} ago" if left.end is not None else ""
        took = left.took()
        after = f" after {human_duration(took)}" if took is not None else ""
        others = _and([(t.who if t.func == left.func else f"{t.class_name or t.func} {t.who}") for t in self.running])
        since = max((t.running_for(now) or 0.0 for t in self.running), default=0.0)
        also = f" (and {len(self.finished) - 1} more)" if len(self.finished) > 1 else ""
        owner = f" of {left.class_name}" if left.class_name else ""
        verb = "is" if len(self.running) == 1 else "are"
        where = self.method if not self.class_name else "it"
        return (f"{left.who}{owner}{also} returned from {left.method}{ended}{after}, while {others} {verb} still in "
                f"{where} ({human_duration(since)}): it left the collective the others are blocked in")

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "kind": self.kind, "method": self.method, "class": self.class_name, "members": self.members,
            "finished": len(self.finished),
            "still_in": [{"pid": t.pid, "rank": t.rank, "node": t.node, "actor_id": t.actor_id, "task": t.func,
                          "running_for": round(t.running_for(now) or 0.0, 1)} for t in self.running],
            "left": [{"pid": t.pid, "rank": t.rank, "node": t.node, "actor_id": t.actor_id, "task": t.func,
                      "end": t.end} for t in self.finished] if self.kind == "left early" else [],
            "sentence": self.sentence(now),
        }


@dataclass(slots=True)
class TaskPhase:
    """The phase the running tasks name (data/frameworks.yaml `task_phases`): shown with its source,
    beside the log's verdict, never merged into its timeline."""

    phase: str
    tasks: dict[str, int] = field(default_factory=dict)  # `Class.method` -> how many run it, in the phase
    since: float | None = None  # the oldest of them began

    @property
    def where(self) -> str:
        """`OnPolicyDistillActor.sync_weights, RolloutWorker.receive_weights`, `WorkerDict.update_actor ×4`."""
        shown = [f"{func} ×{n}" if n > 1 else func for func, n in list(self.tasks.items())[:3]]
        more = len(self.tasks) - 3
        return ", ".join(shown) + (f", +{more} more" if more > 0 else "")

    @property
    def text(self) -> str:
        return f"{self.phase} (from Ray tasks: {self.where})"

    def as_json(self, now: float, log_phase: str | None, use: str) -> dict[str, Any]:
        """`use`: why it is shown (`the log is silent for 40s`, `evidence`); `agrees`: whether the log names it too."""
        return {"phase": self.phase, "source": "ray tasks", "text": self.text, "tasks": dict(self.tasks),
                "since": self.since,
                "running_for": round(max(0.0, now - self.since), 1) if self.since is not None else None,
                "log_phase": log_phase, "agrees": None if log_phase is None else log_phase == self.phase,
                "use": use}


def _and(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
