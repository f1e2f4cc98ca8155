"""Fuzzing the parts that read untrusted text: log bytes, timestamps, Ray prefixes, phase lines, config.

Whatever a training job or a user's YAML throws at them, no exception escapes and what they keep
stays bounded. tests/test_logs.py already fuzzes the follower with random bytes cut anywhere and
plain lines; these add hostile structure (`\\r` storms, ANSI garbage, huge lines, out-of-order
times) and the other parsers. Modest example counts keep the whole file to a few seconds.
"""

from __future__ import annotations

import itertools
import math
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkdtop.analysis import lines as lines_mod
from gkdtop.analysis import phases
from gkdtop.analysis.engine import Analysis
from gkdtop.analysis.lines import parse_line, repeat_count
from gkdtop.analysis.time import parse_timestamp
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import Config, ConfigError, builtin_phases, load_config
from gkdtop.model import LogLine

FAST = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
CONTROL = {chr(c) for c in range(32) if c != 9} | {chr(c) for c in range(0x7F, 0xA0)}

# --- hostile log bytes ---------------------------------------------------------------------------

ANSI = st.sampled_from([
    b"\x1b[31m", b"\x1b[0m", b"\x1b[2K", b"\x1b[1A", b"\x1b]0;title\x07", b"\x1b]8;;http://x\x1b\\",
    b"\x1b]", b"\x1b[", b"\x1b[38;5;", b"\x1b(B", b"\x1b", b"\x9b31m", b"\xc2\x9b", b"\x00", b"\x7f",
])
TOKENS = st.one_of(
    ANSI,
    st.integers(1, 400).map(lambda n: b"\r" * n),  # a \r storm
    st.integers(1, 50).map(lambda n: b"\r\n" * n),
    st.integers(1, 30).map(lambda n: b"\n" * n),
    st.integers(100, 40_000).map(lambda n: b"x" * n),  # a huge line
    st.integers(1, 40).map(lambda n: "é€😀".encode() * n),
    st.binary(max_size=64),  # junk, invalid UTF-8 included
    st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"(WorkerDict pid=12, ip=1.2.3.4) ", b"2026-01-11 10:00:05,123 ", b"I0111 10:00:00.1 ",
                     b"Processed prompts:  50%|#####     | 5/10 [00:01<00:01, 4.2it/s]"]),
)


@FAST
@given(tokens=st.lists(TOKENS, max_size=40), cuts=st.lists(st.integers(1, 60_000), max_size=5),
       max_line=st.sampled_from([16, 200, 4096]))
def test_hostile_bytes_give_clean_bounded_lines(tokens: list[bytes], cuts: list[int], max_line: int) -> None:
    data = b"".join(tokens)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "h.log"
        log.write_bytes(b"")
        collector = LogCollector([str(log)], max_line=max_line)
        collector.collect()
        follower = collector._files[str(log)]
        bounds = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
        produced: list[LogLine] = []
        for start, end in itertools.pairwise(bounds):
            with open(log, "ab") as fh:
                fh.write(data[start:end])
            batch = collector.collect()
            produced += batch.lines + list(batch.progress.values())
            # The unfinished line is kept bounded, however long it grows or however many \r it gets.
            assert len(follower.partial) <= follower.cap
        with open(log, "ab") as fh:
            fh.write(b"\n")
        produced += collector.collect().lines
        collector.close()
    for line in produced:
        assert len(line.raw) <= max_line and len(line.text) <= max_line
        assert not CONTROL & set(line.raw), repr(line.raw[:80])
    assert sum(not ln.progress for ln in produced) == data.count(b"\n") + 1


@FAST
@given(st.binary(max_size=3000) | st.lists(TOKENS, max_size=20).map(b"".join))
def test_collapse_leaves_no_carriage_return_and_keeps_the_lines(data: bytes) -> None:
    cleaned = lines_mod.clean_bytes(data)
    collapsed = lines_mod.collapse_lines(cleaned)
    assert b"\r" not in collapsed
    assert collapsed.count(b"\n") == cleaned.count(b"\n")
    text = lines_mod.decode(collapsed)
    assert not (CONTROL - {"\n"}) & set(text)


# --- timestamps and prefixes ---------------------------------------------------------------------

# Longer than int() converts by default (4,300 digits): a number in a log line must not raise.
DIGITS = st.integers(1, 6000).map(lambda n: "9" * n) | st.integers(0, 10**6).map(str)
OFFSETS = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
MOMENTS = st.datetimes(min_value=datetime(1971, 1, 2), max_value=datetime(2200, 12, 30))


@FAST
@given(moment=MOMENTS, tz=OFFSETS, sep=st.sampled_from(["T", " "]), zone_colon=st.booleans(),
       micro=st.booleans())
def test_iso_timestamps_with_any_offset_read_back_exactly(moment: datetime, tz: timezone, sep: str,
                                                          zone_colon: bool, micro: bool) -> None:
    moment = moment.replace(tzinfo=tz, microsecond=moment.microsecond if micro else 0)
    offset = moment.strftime("%z")
    zone = offset[:3] + ":" + offset[3:] if zone_colon else offset
    text = moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + (f".{moment.microsecond:06d}" if micro else "") + zone
    parsed = parse_timestamp(text + " rest of the line")
    assert parsed is not None and math.isclose(parsed, moment.timestamp(), abs_tol=1e-5), text


