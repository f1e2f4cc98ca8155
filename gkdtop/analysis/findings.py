"""Findings: known failure signatures recognised in log lines as they arrive, with cause and fix.

The catalogue is data (`data/findings.yaml`, extendable from the user's config; analysis/rules.py
reads both). A signature matches one line; `extra` patterns may fill more fields from the next
lines of the same file (a traceback's details, a watchdog's rank). Which line matches what is the
matcher's answer; RE2 reads the named groups.

One incident is one finding, and a record's fields come from one incident's lines:
- a line fills an open window only if it comes from the same process (a Ray prefix's pid) and
  contradicts none of the fields already read (another rank's `[rank9]:`, another collective's work
  number); a new match of the same signature from the same process ends the earlier window
- a repeat (the same key) counts one more incident and shows the latest incident's fields (with the
  earlier ones' where both come from one process and disagree on nothing);
  (so the frames of one traceback that each name `wake_up` are one incident with its one error);
- a C++ or c10d line restating an exception already recorded (`what():`, `... terminated with
  exception:`) is that incident again, not a new one;
- a record without any of the signature's key fields beside one with them is a vaguer report of
  the same thing (`The actor died because its node has died` after the node's own line): not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gkdtop.analysis.phases import EXCEPTION_PATTERN, FATAL_SIGNAL_PATTERN
from gkdtop.model import Finding, LogLine

if TYPE_CHECKING:
    from gkdtop.analysis.matcher import Pattern
    from gkdtop.analysis.rules import Signature

MAX_FINDINGS = 200
MAX_RAISERS = 64  # processes whose last exception is kept (cause_if_raised)
RAISED_BEFORE = 300.0  # seconds before a death in which its process's own exception explains it
MAX_SAMPLE = 6
# Text before a match that says the line restates an exception logged already (C++'s terminate handler,
# c10d's watchdog and communicator-abort messages).
RESTATED = ("what():", "terminated with exception:", "reason for failure was:")

Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class _Open:
    """One incident: a signature that matched and still looks at the next lines of its file for extra fields."""

    signature: Signature
    extra_ids: list[tuple[int, Pattern]]
    fields: dict[str, str]
    sample: list[str]
    time: float
    left: int
    emitted: Finding | None
    source: str
    speaker: tuple[int | None, str]  # the Ray prefix's (pid, ip): (None, "") for a line without one


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


def _other_speaker(a: tuple[int | None, str], b: tuple[int | None, str]) -> bool:
    """Two lines from different processes, as far as their Ray prefixes tell."""
    return a[0] is not None and b[0] is not None and a != b


def _windowed(sig: Signature) -> bool:
    """A signature that reads the lines after its match: fields from them, or the next one to withdraw it."""
    return bool(sig.extra) or sig.unless_next is not None


def _agrees(fields: dict[str, str], other: dict[str, str]) -> bool:
    return all(other.get(k, v) == v for k, v in fields.items())


def _extra_fields(extra_ids: list[tuple[int, Pattern]], text: str, ids: Collection[int]) -> dict[str, str]:
    """The fields a signature's `extra` patterns read from one line (the first pattern to name a field wins)."""
    offered: dict[str, str] = {}
    for pattern_id, pattern in extra_ids:
        if pattern_id in ids and (m := pattern.search(text)) is not None:
            for k, v in _groups(m).items():
                offered.setdefault(k, v)
    return offered


