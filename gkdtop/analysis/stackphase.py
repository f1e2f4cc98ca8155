"""The phase a process is in, read from its Python stack: pure functions over py-spy's frames.

When the log is silent, or what it last said is nothing a phase rule knows, the stack still says
where the job is: a driver blocked in `fit` on the line `self.actor_rollout_wg.generate_sequences(...)`
is generating, a worker inside vLLM's `capture_model` is starting its rollout engine. The rules are
data (data/stack_phases.yaml); this module reads them and applies them, and does no I/O: the
sampler (collectors/stackphase.py) reads the stacks and, for rules on `code`, the source lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gkdtop.analysis.rules import (
    BUILTIN,
    ConfigError,
    check_keys,
    compose,
    get,
    node_error,
    pattern,
    scalar,
    strings,
)
from gkdtop.model.stacks import StackFrame, ThreadStack

if TYPE_CHECKING:
    from gkdtop.analysis.matcher import Pattern


class Frame(Protocol):
    """What a frame of py-spy's dump has (actions/stacks.StackFrame): innermost first in a thread."""

    function: str  # py-spy's qualified name: `RayPPOTrainer.fit`, `func_generator.<locals>.Functor.__call__`
    file: str  # short (package-relative) name
    path: str  # the full file name in the target
    line: int
    native: bool


class Thread(Protocol):
    name: str
    frames: Sequence[Any]  # Frames, innermost first


@dataclass(frozen=True, slots=True)
class FrameRule:
    """A frame matches when its function is one of `functions` (or any, when empty), its file matches
    `file` and its source line matches `code` (each only when given)."""

    functions: frozenset[str]  # plain names: the qualified name's last part
    qualified: tuple[str, ...]  # dotted names: the qualified name's end (`CriticWorker.init_model`)
    file: Pattern | None
    code: Pattern | None
    label: str  # a phase for `rules`, the wait's name for `waits` ("" = the function's own name)


@dataclass(frozen=True, slots=True)
class StackRules:
    rules: tuple[FrameRule, ...]
    waits: tuple[FrameRule, ...]


@dataclass(slots=True)
class StackMatch:
    """One process's stack, judged: the phase, the frame that says so, what it waits on."""

    phase: str
    function: str  # the matched frame's function, its last part (`capture_model`)
    file: str  # its short file name
    line: int
    package: str  # the top package of that file (`vllm`, `verl`): whose code it is
    via: str = ""  # for a rule on code: the call on that line (`generate_sequences`)
    waiting: str = ""  # the innermost frame's wait (`ray.get`, `broadcast`), if a known one
    thread: str = ""

    @property
    def frame(self) -> str:
        """`capture_model (vllm/worker/model_runner.py:1234)`."""
        return f"{self.function} ({self.file}:{self.line})"

    @property
    def where(self) -> str:
        """`vllm … capture_model`, `verl … fit → generate_sequences`: whose code, which function."""
        tail = f"{self.function} → {self.via}" if self.via and self.via != self.function else self.function
        return f"{self.package} … {tail}" if self.package else tail


SourceLine = Callable[[Any], str]  # a frame's source line, "" when unknown (no file, not readable)
WORD_RE = re.compile(r"\w+")  # on a line our own rule matched, never a user pattern
RULE_KEYS = {"phase", "functions", "file", "code"}
WAIT_KEYS = {"name", "functions", "file", "code"}


def parse_stack_rules(node: Any, where: str) -> StackRules:
    """The `rules:` and `waits:` of a stack-phase file; ConfigError (file:line: key) on a bad one."""
    check_keys(node, where, "", {"rules", "waits"})
    rules = tuple(_frame_rule(item, where, f"rules[{i}]", "phase") for i, item in enumerate(_seq(node, where, "rules")))
    waits = tuple(_frame_rule(item, where, f"waits[{i}]", "name") for i, item in enumerate(_seq(node, where, "waits")))
    return StackRules(rules, waits)


def _seq(node: Any, where: str, key: str) -> list[Any]:
    items = get(node, key)
    if items is None:
        return []
    if items.tag != "tag:yaml.org,2002:seq":
        raise node_error(where, items, key, "expected a list")
    return list(items.value)


def _frame_rule(node: Any, where: str, path: str, label_key: str) -> FrameRule:
    check_keys(node, where, path, RULE_KEYS if label_key == "phase" else WAIT_KEYS)
    label_node = get(node, label_key)
    if label_key == "phase" and label_node is None:
        raise node_error(where, node, path, "a rule needs `phase`")
    names = strings(get(node, "functions"), where, f"{path}.functions") if get(node, "functions") is not None else []
    file_node, code_node = get(node, "file"), get(node, "code")
    if not names and code_node is None:
        raise node_error(where, node, path, "a rule needs `functions` or `code`")
    return FrameRule(
        functions=frozenset(n for n in names if "." not in n),
        qualified=tuple(n for n in names if "." in n),
        file=pattern(file_node, where, f"{path}.file") if file_node is not None else None,
        code=pattern(code_node, where, f"{path}.code") if code_node is not None else None,
        label=scalar(label_node, where, f"{path}.{label_key}") if label_node is not None else "",
    )


_BUILTIN: StackRules | None = None