@settings(max_examples=150, deadline=None, database=None)
@given(st.from_regex(r"\A\[?\d{1,5}[-/]\d{1,3}[-/]\d{1,3}[T ]\d{1,3}:\d{1,3}:\d{1,4}([.,]\d{0,40})?"
                     r"(Z|[+-]\d{2,4}:?\d{0,3})?\]?", fullmatch=True)
       | st.from_regex(r"\A[IWEF]\d{3,5} \d\d:\d\d:\d\d(\.\d{0,30})?", fullmatch=True)
       | st.from_regex(r"\A(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d", fullmatch=True))
def test_malformed_timestamps_are_none_or_finite(text: str) -> None:
    ts = parse_timestamp(text)
    assert ts is None or math.isfinite(ts)


@FAST
@given(name=st.text(max_size=30), pid=st.integers(0, 10**300) | st.text(max_size=8), ip=st.text(max_size=20),
       rest=st.text(max_size=200), repeats=DIGITS)
def test_ray_prefixes_and_repeat_counts_never_raise(name: str, pid: object, ip: str, rest: str, repeats: str) -> None:
    raw = f"({name} pid={pid}, ip={ip}) {rest} [repeated {repeats}x across cluster]"
    raw = "".join(c for c in raw if c not in CONTROL)
    line = parse_line(raw, "f", 0.0)
    assert line.raw == raw and line.text
    assert line.pid is None or line.pid >= 0
    assert repeat_count(raw) >= 0


# --- the phase engine ----------------------------------------------------------------------------

PHASE_TEXT = st.sampled_from([
    "Loading config", "phase 'config' DONE", "Starting dataset generation", "Dataset generation completed",
    "Creating ResourcePool", "ResourcePool created", "Initializing Actor Worker", "Actor Worker initialized",
    "Initializing Rollout Worker", "Rollout Worker initialized", "[SYNC] Start", "[SYNC] ✓",
    "Traceback (most recent call last):", "RuntimeError: boom", "✗ worker failed", "Training finished",
    "Processed prompts:  40%|####      | 4/10 [00:01<00:02, 3.1it/s]", "still waiting for workers",
    "CUDA out of memory. Tried to allocate 2.00 GiB",
])
STEP_TEXT = st.builds(
    lambda step, metrics: f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in metrics),
    DIGITS,
    st.lists(st.tuples(st.sampled_from(["actor/pg_loss", "timing_s/step", "x"]),
                       st.sampled_from(["nan", "inf", "-inf", "1e999", "0.5", "-3", "9" * 500])), max_size=4),
)
LINE_TEXT = PHASE_TEXT | STEP_TEXT | st.text(max_size=120)


@FAST
@given(events=st.lists(st.tuples(LINE_TEXT, st.floats(-1e12, 1e12, allow_nan=False), st.booleans()),
                       max_size=120),
       now=st.floats(-1e12, 1e12, allow_nan=False))
def test_phase_engine_takes_anything_in_any_order_and_stays_bounded(
        events: list[tuple[str, float, bool]], now: float) -> None:
    with mock.patch.object(phases, "MAX_SPANS", 5), mock.patch.object(phases, "MAX_RECENT_STEPS", 7):
        analysis = Analysis(Config(phases=builtin_phases()).rules())
    engine = analysis.phases
    for text, t, progress in events:  # timestamps jump backwards and forwards at random
        line = LogLine("f", text, t, t, "", None, "", 0, progress, False, text)
        if progress:
            analysis.feed_progress(line)
        else:
            analysis.feed([line])
        assert len(engine.timeline) <= 5 and len(engine.recent_steps) <= 7 and len(engine.first_spans) <= 20
        assert len(engine._bar_keys) <= 1001
    status = engine.status(now)
    assert status.state in {"waiting", "running", "stalled", "done", "failed"}
    assert len(status.timeline) <= 25


# --- the config loader ---------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["1e400", ".inf", ".nan", "-1", "(", "[a-", "0"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["name", "start", "done", "hint", "causes", "match", "extra", "within", "default", "ui"]),
    inner, max_size=3), max_leaves=8)
TOP = st.sampled_from(["stall_after", "phases", "phases_mode", "filters", "idle_patterns", "fail_pattern",
                       "driver_patterns", "logs", "backlog", "max_line", "refresh", "findings", "bogus"])


def _load(text: str) -> Config | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_config(path)
        except ConfigError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc)
            return None


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(TOP, VALUES, max_size=4))
def test_config_loader_gives_a_config_or_one_line_error(doc: dict[str, object]) -> None:
    cfg = _load(yaml.safe_dump(doc, allow_unicode=True))
    if cfg is not None:
        assert all(math.isfinite(v) and v > 0 for v in cfg.refresh.values())
        assert math.isfinite(cfg.stall_after) and cfg.backlog >= 0 and cfg.max_line > 0


@FAST
@given(st.text(max_size=300) | st.sampled_from([
    "? [a, b]\n: 1\n", "refresh: {? [ui]: 1}\n", "filters: {? {a: 1}: x}\n", "backlog: 1e400\n", "max_line: .inf\n",
    "stall_after: .nan\n", "refresh: {ui: .inf}\n", "a: &x [*x]\n", "[" * 200, "phases: [{name: a, start: '('}]\n",
    "findings: [{name: a, match: b, within: 1e999}]\n", "\ufeffstall_after: 3\n", "- 1\n", "!!binary x\n",
]))
def test_config_loader_on_raw_text(text: str) -> None:
    _load(text)
