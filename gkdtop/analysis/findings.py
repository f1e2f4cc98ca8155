"""Findings: known failure signatures recognised in log lines as they arrive, with cause and fix.

The catalogue is data (`data/findings.yaml`, extendable from the user's config; analysis/rules.py
reads both). A signature matches one line; `extra` patterns may fill more fields from the next
lines of the same file (a traceback's details, a watchdog's rank). Repeats collapse into one
finding with a count. Which line matches what is the matcher's answer; RE2 reads the named groups.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gkdtop.model import Finding, LogLine

if TYPE_CHECKING:
    from gkdtop.analysis.matcher import Pattern
    from gkdtop.analysis.rules import Signature

MAX_FINDINGS = 200
MAX_SAMPLE = 6


@dataclass(slots=True)
class _Open:
    """A signature that matched and still looks at the next lines of its file for extra fields."""

    signature: Signature
    extra_ids: list[tuple[int, Pattern]]
    fields: dict[str, str]
    sample: list[str]
    time: float
    left: int
    emitted: Finding | None


def _groups(match: object) -> dict[str, str]:
    """The fields a match filled. A regex cannot name two groups alike, so an alternative's copy of a field
    is `peer2`, `iface3`: it is reported under the field's own name (`peer`), where the pattern has one."""
    groups: dict[str, str | None] = match.groupdict()  # type: ignore[attr-defined]
    fields: dict[str, str] = {}
    for name, value in groups.items():
        if value is not None:
            base = name.rstrip("0123456789")
            fields.setdefault(base if base != name and base in groups else name, value)
    return fields


class FindingsEngine:
    def __init__(self, signatures: list[Signature], register: Callable[[str | Pattern], int]) -> None:
        self.signatures = signatures
        self.by_id: dict[int, list[tuple[int, Signature]]] = {}  # match id -> (catalogue order, signature)
        self.extra_ids: list[list[tuple[int, Pattern]]] = []
        for order, sig in enumerate(signatures):
            self.by_id.setdefault(register(sig.match), []).append((order, sig))
            self.extra_ids.append([(register(p), p) for p in sig.extra])
        self.match_ids = frozenset(self.by_id)
        self.found: dict[tuple[str, tuple[tuple[str, str], ...]], Finding] = {}
        self.open: dict[str, list[_Open]] = {}

    def opens_window(self) -> tuple[frozenset[int], int]:
        """The ids whose lines open a window of following lines to look at, and its widest size."""
        ids = frozenset(i for i, sigs in self.by_id.items() if any(sig.extra for _, sig in sigs))
        return ids, max((sig.within for sig in self.signatures if sig.extra), default=0)

    def feed(self, line: LogLine, t: float, ids: Collection[int]) -> None:
        text = line.text
        pending = self.open.get(line.source)
        if pending:
            self._extend(pending, text, ids)
        if not ids or self.match_ids.isdisjoint(ids):
            return
        hits = sorted(hit for i in ids for hit in self.by_id.get(i, ()))
        for order, sig in hits:
            m = sig.match.search(text)
            if m is None:
                continue
            fields = _groups(m)
            extra_ids = self.extra_ids[order]
            opened = _Open(sig, extra_ids, fields, [line.raw or text], t, sig.within, None)
            if sig.extra:
                for pattern_id, pattern in extra_ids:  # the match line itself may carry an extra field
                    if pattern_id in ids and (e := pattern.search(text)) is not None:
                        opened.fields.update(_groups(e))
                self.open.setdefault(line.source, []).append(opened)
            if not sig.require_extra:
                opened.emitted = self._record(sig, opened.fields, opened.sample, t, line.source)

    def _extend(self, pending: list[_Open], text: str, ids: Collection[int]) -> None:
        for item in list(pending):
            item.left -= 1
            for pattern_id, pattern in item.extra_ids:
                if pattern_id not in ids:
                    continue
                m = pattern.search(text)
                if m is None:
                    continue
                new = {k: v for k, v in _groups(m).items() if k not in item.fields}
                if not new:
                    continue
                item.fields.update(new)
                if len(item.sample) < MAX_SAMPLE:
                    item.sample.append(text)
                if item.emitted is None:
                    item.emitted = self._record(item.signature, item.fields, item.sample, item.time, "")
                else:
                    self._refine(item)
            if item.left <= 0:
                pending.remove(item)

    def _key(self, sig: Signature, fields: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
        names = sorted(fields) if sig.key is None else sig.key
        return sig.name, tuple((k, fields.get(k, "")) for k in names)

    def _record(self, sig: Signature, fields: dict[str, str], sample: list[str], t: float, source: str) -> Finding:
        key = self._key(sig, fields)
        found = self.found.get(key)
        if found is not None:
            found.count += 1
            found.last_seen = max(found.last_seen, t)
            found.fields.update(fields)
            return found
        if len(self.found) >= MAX_FINDINGS:
            oldest = min(self.found, key=lambda k: self.found[k].last_seen)
            del self.found[oldest]
        found = Finding(name=sig.name, severity=sig.severity, first_seen=t, last_seen=t, count=1,
                        fields=dict(fields), cause=sig.cause, fix=sig.fix, source=source, sample=list(sample))
        self.found[key] = found
        return found

    def _refine(self, item: _Open) -> None:
        """Extra fields arrived after the finding was recorded: re-key it so repeats still collapse."""
        finding = item.emitted
        assert finding is not None
        for key, value in list(self.found.items()):
            if value is finding:
                del self.found[key]
                break
        finding.fields.update(item.fields)
        finding.sample = list(item.sample)
        new_key = self._key(item.signature, finding.fields)
        existing = self.found.get(new_key)
        if existing is not None and existing is not finding:
            existing.count += finding.count
            existing.last_seen = max(existing.last_seen, finding.last_seen)
            item.emitted = existing
        else:
            self.found[new_key] = finding

    def findings(self) -> list[Finding]:
        """Newest first."""
        return sorted(self.found.values(), key=lambda f: f.last_seen, reverse=True)
