"""Defaults plus the user's YAML config: phase rules, log filters, thresholds, paths.

A malformed file is a `ConfigError` whose message is one line naming the file, the line and the
key, so the CLI can print it and exit non-zero without a traceback.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gkdtop.collectors.findings import Signature, builtin_signatures
from gkdtop.model import Hint

DEFAULT_FILTER = r"\[ACTOR\]|\[ROLLOUT\]|\[SYNC\]|\[TEACHER\]|ERROR|Error|NCCL|Traceback|✓|✗|WARN|step:\d+ -"
FAIL_PATTERN = (
    r"Traceback \(most recent call last\)|✗|\bActorDiedError\b|\bRayTaskError\b|\bRaySystemError\b"
    r"|OutOfMemoryError|CUDA out of memory|Watchdog caught collective operation timeout"
)
# Lines a hung job keeps printing; they are not progress.
IDLE_PATTERNS = [
    r"resource request cannot be scheduled|No available node types can fulfill",
    r"Waiting for .* to be ready|still waiting",
]
DRIVER_PATTERNS = [r"main_ppo", r"main_gkd", r"torchrun", r"-m verl\b", r"verl\.trainer", r"gkdtop\.demo\.job"]


class ConfigError(Exception):
    """A config problem, already phrased as the one line the user sees."""


@dataclass(slots=True)
class PhaseRule:
    name: str
    start: re.Pattern[str]
    done: re.Pattern[str] | None = None
    fail: re.Pattern[str] | None = None
    stall_after: float | None = None
    terminal: bool = False
    hint: Hint = field(default_factory=Hint)
    # Phases that recur inside this one every step (weight sync inside the training loop): while this
    # phase runs, their lines name the current sub-phase instead of opening new timeline spans.
    inner: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Config:
    stall_after: float = 120.0
    stall_stacks: bool = True  # dump the job's stacks once when a stall is declared
    phases: list[PhaseRule] = field(default_factory=list)
    filters: dict[str, str] = field(default_factory=lambda: {"default": DEFAULT_FILTER})
    fail_pattern: str = FAIL_PATTERN
    idle_patterns: list[str] = field(default_factory=lambda: list(IDLE_PATTERNS))
    driver_patterns: list[str] = field(default_factory=lambda: list(DRIVER_PATTERNS))
    logs: list[str] = field(default_factory=list)
    backlog: int = 200
    max_line: int = 16384
    refresh: dict[str, float] = field(
        default_factory=lambda: {"gpus": 1.0, "procs": 2.0, "logs": 0.25, "ray": 5.0, "ui": 1.0}
    )
    findings: list[Signature] = field(default_factory=list)
    source: str = ""  # the file it was read from, if any

    @property
    def default_filter(self) -> str:
        return self.filters.get("default", DEFAULT_FILTER)


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gkdtop" / "config.yaml"


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Built-ins, then the user's file (`path`, else the XDG one if it exists)."""
    cfg = Config(phases=builtin_phases(), findings=builtin_signatures())
    if path is None:
        candidate = default_config_path()
        if not candidate.is_file():
            return cfg
        path = candidate
    path = Path(path)
    _apply(cfg, _compose(_read(path), str(path)), str(path))
    cfg.source = str(path)
    return cfg


MAX_BYTES = 1 << 20  # a config is a few KB; more is a wrong path (a log, /dev/zero) or a bomb
MAX_BACKLOG = 100_000  # lines of each file's existing content shown at start-up
MAX_LINE = 1 << 20  # characters kept of one line
REFRESH_RANGE = (0.01, 3600.0)  # seconds between two polls: faster spins a core, slower shows nothing
MAX_DEPTH = 64  # a config nests a few levels; 50,000 nested `[` crash a recursive composer


def _read(path: Path) -> str:
    """The config's text: a regular file of at most MAX_BYTES, else a one-line ConfigError.

    Opened non-blocking and checked on the descriptor, so `--config` naming a FIFO can't hang us.
    """
    from gkdtop.collectors.logs import open_regular

    try:
        with open_regular(str(path)) as fh:
            data = fh.read(MAX_BYTES + 1) or b""
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise ConfigError(f"{path!r}: cannot read config: {exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: cannot read config: larger than {MAX_BYTES >> 20} MiB (is it a config file?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: cannot read config: not UTF-8 (byte {data[exc.start]:#04x})") from None


