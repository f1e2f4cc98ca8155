"""`gkdtop replay LOG...`: the phase timeline, steps, where the run stopped and its errors, after the fact.

Streams, never loads a file: the analysis (analysis/history.py) reads each file in chunks, its
matcher scans a chunk for every rule at once and only the lines it names are parsed. The same
engine follows live logs, so replay and the dashboard agree on a file.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.anomalies import watched
from gkdtop.analysis.curves import Curves
from gkdtop.analysis.engine import Analysis, ErrorGroup
from gkdtop.analysis.history import file_range
from gkdtop.analysis.phases import ended_short
from gkdtop.analysis.profiles import Framework
from gkdtop.analysis.steps import bar_pace, ran_steps, step_pace, timed_steps
from gkdtop.format import clock, human_duration, shown
from gkdtop.model import Hint

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from gkdtop.config import Config
    from gkdtop.model import Anomaly, EarlierRun, Evidence, Finding, PhaseStatus

SCHEMA = 2

# The starts of files people hand to replay by mistake, and what they are.
_NOT_TEXT = (
    (b"\x1f\x8b", "gzip-compressed: replay its text (zcat FILE > copy.log)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: replay its text (zstdcat FILE > copy.log)"),
    (b"BZh", "bzip2-compressed: replay its text (bzcat FILE > copy.log)"),
    (b"\xfd7zXZ\x00", "xz-compressed: replay its text (xzcat FILE > copy.log)"),
    (b"\x7fELF", "an executable, not a log"),
    (b"PK\x03\x04", "a zip archive (a torch checkpoint?), not a log"),
)
_CHECK_BYTES = 16 * 1024  # read of each input's start, to tell what it is
_BINARY = bytes(c for c in range(32) if c not in b"\t\n\r\x0b\x0c\x1b")  # control bytes no log is made of
_NUL_RUN = re.compile(rb"\x00{16,}")  # a crash leaves a block of NULs where the last writes were lost


def utf16(head: bytes) -> bool:
    """UTF-16 text (Windows tools, PowerShell's `>`): a byte-order mark, or a NUL beside nearly every ASCII byte."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    pairs = len(head) // 2
    return pairs >= 8 and max(head[0::2].count(0), head[1::2].count(0)) >= 0.9 * pairs


def check_input(path: str) -> str | None:
    """Why `path` can't be replayed, as one line naming it; None when it can.

    Replay reads its input in ranges up to its size, so it takes only a regular file whose size is
    its content: not a FIFO (opened non-blocking here, so one can't hang us), device or directory,
    and not a /proc or /sys file (size 0 or 4096 whatever they hold). A compressed or binary file is
    refused by its first bytes rather than replayed into an empty report.
    """
    from gkdtop.safeopen import NotRegularFile, open_regular

    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(_CHECK_BYTES) or b""
    except NotRegularFile as exc:
        return f"{path}: {exc.strerror}, not a log file"
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    except ValueError as exc:  # a NUL in the name
        return f"{path!a}: {exc}"
    if (size == 0 and head) or len(head) < min(size, _CHECK_BYTES):  # (a live log may have grown: more is fine)
        return (f"{path}: its size ({size} bytes) is not what it holds: a /proc or /sys file? "
                f"replay a copy (cat {path} > copy.log)")
    for magic, what in _NOT_TEXT:
        if head.startswith(magic):
            return f"{path}: {what.replace('FILE', path)}"
    text = _NUL_RUN.sub(b"", head)  # a crashed log's NUL tail is no reason to refuse it (snapshot reads it)
    if utf16(text):
        return None  # read as snapshot reads it (input_note says what that misses)
    if text and sum(text.count(c) for c in _BINARY) * 20 > len(text):  # over 5%: no log looks like this
        return f"{path}: a binary file, not a text log"
    return None


def input_note(path: str) -> str | None:
    """A line to say about an input replay reads but not fully: UTF-16, whose text the rules (UTF-8) miss."""
    from gkdtop.safeopen import open_regular

    try:
        with open_regular(path) as fh:
            head = fh.read(_CHECK_BYTES) or b""
    except (OSError, ValueError):
        return None
    if utf16(_NUL_RUN.sub(b"", head)):
        return (f"{shown(path)}: UTF-16 text, read as snapshot reads it; the rules match UTF-8, so convert it for a "
                f"full reading (iconv -f UTF-16 -t UTF-8 {shlex.quote(path)} > copy.log)")
    return None


@dataclass
class ReplayReport:
    files: list[str]
    status: PhaseStatus
    started: float | None
    ended: float | None
    steps: dict[str, Any]
    errors: list[ErrorGroup] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    lines_read: int = 0
    method: str = "hyperscan"
    framework: Framework = field(default_factory=Framework)
    open_end: OpenEnd | None = None  # the log ends mid-phase (state running): said, with what to check
    anomalies: list[Anomaly] = field(default_factory=list)  # slow failures: analysis/anomalies.py
    # Where a line states how long the run had already gone on (a bar's `[1:52:10<`, `ran for 1800417 ms`) and
    # that reaches before `started`: the run was under way by then (a bound, not a stamp), and that line.
    began_by: float | None = None
    began_evidence: Evidence | None = None
    # Where a failure line states something ran longer than the stamps (and began_by) span (`ran for 607342
    # milliseconds` after the last stamp): the run went on at least that long (a bound), and that line.
    ran_for: float | None = None
    ran_evidence: Evidence | None = None
    newest_first: list[str] = field(default_factory=list)  # files that list their newest line first: read bottom up


@dataclass
class OpenEnd:
    """A log that just stops mid-phase. After the fact a hang there and a copy taken mid-run read the
    same (replay has no clock), so replay says where it ended and what to check if the job stopped."""

    phase: str
    after: str  # the last line a rule knew
    hint: Hint | None  # what to check if the job did stop there (no causes: nothing says it stopped)
    stepping: bool = False  # the log steps to its last line
    pace: str = ""  # a stepping log: where the time of a step goes (its largest timed part)
    last_line: str = ""  # the log's own last line, where lines no rule knows follow `after`
    unknown: int = 0  # how many such lines
    waited: float | None = None  # seconds without progress the log's own last lines state (a timeout's wait)

    NOTE = ("replay cannot tell a hang there from a log copied mid-run"
            " (`gkdtop snapshot --log FILE` judges a live file's silence)")
    STEPPING = ("the job was stepping to the last line: nothing in the file says it stopped"
                " (`gkdtop snapshot --log FILE` judges a live file's silence)")

    @property
    def note(self) -> str:
        if self.waited is not None:  # a witness: the job itself timed the wait
            return (f"the log itself states a wait of {human_duration(self.waited)} there with no progress: it hung "
                    "at least that long (`gkdtop snapshot --log FILE` judges a live file's silence)")
        return (self.STEPPING + (f"; {self.pace}" if self.pace else "")) if self.stepping else self.NOTE

    @property
    def text(self) -> str:
        last = (f" ({self.unknown} line{'s' if self.unknown != 1 else ''} no rule knows follow; the last: "
                f"`{self.last_line}`)") if self.last_line else ""
        return f"the log ends in {self.phase}" + (f" after `{self.after}`" if self.after else "") + last + \
            f": {self.note}"

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "after": self.after, "last_line": self.last_line or None,
                "waited_s": self.waited, "hint": self.hint.as_json() if self.hint else None}


