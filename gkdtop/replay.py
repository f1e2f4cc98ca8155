"""`gkdtop replay LOG...`: the phase timeline, steps, where the run stopped and its errors, after the fact.

Streams, never loads a file: GNU grep (a DFA, gigabytes per second) picks the candidate lines
with every pattern the phase engine and the findings know, and only those are parsed in Python.
Without grep, or for a pattern grep cannot take, the same selection runs in Python.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gkdtop.collectors.findings import FindingsEngine, unnamed
from gkdtop.collectors.logs import parse_line, strip_ansi
from gkdtop.collectors.phases import EXCEPTION_RE, STEP_RE, PhaseEngine
from gkdtop.collectors.prefilter import Prefiltered
from gkdtop.config import Config
from gkdtop.model import Finding, LogLine, PhaseStatus

SCHEMA = 1
TRACEBACK = "Traceback (most recent call last)"
TAIL_BYTES = 64 * 1024


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


def candidate_patterns(config: Config, findings: FindingsEngine) -> list[str]:
    pats = [STEP_RE.pattern, config.fail_pattern, re.escape(TRACEBACK), EXCEPTION_RE.pattern.lstrip("^")]
    for rule in config.phases:
        pats += [p.pattern for p in (rule.start, rule.done, rule.fail) if p is not None]
    for sig in findings.signatures:
        pats += [sig.match.pattern, *(e.pattern for e in sig.extra)]
    return pats


GREP_ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
CHUNK_MIN = 64 * 1024 * 1024  # below this one grep is as fast as several


def _chunks(path: str, jobs: int) -> list[tuple[int, int]]:
    """`jobs` byte ranges of the file that start and end on line boundaries."""
    size = Path(path).stat().st_size
    if jobs < 2 or size < CHUNK_MIN:
        return [(0, size)]
    cuts = [0]
    with open(path, "rb") as fh:
        for i in range(1, jobs):
            fh.seek(max(size * i // jobs, cuts[-1]))
            fh.readline()
            if fh.tell() < size:
                cuts.append(fh.tell())
    cuts.append(size)
    return list(itertools.pairwise(cuts))


def _range_reader(path: str, start: int, end: int, size: int) -> tuple[Any, subprocess.Popen[bytes] | None]:
    """The bytes [start, end) of the file: the file itself, positioned, when `end` is its end; else a pipe
    from `dd` (4 MiB blocks: half the cost of `head -c`, which copies 8 KiB at a time)."""
    if end >= size:
        fh = open(path, "rb")  # noqa: SIM115 - handed to a child process, closed by the caller
        fh.seek(start)
        return fh, None
    dd = subprocess.Popen(["dd", f"if={path}", "bs=4M", f"skip={start}", f"count={end - start}",
                           "iflag=skip_bytes,count_bytes", "status=none"], stdout=subprocess.PIPE, env=GREP_ENV)
    return dd.stdout, dd


def _grep_lines(path: str, patterns: list[str], jobs: int | None = None) -> Iterator[tuple[int, str]] | None:
    """Candidate lines with their line numbers, selected by GNU grep; a large file in parallel chunks.

    The chunks' greps (and, for every chunk but the last, a `wc -l` of it, to number the next chunk's
    lines) run at once, each writing to a temporary file, so a chunk with many matches never blocks
    another; the results are then read back in file order.
    """
    grep = shutil.which("grep")
    eres = [to_ere(p) for p in patterns]
    if grep is None or any(e is None for e in eres) or not (shutil.which("dd") and shutil.which("wc")):
        return None
    args = [grep, "-n", "-a", "-E"]
    for e in eres:
        args += ["-e", e]  # type: ignore[list-item]
    size = Path(path).stat().st_size
    chunks = _chunks(path, jobs if jobs is not None else min(os.cpu_count() or 1, 4))

    def lines() -> Iterator[tuple[int, str]]:
        with tempfile.TemporaryDirectory(prefix="gkdtop-replay-") as tmp:
            running = []
            for i, (start, end) in enumerate(chunks):
                out = open(Path(tmp) / f"{i}.out", "w+b")  # noqa: SIM115 - closed below
                err = open(Path(tmp) / f"{i}.err", "w+b")  # noqa: SIM115 - closed below
                reader, feeder = _range_reader(path, start, end, size)
                proc = subprocess.Popen(args, stdin=reader, stdout=out, stderr=err, env=GREP_ENV)
                reader.close()
                count = None
                if end < size:  # how many lines this chunk holds: the next chunk's numbers start after them
                    counter, counter_feeder = _range_reader(path, start, end, size)
                    count = subprocess.Popen(["wc", "-l"], stdin=counter, stdout=subprocess.PIPE, env=GREP_ENV)
                    counter.close()
                    running.append((proc, out, err, count, [feeder, counter_feeder]))
                else:
                    running.append((proc, out, err, count, [feeder]))
            offset = 0
            for proc, out, err, count, feeders in running:
                code = proc.wait()
                for feeder in feeders:
                    if feeder is not None:
                        feeder.wait()
                if code > 1:
                    err.seek(0)
                    message = err.read().decode(errors="replace").strip()
                    raise OSError(message.splitlines()[0] if message else f"grep failed on {path}")
                out.seek(0)
                for raw in out:
                    number, _, rest = raw.partition(b":")
                    yield offset + int(number), rest.rstrip(b"\r\n").decode("utf-8", "replace")
                out.close()
                err.close()
                if count is not None:
                    offset += int(count.communicate()[0].split()[0])

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
