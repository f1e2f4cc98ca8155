"""Which training stack a job runs (verl, OpenRLHF, TRL, …) and how (FSDP or Megatron, vLLM or SGLang
rollout, colocated or split), told from its log lines and its processes' command lines.

The profiles are data (gkdtop/data/frameworks.yaml). Their log patterns go through the analysis'
one matcher like every phase rule, so telling the framework costs a set lookup per matched line;
command lines are read only when the process list changed. The answer is a short label for the
top bar ("verl · GRPO · FSDP · vLLM rollout · colocated") plus the evidence behind it, so a user
can see why gkdtop thinks so, and pin another with the config's `framework:` key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.rules import (
    SEQ,
    ConfigError,
    boolean,
    check_keys,
    compose,
    get,
    node_error,
    pattern,
    scalar,
    strings,
)

if TYPE_CHECKING:
    from gkdtop.analysis.matcher import Pattern
    from gkdtop.model import LogLine

WHERE = "gkdtop/data/frameworks.yaml"
COMMAND_WEIGHT = 3  # a process running the framework's entry point outweighs a printed line
MAX_SAMPLES = 3  # evidence lines kept per profile, to show why


@dataclass(slots=True)
class TraitValue:
    label: str
    match: Pattern


@dataclass(slots=True)
class Profile:
    name: str
    label: str
    evidence: list[Pattern] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    commands: list[Pattern] = field(default_factory=list)
    traits: list[str] = field(default_factory=list)
    base: str = ""
    fallback: bool = False
    rl: bool = False  # an RL trainer (actor, rollout, critic): phases keep their RL names (PhaseRule.plain)


@dataclass(slots=True)
class Profiles:
    profiles: list[Profile]
    traits: dict[str, list[TraitValue]]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.profiles]


@dataclass(slots=True)
class Framework:
    """The verdict: `name` None when nothing told (no label then)."""

    name: str | None = None
    label: str = ""
    traits: dict[str, str] = field(default_factory=dict)
    source: str = "none"  # log | processes | log+processes | config | none
    evidence: list[str] = field(default_factory=list)  # the lines (or command lines) that told

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "traits": self.traits, "source": self.source,
                "evidence": self.evidence}


# --- the data file ---------------------------------------------------------------------------------

PROFILE_KEYS = {"name", "label", "evidence", "workers", "commands", "traits", "base", "fallback", "rl"}


def parse_profiles(doc: Any, where: str = WHERE) -> Profiles:
    # `task_phases` (Ray task names to phases) is read by analysis/taskphases.py, from the same file.
    check_keys(doc, where, "", {"traits", "frameworks", "task_phases"})
    groups: dict[str, list[TraitValue]] = {}
    tnode = get(doc, "traits")
    if tnode is not None:
        names = {str(k.value) for k, _ in tnode.value} if tnode.tag.endswith(":map") else set()
        check_keys(tnode, where, "traits", names)
        for k, values in tnode.value:
            key = f"traits.{k.value}"
            if values.tag != SEQ:
                raise node_error(where, values, key, "expected a list of {label, match}")
            out = []
            for i, item in enumerate(values.value):
                check_keys(item, where, f"{key}[{i}]", {"label", "match"})
                if get(item, "label") is None or get(item, "match") is None:
                    raise node_error(where, item, f"{key}[{i}]", "needs 'label' and 'match'")
                out.append(TraitValue(scalar(get(item, "label"), where, f"{key}[{i}].label"),
                                      pattern(get(item, "match"), where, f"{key}[{i}].match")))
            groups[str(k.value)] = out
    fnode = get(doc, "frameworks")
    if fnode is None or fnode.tag != SEQ:
        raise node_error(where, fnode, "frameworks", "expected a list of profiles")
    profiles = []
    for i, item in enumerate(fnode.value):
        key = f"frameworks[{i}]"
        check_keys(item, where, key, PROFILE_KEYS)
        if get(item, "name") is None:
            raise node_error(where, item, key, "missing 'name'")
        name = scalar(get(item, "name"), where, f"{key}.name")
        prof = Profile(name=name, label=name)
        if (n := get(item, "label")) is not None:
            prof.label = scalar(n, where, f"{key}.label")
        if (n := get(item, "evidence")) is not None:
            prof.evidence = [pattern(x, where, f"{key}.evidence[{j}]") for j, x in enumerate(_items(n))]
        if (n := get(item, "commands")) is not None:
            prof.commands = [pattern(x, where, f"{key}.commands[{j}]") for j, x in enumerate(_items(n))]
        if (n := get(item, "workers")) is not None:
            prof.workers = strings(n, where, f"{key}.workers")
        if (n := get(item, "traits")) is not None:
            prof.traits = strings(n, where, f"{key}.traits")
            for t in prof.traits:
                if t not in groups:
                    raise node_error(where, n, f"{key}.traits", f"no trait group {t!r} (defined: {', '.join(groups)})")
        if (n := get(item, "base")) is not None:
            prof.base = scalar(n, where, f"{key}.base")
        if (n := get(item, "fallback")) is not None:
            prof.fallback = boolean(n, where, f"{key}.fallback")
        if (n := get(item, "rl")) is not None:
            prof.rl = boolean(n, where, f"{key}.rl")
        profiles.append(prof)
    names = {p.name for p in profiles}
    for p in profiles:
        if p.base and p.base not in names:
            raise ConfigError(f"{where}: frameworks: {p.name}: base {p.base!r} is no profile")
    return Profiles(profiles, groups)


def _items(node: Any) -> list[Any]:
    return node.value if node.tag == SEQ else [node]


@functools.cache
def builtin_profiles() -> Profiles:
    text = resources.files("gkdtop.data").joinpath("frameworks.yaml").read_text(encoding="utf-8")
    return parse_profiles(compose(text, WHERE))


# --- detection -------------------------------------------------------------------------------------

class ProfileDetector:
    """Evidence gathered from matched lines (`feed`), judged on demand (`result`)."""

    def __init__(self, register: Callable[[str | Pattern], int], profiles: Profiles | None = None) -> None:
        self.profiles = profiles or builtin_profiles()
        self._uses: dict[int, list[tuple[str, str, int]]] = {}  # matcher id -> (kind, key, index)
        for p in self.profiles.profiles:
            for j, pat in enumerate(p.evidence):
                self._uses.setdefault(register(pat), []).append(("e", p.name, j))
        for group, values in self.profiles.traits.items():
            for j, value in enumerate(values):
                self._uses.setdefault(register(value.match), []).append(("t", group, j))
        self.ids = frozenset(self._uses)
        # A worker class several stacks name (open-instruct copied OpenRLHF's `LLMRayActor`) counts apart from a
        # stack's own: the one whose own worker is there too outscores the other; alone, the first listed wins.
        self._workers: dict[str, list[str]] = {}
        for p in self.profiles.profiles:
            for w in p.workers:
                self._workers.setdefault(w, []).append(p.name)
        self.hits: dict[str, set[int]] = {}  # profile -> evidence indices seen (-1: its own worker; -2: a shared one)
        self.samples: dict[str, list[str]] = {}
        self.trait_hits: dict[str, set[int]] = {}
        self._workers_seen: set[str] = set()
        self._commands: tuple[str, ...] | None = None
        self._command_hits: tuple[dict[str, list[str]], dict[str, set[int]]] = ({}, {})

    def seen(self, worker: str) -> bool:
        """feed() has met this worker (or the line has none): a line of it with no matches changes nothing here."""
        return not worker or worker in self._workers_seen

    def feed(self, line: LogLine, ids: Collection[int]) -> None:
        """One matched line (its matcher ids): cheap when it holds no evidence."""
        worker = line.worker
        if worker and worker not in self._workers_seen:
            self._workers_seen.add(worker)
            names = self._workers.get(worker, ())
            for name in names:
                self._hit(name, -1 if len(names) == 1 else -2, f"({worker} pid=…) actor")
        if self.ids.isdisjoint(ids):
            return
        for i in ids:
            for kind, key, j in self._uses.get(i, ()):
                if kind == "e":
                    self._hit(key, j, line.text)
                else:
                    self.trait_hits.setdefault(key, set()).add(j)

    def _hit(self, name: str, index: int, text: str) -> None:
        seen = self.hits.setdefault(name, set())
        if index not in seen:
            seen.add(index)
            samples = self.samples.setdefault(name, [])
            if len(samples) < MAX_SAMPLES:
                samples.append(text.strip()[:160])

    def _scan_commands(self, commands: Iterable[str]) -> tuple[dict[str, list[str]], dict[str, set[int]]]:
        """Profiles and trait values the processes' command lines name (redone only when they change)."""
        key = tuple(commands)
        if key != self._commands:
            by_profile: dict[str, list[str]] = {}
            traits: dict[str, set[int]] = {}
            for cmd in key:
                for p in self.profiles.profiles:
                    if any(pat.search(cmd) for pat in p.commands):
                        by_profile.setdefault(p.name, []).append(cmd[:160])
                for group, values in self.profiles.traits.items():
                    for j, value in enumerate(values):
                        if value.match.search(cmd):
                            traits.setdefault(group, set()).add(j)
            self._commands, self._command_hits = key, (by_profile, traits)
        return self._command_hits

    def lineage(self, name: str | None) -> tuple[str, ...]:
        """A profile's name and its bases' (easyr1, verl): whose framework-only hint lines hold for it."""
        profiles = {p.name: p for p in self.profiles.profiles}
        found: list[str] = []
        while name and name in profiles and name not in found:
            found.append(name)
            name = profiles[name].base
        return tuple(found)

    def rl(self, name: str | None) -> bool:
        """Is the profile (or a base of it) an RL trainer's? Unknown (None) is not: no actor is known of."""
        profiles = {p.name: p for p in self.profiles.profiles}
        return any(profiles[n].rl for n in self.lineage(name))

    def result(self, commands: Iterable[str] = (), pinned: str | None = None) -> Framework:
        """The framework now: `pinned` (the config's `framework:`) wins; else the best-supported profile."""
        by_cmd, cmd_traits = self._scan_commands(commands)
        profiles = {p.name: p for p in self.profiles.profiles}
        own = {name: len(self.hits.get(name, ())) + COMMAND_WEIGHT * bool(by_cmd.get(name)) for name in profiles}
        score = {name: n + (own.get(profiles[name].base, 0) if n and profiles[name].base else 0)
                 for name, n in own.items()}
        chosen: Profile | None = None
        if pinned and pinned in profiles:
            chosen = profiles[pinned]
        else:
            # The log names the job where it can: a process of another stack on the machine (another job, a
            # helper's cluster) does not outvote it; processes still tell a fork from its base.
            logged = {name for name, p in profiles.items() if not p.fallback and self.hits.get(name)}
            best = 0
            for p in self.profiles.profiles:  # ties: the one listed first
                if logged and p.name not in logged and p.base not in logged:
                    continue
                if not p.fallback and score[p.name] > best:
                    chosen, best = p, score[p.name]
            if chosen is None:
                chosen = next((p for p in self.profiles.profiles if p.fallback and score[p.name]), None)
        if chosen is None:
            return Framework()
        traits: dict[str, str] = {}
        for group in chosen.traits:
            seen = self.trait_hits.get(group, set()) | cmd_traits.get(group, set())
            if seen:
                traits[group] = self.profiles.traits[group][min(seen)].label
        from_log, from_cmd = bool(self.hits.get(chosen.name)), bool(by_cmd.get(chosen.name))
        source = "config" if pinned == chosen.name else (
            "log+processes" if from_log and from_cmd else "processes" if from_cmd else "log")
        evidence = [*by_cmd.get(chosen.name, ())[:1], *self.samples.get(chosen.name, ())]
        return Framework(name=chosen.name, label=" · ".join([chosen.label, *traits.values()]), traits=traits,
                         source=source, evidence=evidence)