def tail_of(path: str, limit: int = 65536, counted: tuple[int, int] | None = None, newest_first: bool = False
            ) -> tuple[list[str], list[int | None]]:
    """The last non-blank lines of a file (TAIL_LINES at most, oldest first) as a terminal shows them (escapes
    out, a bar's last redraw), each cut at 300 characters: what the job printed last, whether or not a rule
    knows it; ([], []) when unreadable. And each one's line number, where `counted` (history's lines and bytes of
    the whole file) still describes it. A file that lists its newest line first: its first lines, turned round."""
    from gkdtop.analysis.lines import clean_line
    from gkdtop.analysis.wordphase import TAIL_LINES

    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(0 if newest_first else max(0, size - limit))
            tail = fh.read(limit)
    except OSError:
        return [], []
    if newest_first:
        heads = tail.split(b"\n")[: -1 if size > limit else None]  # a cut last line is no line
        kept = [(text[:300], k + 1) for k, raw in enumerate(heads[: TAIL_LINES + 1])
                if (text := clean_line(raw).rstrip())][:TAIL_LINES][::-1]
        return [text for text, _ in kept], [number for _, number in kept]
    raws = tail.split(b"\n")[1 if size > limit else 0:]  # a cut first line is no line
    if raws and raws[-1] == b"":
        raws.pop()  # the newline that ends the last line
    last = counted[0] if counted is not None and counted[1] == size else None
    kept = [(text[:300], None if last is None else last - (len(raws) - 1 - k))
            for k, raw in enumerate(raws[-TAIL_LINES - 1:], start=max(0, len(raws) - TAIL_LINES - 1))
            if (text := clean_line(raw).rstrip())][-TAIL_LINES:]
    return [text for text, _ in kept], [number for _, number in kept]


