"""The phase from Ray's task table: which phase a running actor method is (`task_phases` in
data/frameworks.yaml, plus the user's config `task_phases:`), and which phase the running tasks name.

Every phase of an RL step on Ray is a method call on a worker group (`WorkerDict.actor_rollout_
generate_sequences`), so the running tasks say where the job is when its log says nothing a rule
knows, with no ptrace on any node. Rules are data: one regular expression on Ray's `Class.method`
per phase, the first that matches wins, so the file's order is the priority. Pure functions over
model data; the collector (collectors/ray_tasks.py) reads the table.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.rules import (
    BUILTIN,
    MAP,
    SEQ,
    TaskPhaseRule,
    check_keys,
    compose,
    get,
    node_error,
    pattern,
    scalar,
)
from gkdtop.model.tasks import RUNNING, TaskPhase

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from gkdtop.model.tasks import RayTask

WHERE = BUILTIN + "frameworks.yaml"
RULE_KEYS = {"phase", "tasks"}


def parse_task_phases(node: Any, where: str, path: str = "task_phases", framework: str = "") -> list[TaskPhaseRule]:
    """A list of `{phase, tasks}` (the user's config, or one framework's section of the built-ins)."""
    if node is None or node.tag != SEQ:
        raise node_error(where, node, path, "expected a list of {phase, tasks}")
    rules = []
    for i, item in enumerate(node.value):
        key = f"{path}[{i}]"
        check_keys(item, where, key, RULE_KEYS)
        phase, tasks = get(item, "phase"), get(item, "tasks")
        if phase is None or tasks is None:
            raise node_error(where, item, key, "needs 'phase' and 'tasks' (a regular expression on Class.method)")
        name = scalar(phase, where, f"{key}.phase").strip()
        if not name:
            raise node_error(where, phase, f"{key}.phase", "must name a phase")
        rules.append(TaskPhaseRule(name, pattern(tasks, where, f"{key}.tasks"), framework))
    return rules


def parse_sections(node: Any, where: str, path: str = "task_phases") -> list[TaskPhaseRule]:
    """frameworks.yaml's `task_phases`: a mapping of framework (verl, openrlhf, demo, ...) to its rules."""
    if node is None or node.tag != MAP:
        raise node_error(where, node, path, "expected a mapping of framework name to a list of {phase, tasks}")
    rules: list[TaskPhaseRule] = []
    for key, value in node.value:
        name = scalar(key, where, path)
        rules += parse_task_phases(value, where, f"{path}.{name}", name)
    return rules


@functools.cache
def builtin_task_phases() -> tuple[TaskPhaseRule, ...]:
    """The built-in rules, read when the first task arrives (not before the first frame)."""
    from importlib import resources

    text = resources.files("gkdtop.data").joinpath("frameworks.yaml").read_text(encoding="utf-8")
    node = get(compose(text, WHERE), "task_phases")
    return tuple(parse_sections(node, WHERE)) if node is not None else ()


def task_phaser(user: Sequence[TaskPhaseRule] = ()) -> TaskPhaser:
    """The task-name rules a job is judged by: the user's config `task_phases:` first, then the built-in table."""
    return TaskPhaser([*user, *builtin_task_phases()])


class TaskPhaser:
    """The rules (the user's first), with each `Class.method`'s answer kept: a job has a few dozen."""

    def __init__(self, rules: Sequence[TaskPhaseRule]) -> None:
        self.rules = tuple(rules)
        self._known: dict[str, int | None] = {}

    def index(self, func: str) -> int | None:
        """The position of the first rule that matches `func` (the priority), None when none does."""
        if func not in self._known:
            if len(self._known) > 4096:  # a job that names its tasks freely: stay bounded
                self._known.clear()
            self._known[func] = next((i for i, r in enumerate(self.rules) if r.tasks.search(func)), None)
        return self._known[func]

    def phase_of(self, func: str) -> str | None:
        i = self.index(func)
        return self.rules[i].phase if i is not None else None

    def task_phase(self, tasks: Iterable[RayTask]) -> TaskPhase | None:
        """The phase of the running tasks: the first rule (in priority) any of them matches; with every
        running task in that phase, counted per `Class.method`, and since when the oldest runs."""
        best: int | None = None
        found: dict[int, list[RayTask]] = {}
        for task in tasks:
            if task.state != RUNNING:
                continue
            i = self.index(task.func)
            if i is None:
                continue
            found.setdefault(i, []).append(task)
            best = i if best is None else min(best, i)
        if best is None:
            return None
        phase = self.rules[best].phase
        members = [t for i, ts in found.items() if self.rules[i].phase == phase for t in ts]
        counts: dict[str, int] = {}
        for task in sorted(members, key=lambda t: (self.index(t.func) or 0, t.func)):
            counts[task.func] = counts.get(task.func, 0) + 1
        starts = [t.start for t in members if t.start is not None]
        return TaskPhase(phase, counts, min(starts) if starts else None)
