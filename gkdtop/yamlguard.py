"""Checks on a YAML config that the YAML library does not make: nesting depth, duplicate keys, tags.

Run around analysis.rules.compose, so the built-in rules and every user file get them. Each
failure is a one-line ConfigError naming file:line and the key. Below everything: it imports no other
module of gkdtop, and the rule parser raises its error.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # a config nests a few levels; 50,000 nested `[` crash a recursive composer

class ConfigError(Exception):
    """A config problem, already phrased as the one line the user sees."""


def node_error(where: str, node: Any, key: str, msg: str) -> ConfigError:
    """The error for `key` at the node's line of `where`."""
    line = f":{node.start_mark.line + 1}" if node is not None else ""
    return ConfigError(f"{where}{line}: {key}: {msg}")


_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_KIND_TAG = {"ScalarNode": "", "SequenceNode": _SEQ, "MappingNode": _MAP}
_KIND_WORD = {"ScalarNode": "a single value", "SequenceNode": "a list", "MappingNode": "a mapping"}


def check_depth(text: str, where: str, loader: Any) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the parser's flat event stream, before composing.

    The composer (libyaml's binding, or PyYAML's own) recurses once per level: 50,000 nested `[`
    overflow the C stack (a segfault) or Python's. The parser keeps its own stack, and we stop it at
    the first level too deep, so a bomb costs microseconds. YAML errors propagate to the caller.
    """
    import yaml

    def too_deep(line: int) -> ConfigError:
        return ConfigError(f"{where}:{line}: nested more than {MAX_DEPTH} levels deep (a config needs a few)")

    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise too_deep(event.start_mark.line + 1)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:  # PyYAML 6.0.4 stops a flow bomb itself ("exceeded maximum nesting depth")
        if "nesting depth" not in str(exc):
            raise
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        raise too_deep(mark.line + 1 if mark is not None else 1) from None


def check_nodes(root: Any, where: str) -> None:
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
        if node.tag != _KIND_TAG[kind] and (kind != "ScalarNode" or node.tag in (_MAP, _SEQ)):
            raise node_error(where, node, path or "(top level)",
                             f"{_KIND_WORD[kind]} tagged {node.tag.rsplit(':', 1)[-1]!r}")
        if isinstance(node, yaml.SequenceNode):
            todo += [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            first: dict[str, Any] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    name = f"{path}.{k.value}" if path else str(k.value)
                    if k.value in first:
                        line = first[k.value].start_mark.line + 1
                        raise node_error(where, k, name, f"duplicate key (first given at line {line})")
                    first[k.value] = k
                    todo.append((v, name))
                else:
                    todo += [(k, path), (v, path)]