# A line that states how long its process waited without progress: `timed out after 300000ms` (c10d's store),
# faulthandler's `Timeout (0:05:00)!`, SGLang's `Scheduler watchdog timeout (self.watchdog_timeout=300` (not its
# start-up's server_args, which name the setting), NCCL's `ran for 1800092 milliseconds`,
# a job's own watchdog's `no progress for 60s`.
STATED_WAIT_RE = re.compile(
    r"\b(?:timed out after|no progress (?:for|in)) (\d{1,12}(?:\.\d{1,6})?) ?(ms|milliseconds|s|secs?|seconds)\b"
    r"|^Timeout \((\d{1,3}):(\d\d):(\d\d)\)!|[Ww]atchdog timeout \((?:self\.)?watchdog_timeout=(\d{1,9})\b"
    r"|\bran for (\d{1,12}) milliseconds\b"
)


# subprocess.TimeoutExpired's message, `Command '['bash', '-c', …]' timed out after 12 seconds`: a child command's own
# limit (a reward sandbox's, a compile's), which the job itself goes on past (audit 17: "it hung at least 12s").
CHILD_TIMEOUT_RE = re.compile(r"\bCommand '.*' timed out after \d")


def stated_wait(text: str) -> float | None:
    """The seconds without progress a line states, or None."""
    m = STATED_WAIT_RE.search(text.strip())
    if m is None or CHILD_TIMEOUT_RE.search(text):
        return None
    if m.group(1) is not None:
        return float(m.group(1)) / (1000 if m.group(2).startswith("m") else 1)
    if m.group(3) is not None:
        return int(m.group(3)) * 3600 + int(m.group(4)) * 60 + int(m.group(5))
    return float(m.group(6)) if m.group(6) is not None else int(m.group(7)) / 1000


