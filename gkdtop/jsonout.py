"""Strict JSON for every output: no bare NaN / Infinity (JSON.parse and jq reject them).

A non-finite number becomes null, and the document lists where that happened under "nonfinite"
(e.g. `phases.steps.metrics.actor/pg_loss: nan`), so a NaN loss is still visible.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any


def strict(doc: Any, path: str = "", found: list[str] | None = None) -> Any:
    """`doc` with every non-finite float replaced by None; `found` collects `path: value` of each."""
    if isinstance(doc, float):
        if math.isfinite(doc):
            return doc
        if found is not None:
            found.append(f"{path}: {doc}")
        return None
    if isinstance(doc, dict):
        return {k: strict(v, f"{path}.{k}" if path else str(k), found) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [strict(v, f"{path}[{i}]", found) for i, v in enumerate(doc)]
    return doc


def document(doc: dict[str, Any]) -> dict[str, Any]:
    """A top-level document made strict, with its "nonfinite" list when it had any."""
    found: list[str] = []
    out = strict(doc, "", found)
    if found:
        out["nonfinite"] = found[:100]
    return out


def dumps(doc: dict[str, Any], **kwargs: Any) -> str:
    return json.dumps(document(doc), allow_nan=False, default=str, **kwargs)


def dump(doc: dict[str, Any], fh: IO[str], **kwargs: Any) -> None:
    json.dump(document(doc), fh, allow_nan=False, default=str, **kwargs)
