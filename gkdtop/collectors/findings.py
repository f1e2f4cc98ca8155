"""Findings: known failure signatures recognised in log lines as they arrive, with cause and fix.

The catalogue is data (`data/findings.yaml`, extendable from the user's config). A signature
matches one line; `extra` patterns may fill more fields from the next lines of the same file (a
traceback's details, a watchdog's rank). Repeats collapse into one finding with a count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

from gkdtop.collectors.prefilter import Prefiltered
from gkdtop.model import Finding, LogLine

MAX_FINDINGS = 200
MAX_SAMPLE = 6


@dataclass(slots=True)
class Signature:
    name: str
    severity: str
    match: re.Pattern[str]
    cause: str = ""
    fix: str = ""
    extra: list[re.Pattern[str]] = field(default_factory=list)
    within: int = 20
    require_extra: bool = False
    key: list[str] | None = None  # None: every field tells findings apart


@dataclass(slots=True)
class _Open:
    """A signature that matched and still looks at the next lines of its file for extra fields."""

    signature: Signature
    fields: dict[str, str]
    sample: list[str]
    time: float
    left: int
    emitted: Finding | None


class FindingsEngine:
    def __init__(self, signatures: list[Signature]) -> None:
        self.signatures = signatures
        # One search tells whether a line needs the per-signature checks; group names would clash.
        joined = "|".join(f"(?:{unnamed(s.match.pattern)})" for s in signatures)
        self.any_re = Prefiltered(re.compile(joined)) if joined else None  # literals first: a flood stays cheap
        self.found: dict[tuple[str, tuple[tuple[str, str], ...]], Finding] = {}
        self.open: dict[str, list[_Open]] = {}

    def feed(self, line: LogLine) -> None:
        text = line.text
        pending = self.open.get(line.source)
        if pending:
            self._extend(pending, text)
        if self.any_re is None or not self.any_re.search(text):
            return
        for sig in self.signatures:
            m = sig.match.search(text)
            if m is None:
                continue
            fields = {k: v for k, v in m.groupdict().items() if v is not None}
            opened = _Open(sig, fields, [line.raw or text], line.time, sig.within, None)
            if sig.extra:
                for pattern in sig.extra:  # the match line itself may carry an extra field
                    if (e := pattern.search(text)) is not None:
                        opened.fields.update({k: v for k, v in e.groupdict().items() if v is not None})
                self.open.setdefault(line.source, []).append(opened)
            if not sig.require_extra:
                opened.emitted = self._record(sig, opened.fields, opened.sample, line.time, line.source)

    def _extend(self, pending: list[_Open], text: str) -> None:
        for item in list(pending):
            item.left -= 1
            for pattern in item.signature.extra:
                m = pattern.search(text)
                if m is None:
                    continue
                new = {k: v for k, v in m.groupdict().items() if v is not None and k not in item.fields}
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


def unnamed(pattern: str) -> str:
    """The pattern with its named groups made plain, so several can be joined into one regex."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


def builtin_signatures() -> list[Signature]:
    import yaml

    text = resources.files("gkdtop.data").joinpath("findings.yaml").read_text(encoding="utf-8")
    return parse_signatures(yaml.safe_load(text)["findings"], "gkdtop/data/findings.yaml")


def parse_signatures(entries: object, where: str) -> list[Signature]:
    """From YAML-loaded data; a bad entry raises ValueError naming it (config.py adds file:line)."""
    if not isinstance(entries, list):
        raise ValueError(f"{where}: findings: expected a list")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "match" not in entry:
            raise ValueError(f"{where}: findings[{i}]: needs 'name' and 'match'")
        try:
            extra = [re.compile(p) for p in entry.get("extra") or []]
            match = re.compile(entry["match"])
        except re.error as exc:
            raise ValueError(f"{where}: findings[{i}] ({entry['name']}): invalid regular expression: {exc}") from None
        key = entry.get("key")
        out.append(Signature(
            name=str(entry["name"]), severity=str(entry.get("severity", "error")), match=match,
            cause=str(entry.get("cause", "")), fix=str(entry.get("fix", "")), extra=extra,
            within=int(entry.get("within", 20)), require_extra=bool(entry.get("require_extra", False)),
            key=[str(k) for k in key] if isinstance(key, list) else None,
        ))
    return out