def open_end(status: PhaseStatus, config: Config, frameworks: tuple[str, ...] = (),
             seen: Collection[str] = ()) -> OpenEnd | None:
    """OpenEnd for a log judged running (or waiting) at its end; the hint is the waiting phase's (its
    lines true of `frameworks`, the detected one and its bases, and whose evidence the log holds: `seen`).
    It quotes the log's own last line where the verdict does (`status.unrecognised_last`)."""
    if status.state not in ("running", "waiting"):
        return None
    # Where the verdict was read from a line's words, that line is the last place known (not the rules' last line).
    after = (status.worded.text if status.worded is not None else status.recognised_last).strip()[:200]
    last = status.last_step
    if (last is not None and status.unrecognised == 0 and status.last_progress is not None
            and last.time >= status.last_progress):
        # Stepping to its last line: nothing in the file says the job stopped, so no hang is guessed at.
        return OpenEnd(phase=status.current or "no known phase", after=after, hint=None, stepping=True,
                       pace=step_pace(status.steps))
    name = status.expected or status.current
    rule = next((r for r in config.phases if name in (r.name, r.plain)), None)  # its plain name: rename
    hint = rule.hint.for_steps(timed_steps(status.steps), ran_steps(status.steps)).for_framework(frameworks) \
        .for_seen(seen) if rule is not None else None
    # What to check, not why it stopped: no line says it did, so a cause would be a guess.
    hint = Hint(actions=list(hint.actions)) if hint is not None and hint.actions else None
    last_line = status.unrecognised_last
    waited = stated_wait(status.recognised_last)  # the last line a rule knew, else the log's own last line
    return OpenEnd(phase=status.current or "no known phase", after=after, hint=hint,
                   last_line=last_line, unknown=status.unrecognised if last_line else 0,
                   waited=waited if waited is not None else stated_wait(last_line))


def replay(paths: list[str], config: Config, ahead: bool = False, csv_path: str | None = None) -> ReplayReport:
    """`ahead` (`gkdtop replay`, a process with no other thread, which exits after): large files are
    scanned by a forked reader while this process applies, and freed chunks stay in the heap.
    `csv_path`: every step's metrics are written there, a row per step (StepTable)."""
    analysis = Analysis(config.rules())
    table = None
    if csv_path is not None:
        table = StepTable()
        analysis.phases.curves.sink = table.add
    else:  # the metrics the anomalies read, not all sixty: a dense log's replay would take twice as long
        analysis.phases.curves = Curves(only=watched())
    if ahead:
        from gkdtop.heap import reuse_chunks

        reuse_chunks()
    ranges = [file_range(path) for path in paths]
    analysis.read_history(ranges, ahead=ahead)
    # No clock after the fact: the log is judged at its own end, the latest line it dates (an idle
    # line too: Ray's pending warnings, vLLM's stats), so a job that printed only those is stalled.
    at = max(analysis.ended or 0.0, analysis.phases.last_activity or 0.0)
    framework = analysis.profiles.result(pinned=config.framework)
    tail, numbers = tail_of(paths[-1], counted=analysis.lines_in.get(paths[-1]),
                            newest_first=ranges[-1].newest_first) if paths else ([], [])
    status = analysis.status(at, framework, tail, numbers)
    for cited in status.evidence:
        if not cited.source and cited.line is not None:
            cited.source = paths[-1]  # a guess from the tail's words before any line a rule fed: the tail's file
    if table is not None:
        table.write(csv_path)  # type: ignore[arg-type]
    began_by = analysis.phases.began_by
    if began_by is not None and (analysis.started is None or began_by >= analysis.started):
        began_by = None  # no stamp to count back from, or nothing before the first stamp
    ran_for, ran_evidence = analysis.phases.stated_run()
    if ran_for is not None and analysis.started is not None and analysis.ended is not None and (
            ran_for <= analysis.ended - min(analysis.started, began_by or analysis.started) + 1):
        ran_for = None  # the stamps already span that long
    return ReplayReport(files=list(paths), status=status, started=analysis.started, ended=analysis.ended,
                        steps=status.steps, errors=analysis.error_groups(), findings=analysis.findings(),
                        lines_read=analysis.lines_read, method=analysis.matcher.engine, framework=framework,
                        open_end=open_end(status, config, analysis.profiles.lineage(framework.name),
                                          analysis.phases.seen_matched),
                        anomalies=analysis.anomalies(config.anomalies), began_by=began_by,
                        began_evidence=analysis.phases.began_evidence if began_by is not None else None,
                        ran_for=ran_for, ran_evidence=ran_evidence if ran_for is not None else None,
                        newest_first=[r.path for r in ranges if r.newest_first])


