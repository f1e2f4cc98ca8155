"""Who is still in a call the others left: straggler and early leaver, from Ray's task table alone.

A worker group's step is one method called on every member at once (`[w.update_actor.remote(b) for w
in workers]`): the calls share their caller and are submitted within a moment of each other, which
makes them a round. When most members of a round returned and a few are still in it, those are the
stragglers ("3 of 4 WorkerDict finished actor_rollout_update_actor 2m10s ago; pid 4242 on node
10.0.0.3 is still in it (4m05s)"). When a few returned at once while the rest have been in it far
longer, those left a collective the others are blocked in (the demo's hang-sync: rank 1 skipped the
weight broadcast). Rounds are formed per class and method, and across classes per phase
(analysis/taskphases.py), since a weight sync spans the trainer and the rollout. Pure functions
over model data; collectors/ray_tasks.py reads the table, the store calls `find_stragglers`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gkdtop.model.tasks import RUNNING, Straggler

if TYPE_CHECKING:
    from gkdtop.model.tasks import RayTask

ROUND_WINDOW = 2.0  # seconds: a call on a worker group submits every member's task within this
MIN_LAG = 1.0  # seconds past the last member's return before the rest are called stragglers ...
LAG_SHARE = 0.25  # ... and at least this share of what the returned members took (a busy step varies)
EARLY_MIN = 5.0  # seconds the rest must have waited before a quick return is called leaving early ...
EARLY_FACTOR = 10.0  # ... and this many times what the quick member took
# verl names each worker `<prefix><Class>_<placement group>:<local rank>` (single_controller/ray/base.py).
VERL_NAME = re.compile(r"_(\d+):(\d+)$")


def rank_of(actor_name: str) -> int | None:
    """The rank an actor's name says (verl's `…WorkerDict_0:3` -> 3), None when it says none. Beyond
    the first placement group the local rank is not the global one: no rank then, the name says it."""
    found = VERL_NAME.search(actor_name)
    if found is None or found.group(1) != "0":
        return None
    return int(found.group(2))


def _key_time(task: RayTask) -> float | None:
    return task.created if task.created is not None else task.start


def _round(running: list[RayTask], finished: Iterable[RayTask]) -> list[RayTask]:
    """The returned members of the round `running` belongs to: tasks submitted within ROUND_WINDOW of
    it, one per actor not still running it (its newest)."""
    times = [t for t in (_key_time(r) for r in running) if t is not None]
    busy = {t.actor_id for t in running}
    parents = {t.parent_task_id for t in running if t.parent_task_id}
    best: dict[str, RayTask] = {}
    for task in finished:
        when = _key_time(task)
        if task.actor_id in busy or task.end is None or when is None or not times:
            continue
        if not min(times) - ROUND_WINDOW <= when <= max(times) + ROUND_WINDOW:
            continue
        if parents and task.parent_task_id and task.parent_task_id not in parents:
            continue  # another caller's call of the same method
        held = best.get(task.actor_id)
        if held is None or (task.end or 0.0) > (held.end or 0.0):
            best[task.actor_id] = task
    return list(best.values())


def _judge(running: list[RayTask], done: list[RayTask], now: float) -> str:
    """"straggler", "left early" or "" for a split round."""
    if not running or not done:
        return ""
    took = [t.took() or 0.0 for t in done]
    if len(done) > len(running):
        last = max(t.end or 0.0 for t in done)
        return "straggler" if now - last >= max(MIN_LAG, LAG_SHARE * statistics.median(took)) else ""
    waited = min(t.running_for(now) or 0.0 for t in running)
    return "left early" if waited >= max(EARLY_MIN, EARLY_FACTOR * max(took)) else ""


def find_stragglers(running: Iterable[RayTask], finished: Iterable[RayTask], now: float,
                    phase_of: Callable[[str], str | None] | None = None) -> list[Straggler]:
    """Every split round: per class and method, and across classes per phase (which then stands for
    the one-class rounds inside it). `finished`: the members' newest returns (the collector asks for
    those of each method a task has been in for a while)."""
    busy = [t for t in running if t.state == RUNNING and t.actor_id]
    done = [t for t in finished if t.actor_id and t.end is not None]
    found: list[Straggler] = []
    by_method: dict[tuple[str, str], list[RayTask]] = {}
    for task in busy:
        by_method.setdefault((task.class_name, task.method), []).append(task)
    for (cls, method), members in by_method.items():
        returned = _round(members, (t for t in done if (t.class_name, t.method) == (cls, method)))
        kind = _judge(members, returned, now)
        if kind:
            found.append(_made(kind, method, cls, members, returned, now))
    if phase_of is None:
        return found
    by_phase: dict[str, list[RayTask]] = {}
    for task in busy:
        if (phase := phase_of(task.func)) is not None:
            by_phase.setdefault(phase, []).append(task)
    for phase, members in by_phase.items():
        returned = _round(members, (t for t in done if phase_of(t.func) == phase))
        if len({t.class_name for t in [*members, *returned]}) < 2:
            continue  # one class: its own round above says it
        kind = _judge(members, returned, now)
        if not kind:
            continue
        wide = _made(kind, phase, "", members, returned, now)
        ids = {t.task_id for t in [*members, *returned]}
        found = [s for s in found if not {t.task_id for t in [*s.running, *s.finished]} <= ids]
        found.append(wide)
    return found


def _made(kind: str, method: str, cls: str, running: list[RayTask], done: list[RayTask], now: float) -> Straggler:
    """Members in the order a person reads them: by rank, then by pid."""
    def order(t: RayTask) -> tuple[int, int, str]:
        return (t.rank if t.rank is not None else 1 << 30, t.pid or 0, t.func)

    return Straggler(kind, method, cls, finished=sorted(done, key=order), running=sorted(running, key=order))


def failed_causes(failed: Iterable[RayTask], in_log: Callable[[str], bool], limit: int = 3) -> list[str]:
    """A failed task as a root cause, when the log does not already say it: `Ray task W.boom failed on
    node 10.0.0.3 (pid 4242, actor 545bce65): ValueError: bad shard 7`. Newest first; a cancelled
    task is no cause."""
    causes = []
    for task in failed:
        if task.error_type == "TASK_CANCELLED":
            continue
        error = task.error or task.error_type or "failed"
        if task.error and in_log(task.error):
            continue
        where = f" on node {task.node}" if task.node else ""
        who = ", ".join(part for part in (f"rank {task.rank}" if task.rank is not None else "",
                                          f"pid {task.pid}" if task.pid else "",
                                          f"actor {task.actor_id[:8]}" if task.actor_id else "") if part)
        causes.append(f"Ray task {task.func} failed{where}" + (f" ({who})" if who else "") + f": {error}")
        if len(causes) >= limit:
            break
    return causes
