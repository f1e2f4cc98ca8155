"""The rules, read once: phases (data/phases.yaml + the user's `phases:`), findings (data/findings.yaml
+ the user's `findings:`), validated on YAML's node tree so every error names its file:line: key.

One parser for built-ins and user files alike; every pattern is checked here by the engines that
will run it (analysis/matcher.py), so a pattern they refuse is a config error, not a crash later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gkdtop.analysis.matcher import Pattern, PatternError, compile_pattern
from gkdtop.model import Hint
from gkdtop.yamlguard import ConfigError, node_error


@dataclass(frozen=True, slots=True)
class TaskPhaseRule:
    """`tasks` matches Ray's `Class.method` (func_or_class_name) of a running task: it is in `phase`
    (analysis/taskphases.py reads them)."""

    phase: str
    tasks: Pattern
    framework: str = ""  # the section of frameworks.yaml it came from; "" for the user's


@dataclass(slots=True)
class PhaseRule:
    name: str
    start: Pattern
    done: Pattern | None = None
    fail: Pattern | None = None
    stall_after: float | None = None
    terminal: bool = False
    hint: Hint = field(default_factory=Hint)
    # Shown instead of `hint` when the phase failed (a crash) rather than stalled, where the hang's
    # causes would mislead: an assertion in a training step is not "generation is stuck".
    fail_hint: Hint | None = None
    # Shown when the failure is a collective's or a wait's timeout in this phase (what waits on what here).
    timeout_hint: Hint | None = None
    # Phases that recur inside this one every step (weight sync inside the training loop): while this
    # phase runs, their lines name the current sub-phase instead of opening new timeline spans.
    inner: list[str] = field(default_factory=list)
    # A phase that happens inside whichever phase is underway (NCCL makes a communicator while the model
    # loads or the engine starts): once it is done, the phase it interrupted goes on.
    nested: bool = False
    # The name shown where the log's framework is no RL one (SFT, pretraining, a server): `actor init` is
    # `model load` on an HF Trainer log, which has no actor. Output only: rules and config name `name`.
    plain: str = ""


@dataclass(slots=True)
class Signature:
    """A known failure: `match` on one line (named groups become fields); `extra` patterns fill more
    fields from the next `within` lines of the same file."""

    name: str
    severity: str
    match: Pattern
    cause: str = ""
    fix: str = ""
    extra: list[Pattern] = field(default_factory=list)
    within: int = 20
    require_extra: bool = False
    key: list[str] | None = None  # None: every field tells findings apart
    # A sentence added to `fix` where the job is that framework (or a fork of it): its own option's name
    # (`verl: actor_rollout_ref.rollout.gpu_memory_utilization`) never shown on a log of another stack.
    fix_for: dict[str, str] = field(default_factory=dict)
    # Said instead of cause / fix where the process the `pid` field names raised an exception just before (a
    # worker's death after its own error is that error's consequence, not a kill).
    cause_if_raised: str = ""
    fix_if_raised: str = ""
    # Incidents needed before it is shown: one stats line with no tokens is a request's prefill, many are a hang.
    min_count: int = 1
    # Seconds in which more matching lines of one file are the same incident: one crash is reported by abseil's
    # handler, again through Ray's logger and by Python's faulthandler (`fatal-signal x3` for one SIGSEGV). Lines of
    # one process (its Ray prefix's pid) are one incident however far apart their stamps: a process dies once.
    merge_within: float = 0.0
    # Withdrawn where the next line of its file matches: a line a terminal wrapped (`…collective opera` then
    # `tion timeout: WorkNCCL(…`) is not a line cut off.
    unless_next: Pattern | None = None
    # Fields read from the latest earlier line of the same file that matches one of these (a banner printed above
    # the match line: HF Trainer's `Total optimization steps = 402` above its resume line).
    before: list[Pattern] = field(default_factory=list)
    # [step, total]: two fields; where the first is at or past the second (a run resumed at its last step),
    # cause_if_reached / fix_if_reached are said instead of cause / fix.
    reached: list[str] = field(default_factory=list)
    cause_if_reached: str = ""
    fix_if_reached: str = ""


@dataclass(slots=True)
class RuleSet:
    """What the analysis judges lines by, parsed: config.py builds it (`Config.rules()`), and the
    analysis layer takes nothing else from the config."""

    phases: list[PhaseRule] = field(default_factory=list)
    findings: list[Signature] = field(default_factory=list)
    fail_pattern: str | Pattern = ""  # a line that ends the run as failed ("": none)
    idle_patterns: list[str | Pattern] = field(default_factory=list)  # lines that are no progress
    stall_after: float = 120.0  # seconds without progress before a phase with no limit of its own stalls
    stall_fixed: bool = False  # `--stall-after` said it for every phase: no pace or first-step allowance
    max_line: int = 16384  # characters kept of a line read as history (config `max_line`, as live)
    # The user's Ray task-name rules (config `task_phases:`): they name a failure's Ray task before the built-ins.
    task_phases: list[TaskPhaseRule] = field(default_factory=list)


# --- YAML nodes with line numbers ----------------------------------------------------------------

MAP, SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
BUILTIN = "gkdtop/data/"  # the built-in rules' files: tests compile them with every engine


def get(node: Any, key: str) -> Any:
    if node is None:
        return None
    for k, v in node.value:
        if k.value == key:
            return v
    return None


def check_keys(node: Any, where: str, path: str, allowed: set[str]) -> None:
    if node.tag != MAP:
        raise node_error(where, node, path, "expected a mapping")
    for k, _ in node.value:
        if k.tag in (MAP, SEQ):  # `? [a, b]`: unhashable, never a key
            raise node_error(where, k, path or "(top level)", "keys must be plain names")
        if k.value not in allowed:
            raise node_error(where, k, f"{path}.{k.value}" if path else k.value,
                             f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def scalar(node: Any, where: str, key: str) -> str:
    if node.tag in (MAP, SEQ):
        raise node_error(where, node, key, "expected a single value")
    return str(node.value)


def number(node: Any, where: str, key: str) -> float:
    raw = scalar(node, where, key)
    try:
        value = float(raw)
    except ValueError:
        raise node_error(where, node, key, f"expected a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:  # inf would overflow int(), nan compares false
        raise node_error(where, node, key, f"must be positive and finite, got {raw}")
    return value


def count(node: Any, where: str, key: str) -> int:
    raw = scalar(node, where, key)
    if not raw.isdigit() or not 0 < int(raw) < 1_000_000:
        raise node_error(where, node, key, f"expected a whole number from 1, got {raw!r}")
    return int(raw)


def boolean(node: Any, where: str, key: str) -> bool:
    value = scalar(node, where, key).lower()
    if value not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
        raise node_error(where, node, key, f"expected true or false, got {value!r}")
    return value in ("true", "yes", "on", "1")


def pattern(node: Any, where: str, key: str) -> Pattern:
    raw = scalar(node, where, key)
    try:
        builtin = where.startswith(BUILTIN)
        return compile_pattern(raw, every_engine=not builtin, lazy=builtin)
    except PatternError as exc:
        raise node_error(where, node, key, str(exc)) from None


def any_pattern(node: Any, where: str, key: str) -> str:
    """One pattern, or a list of them (each checked) as one that matches where any does: a hint's evidence names
    several engines' lines at once (YAML anchors, no copies)."""
    return "|".join(f"(?:{p.text})" for p in patterns(node, where, key)) if node.tag == SEQ else \
        pattern(node, where, key).text


