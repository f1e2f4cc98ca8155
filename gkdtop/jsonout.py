"""Strict JSON for every output: no bare NaN / Infinity (JSON.parse and jq reject them).

A non-finite number becomes null, and the document lists where that happened under "nonfinite"
(e.g. `phases.steps.metrics.actor/pg_loss: nan`), so a NaN loss is still visible. A string that
is not valid Unicode (a file name's undecodable bytes, kept by Python as lone surrogates) is written
with those bytes backslash-escaped (`\\xff`), so every parser takes the document.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any


def strict(doc: Any, path: str = "", found: list[str] | None = None) -> Any:
    """`doc` with every non-finite float replaced by None; `found` collects `path: value` of each."""
    if isinstance(doc, str):
        return doc if doc.isascii() else valid_text(doc)
    if isinstance(doc, float):
        if math.isfinite(doc):
            return doc
        if found is not None:
            found.append(f"{path}: {doc}")
        return None
    if isinstance(doc, dict):
        return {valid_text(k) if isinstance(k, str) and not k.isascii() else k: strict(v, f"{path}.{k}" if path
                else str(k), found) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [strict(v, f"{path}[{i}]", found) for i, v in enumerate(doc)]
    return doc


def valid_text(text: str) -> str:
    """`text` with lone surrogates written as backslash escapes: `\\xNN` for an undecodable byte
    (surrogateescape), `\\uDXXX` for any other."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"\\u{ord(c):04x}"
                       if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text


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
