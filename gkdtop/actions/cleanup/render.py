"""A plan and its results as JSON (schema 1) and as the text a person reads before saying yes."""

from __future__ import annotations

from typing import Any

from gkdtop.actions.cleanup.model import (
    SCHEMA,
    CleanupItem,
    CleanupResult,
)


def plan_json(items: list[CleanupItem], results: list[CleanupResult] | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "items": [{"kind": i.kind, "target": i.target, "reason": i.reason, "action": i.action,
                   "selected": i.selected} for i in items],
        "results": [{"target": r.target, "kind": r.kind, "outcome": r.outcome, "detail": r.detail}
                    for r in (results or [])],
    }


def target_text(item: CleanupItem) -> str:
    """`PID 123 VLLM::EngineCore` or the path: the same words in the CLI preview and the TUI modal."""
    return f"PID {item.target} {item.name}" if item.action == "terminate" else str(item.target)


def plan_text(items: list[CleanupItem]) -> str:
    """The preview a person reads before saying yes: one line per item, its reason below it."""
    if not items:
        return "Nothing to clean up: no debris of a crashed run found for this user.\n"
    selected = sum(1 for i in items if i.selected and i.action != "keep")
    lines = [f"Cleanup plan: {len(items)} item(s), {selected} selected "
             "([x] acted on; [ ] listed only: select by hand, or kept)"]
    for item in items:
        mark = "x" if item.selected and item.action != "keep" else " "
        lines.append(f"[{mark}] {item.action:<9} {item.kind:<15} {target_text(item)}")
        lines.append(f"      {item.reason}")
    return "\n".join(lines) + "\n"


def results_text(results: list[CleanupResult]) -> str:
    lines = [f"{r.outcome:<17} {r.kind:<15} {r.target}" + (f"  ({r.detail})" if r.detail else "") for r in results]
    return "\n".join(lines) + "\n" if lines else "Nothing was done.\n"