def strings(node: Any, where: str, key: str) -> list[str]:
    if node.tag != SEQ:
        return [scalar(node, where, key)]
    return [scalar(item, where, f"{key}[{i}]") for i, item in enumerate(node.value)]


def patterns(node: Any, where: str, key: str) -> list[Pattern]:
    items = node.value if node.tag == SEQ else [node]
    return [pattern(item, where, f"{key}[{i}]") for i, item in enumerate(items)]


# --- phases and findings ----------------------------------------------------------------------------

PHASE_KEYS = {"name", "start", "done", "fail", "stall_after", "terminal", "hint", "fail_hint", "timeout_hint", "inner",
              "nested", "plain"}
FINDING_KEYS = {"name", "severity", "match", "extra", "within", "require_extra", "key", "cause", "fix", "fix_for",
                "cause_if_raised", "fix_if_raised", "min_count", "merge_within", "unless_next", "before", "reached",
                "cause_if_reached", "fix_if_reached"}


def parse_phases(node: Any, where: str, path: str = "phases") -> list[PhaseRule]:
    if node is None or node.tag != SEQ:
        raise node_error(where, node, path, "expected a list of phases")
    rules = []
    for i, item in enumerate(node.value):
        key = f"{path}[{i}]"
        check_keys(item, where, key, PHASE_KEYS)
        name_node, start_node = get(item, "name"), get(item, "start")
        if name_node is None:
            raise node_error(where, item, key, "missing 'name'")
        if start_node is None:
            raise node_error(where, item, key, "missing 'start' (a regular expression)")
        rule = PhaseRule(name=scalar(name_node, where, f"{key}.name"), start=pattern(start_node, where, f"{key}.start"))
        if (n := get(item, "done")) is not None:
            rule.done = pattern(n, where, f"{key}.done")
        if (n := get(item, "fail")) is not None:
            rule.fail = pattern(n, where, f"{key}.fail")
        if (n := get(item, "stall_after")) is not None:
            rule.stall_after = number(n, where, f"{key}.stall_after")
        if (n := get(item, "terminal")) is not None:
            rule.terminal = boolean(n, where, f"{key}.terminal")
        if (n := get(item, "inner")) is not None:
            rule.inner = strings(n, where, f"{key}.inner")
        if (n := get(item, "nested")) is not None:
            rule.nested = boolean(n, where, f"{key}.nested")
        if (n := get(item, "plain")) is not None:
            rule.plain = scalar(n, where, f"{key}.plain")
        if (n := get(item, "hint")) is not None:
            rule.hint = parse_hint(n, where, f"{key}.hint")
        if (n := get(item, "fail_hint")) is not None:
            rule.fail_hint = parse_hint(n, where, f"{key}.fail_hint")
        if (n := get(item, "timeout_hint")) is not None:
            rule.timeout_hint = parse_hint(n, where, f"{key}.timeout_hint")
        rules.append(rule)
    return rules