class StepTable:
    """`replay --csv`: one row per step, every metric a column. Rows go to a spooled temporary file
    as they land (the key sets a run prints change: validation steps add keys), so memory stays
    bounded; the header is the union of every key, known at the end."""

    def __init__(self) -> None:
        import tempfile

        self.rows = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 (closed by write)
        self.keysets: dict[tuple[str, ...], int] = {}
        self.columns: dict[str, None] = {}

    def add(self, step: int, keys: tuple[str, ...], values: Sequence[float]) -> None:
        index = self.keysets.get(keys)
        if index is None:
            index = self.keysets[keys] = len(self.keysets)
            self.columns.update(dict.fromkeys(keys))
        self.rows.write(f"{step}\t{index}\t" + "\t".join(map(repr, values)) + "\n")

    def write(self, path: str) -> int:
        """The CSV at `path`; how many rows."""
        import csv

        columns = list(self.columns)
        where = {name: i for i, name in enumerate(columns, 1)}
        keysets = {index: [where[k] for k in keys] for keys, index in self.keysets.items()}
        self.rows.seek(0)
        n = 0
        with open(path, "w", newline="", encoding="utf-8") as out, self.rows:
            writer = csv.writer(out)
            writer.writerow(["step", *columns])
            for line in self.rows:
                step, index, *values = line.rstrip("\n").split("\t")
                row = [step] + [""] * len(columns)
                for at, value in zip(keysets[int(index)], values, strict=False):
                    row[at] = value
                writer.writerow(row)
                n += 1
        return n


def report_json(report: ReplayReport) -> dict[str, Any]:
    """The report (docs/replay.md): the verdict is the phase status's one encoding, `current` named
    `stopped_in`, and only what holds after the fact (no `since` or clock: the log has ended)."""
    verdict = report.status.as_json()
    if report.started is None:  # no line had a stamp: a span's time would be the file's, not its own
        for span in verdict["timeline"]:
            span["start"] = span["end"] = span["duration"] = None
    return {
        "schema": SCHEMA,
        "files": report.files,
        "read_bottom_up": report.newest_first,
        "framework": report.framework.as_json(),
        "started": report.started,
        "ended": report.ended,
        "began_by": report.began_by,
        "ran_for_s": report.ran_for,
        "state": verdict["state"],
        "stopped_in": verdict["current"],
        **{key: verdict[key] for key in ("expected", "stalled_for", "stall_after", "failure", "unrecognised",
                                         "last_known", "finished_by", "interrupted", "earlier_runs", "phase_from",
                                         "worded_note")},
        "open_end": report.open_end.as_json() if report.open_end else None,
        "hint": verdict["hint"],
        "timeline": verdict["timeline"],
        # (and the lines the run's length stands on, where a line states more than its stamps span)
        "evidence": [*verdict["evidence"], *(e.as_json() for e in (report.began_evidence, report.ran_evidence) if e)],
        "steps": report.steps,
        "errors": [asdict(e) for e in report.errors],
        "findings": [f.as_json() for f in report.findings],
        "anomalies": [a.as_json() for a in report.anomalies],
        "lines_read": report.lines_read,
        "method": report.method,
    }


def _ran_for_reason(report: ReplayReport) -> str:
    """Why the run went on at least `ran_for`: a line states it, or its steps' own times add up to it."""
    steps = report.ran_evidence is not None and "timing_s/step" in report.ran_evidence.claim
    return "its steps' own times add up to that" if steps else "a line states something ran that long"


def earlier_run_text(run: EarlierRun, stamped: bool) -> str:
    """One run the file held before the one reported (`>>` into the same log): how it ended, and where the next
    began, so its failure is not read as the last run's."""
    when = ""
    if stamped and run.began is not None and run.began_after:  # its first lines carried no stamp: a bound only
        when = f" begun at or after {clock(run.began)}"
    elif stamped and run.began is not None:  # (its lines after the last stamp carry none: no end to give then)
        when = f" from {clock(run.began)} to {clock(run.ended)}" if run.ended is not None and (
            run.ended - run.began >= 1) else f" begun at {clock(run.began)}"
    return (f"earlier in this log: a run{when} that {run.told()}; the run below began at "
            f"{run.evidence.where()}")