def builtin_phases() -> list[PhaseRule]:
    text = resources.files("gkdtop.data").joinpath("phases.yaml").read_text(encoding="utf-8")
    doc = _compose(text, "gkdtop/data/phases.yaml")
    return _phases(_get(doc, "phases"), "gkdtop/data/phases.yaml", "phases")


# --- YAML with line numbers -------------------------------------------------------------------
# We validate the composed node tree rather than the loaded dicts so every error can name its line.


def _compose(text: str, where: str) -> Any:
    """The YAML node tree of a config, checked for nesting depth and duplicate keys."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_depth(yaml.parse(text, Loader=loader), where)
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{where}{line}: invalid YAML: {' '.join(str(problem).split())}") from None
    if node is None:
        return None
    _check_nodes(node, where)
    if node.tag != "tag:yaml.org,2002:map":
        raise ConfigError(f"{where}:{node.start_mark.line + 1}: the config must be a mapping of keys")
    return node


def _check_depth(events: Any, where: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the parser's flat event stream, before composing.

    The composer (libyaml's binding, or PyYAML's own) recurses once per level: 50,000 nested `[`
    overflow the C stack (a segfault) or Python's. The parser keeps its own stack, and we stop it at
    the first level too deep, so a bomb costs microseconds.
    """
    import yaml

    depth = 0
    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise ConfigError(f"{where}:{line}: nested more than {MAX_DEPTH} levels deep (a config needs a few)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


_KIND_TAG = {"ScalarNode": "", "SequenceNode": "tag:yaml.org,2002:seq", "MappingNode": "tag:yaml.org,2002:map"}
_STRUCTURE_TAGS = ("tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")


def _check_nodes(root: Any, where: str) -> None:
    """Every mapping without a key given twice, every node's tag true to its kind.

    A key given twice is an error naming both lines: YAML loaders keep one silently. The validators
    tell a mapping from a list by its tag, so `x: !!map 1` (a scalar tagged as a mapping),
    `!!seq {a: 1}` or `!!str [a]` would reach them as the wrong shape: an error naming the key, here.
    """
    import yaml

    done: set[int] = set()  # aliases share nodes: each is checked once (no billion laughs)
    todo: list[tuple[Any, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in done:
            continue
        done.add(id(node))
        kind = type(node).__name__
        if node.tag != _KIND_TAG[kind] and (kind != "ScalarNode" or node.tag in _STRUCTURE_TAGS):
            what = {"ScalarNode": "a single value", "SequenceNode": "a list", "MappingNode": "a mapping"}[kind]
            raise _err(where, node, path or "(top level)", f"{what} tagged {node.tag.rsplit(':', 1)[-1]!r}")
        if isinstance(node, yaml.SequenceNode):
            todo += [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            first: dict[str, Any] = {}
            for k, v in node.value:
                name = f"{path}.{k.value}" if path else str(k.value)
                if isinstance(k, yaml.ScalarNode):
                    if k.value in first:
                        line = first[k.value].start_mark.line + 1
                        raise _err(where, k, name, f"duplicate key (first given at line {line})")
                    first[k.value] = k
                else:
                    todo.append((k, path))
                todo.append((v, name if isinstance(k, yaml.ScalarNode) else path))


def _err(where: str, node: Any, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}:{node.start_mark.line + 1}: {key}: {msg}")


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    for k, v in node.value:
        if k.value == key:
            return v
    return None


def _keys(node: Any, where: str, path: str, allowed: set[str]) -> None:
    if node.tag != "tag:yaml.org,2002:map":
        raise _err(where, node, path, "expected a mapping")
    for k, _ in node.value:
        if k.tag in ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):  # `? [a, b]`: unhashable, never a key
            raise _err(where, k, path or "(top level)", "keys must be plain names")
        if k.value not in allowed:
            raise _err(where, k, f"{path}.{k.value}" if path else k.value,
                       f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def _scalar(node: Any, where: str, key: str) -> str:
    if node.tag in ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
        raise _err(where, node, key, "expected a single value")
    return str(node.value)


def _number(node: Any, where: str, key: str) -> float:
    raw = _scalar(node, where, key)
    try:
        value = float(raw)
    except ValueError:
        raise _err(where, node, key, f"expected a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:  # inf would overflow int(), nan compares false
        raise _err(where, node, key, f"must be positive and finite, got {raw}")
    return value


def _count(node: Any, where: str, key: str, low: int, high: int) -> int:
    """A whole number in [low, high]: `backlog: 1e12` would read a whole log, `max_line: 0` none of it."""
    raw = _scalar(node, where, key)
    try:
        value = float(raw)
    except ValueError:
        raise _err(where, node, key, f"expected a whole number, got {raw!r}") from None
    if not math.isfinite(value) or value != int(value) or not low <= value <= high:
        raise _err(where, node, key, f"expected a whole number from {low} to {high:,}, got {raw}")
    return int(value)


def _regex(node: Any, where: str, key: str) -> re.Pattern[str]:
    raw = _scalar(node, where, key)
    try:
        return re.compile(raw)
    except re.error as exc:
        raise _err(where, node, key, f"invalid regular expression: {exc}") from None


def _strings(node: Any, where: str, key: str) -> list[str]:
    if node.tag != "tag:yaml.org,2002:seq":
        return [_scalar(node, where, key)]
    return [_scalar(item, where, f"{key}[{i}]") for i, item in enumerate(node.value)]


PHASE_KEYS = {"name", "start", "done", "fail", "stall_after", "terminal", "hint", "inner"}


def _phases(node: Any, where: str, path: str) -> list[PhaseRule]:
    if node is None or node.tag != "tag:yaml.org,2002:seq":
        raise _err(where, node, path, "expected a list of phases")
    rules = []
    for i, item in enumerate(node.value):
        key = f"{path}[{i}]"
        _keys(item, where, key, PHASE_KEYS)
        name_node, start_node = _get(item, "name"), _get(item, "start")
        if name_node is None:
            raise _err(where, item, key, "missing 'name'")
        if start_node is None:
            raise _err(where, item, key, "missing 'start' (a regular expression)")
        rule = PhaseRule(name=_scalar(name_node, where, f"{key}.name"), start=_regex(start_node, where, f"{key}.start"))
        if (n := _get(item, "done")) is not None:
            rule.done = _regex(n, where, f"{key}.done")
        if (n := _get(item, "fail")) is not None:
            rule.fail = _regex(n, where, f"{key}.fail")
        if (n := _get(item, "stall_after")) is not None:
            rule.stall_after = _number(n, where, f"{key}.stall_after")
        if (n := _get(item, "terminal")) is not None:
            rule.terminal = _scalar(n, where, f"{key}.terminal").lower() in ("true", "yes", "1")
        if (n := _get(item, "inner")) is not None:
            rule.inner = _strings(n, where, f"{key}.inner")
        if (n := _get(item, "hint")) is not None:
            _keys(n, where, f"{key}.hint", {"causes", "actions"})
            causes, actions = _get(n, "causes"), _get(n, "actions")
            rule.hint = Hint(
                causes=_strings(causes, where, f"{key}.hint.causes") if causes is not None else [],
                actions=_strings(actions, where, f"{key}.hint.actions") if actions is not None else [],
            )
        rules.append(rule)
    return rules


TOP_KEYS = {
    "stall_after", "phases", "phases_mode", "filters", "idle_patterns", "fail_pattern",
    "driver_patterns", "logs", "backlog", "max_line", "refresh", "findings", "stall_stacks",
}
FINDING_KEYS = {"name", "severity", "match", "extra", "within", "require_extra", "key", "cause", "fix"}


def _findings(node: Any, where: str) -> list[Signature]:
    if node.tag != "tag:yaml.org,2002:seq":
        raise _err(where, node, "findings", "expected a list of signatures")
    out = []
    for i, item in enumerate(node.value):
        key = f"findings[{i}]"
        _keys(item, where, key, FINDING_KEYS)
        if _get(item, "name") is None or _get(item, "match") is None:
            raise _err(where, item, key, "needs 'name' and 'match'")
        sig = Signature(name=_scalar(_get(item, "name"), where, f"{key}.name"), severity="error",
                        match=_regex(_get(item, "match"), where, f"{key}.match"))
        if (n := _get(item, "severity")) is not None:
            sig.severity = _scalar(n, where, f"{key}.severity")
        if (n := _get(item, "extra")) is not None:
            items = n.value if n.tag.endswith(":seq") else [n]
            sig.extra = [_regex(x, where, f"{key}.extra[{j}]") for j, x in enumerate(items)]
        if (n := _get(item, "within")) is not None:
            sig.within = int(_number(n, where, f"{key}.within"))
        if (n := _get(item, "require_extra")) is not None:
            sig.require_extra = _scalar(n, where, f"{key}.require_extra").lower() in ("true", "yes", "1")
        if (n := _get(item, "key")) is not None:
            sig.key = _strings(n, where, f"{key}.key")
        for attr in ("cause", "fix"):
            if (n := _get(item, attr)) is not None:
                setattr(sig, attr, _scalar(n, where, f"{key}.{attr}"))
        out.append(sig)
    return out


def _apply(cfg: Config, doc: Any, where: str) -> None:
    if doc is None:
        return
    _keys(doc, where, "", TOP_KEYS)
    if (n := _get(doc, "stall_after")) is not None:
        cfg.stall_after = _number(n, where, "stall_after")
    if (n := _get(doc, "stall_stacks")) is not None:
        value = _scalar(n, where, "stall_stacks").lower()
        if value not in ("true", "false", "yes", "no", "on", "off"):
            raise _err(where, n, "stall_stacks", f"expected true or false, got {value!r}")
        cfg.stall_stacks = value in ("true", "yes", "on")
    mode = "extend"
    if (n := _get(doc, "phases_mode")) is not None:
        mode = _scalar(n, where, "phases_mode")
        if mode not in ("extend", "replace"):
            raise _err(where, n, "phases_mode", f"expected 'extend' or 'replace', got {mode!r}")
    if (n := _get(doc, "phases")) is not None:
        user = _phases(n, where, "phases")
        if mode == "replace":
            cfg.phases = user
        else:
            # extend: a user rule with a built-in's name replaces it in place; new ones go first,
            # so they are tried before the built-ins.
            by_name = {r.name: r for r in user}
            kept = [by_name.pop(r.name, r) for r in cfg.phases]
            cfg.phases = [r for r in user if r.name in by_name] + kept
    if (n := _get(doc, "filters")) is not None:
        _keys(n, where, "filters", {str(k.value) for k, _ in n.value} if n.tag.endswith(":map") else set())
        for k, v in n.value:
            _regex(v, where, f"filters.{k.value}")
            cfg.filters[k.value] = _scalar(v, where, f"filters.{k.value}")
    if (n := _get(doc, "fail_pattern")) is not None:
        cfg.fail_pattern = _regex(n, where, "fail_pattern").pattern
    for key in ("idle_patterns", "driver_patterns"):
        if (n := _get(doc, key)) is not None:
            values = _strings(n, where, key)
            for i, item in enumerate(n.value if n.tag.endswith(":seq") else [n]):
                _regex(item, where, f"{key}[{i}]")
            setattr(cfg, key, values)
    if (n := _get(doc, "logs")) is not None:
        cfg.logs = [os.path.expanduser(p) for p in _strings(n, where, "logs")]
        for i, (item, p) in enumerate(zip(n.value if n.tag.endswith(":seq") else [n], cfg.logs, strict=True)):
            if not p or "\0" in p:
                raise _err(where, item, f"logs[{i}]", f"not a usable path: {p!r}")
    if (n := _get(doc, "backlog")) is not None:
        cfg.backlog = _count(n, where, "backlog", 0, MAX_BACKLOG)
    if (n := _get(doc, "max_line")) is not None:
        cfg.max_line = _count(n, where, "max_line", 80, MAX_LINE)
    if (n := _get(doc, "findings")) is not None:
        user = _findings(n, where)
        names = {sig.name for sig in user}
        cfg.findings = user + [sig for sig in cfg.findings if sig.name not in names]
    if (n := _get(doc, "refresh")) is not None:
        _keys(n, where, "refresh", set(cfg.refresh))
        for k, v in n.value:
            value = _number(v, where, f"refresh.{k.value}")
            if not REFRESH_RANGE[0] <= value <= REFRESH_RANGE[1]:
                low, high = REFRESH_RANGE
                raise _err(where, v, f"refresh.{k.value}", f"expected {low:g} to {high:g} seconds, got {v.value}")
            cfg.refresh[k.value] = value
