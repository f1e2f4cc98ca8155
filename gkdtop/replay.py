"""`gkdtop replay LOG...`: the phase timeline, steps, where the run stopped and its errors, after the fact.

Streams, never loads a file: GNU grep (a DFA, gigabytes per second) picks the lines holding a
literal that some pattern of the phase engine or the findings needs, and only those meet the full
patterns and are parsed in Python. Without grep, or for a pattern grep cannot take, the same
selection runs in Python.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gkdtop.collectors.findings import FindingsEngine, unnamed
from gkdtop.collectors.logs import parse_line, strip_ansi
from gkdtop.collectors.phases import EXCEPTION_RE, STEP_RE, PhaseEngine
from gkdtop.collectors.prefilter import Prefiltered, required_literals
from gkdtop.config import Config
from gkdtop.model import Finding, LogLine, PhaseStatus

SCHEMA = 1
TRACEBACK = "Traceback (most recent call last)"
TAIL_BYTES = 64 * 1024

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


def check_input(path: str) -> str | None:
    """Why `path` can't be replayed, as one line naming it; None when it can.

    Replay seeks, splits and splices its input by size, so it takes only a regular file whose size
    is its content: not a FIFO (opened non-blocking here, so one can't hang us), device or directory,
    and not a /proc or /sys file (size 0 or 4096 whatever they hold). A compressed or binary file is
    refused by its first bytes rather than replayed into an empty report.
    """
    from gkdtop.collectors.logs import NotRegularFile, open_regular

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
    if head and sum(head.count(c) for c in _BINARY) * 20 > len(head):  # over 5%: no log looks like this
        return f"{path}: a binary file, not a text log"
    return None


@dataclass
class ErrorGroup:
    exception: str  # the final exception line, e.g. "ray.exceptions.ActorDiedError: The actor died ..."
    count: int
    first_line: int  # 1-based line number in its file
    source: str


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
    method: str = "grep"


def to_ere(pattern: str) -> str | None:
    """A Python regex as a GNU grep -E pattern, or None when it uses what ERE lacks."""
    if re.search(r"\(\?[=!<]|\(\?[aiLmsux]", pattern.replace("(?P<", "")):
        return None
    out = re.sub(r"\(\?P<\w+>|\(\?:", "(", pattern)
    out = out.replace(r"\d", "[0-9]")
    if "(?" in out:
        return None
    return out


@functools.cache
def needles(pattern: str) -> frozenset[str] | None:
    """Literals one of which every match of `pattern` contains; None when it needs none (or ignores case)."""
    found = required_literals(pattern)
    return frozenset(found[0]) if found is not None and not found[1] else None


WINDOW_MIN = 4  # shorter needle windows would let through too many lines
SAMPLES = 8  # blocks of the file whose byte counts choose the windows
SAMPLE_BYTES = 16 * 1024


def _byte_counts(path: str, wanted: set[int]) -> dict[int, int]:
    """How often each wanted byte occurs in a few blocks spread over the file."""
    size = Path(path).stat().st_size
    sample = bytearray()
    with open(path, "rb") as fh:
        for i in range(SAMPLES):
            fh.seek(size * i // SAMPLES)
            sample += fh.read(SAMPLE_BYTES)
    return {b: sample.count(b) for b in wanted}


def _window(needle: bytes, counts: dict[int, int]) -> bytes:
    """The needle from its byte that is rarest in this file on (at least WINDOW_MIN bytes long).

    grep's DFA skips fast over bytes that start no needle and steps slowly from one that does, so an
    alternation of literals costs about as much as its first bytes are frequent: `phase 'x' START`
    costs less looked for from its `'` than from the `p` of every other word.
    """
    if len(needle) <= WINDOW_MIN:
        return needle
    start = min(range(len(needle) - WINDOW_MIN + 1), key=lambda i: counts[needle[i]])
    return needle[start:]


def _fewest(words: set[bytes]) -> set[bytes]:
    """The words without those holding another: a line with the longer one has the shorter one too."""
    return {w for w in words if not any(v != w and v in w for v in words)}


def grep_patterns(path: str, patterns: list[str]) -> tuple[list[bytes], list[bytes]] | None:
    """What grep looks for to find every line that one of `patterns` matches, and few others: literals,
    and the patterns that need none, as ERE; None when one of those can't be written as ERE.

    On a 1 GB verl-like log, one core, against the default filter: the 47 patterns as ERE cost grep
    ~3.3x, their needles whole ~3.2x, the needles cut to windows that start on a rare byte ~1.5x.
    """
    words: set[bytes] = set()
    whole: list[bytes] = []
    for pattern in patterns:
        found = needles(pattern)
        if found is None or any(c in w for w in found for c in "\0\n"):
            ere = to_ere(pattern)
            if ere is None:
                return None
            whole.append(ere.encode())
        else:
            words |= {w.encode() for w in found}
    counts = _byte_counts(path, {b for w in words for b in w})
    return sorted(_fewest({_window(w, counts) for w in _fewest(words)})), whole


def candidate_patterns(config: Config, findings: FindingsEngine) -> list[str]:
    pats = [STEP_RE.pattern, config.fail_pattern, re.escape(TRACEBACK), EXCEPTION_RE.pattern.lstrip("^")]
    for rule in config.phases:
        pats += [p.pattern for p in (rule.start, rule.done, rule.fail) if p is not None]
    for sig in findings.signatures:
        pats += [sig.match.pattern, *(e.pattern for e in sig.extra)]
    return pats


GREP_ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
CHUNK_MIN = 64 * 1024 * 1024  # below this one grep is as fast as several
CUT_SEARCH = 4 * 1024 * 1024  # how far past a chunk's planned end to look for a line grep will print


def _chunks(path: str, jobs: int, words: list[bytes]) -> list[tuple[int, int]]:
    """Up to `jobs` byte ranges of the file, each but the last ending with a line that holds one of the
    words grep looks for. grep prints that line last, and its number is how many lines the range
    holds: the next range's lines are numbered from there without a `wc -l` pass over the range."""
    size = Path(path).stat().st_size
    if jobs < 2 or size < CHUNK_MIN or not words:
        return [(0, size)]
    word = re.compile(b"|".join(map(re.escape, words)))
    cuts = [0]
    with open(path, "rb") as fh:
        for i in range(1, jobs):
            start = max(size * i // jobs, cuts[-1])
            fh.seek(start)
            block = fh.read(CUT_SEARCH)
            found = word.search(block)
            end = block.find(b"\n", found.end()) if found else -1
            if end >= 0 and start + end + 1 < size:  # else no cut here: a longer chunk
                cuts.append(start + end + 1)
    cuts.append(size)
    return list(itertools.pairwise(cuts))


PIPE_BYTES = 1024 * 1024  # the most an unprivileged pipe may hold (fs.pipe-max-size): fewer wake-ups


def _splice(path: str, pipe: int, start: int, end: int, errors: list[OSError]) -> None:
    """Move the file's bytes [start, end) into the pipe and close it. splice(2) hands over the page cache's
    pages where `dd` would copy them twice (~1 core-second a GB, as much as the grep it feeds)."""
    try:
        with open(path, "rb") as fh:
            while start < end:
                moved = os.splice(fh.fileno(), pipe, min(end - start, PIPE_BYTES), offset_src=start)
                if moved == 0:
                    break
                start += moved
    except BrokenPipeError:  # the reader is gone: grep failed, and says why
        pass
    except OSError as exc:  # not a silent short read: the caller raises it
        errors.append(exc)
    finally:
        os.close(pipe)


def _range_reader(path: str, start: int, end: int, size: int,
                  errors: list[OSError]) -> tuple[int, threading.Thread | None]:
    """A descriptor to read the bytes [start, end) of the file from: the file itself, positioned, when
    `end` is its end; else a pipe that a thread fills."""
    if end >= size:
        fd = os.open(path, os.O_RDONLY)
        os.lseek(fd, start, os.SEEK_SET)
        return fd, None
    read, write = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    feeder = threading.Thread(target=_splice, args=(path, write, start, end, errors), daemon=True)
    feeder.start()
    return read, feeder


def _grep_lines(path: str, patterns: list[str], jobs: int | None = None) -> Iterator[tuple[int, str]] | None:
    """Candidate lines with their line numbers, selected by GNU grep; a large file in parallel chunks.

    The chunks' greps run at once, each writing to a temporary file, so a chunk with many matches
    never blocks another; the results are then read back in file order. All but the last chunk reach
    grep through a pipe that a thread fills with splice(2); the last one reads the file itself.
    """
    grep = shutil.which("grep")
    found = grep_patterns(path, patterns)
    if grep is None or found is None:
        return None
    words, whole = found
    args: list[str | bytes] = [grep, "-n", "-a", "-E"]
    if words:
        args += ["-e", b"|".join(re.sub(rb"[\\.\[\](){}*+?|^$]", lambda m: b"\\" + m[0], w) for w in words)]
    for ere in whole:
        args += ["-e", ere]
    # grep lets through some lines that hold a needle but match no pattern: each line meets the patterns
    # whose needles it holds, one at a time (~3 µs a line; the patterns joined try every alternative at
    # every position, ~45 µs). The same selection as _python_lines.
    tests = [(re.compile(p), needles(p) or frozenset({""})) for p in patterns]
    size = Path(path).stat().st_size
    if jobs is None:
        jobs = min(os.cpu_count() or 1, 4) if hasattr(os, "splice") else 1  # splice(2) is Linux's
    chunks = _chunks(path, jobs, words)

    def lines() -> Iterator[tuple[int, str]]:
        errors: list[OSError] = []
        with tempfile.TemporaryDirectory(prefix="gkdtop-replay-") as tmp:
            running = []
            for i, (start, end) in enumerate(chunks):
                out = open(Path(tmp) / f"{i}.out", "w+b")  # noqa: SIM115 - closed below
                err = open(Path(tmp) / f"{i}.err", "w+b")  # noqa: SIM115 - closed below
                reader, feeder = _range_reader(path, start, end, size, errors)
                proc = subprocess.Popen(args, stdin=reader, stdout=out, stderr=err, env=GREP_ENV)
                os.close(reader)
                running.append((proc, out, err, feeder))
            offset = 0
            for proc, out, err, feeder in running:
                code = proc.wait()
                if feeder is not None:
                    feeder.join()
                if code > 1:
                    err.seek(0)
                    message = err.read().decode(errors="replace").strip()
                    raise OSError(message.splitlines()[0] if message else f"grep failed on {path}")
                if errors:
                    raise OSError(f"{path}: {errors[0]}")
                out.seek(0)
                number = 0
                for raw in out:
                    head, _, rest = raw.partition(b":")
                    number = int(head)
                    text = rest.rstrip(b"\r\n").decode("utf-8", "replace")
                    if any(rx.search(text) for rx, needed in tests if any(w in text for w in needed)):
                        yield offset + number, text
                out.close()
                err.close()
                offset += number  # the chunk's last line, which grep printed: see _chunks

    return lines()


def _python_lines(path: str, patterns: list[str]) -> Iterator[tuple[int, str]]:
    any_re = Prefiltered(re.compile("|".join(f"(?:{unnamed(p)})" for p in patterns)))
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            if any_re.search(text):
                yield number, text


def clean(raw: str) -> str:
    """What the follower does to a line: the last `\r` state, no ANSI or control characters."""
    if "\r" in raw:
        parts = [p for p in raw.split("\r") if p.strip()]
        raw = parts[-1] if parts else ""
    return strip_ansi(raw).replace("\n", "")


def _last_time(path: str) -> float | None:
    """The newest timestamp near the end of the file: when the run was last heard of."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - TAIL_BYTES))
        tail = fh.read().decode("utf-8", "replace").splitlines()
    for raw in reversed(tail):
        line = parse_line(clean(raw), path, 0.0)
        if line.ts is not None:
            return line.ts
    return None


def replay(paths: list[str], config: Config, use_grep: bool = True) -> ReplayReport:
    phases = PhaseEngine(config)
    findings = FindingsEngine(config.findings)
    patterns = candidate_patterns(config, findings)
    errors: dict[str, ErrorGroup] = {}
    started: float | None = None
    ended: float | None = None
    method = "grep" if use_grep else "python"
    count = 0
    for path in paths:
        selected = _grep_lines(path, patterns) if use_grep else None
        if selected is None:
            selected, method = _python_lines(path, patterns), "python"
        last_ts: float | None = None
        open_traceback: int | None = None
        waiting: list[tuple[int, LogLine]] = []  # untimed lines before the file's first timestamp

        def feed(number: int, line: LogLine, path: str = path) -> None:
            nonlocal open_traceback
            phases.feed(line)
            findings.feed(line)
            if TRACEBACK in line.text:
                open_traceback = number
            elif open_traceback is not None and EXCEPTION_RE.match(line.text.strip()):
                key = line.text.strip()[:300]
                group = errors.get(key)
                if group is None:
                    errors[key] = ErrorGroup(key, 1, open_traceback, path)
                else:
                    group.count += 1
                open_traceback = None

        for number, raw in selected:
            count += 1
            line = parse_line(clean(raw), path, last_ts or 0.0)
            if line.ts is not None:
                line.seen = last_ts = line.ts  # replayed: the line's own time is the only clock
                started = line.ts if started is None else min(started, line.ts)
                for early_number, early in waiting:  # as early as the first timestamped line after them
                    early.seen = line.ts
                    feed(early_number, early)
                waiting.clear()
            elif last_ts is not None:
                line.seen = last_ts  # untimed: as late as the last timestamped line before it
            else:
                waiting.append((number, line))
                continue
            feed(number, line)
        end = _last_time(path)
        for early_number, early in waiting:  # no timestamp anywhere: the file's own time
            early.seen = end or 0.0
            feed(early_number, early)
        if end is not None:
            ended = end if ended is None else max(ended, end)
    at = ended or phases.last_activity or 0.0
    status = phases.status(at)
    steps = _step_stats(phases)
    return ReplayReport(files=list(paths), status=status, started=started, ended=ended, steps=steps,
                        errors=sorted(errors.values(), key=lambda g: g.first_line), findings=findings.findings(),
                        lines_read=count, method=method)


def _step_stats(phases: PhaseEngine) -> dict[str, Any]:
    steps = list(phases.steps)
    if not steps:
        return {"count": 0}
    times = [s.metrics["timing_s/step"] for s in steps if "timing_s/step" in s.metrics]
    if not times and len(steps) > 1:
        times = [(b.time - a.time) / max(1, b.step - a.step) for a, b in itertools.pairwise(steps) if b.step > a.step]
    slowest = max(steps, key=lambda s: s.metrics.get("timing_s/step", 0.0))
    breakdown: dict[str, list[float]] = {}
    for s in steps:
        for key, value in s.timings.items():
            breakdown.setdefault(key, []).append(value)
    return {
        "count": len({s.step for s in steps}),
        "first": steps[0].step,
        "last": steps[-1].step,
        "mean_s": statistics.fmean(times) if times else None,
        "slowest": {"step": slowest.step, "seconds": slowest.metrics.get("timing_s/step")} if times else None,
        "timing_mean_s": {k: statistics.fmean(v) for k, v in breakdown.items()},
    }


def report_json(report: ReplayReport) -> dict[str, Any]:
    st = report.status
    return {
        "schema": SCHEMA,
        "files": report.files,
        "started": report.started,
        "ended": report.ended,
        "state": st.state,
        "stopped_in": st.current,
        "expected": st.expected,
        "failure": st.failure,
        "hint": asdict(st.hint) if st.hint else None,
        "timeline": [{"name": s.name, "start": s.start, "end": s.end, "duration": s.duration, "status": s.status}
                     for s in st.timeline],
        "steps": report.steps,
        "errors": [asdict(e) for e in report.errors],
        "findings": [asdict(f) for f in report.findings],
        "lines_read": report.lines_read,
        "method": report.method,
    }


def report_text(report: ReplayReport) -> str:
    from gkdtop.format import clock, human_duration

    st = report.status
    out = [f"{', '.join(report.files)}: {human_duration((report.ended or 0) - (report.started or 0))} "
           f"from {clock(report.started)} to {clock(report.ended)}", "", "timeline:"]
    for span in st.timeline:
        dur = human_duration(span.duration) if span.duration is not None else "(unfinished)"
        out.append(f"  {clock(span.start)}  {span.name:<20} {dur:>12}  {span.status}")
    steps = report.steps
    if steps.get("count"):
        mean = f"{steps['mean_s']:.2f}s" if steps.get("mean_s") is not None else "-"
        out += ["", f"steps: {steps['count']} ({steps['first']}..{steps['last']}), mean {mean}/step"]
        if steps.get("slowest"):
            out.append(f"  slowest: step {steps['slowest']['step']} ({steps['slowest']['seconds']:.2f}s)")
        if steps.get("timing_mean_s"):
            out.append("  mean timing: " + "  ".join(f"{k} {v:.2f}s" for k, v in steps["timing_mean_s"].items()))
    if st.state == "done":
        verdict = "finished" if st.current == "finished" else f"finished: {st.current}"
    else:
        prefix = {"failed": "FAILED in", "stalled": "stopped (silent) in"}.get(st.state, "ended in")
        verdict = f"{prefix} {st.current or '-'}"
    out += ["", verdict + (f" (next expected: {st.expected})" if st.expected else "")]
    if st.failure:
        out.append(f"  {st.failure}")
    if st.hint and st.state in ("failed", "stalled"):
        out += [f"  cause: {c}" for c in st.hint.causes] + [f"  try: {a}" for a in st.hint.actions]
    if report.errors:
        out += ["", "errors:"]
        out += [f"  x{g.count}  {g.exception}  (first at {Path(g.source).name}:{g.first_line})" for g in report.errors]
    if report.findings:
        out += ["", "findings:"]
        for f in report.findings:
            out.append(f"  {f.severity} {f.name} x{f.count} {f.fields}")
            out.append(f"    fix: {f.fix}")
    return "\n".join(out) + "\n"
