"""The house's shape, read from the imports with `ast` (annotation-only imports count): no import cycle,
and no import across a layer rule of docs/architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gkdtop"

# Lowest first. A module imports its own layer and those below it, with the exceptions in ALLOWED;
# only the top (entry: cli, commands, doctor; views: tui, web) imports what runs in the job.
BASE = {"model", "safeopen", "yamlguard", "jsonout", "format", "heap", "prockind", "proctree", "probe", "data"}
LAYERS = ["base", "capture", "analysis", "collectors", "wiring", "outputs", "actions", "job", "top"]
ALLOWED = {
    "capture": {"base", "capture"},  # reading a process needs no rule
    "analysis": {"base", "analysis"},  # lines in, verdicts out: no config, collectors, actions or wiring
    "job": {"base", "job"},  # runs inside the user's job: `gkdtop run`, the demo
}


def layer(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if not top or top in BASE:
        return "base"
    if top in ("capture", "analysis", "collectors", "actions"):
        return top
    if top == "alerts":
        return "actions"  # reads the store, redacts, sends: composes like an action
    if top in ("config", "store", "monitor"):
        return "wiring"
    if top in ("snapshot", "replay"):
        return "outputs"
    if top in ("jobrun", "demo"):
        return "job"
    if top in ("cli", "__main__", "commands", "doctor", "tui", "web"):
        return "top"  # entry and views
    return "unknown"  # a new module: give it a layer here (and a row in docs/architecture.md)


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every gkdtop module `module` imports, anywhere in it (functions and TYPE_CHECKING blocks too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
            prefix = ".".join([*(base if node.level else []), *([node.module] if node.module else [])])
            names += [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def crossings(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(edges.items()):
        mine = layer(module)
        below = LAYERS[: LAYERS.index(mine) + 1]
        allowed = ALLOWED.get(mine) or {name for name in below if name != "job" or mine == "top"}
        bad += [f"{module} ({mine}) imports {t} ({layer(t)})" for t in sorted(targets) if layer(t) not in allowed]
    return bad


def test_every_module_has_a_layer() -> None:
    assert [m for m in modules() if layer(m) == "unknown"] == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_no_import_crosses_a_layer_rule() -> None:
    assert crossings(graph()) == []


def test_below_the_views_nothing_imports_textual() -> None:
    for module, path in modules().items():
        if layer(module) != "top":
            text = path.read_text()
            assert "import textual" not in text and "from textual" not in text, module


def test_the_checks_catch_what_they_are_for() -> None:
    """A cycle and a crossing planted in a copy of the graph are both found."""
    edges = graph()
    edges["gkdtop.model"] = edges["gkdtop.model"] | {"gkdtop.store"}
    edges["gkdtop.analysis.engine"] = edges["gkdtop.analysis.engine"] | {"gkdtop.config"}
    assert any("gkdtop.model" in c and "gkdtop.store" in c for c in cycles(edges))
    assert "gkdtop.analysis.engine (analysis) imports gkdtop.config (wiring)" in crossings(edges)
    assert "gkdtop.model (base) imports gkdtop.store (wiring)" in crossings(edges)
    assert "gkdtop.collectors.procs (collectors) imports gkdtop.actions (actions)" in crossings(
        {**edges, "gkdtop.collectors.procs": {"gkdtop.actions"}})