def report_text(report: ReplayReport, why: bool = False) -> str:
    """The report for a person; `why`: each statement's lines (file:line, the line) after it."""
    from gkdtop.format import clock, hint_text, human_duration

    st = report.status
    if report.started is not None and report.ended is not None:
        span = f"{human_duration(report.ended - report.started)} from {clock(report.started)} to {clock(report.ended)}"
        first = st.timeline[0] if st.timeline else None
        if first is not None and first.start_before and not first.guess:  # its first lines came before any stamp
            span = (f"{human_duration(report.ended - report.started)} of stamps, {clock(report.started)} to "
                    f"{clock(report.ended)}; the lines before the first stamp carry no time")
        if report.ended - report.started < 1:  # one stamped moment: no length, not "0s from A to A"
            span = f"one stamped time, {clock(report.started)}: duration unknown"
        if report.began_by is not None:  # a line says the run went on before the first stamp: a bound, not a stamp
            span = (f"≥{human_duration(report.ended - report.began_by)}, from ≤{clock(report.began_by)} (a line states "
                    f"how long something had already run) to {clock(report.ended)}; stamps {clock(report.started)} to "
                    f"{clock(report.ended)}")
        if report.ran_for is not None:  # a line after the last stamp states a longer run: a bound on its length
            stamps = (f"one stamped time, {clock(report.started)}" if report.ended - report.started < 1
                      else f"stamps {clock(report.started)} to {clock(report.ended)}")
            span = f"≥{human_duration(report.ran_for)} ({_ran_for_reason(report)}); {stamps}"
        if any(s.clock_jump is not None for s in st.timeline):
            span += " (writers' stamps in two clock zones, likely: see the '?' below)"
    elif report.ran_for is not None:  # no stamp, but a line states how long it ran (Lightning's bar `[1:13:28<`)
        span = f"no timestamps; ≥{human_duration(report.ran_for)} ({_ran_for_reason(report)})"
    else:
        span = "no timestamps: duration unknown"
    out = [f"{', '.join(shown(f) for f in report.files)}: {span}"]  # a name's ESC or BEL never reaches the terminal
    if report.newest_first:
        out.append(f"read bottom up: {', '.join(shown(f) for f in report.newest_first)} "
                   "lists its newest line first (a log search's export)")
    if report.framework.label:
        out.append(f"framework: {report.framework.label} (from the {report.framework.source})")
    out += [earlier_run_text(run, report.started is not None) for run in st.earlier_runs]
    out += ["", "timeline:"]
    jumps = []
    for i, s in enumerate(st.timeline):
        dur = human_duration(s.duration) if s.duration is not None else "(unfinished)"
        ended_by = st.timeline[i + 1] if i + 1 < len(st.timeline) else None
        if s.clock_jump is not None:
            dur += "?"
            jumps.append(f"  ? {s.name}: its stamps jump {human_duration(abs(s.clock_jump))} from one writer to "
                         "another: two clock zones, likely, so its time is not measured")
        when = clock(s.start) if report.started is not None else "--:--:--"  # no stamps: no time of its own
        if report.started is None and s.duration is not None:
            dur = "?"  # no two stamps: no length either
        elif s.start_before and report.started is not None:
            when = f"≤{when}"  # it began before its first stamp: at most that time, at least that long
            dur = f"≥{dur}" if s.duration else "?" if s.duration is not None else dur
        elif (s.start_after or s.end_after) and report.started is not None:
            # A line without a stamp took the one before it: it began at or after that time, and a length with no
            # stamp between its first line and its last is none (`config 0s` of unstamped lines said otherwise).
            when = f"≥{when}" if s.start_after else when
            if s.unmeasured:
                dur = "?"
            elif s.duration is not None:
                dur = ("~" if s.start_after and s.end_after else "≤" if s.start_after else "≥") + dur
        if (ended_by is not None and ended_by.start_before and s.duration and report.started is not None
                and s.end is not None and s.end >= ended_by.start and dur[0].isdigit()):
            dur = f"≤{dur}"  # the next phase began before its first line (a stack printed later): this one ended then
        if s.status == "passed":
            dur = "?"  # the words put the run past it; no line says when it ended
        out.append(f"  {when:>9}  {s.name:<20} {dur:>12}  {s.status}" + (" (a guess)" if s.guess else ""))
    loop = st.timeline[-1] if st.timeline else None
    if st.within and st.current and loop is not None and loop.name == st.within and loop.end is None:
        # The verdict names a part of the step (`FAILED in checkpoint save`): its row, under the loop's.
        when = "--:--:--"  # no stamps: no time of its own
        if report.started is not None and st.since is not None:
            when = {"before": "≤", "after": "≥"}.get(st.since_bound, "") + clock(st.since)
        out.append(f"  {when:>9}    {st.current:<18} {'(unfinished)':>12}  {loop.status}")
    out += jumps
    stepping = report.open_end is not None and report.open_end.stepping  # its verdict says where a step's time goes
    out += steps_text(report.steps, with_share=not stepping)
    if st.state == "done":
        verdict = "finished" if st.current == "finished" else f"finished: {st.current}"
        bar = report.steps.get("bar")
        if short := ended_short(st):  # only the process's end is known (audit 26)
            verdict = (f"ended at {short} of the loop's bar, not finished: the process ended (wandb's end-of-run "
                       "block) short of the bar's total")
        elif bar and bar.get("total") and bar["n"] < bar["total"]:  # it stopped early (max_steps, an early stop, a bug)
            verdict += f", ended at {bar['n']}/{bar['total']} of the loop's bar"
    else:
        prefix = {"failed": "FAILED in", "stalled": "stalled in"}.get(st.state, "ended in")  # a log may still print
        if st.interrupted:
            prefix = "INTERRUPTED in"  # stopped from outside (Ctrl+C, a signal), not by an error of its own
        last = st.timeline[-1] if st.timeline else None
        if st.state != "failed" and last is not None and last.name == st.current and last.status == "done":
            prefix = {"stalled": "stalled after"}.get(st.state, "ended after")  # it finished: not "in" it
        if st.worded is not None:  # a guess from a line's words: said as one (`FAILED, likely in generation`)
            prefix = prefix.replace(" in", ", likely in")
        if not st.current:
            verdict = f"{prefix.split()[0]} (phase unknown)"
        elif st.current.startswith("after "):  # the unnamed phase after a finished one: "FAILED after nccl init"
            verdict = f"{prefix.rsplit(' ', 1)[0]} {st.current}"
        else:
            verdict = f"{prefix} {st.current}"
    out += ["", verdict + (f" (next expected: {st.expected})" if st.expected else "")]
    if st.worded_note:
        out.append(f"  {st.worded_note}")
    if st.finished_by:
        out.append(f"  {st.finished_by}")
    if st.state == "stalled" and st.stalled_for is not None:
        out.append(f"  no progress for {human_duration(st.stalled_for)} before the log ended"
                   f" (stalled after {human_duration(st.stall_after)})")
    if st.failure:
        out.append(f"  {st.failure}")
    if st.unsure:
        out.append(f"  {st.unsure}")
    if st.last_known:
        out.append(f"  last known line: `{st.last_known}`")
    if st.last_line and report.open_end is None:  # a stalled log; an open end quotes it below
        out.append(f"  last line: `{st.last_line}`")
    if st.hint and st.state in ("failed", "stalled"):
        out += hint_text(st.hint.causes, st.hint.actions)
    if report.open_end is not None:
        end = report.open_end
        out.append(f"  {'after `' + end.after + '`: ' if end.after else ''}{end.note}")
        if end.last_line:  # what the job printed last, though no rule knows it
            out.append(f"  {end.unknown} line{'s' if end.unknown != 1 else ''} no rule knows follow; the last: "
                       f"`{end.last_line}`")
        if end.hint is not None:
            out.append("  if it stopped there:" if end.waited is None else "  what to check:")
            out += hint_text(end.hint.causes, end.hint.actions, indent="    ")
    if report.errors:
        out += ["", "errors:"]
        out += [f"  x{g.count}  {g.exception}  (first at {shown(Path(g.source).name)}:{g.first_line or '?'})"
                for g in report.errors]
    if report.anomalies:
        out += ["", "anomalies:"]
        out += [f"  {a.text}" for a in report.anomalies]
    if report.findings:
        out += ["", "findings:"]
        fixes = set()
        for f in report.findings:
            out.append(f"  {f.severity} {f.name} x{f.count} {f.fields}")
            if f.fix not in fixes:  # four ranks' timeouts: their fix once
                out.append(f"    fix: {f.fix}")
            fixes.add(f.fix)
    if why:
        out += ["", "why (the lines each statement stands on):"]
        cited = [*st.evidence, *(s.evidence for s in st.timeline if s.evidence is not None),
                 *([report.began_evidence] if report.began_evidence is not None else []),
                 *([report.ran_evidence] if report.ran_evidence is not None else [])]
        if report.framework.evidence:
            out.append(f"  framework {report.framework.name}: `{report.framework.evidence[0][:200]}`")
        once: set[tuple[str, str, int | None]] = set()
        for e in cited:  # a phase's start is cited once, in the verdict's order
            if (e.claim, e.source, e.line) not in once:
                once.add((e.claim, e.source, e.line))
                out.append(f"  {e.claim}: {shown(e.where())}  `{e.text}`")
        if not cited:
            out.append("  no line: nothing above stands on a line of the log")
    return "\n".join(out) + "\n"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def steps_text(steps: dict[str, Any], with_share: bool = True) -> list[str]:
    """The step statistics for a person (replay's text; the bundle's summary); `with_share`: with where a step's time
    goes (its largest timed part's share)."""
    bar = steps.get("bar")
    pace = bar_pace(bar)
    at = f"the loop's bar is at {bar['n']}/{bar['total']}" + (f", {pace}" if pace else "") if bar else ""
    if not steps.get("count"):
        return ["", f"steps: none with metrics; {at}"] if bar else []
    stats = ", ".join(f"{name} {_seconds(steps.get(key))}" for name, key in
                      (("mean", "mean_s"), ("p50", "p50_s"), ("p95", "p95_s"), ("max", "max_s")))
    if steps.get("mean_s") is None and pace:  # no step line measured its time (no stamps of their own): the bar's
        stats = f"{pace} by its bar"
    first, last, count = steps["first"], steps["last"], steps["count"]
    span = f"{first}..{last}" if first != last else f"step {last}"
    head = f"{count} ({span})"
    if first > 1 or count < last - first + 1:  # steps ran that printed no line here: say how far it got
        head = f"up to {last}, {count} with metrics ({span})"
    out = ["", f"steps: {head}, {stats}"]
    if bar and bar["n"] > last:  # metric records without the loop's own count: the bar says where it is
        out[-1] = f"steps: {count} with metrics" + (f"; {at}" if pace and stats.startswith(pace) else
                                                      f", {stats}; {at}")
    if steps.get("trend") is not None:
        out[-1] += f", last tenth {steps['trend']:.2f}x the first"
    if steps.get("slowest"):
        out.append("  slowest: " + ", ".join(f"step {s['step']} ({s['seconds']:.2f}s)" for s in steps["slowest"]))
    for key, series in (steps.get("timing") or {}).items():
        trend = f", trend {series['trend']:.2f}x" if series.get("trend") is not None else ""
        out.append(f"  {key:<24} mean {_seconds(series['mean_s'])}  p95 {_seconds(series['p95_s'])}"
                   f"  max {_seconds(series['max_s'])}{trend}")
    if with_share and (share := step_pace(steps)):  # a slow run's first question, whatever its end
        out.append(f"  {share}")
    return out