class FindingsEngine:
    def __init__(self, signatures: list[Signature], register: Callable[[str | Pattern], int]) -> None:
        self.signatures = signatures
        self.by_name = {sig.name: sig for sig in signatures}
        self.by_id: dict[int, list[tuple[int, Signature]]] = {}  # match id -> (catalogue order, signature)
        self.extra_ids: list[list[tuple[int, Pattern]]] = []
        self.before_ids: list[list[tuple[int, Pattern]]] = []
        for order, sig in enumerate(signatures):
            self.by_id.setdefault(register(sig.match), []).append((order, sig))
            self.extra_ids.append([(register(p), p) for p in sig.extra])
            self.before_ids.append([(register(p), p) for p in sig.before])
            if sig.unless_next is not None:
                register(sig.unless_next)  # a line that matches it is read (history reads only lines a pattern names)
        self.match_ids = frozenset(self.by_id)
        self.context_ids = frozenset(i for ids in self.before_ids for i, _ in ids)
        self.context: dict[str, dict[int, dict[str, str]]] = {}  # source -> catalogue order -> its `before` fields
        self.found: dict[Key, Finding] = {}
        self.keys: dict[int, Key] = {}  # id(finding) -> its key in found
        self.shown: dict[int, _Open] = {}  # id(finding) -> the incident whose fields it shows (the latest)
        self.open: dict[str, list[_Open]] = {}
        self.exception_id = register(EXCEPTION_PATTERN)
        self.raised: dict[int, tuple[float, str]] = {}  # a Ray prefix's pid -> (time, text) of its last exception
        # (or of its fatal signal, where it raised none: an actor's abort Ray flushes after its caller's report)
        self.fatal_id = register(FATAL_SIGNAL_PATTERN)

    def opens_window(self) -> tuple[frozenset[int], int]:
        """The ids whose lines open a window of following lines to look at, and its widest size."""
        ids = frozenset(i for i, sigs in self.by_id.items() if any(_windowed(sig) for _, sig in sigs))
        return ids, max((sig.within for sig in self.signatures if _windowed(sig)), default=0)

    def feed(self, line: LogLine, t: float, ids: Collection[int]) -> None:
        text = line.text
        speaker = (line.pid, line.ip)
        if line.pid is not None and (self.exception_id in ids or (
                self.fatal_id in ids and line.pid not in self.raised)):
            self.raised.pop(line.pid, None)
            self.raised[line.pid] = (t, text.strip()[:300])
            if len(self.raised) > MAX_RAISERS:
                del self.raised[next(iter(self.raised))]
        if ids and not self.context_ids.isdisjoint(ids):
            for order, before in enumerate(self.before_ids):
                if before and (offered := _extra_fields(before, text, ids)):
                    self.context.setdefault(line.source, {})[order] = offered  # the latest such line wins
        hits: list[tuple[int, Signature, dict[str, str], bool]] = []
        if ids and not self.match_ids.isdisjoint(ids):
            for order, sig in sorted(hit for i in ids for hit in self.by_id.get(i, ())):
                m = sig.match.search(text)
                if m is None:
                    continue
                fields = _groups(m)
                for k, v in _extra_fields(self.extra_ids[order], text, ids).items():  # the match line's own extras
                    fields.setdefault(k, v)
                for k, v in self.context.get(line.source, {}).get(order, {}).items():  # a banner above it
                    fields.setdefault(k, v)
                restated = any(marker in text[: m.start()] for marker in RESTATED)
                hits.append((order, sig, fields, restated))
        pending = self.open.get(line.source)
        if pending:
            new = {sig.name for _, sig, _, restated in hits if not restated}
            if new:  # a new incident of a signature ends the earlier one's window in the same process
                pending[:] = [p for p in pending if p.signature.name not in new or _other_speaker(p.speaker, speaker)]
            self._extend(pending, line, ids)
        for order, sig, fields, restated in hits:
            if restated and self._restates(sig, fields, line.source):
                continue
            opened = _Open(sig, self.extra_ids[order], fields, [line.raw or text], t, sig.within, None,
                           line.source, speaker)
            if _windowed(sig):
                self.open.setdefault(line.source, []).append(opened)
            if not sig.require_extra:
                opened.emitted = self._record(opened, t)

    def _restates(self, sig: Signature, fields: dict[str, str], source: str) -> bool:
        """A recorded incident of sig in source whose identity (its key's fields) these fields agree with."""
        names = sorted(fields) if sig.key is None else sig.key
        mine = {k: fields[k] for k in names if k in fields}
        return any(f.name == sig.name and f.source == source and _agrees(mine, f.fields) for f in self.found.values())

    def _extend(self, pending: list[_Open], line: LogLine, ids: Collection[int]) -> None:
        text = line.text
        speaker = (line.pid, line.ip)
        for item in list(pending):
            item.left -= 1
            if item.left <= 0:
                pending.remove(item)
            unless = item.signature.unless_next
            if unless is not None and item.left == item.signature.within - 1:  # the line right after its match
                if item.emitted is not None and unless.search(text):  # (no prefix: not the speaker's own)
                    self._withdraw(item.emitted)
                    item.emitted = None
                if not item.signature.extra:
                    if item in pending:
                        pending.remove(item)
                    continue
            if _other_speaker(item.speaker, speaker):
                continue
            offered = _extra_fields(item.extra_ids, text, ids)
            if not offered or not _agrees(offered, item.fields):
                continue  # nothing for it, or a line of another incident (another rank, another work)
            new = {k: v for k, v in offered.items() if k not in item.fields}
            if not new:
                continue
            item.fields.update(new)
            if len(item.sample) < MAX_SAMPLE:
                item.sample.append(text)
            if item.emitted is None:
                item.emitted = self._record(item, item.time)
            else:
                self._refine(item)

    def _withdraw(self, found: Finding) -> None:
        """One incident of a recorded finding was none (Signature.unless_next): counted once less, gone at none."""
        found.count -= 1
        if found.count <= 0:
            key = self.keys.pop(id(found), None)
            if key is not None:
                self.found.pop(key, None)
            self.shown.pop(id(found), None)

    def _key(self, sig: Signature, fields: dict[str, str]) -> Key:
        names = sorted(fields) if sig.key is None else sig.key
        return sig.name, tuple((k, fields.get(k, "")) for k in names)

    def _record(self, item: _Open, t: float) -> Finding:
        """A new incident: a repeat of a recorded one (the same key) counts once more and shows its own fields."""
        sig = item.signature
        key = self._key(sig, item.fields)
        found = self.found.get(key)
        shown = self.shown.get(id(found)) if found is not None else None
        if found is not None and sig.merge_within and found.source == item.source and (
                0 <= t - found.last_seen <= sig.merge_within
                or (shown is not None and item.speaker[0] is not None and shown.speaker == item.speaker)):
            found.last_seen = t  # another report of the incident just recorded (merge_within): what it adds
            for name, value in item.fields.items():
                found.fields.setdefault(name, value)
            return found
        if found is not None:
            found.count += 1
            found.last_seen = max(found.last_seen, t)
            shown = self.shown.get(id(found))
            if shown is not None and shown.speaker == item.speaker and _agrees(item.fields, found.fields):
                found.fields.update(item.fields)  # more lines of one process that disagree on nothing
            else:
                found.fields = dict(item.fields)
                found.sample = list(item.sample)
            self.shown[id(found)] = item
            return found
        if len(self.found) >= MAX_FINDINGS:
            oldest = min(self.found, key=lambda k: self.found[k].last_seen)
            self._forget(self.found.pop(oldest))
        found = Finding(name=sig.name, severity=sig.severity, first_seen=t, last_seen=t, count=1,
                        fields=dict(item.fields), cause=sig.cause, fix=sig.fix, source=item.source,
                        sample=list(item.sample))
        self.found[key] = found
        self.keys[id(found)] = key
        self.shown[id(found)] = item
        return found

    def _forget(self, finding: Finding) -> None:
        self.keys.pop(id(finding), None)
        self.shown.pop(id(finding), None)

    def _refine(self, item: _Open) -> None:
        """Extra fields arrived after the incident was recorded: show them, re-keyed so repeats still collapse."""
        finding = item.emitted
        assert finding is not None
        key = self.keys.get(id(finding))
        new_key = self._key(item.signature, item.fields)
        if key is None or self.shown.get(id(finding)) is not item:
            # The record was dropped, or shows a later incident: this one stays counted there while its key
            # agrees, and becomes a finding of its own once its fields tell it apart.
            if key is not None and new_key != key:
                finding.count -= 1
                item.emitted = self._record(item, item.time)
            elif key is None:
                item.emitted = self._record(item, item.time)
            return
        finding.fields = dict(item.fields)
        finding.sample = list(item.sample)
        if new_key == key:
            return
        del self.found[key]
        existing = self.found.get(new_key)
        if existing is None:
            self.found[new_key] = finding
            self.keys[id(finding)] = new_key
            return
        # The same incident as one recorded already, as far as the key tells: one record.
        existing.count += finding.count
        existing.first_seen = min(existing.first_seen, finding.first_seen)
        existing.last_seen = max(existing.last_seen, finding.last_seen)
        existing.fields = dict(item.fields)
        existing.sample = list(item.sample)
        self.shown[id(existing)] = item
        self._forget(finding)
        for items in self.open.values():
            for other in items:
                if other.emitted is finding:
                    other.emitted = existing

    def _identified(self, finding: Finding) -> bool:
        """Whether a record carries any field that tells its incident apart (always, for `key: []`)."""
        sig = self.by_name.get(finding.name)
        if sig is not None and sig.key == []:
            return True
        names = sig.key if sig is not None and sig.key is not None else list(finding.fields)
        return any(finding.fields.get(k) for k in names)

    def findings(self) -> list[Finding]:
        """Newest first; a vaguer report beside a record of the same signature that names its incident is left out."""
        named = {f.name for f in self.found.values() if self._identified(f)}
        shown = [f for f in self.found.values() if (f.name not in named or self._identified(f)) and (
            f.name not in self.by_name or f.count >= self.by_name[f.name].min_count)]
        for finding in shown:
            self._explain(finding)
        return sorted(shown, key=lambda f: f.last_seen, reverse=True)

    def _explain(self, finding: Finding) -> None:
        """A death whose process (its `pid` field) raised an exception just before: that error is the cause. A
        signature's `reached` step at or past its total: its cause_if_reached / fix_if_reached."""
        sig = self.by_name.get(finding.name)
        if sig is not None and sig.reached:
            step, total = (finding.fields.get(k, "").replace(",", "") for k in sig.reached)
            reached = step.isdigit() and total.isdigit() and int(step) >= int(total)
            finding.cause = sig.cause_if_reached or sig.cause if reached else sig.cause
            finding.fix = sig.fix_if_reached or sig.fix if reached else sig.fix
        pid = finding.fields.get("pid", "")
        if sig is None or not sig.cause_if_raised or not pid.isdigit() or int(pid) not in self.raised:
            return
        when, text = self.raised[int(pid)]
        if finding.first_seen - RAISED_BEFORE <= when <= finding.first_seen + 5:
            finding.fields["raised"] = text
            finding.cause, finding.fix = sig.cause_if_raised, sig.fix_if_raised or sig.fix