def parse_hint(node: Any, where: str, key: str) -> Hint:
    """`causes` and `actions`: lists of lines, each a string, or `{text: ..., frameworks: [verl, ...]}`
    for a line that holds for those frameworks only, or `{text: ..., unless: [verl]}` for one that a
    framework's own line replaces (Hint.for_framework), and/or `{text: ..., seen: PATTERN}` for one
    shown only once a line of the log matched PATTERN (Hint.for_seen: no advice without its evidence), and/or
    `{text: ..., unless_seen: PATTERN}` for one hidden once a line matched PATTERN (a later line contradicts it),
    and/or `{text: ..., steps: N}` for one shown once N steps timed their parts, `{text: ..., ran_steps: N}` once N
    steps ran (timed or not), `{text: ..., before_steps: N}` while fewer ran (Hint.for_steps)."""
    check_keys(node, where, key, {"causes", "actions"})
    hint = Hint()
    for part, out in (("causes", hint.causes), ("actions", hint.actions)):
        if (items := get(node, part)) is None:
            continue
        for i, item in enumerate(items.value if items.tag == SEQ else [items]):
            where_item = f"{key}.{part}[{i}]"
            if item.tag != MAP:
                out.append(scalar(item, where, where_item))
                continue
            check_keys(item, where, where_item, {"text", "frameworks", "unless", "seen", "unless_seen", "steps",
                                                      "before_steps", "ran_steps"})
            text, only, unless = get(item, "text"), get(item, "frameworks"), get(item, "unless")
            seen, unseen, steps = get(item, "seen"), get(item, "unless_seen"), get(item, "steps")
            before, ran = get(item, "before_steps"), get(item, "ran_steps")
            if text is None or (only is not None and unless is not None) or (
                    only is unless is seen is unseen is steps is before is ran is None):
                raise node_error(where, item, where_item, "needs `text` and one of `frameworks`, `unless`, "
                                 "and/or `seen`, `unless_seen`, `steps`, `ran_steps`, `before_steps`")
            out.append(scalar(text, where, f"{where_item}.text"))
            if only is not None or unless is not None:
                hint.only[out[-1]] = (
                    tuple(strings(only, where, f"{where_item}.frameworks")) if only is not None else
                    tuple(f"!{name}" for name in strings(unless, where, f"{where_item}.unless")))
            if seen is not None:
                hint.seen[out[-1]] = any_pattern(seen, where, f"{where_item}.seen")
            if unseen is not None:
                hint.unseen[out[-1]] = any_pattern(unseen, where, f"{where_item}.unless_seen")
            if steps is not None:
                hint.steps[out[-1]] = count(steps, where, f"{where_item}.steps")
            if before is not None:
                hint.before_steps[out[-1]] = count(before, where, f"{where_item}.before_steps")
            if ran is not None:
                hint.ran_steps[out[-1]] = count(ran, where, f"{where_item}.ran_steps")
    return hint