def builtin_stack_rules() -> StackRules:
    """data/stack_phases.yaml, read once per process (the sampler asks on every sample)."""
    global _BUILTIN
    if _BUILTIN is None:
        from importlib import resources

        name = "stack_phases.yaml"
        text = resources.files("gkdtop.data").joinpath(name).read_text(encoding="utf-8")
        node = compose(text, BUILTIN + name)
        if node is None:
            raise ConfigError(f"{BUILTIN}{name}: empty")
        _BUILTIN = parse_stack_rules(node, BUILTIN + name)
    return _BUILTIN


def _matches(rule: FrameRule, frame: Any, source: SourceLine | None) -> Any:
    """Truthy when `frame` matches `rule`: for a rule on code, the match on its source line."""
    name = frame.function
    short = name.rsplit(".", 1)[-1]
    named = short in rule.functions or any(name == q or name.endswith("." + q) for q in rule.qualified)
    if (rule.functions or rule.qualified) and not named:
        return None
    if rule.file is not None and not rule.file.search(frame.path or frame.file):
        return None
    if rule.code is None:
        return True
    text = source(frame) if source is not None else ""
    return rule.code.search(text) if text else None


def _python(thread: Any) -> list[Any]:
    return [f for f in thread.frames if not f.native]


def match_thread(thread: Any, rules: StackRules, source: SourceLine | None = None) -> StackMatch | None:
    """The first rule (in the file's order) that some frame matches; the innermost such frame."""
    frames = _python(thread)
    if not frames:
        return None
    for rule in rules.rules:
        for frame in frames:
            hit = _matches(rule, frame, source)
            if not hit:
                continue
            via = ""
            if rule.code is not None and hasattr(hit, "group"):  # the call's name: the last word matched
                words = WORD_RE.findall(hit.group(0))
                via = words[-1] if words else ""
            file = frame.file or frame.path
            return StackMatch(phase=rule.label, function=frame.function.rsplit(".", 1)[-1], file=file,
                              line=frame.line, package=package_of(file), via=via, waiting=waiting(frames, rules),
                              thread=thread.name)
    return None


def waiting(frames: Sequence[Any], rules: StackRules) -> str:
    """What the innermost frames wait on (the first three frames are looked at), else ""."""
    for frame in frames[:3]:
        for rule in rules.waits:
            if _matches(rule, frame, None):
                return rule.label or frame.function.rsplit(".", 1)[-1]
    return ""


def package_of(file: str) -> str:
    """`vllm/worker/model_runner.py` -> `vllm`; a script's own file (no package) -> ""."""
    head, sep, _ = file.lstrip("/").partition("/")
    return head if sep and head not in ("site-packages", "dist-packages", "usr", "home", "tmp") else ""


def match_process(threads: Sequence[Any], rules: StackRules, source: SourceLine | None = None) -> StackMatch | None:
    """One process: the main thread's phase, else the first other thread that has one.

    A Ray actor's method runs on the main thread (sync actors) or on its asyncio thread; helper
    threads (Ray's, the stdlib's) match no rule, so the first thread that matches is the one at work.
    """
    ordered = sorted(threads, key=lambda t: t.name != "MainThread")
    for thread in ordered:
        found = match_thread(thread, rules, source)
        if found is not None:
            return found
    return None


_THREAD_RE = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \((idle|active)(\+gil)?\)(?:: "(.*)")?\s*$')
_FRAME_RE = re.compile(r"^ {4}(\S.*?) \((.*?)(?::(\d+))?\)\s*$")


def parse_py_spy_text(text: str) -> list[ThreadStack]:
    """py-spy's plain `dump` output (what Ray's agent returns, what users paste in a log) as ThreadStacks; frames
    innermost first."""
    threads: list[ThreadStack] = []
    for line in text.splitlines():
        if m := _THREAD_RE.match(line):
            tid = int(m.group(1), 16) if m.group(1).startswith("0x") else int(m.group(1))
            threads.append(ThreadStack(name=m.group(4) or f"Thread {tid}", thread_id=tid,
                                       idle=m.group(2) == "idle", owns_gil=bool(m.group(3))))
        elif threads and (m := _FRAME_RE.match(line)):
            file, lineno = m.group(2), m.group(3)
            threads[-1].frames.append(StackFrame(function=m.group(1), file=file, line=int(lineno or 0),
                                                 native=lineno is None))
    return threads


def consensus(matches: Sequence[tuple[int, StackMatch | None]],
              prefer: Sequence[int] = ()) -> tuple[int, StackMatch] | None:
    """Across processes (every rank, in a stall): the phase most of them are in; among those, the
    preferred process (the driver) else the first. None when no process matched a rule."""
    counts: dict[str, int] = {}
    for _, match in matches:
        if match is not None:
            counts[match.phase] = counts.get(match.phase, 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    preferred = [m.phase for pid, m in matches if m is not None and pid in prefer and counts[m.phase] == top]
    phase = preferred[0] if preferred else next(p for p, n in counts.items() if n == top)  # else the first seen
    chosen = [(pid, m) for pid, m in matches if m is not None and m.phase == phase]
    for pid, match in chosen:
        if pid in prefer:
            return pid, match
    return chosen[0]