def parse_findings(node: Any, where: str, path: str = "findings") -> list[Signature]:
    if node is None or node.tag != SEQ:
        raise node_error(where, node, path, "expected a list of signatures")
    out = []
    for i, item in enumerate(node.value):
        key = f"{path}[{i}]"
        check_keys(item, where, key, FINDING_KEYS)
        if get(item, "name") is None or get(item, "match") is None:
            raise node_error(where, item, key, "needs 'name' and 'match'")
        sig = Signature(name=scalar(get(item, "name"), where, f"{key}.name"), severity="error",
                        match=pattern(get(item, "match"), where, f"{key}.match"))
        if (n := get(item, "severity")) is not None:
            sig.severity = scalar(n, where, f"{key}.severity")
            if sig.severity not in ("error", "warning", "info"):
                raise node_error(where, n, f"{key}.severity", f"expected error, warning or info, got {sig.severity!r}")
        if (n := get(item, "extra")) is not None:
            sig.extra = patterns(n, where, f"{key}.extra")
        if (n := get(item, "before")) is not None:
            sig.before = patterns(n, where, f"{key}.before")
        if (n := get(item, "within")) is not None:
            sig.within = int(number(n, where, f"{key}.within"))
        if (n := get(item, "require_extra")) is not None:
            sig.require_extra = boolean(n, where, f"{key}.require_extra")
        if (n := get(item, "min_count")) is not None:
            sig.min_count = count(n, where, f"{key}.min_count")
        if (n := get(item, "merge_within")) is not None:
            sig.merge_within = number(n, where, f"{key}.merge_within")
        if (n := get(item, "key")) is not None:
            sig.key = strings(n, where, f"{key}.key")
        if (n := get(item, "unless_next")) is not None:
            sig.unless_next = pattern(n, where, f"{key}.unless_next")
        if (n := get(item, "reached")) is not None:
            sig.reached = strings(n, where, f"{key}.reached")
            if len(sig.reached) != 2:
                raise node_error(where, n, f"{key}.reached", "expected two field names: [step, total]")
        for attr in ("cause", "fix", "cause_if_raised", "fix_if_raised", "cause_if_reached", "fix_if_reached"):
            if (n := get(item, attr)) is not None:
                setattr(sig, attr, scalar(n, where, f"{key}.{attr}"))
        if (n := get(item, "fix_for")) is not None:
            if n.tag != MAP:
                raise node_error(where, n, f"{key}.fix_for", "expected a mapping of framework name to text")
            sig.fix_for = {scalar(k, where, f"{key}.fix_for"): scalar(v, where, f"{key}.fix_for.{k.value}")
                           for k, v in n.value}
        out.append(sig)
    return out


def compose(text: str, where: str) -> Any:
    """YAML text to its node tree (line numbers kept); a mapping at the top, else ConfigError."""
    import yaml

    from gkdtop.yamlguard import check_depth, check_nodes

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        check_depth(text, where, loader)  # before composing: a nesting bomb crashes the composer
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{where}{line}: invalid YAML: {' '.join(str(problem).split())}") from None
    if node is None:
        return None
    check_nodes(node, where)  # duplicate keys, tags that lie about the shape
    if node.tag != MAP:
        raise ConfigError(f"{where}:{node.start_mark.line + 1}: the config must be a mapping of keys")
    return node


def _builtin(name: str) -> Any:
    text = resources.files("gkdtop.data").joinpath(name).read_text(encoding="utf-8")
    return compose(text, BUILTIN + name)


def builtin_phases() -> list[PhaseRule]:
    return parse_phases(get(_builtin("phases.yaml"), "phases"), "gkdtop/data/phases.yaml")


def builtin_signatures() -> list[Signature]:
    return parse_findings(get(_builtin("findings.yaml"), "findings"), "gkdtop/data/findings.yaml")
