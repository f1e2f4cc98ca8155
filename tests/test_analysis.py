"""The analysis layer (gkdtop/analysis): one matcher for every rule, honest time, whole-run steps,
strict JSON, probe phases of any name, and snapshot == replay on the same file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gkdtop.analysis import matcher as matcher_mod
from gkdtop.analysis.engine import Analysis
from gkdtop.analysis.lines import message_start
from gkdtop.analysis.matcher import Matcher, PatternError, compile_pattern
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import ConfigError, load_config
from gkdtop.model import LogLine
from gkdtop.store import Store
from tests.gkdlog import asctime, ray, startup

GKDTOP = [sys.executable, "-m", "gkdtop"]


@pytest.fixture(params=["hyperscan", "re2"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every matcher test runs on both engines: RE2 alone is what aarch64 nodes (no Hyperscan wheel) get."""
    if request.param == "hyperscan" and matcher_mod.hyperscan is None:
        pytest.skip("no Hyperscan wheel on this machine: the RE2 engine is the one in use")
    if request.param == "re2":
        monkeypatch.setattr(matcher_mod, "hyperscan", None)
    return request.param


def message_of(raw: str) -> str:
    from gkdtop.analysis.lines import split_prefix

    return split_prefix(raw)[1]


PATTERNS = [r"step:(\d{1,18})\s+-\s", r"(?i)loading shards", r"^Traceback", r"[^.]+ DONE$", r"\bpid=\d+",
            r"a+$", r"Worker exit detail: (?P<d>[^.]+)", r"✓ phase", r"ip=10\.0\.0\.7",
            # `$` ending some top-level branches (made to report at the line's end), inside a group (left as is), and
            # `$` and `|` in a class
            r"Started: 'step'$|step:\d+ -|^DONE$", r"Error(?::|\s*$)", r"[$|]b$|\(pid",
            # `^` branches the quick scan reads as "after anything a prefix ends with" (HEAD_END), then again exactly
            r"^Step \d+|step done", r"(?:^|[\s:])100%\|", r"(?i)^foo|bar", r"^ {0,4}\d{1,3}%\|"]
LINES = ["(TaskRunner pid=7, ip=10.0.0.7) step:3 - timing_s/step:1.0", "LOADING Shards of the model",
         "(WorkerDict pid=9) Traceback (most recent call last):", "  Traceback in the middle",
         "phase x DONE", "(pid=3) rank 1 DONE", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "aaaa",
         "Worker exit detail: killed by OOM.", "(TaskRunner pid=1) ✓ phase 'x' DONE in 1 s", "step:4 -\nx",
         "plain line without anything", "(W pid=1, ip=10.0.0.7) no ip in the message",
         "(TaskRunner pid=7) Started: 'step'", "Started: 'step' again", "DONE", "ValueError: x", "an Error",
         "ends in $b", "ends in |b|",
         # each kind of prefix before a message that begins a `^` branch, and those ends of a prefix mid-line
         "(W pid=1) Step 3", "  3: (W pid=1) Step 4", "[2026-01-02 03:04:05] (W pid=1) Step 5",
         "2026-01-02T03:04:05.123Z Step 6", "2026-01-02T03:04:05Z trainer-0   | Step 7", "[1,0]<stdout>:Step 8",
         "[1,0]<stdout>: FOO bar", "x) Step 9", "a | Step 10", "job 12 Step 11", "run Z Step 12", "x>: Step 13",
         "(W pid=1)100%|##| 3/3", "(W pid=1) 100%|##| 3/3", "loss) 100%|#| 1/1", "so)100%| 9", "Steps 100%| 9",
         "(W pid=2)  12%|#| 1/8", "x:  12%|#| 1/8", "Z  12%|#| 1/8", "(W pid=3) (x) Step 14", "(a) (b)Step 15"]


def expected(patterns: list[str], lines: list[str]) -> list[set[int]]:
    return [{i for i, p in enumerate(patterns) if re.search(p, message_of(line))} for line in lines]


def test_every_pattern_meets_every_line_as_python_re_would(engine: str) -> None:
    m = Matcher([compile_pattern(p) for p in PATTERNS], message=message_of)
    assert m.engine == engine
    lines = [x for line in LINES for x in line.split("\n")]
    data = "\n".join(lines).encode()
    got = [set() for _ in lines]
    for start, _end, ids in m.scan(data):
        index = data.count(b"\n", 0, start)
        raw = lines[index]
        message = message_of(raw)
        prefix = raw[: len(raw) - len(message)]
        got[index] = set(m.confirm(message, ids, prefix, everything=not raw.isascii()))
        if raw.isascii() and message_start(raw.encode()) == len(prefix):  # history's fast path: from the bytes
            assert set(m.confirm_ascii(raw.encode(), len(prefix), ids)) == got[index]
    assert got == expected(PATTERNS, lines)
    texts = [message_of(line) for line in lines]
    by_text = m.scan_texts(texts)
    assert [set(by_text.get(i, ())) for i in range(len(texts))] == expected(PATTERNS, texts)


@pytest.mark.parametrize(("pattern", "chunked", "inside"), [
    ("a$|b", rb"(?:a|(?:b)[^\n]*)$", False),
    (r"x\$|y[$|)]$", rb"(?:y[$|)]|(?:x\$)[^\n]*)$", False),  # an escaped `$`, a class holding `$`, `|` and `)`
    ("(?:a|b)$|c", rb"(?:(?:a|b)|(?:c)[^\n]*)$", False),
    (r"rank \d+ BAD[[:punct:]|]$", rb"(?:rank \d+ BAD[[:punct:]|])$", False),  # a POSIX class in a class
    (r"\Q| nan |\E$|went nan", rb"(?:\|\ nan\ \||(?:went nan)[^\n]*)$", False),  # quoted text: no branch in it
    ("(?:a$|b)c", rb"(?:a$|b)c", True),  # a `$` inside a group: hits may end inside a line
    ("a$b|c", rb"a$b|c", True),
])
def test_a_pattern_with_its_own_dollar_is_brought_to_the_end_of_its_line(pattern: str, chunked: bytes,
                                                                         inside: bool) -> None:
    """Hyperscan reports a hit at its end: every branch made to run on to the line's end reports a line once, and
    no hit ends inside a line (which would take the scan's slower path for the whole chunk)."""
    from gkdtop.analysis.matcher import for_chunks

    expression, when = for_chunks(pattern)
    assert expression == chunked and ("$" in when) == inside


@pytest.mark.parametrize(("pattern", "parts"), [
    (r"a|^b|[|^(]c|(x|^y)z", ("a|[|^(]c", "^b|(x|^y)z")),  # `|`, `^` and `(` in a class are members
    ("(?:^|[\\s:])100%\\|", ("", "(?:^|[\\s:])100%\\|")),  # a `^` in a group goes with its branch
    ("(?i)^foo|bar", ("(?i)bar", "(?i)^foo")),  # flags at the start hold for both
    (r"x\|^y|[^|]z", ("[^|]z", r"x\|^y")),  # an escaped `|` is no branch; `[^` no anchor
    (r"[]|^]a|^b", ("[]|^]a", "^b")),  # `]` first in a class is a member
    ("Worker exit: (?P<d>[^.]+)", ("Worker exit: (?P<d>[^.]+)", "")),
    ("a(?i)b|^c", None),  # flags from the middle on
    (r"\Q^x|\E|^y", None),  # quoted text
])
def test_a_pattern_splits_into_its_branches_with_and_without_an_anchor(pattern: str,
                                                                       parts: tuple[str, str] | None) -> None:
    """The quick scan reads `^` branches apart from the rest (HEAD_END, then again exactly): the split must
    keep every branch whole and each on its side."""
    from gkdtop.analysis.matcher import anchored_split

    assert anchored_split(pattern) == parts


@pytest.mark.parametrize(("pattern", "hits", "misses"), [
    (r"\Q| nan |\E$|eval loss went nan", ["eval table | nan |", "eval loss went nan at 3"], ["a[x]|b", "| nan | x"]),
    (r"rank \d+ BAD[[:punct:]|]$", ["rank 3 BAD!", "rank 3 BAD|"], ["ax", "bx", "!!", "rank 3 BAD! x"]),
    (r"v\Q1.5\E", ["v1.5"], ["v1x5"]),
])
def test_quoted_text_and_posix_classes_match_alike_in_both_engines(engine: str, pattern: str, hits: list[str],
                                                                   misses: list[str]) -> None:
    """Review of session 24: `\\Q…\\E` was translated for Hyperscan as a pattern (its `|` a branch, its `.` any
    character), and a POSIX class ended a class early where branches were split: lines missed, lines flagged."""
    m = Matcher([compile_pattern(pattern)], message=message_of)
    data = "\n".join(hits + misses).encode()
    found = {data.count(b"\n", 0, start) for start, _end, ids in m.scan(data) if ids}
    assert found == set(range(len(hits)))


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab (pid=1)DONE.\t:-step0123✓\\^$[]", max_size=40), max_size=12))
def test_scan_agrees_with_re_on_generated_lines(lines: list[str]) -> None:
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    m = Matcher([compile_pattern(p) for p in PATTERNS], message=message_of)
    texts = [message_of(line) for line in lines]
    by_text = m.scan_texts(texts)
    assert [set(by_text.get(i, ())) for i in range(len(texts))] == expected(PATTERNS, texts)


@pytest.mark.parametrize(("pattern", "says"), [
    (r"(?<=x)y", "lookarounds are not supported"),
    (r"(a)\1", "back-references are not supported"),
    ("a{4294967296}", "invalid regular expression"),
    ("(" * 5000 + "a" + ")" * 5000, "characters long"),
    ("a\0b", "NUL"),
    ("[", "invalid regular expression"),
])
def test_a_pattern_no_engine_takes_is_a_one_line_config_error(tmp_path: Path, pattern: str, says: str) -> None:
    with pytest.raises(PatternError, match=re.escape(says)):
        compile_pattern(pattern)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("phases:\n  - name: mine\n    start: " + json.dumps(pattern) + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    message = str(info.value)
    assert message.startswith(f"{cfg}:3: phases[0].start: ") and says in message and "\n" not in message


def test_inline_flags_hold_per_rule_and_no_rule_breaks_another(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(textwrap.dedent("""\
        phases:
          - name: load shards
            start: '(?i)loading shards'
            done: '(?i)shards loaded'
        findings:
          - name: my-segfault
            match: '(?i)segfault at (?P<addr>[0-9a-f]+)'
          - name: greedy
            match: '(a+)+$'
        """))
    analysis = Analysis(load_config(cfg).rules())  # the old engine joined every rule: `(?i)` mid-pattern crashed it
    t = time.time()
    analysis.feed([LogLine("f", "Loading SHARDS from /ckpt", t, t), LogLine("f", "SegFault at 7fff0b1", t, t),
                   LogLine("f", "a" * 50_000 + "!", t, t)])  # `(a+)+$` on Python's re would never return
    status = analysis.status(t + 1)
    assert status.current == "load shards" and status.state == "running"
    assert [(f.name, f.fields) for f in analysis.findings()] == [("my-segfault", {"addr": "7fff0b1"})]


def test_a_catastrophic_pattern_costs_linear_time_in_replay(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("findings:\n  - name: greedy\n    match: '(a+)+$'\n")
    log = tmp_path / "train.log"
    log.write_text(("a" * 30_000 + "!\n") * 20 + "aaaa\n")
    done = subprocess.run([*GKDTOP, "replay", "--json", "--config", str(cfg), str(log)], capture_output=True,
                          text=True, timeout=120)  # Python's re: 2^30000 steps, it would never return
    assert done.returncode == 0, done.stderr
    assert [f["name"] for f in json.loads(done.stdout)["findings"]] == ["greedy"]


def strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_a_nan_loss_is_null_plus_a_note_in_every_json(tmp_path: Path) -> None:
    t0 = time.time() - 60
    lines, _ = startup(t0, steps=2)
    lines.append(ray("TaskRunner", 9, "step:3 - actor/pg_loss:nan - critic/score/mean:inf - timing_s/step:1.5"))
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    snap = strict_json(subprocess.run([*GKDTOP, "snapshot", "--json", "--log", str(log)], capture_output=True,
                                      text=True, timeout=120, check=True).stdout)
    metrics = snap["phases"]["steps"]["metrics"]
    assert metrics["actor/pg_loss"] is None and metrics["critic/score/mean"] is None
    assert "phases.steps.metrics.actor/pg_loss: nan" in snap["nonfinite"]
    assert any(f["name"] == "nan-loss" for f in snap["findings"])
    rep = strict_json(subprocess.run([*GKDTOP, "replay", "--json", str(log)], capture_output=True, text=True,
                                     timeout=120, check=True).stdout)
    assert rep["steps"]["count"] == 3 and any(f["name"] == "nan-loss" for f in rep["findings"])


def test_probe_phases_of_any_name_are_phases(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    script = textwrap.dedent("""\
        import time
        from gkdtop import probe
        with probe.phase("load shards"):
            time.sleep(0.05)
        with probe.phase("warm the cache"):
            time.sleep(0.05)
        try:
            with probe.phase("tokenize"):
                raise ValueError("bad row 17")
        except ValueError:
            pass
        probe.log("phase 'compile kernels' START")
        """)
    with log.open("w") as fh:
        subprocess.run([sys.executable, "-c", script], stderr=fh, check=True, timeout=60)
    rep = strict_json(subprocess.run([*GKDTOP, "replay", "--json", str(log)], capture_output=True, text=True,
                                     timeout=60, check=True).stdout)
    assert [(s["name"], s["status"]) for s in rep["timeline"]] == [
        ("load shards", "done"), ("warm the cache", "done"), ("tokenize", "failed"), ("compile kernels", "running")]
    assert rep["stopped_in"] == "compile kernels"


def steps_log(path: Path, steps: int, t0: float) -> list[float]:
    """A verl-shaped run: vLLM INFO chatter with year-less stamps, a bar, a metrics line per step."""
    seconds = [1.0 + (i * 7919 % 1000) / 100 for i in range(steps)]  # 1.00 .. 10.99, shuffled
    t = t0
    with path.open("w") as fh:
        fh.write(ray("TaskRunner", 7, f"{asctime(t0)} root INFO Configuration loaded") + "\n")
        for step, s in enumerate(seconds, 1):
            t += s
            stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(t))
            fh.write(ray("WorkerDict", 8, f"INFO {stamp} [metrics.py:455] Avg prompt throughput: 1.0 tokens/s") + "\n")
            fh.write(ray("WorkerDict", 8, f"Processed prompts: 100%|####| 8/8 [00:01<00:00, {step}.0it/s]") + "\n")
            fh.write(ray("TaskRunner", 7, f"step:{step} - actor/pg_loss:{1 / step:.4f} - timing_s/gen:{s / 2:.3f}"
                                           f" - timing_s/step:{s:.3f} - perf/throughput:123.4") + "\n")
    os.utime(path, (t, t))
    return seconds


def test_steps_are_the_whole_run_with_exact_statistics(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    seconds = steps_log(log, 5000, time.time() - 40_000)
    rep = strict_json(subprocess.run([*GKDTOP, "replay", "--json", str(log)], capture_output=True, text=True,
                                     timeout=120, check=True).stdout)
    steps = rep["steps"]
    ordered = sorted(round(s, 3) for s in seconds)
    assert (steps["count"], steps["first"], steps["last"]) == (5000, 1, 5000)  # not the last 2,000
    assert steps["p50_s"] == pytest.approx(ordered[2499], abs=1e-6)
    assert steps["p95_s"] == pytest.approx(ordered[int(0.95 * 4999)], abs=1e-6)
    assert steps["max_s"] == pytest.approx(ordered[-1]) and len(steps["slowest"]) == 5
    assert sorted(s["seconds"] for s in steps["slowest"]) == pytest.approx(ordered[-5:])
    assert steps["timing"]["gen"]["mean_s"] == pytest.approx(sum(round(s / 2, 3) for s in seconds) / 5000, abs=1e-6)
    assert steps["trend"] == pytest.approx(1.0, abs=0.1)


def comparable(doc: dict, kind: str) -> dict:
    """What snapshot and replay must agree on: phases, steps, failure, findings."""
    phases = doc["phases"] if kind == "snapshot" else doc
    run = doc["phases"]["steps"]["run"] if kind == "snapshot" else doc["steps"]
    return {
        "timeline": [(s["name"], s["status"]) for s in phases["timeline"]],
        "current": phases["current"] if kind == "snapshot" else phases["stopped_in"],
        "failure": phases["failure"],
        "steps": {k: run.get(k) for k in ("count", "first", "last", "mean_s", "p95_s")},
        "findings": sorted((f["name"], f["count"]) for f in doc["findings"]),
    }


def crash_log(path: Path, t0: float) -> None:
    lines, last = startup(t0, steps=3, step_s=5)
    lines += [ray("WorkerDict", 11, f"{asctime(last + 1)} root ERROR Watchdog caught collective operation timeout: "
                                   "WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                                   "ran for 600042 milliseconds before timing out."),
              ray("WorkerDict", 11, "[Rank 1] Some NCCL operations have failed or timed out."),
              ray("TaskRunner", 9, "Traceback (most recent call last):"),
              ray("TaskRunner", 9, '  File "main_gkd.py", line 9, in <module>'),
              ray("TaskRunner", 9, "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.")]
    path.write_text("".join(line + "\n" for line in lines))
    os.utime(path, (last + 2, last + 2))


def test_snapshot_states_what_replay_states_on_the_same_file(tmp_path: Path) -> None:
    t0 = time.time() - 20_000
    crash_log(tmp_path / "crash.log", t0)
    steps_log(tmp_path / "steps.log", 3000, t0)
    lines, _ = startup(t0, steps=0, upto="sync")
    (tmp_path / "hung.log").write_text("".join(line + "\n" for line in lines))
    for name in ("crash.log", "steps.log", "hung.log"):
        path = str(tmp_path / name)
        snap = strict_json(subprocess.run([*GKDTOP, "snapshot", "--json", "--log", path], capture_output=True,
                                          text=True, timeout=120, check=True).stdout)
        rep = strict_json(subprocess.run([*GKDTOP, "replay", "--json", path], capture_output=True, text=True,
                                         timeout=120, check=True).stdout)
        assert comparable(snap, "snapshot") == comparable(rep, "replay"), name
    assert comparable(snap, "snapshot")["current"] == "weight sync"


def test_an_unterminated_last_line_counts_once_the_file_is_idle(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 3600, steps=2, step_s=5)
    log = tmp_path / "train.log"
    cut = ray("WorkerDict", 11, f"{asctime(last + 1)} root ERROR Watchdog caught collective operation timeout: "
                                "WorkNCCL(SeqNum=7, OpType=ALLRED")  # the process died mid-write
    log.write_text("".join(line + "\n" for line in lines) + cut)

    def state() -> str:
        doc = strict_json(subprocess.run([*GKDTOP, "snapshot", "--json", "--log", str(log)], capture_output=True,
                                         text=True, timeout=60, check=True).stdout)
        return doc["phases"]["state"]

    os.utime(log, (time.time(), time.time()))  # still being written: the line is not complete yet
    assert state() != "failed"
    quiet = time.time() - 900
    os.utime(log, (quiet, quiet))  # idle for 15 minutes: that was the last line
    assert state() == "failed"


def follow(store: Store, collector: LogCollector, until, deadline: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline
    while not until():
        assert time.monotonic() < end, "condition not reached"
        store.put("logs", collector.collect())
        time.sleep(0.05)


WRITER = textwrap.dedent("""\
    import sys, time
    path, skew = sys.argv[1], float(sys.argv[2])
    with open(path, "a") as fh:
        for step in range(1, 10_000):
            t = time.time() - skew  # a node clock `skew` seconds behind (or a zone this machine doesn't use)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
            fh.write(f"(TaskRunner pid=1) {stamp},000 root INFO step:{step} - timing_s/step:0.2\\n")
            fh.flush()
            time.sleep(0.2)
    """)


@pytest.mark.parametrize(("writer_tz", "skew", "offset"), [
    ("UTC", 0.0, 8 * 3600),  # the job's container stamps in UTC; the dashboard runs in UTC+8
    ("Asia/Shanghai", 600.0, 600.0),  # a node clock 10 minutes behind
])
def test_a_clock_or_zone_offset_is_measured_and_is_not_a_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               writer_tz: str, skew: float, offset: float) -> None:
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    from gkdtop.actions.stall_stacks import StallStacker

    log = tmp_path / "train.log"
    env = {**os.environ, "TZ": writer_tz}
    subprocess.run([sys.executable, "-c", WRITER.replace("range(1, 10_000)", "range(-3, 0)").replace(
        "time.sleep(0.2)", "pass"), str(log), str(skew)], env=env, check=True)  # what it wrote before we opened it
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(skew)], env=env)
    try:
        config = load_config(None)
        config.stall_after = 3.0  # 15 of its 0.2 s steps (stamped to the second) without a line
        for rule in config.phases:
            rule.stall_after = None
        store = Store(config)
        collector = LogCollector([str(log)], backlog=50)
        stacker = StallStacker(store, dump=lambda targets: pytest.fail("a stack dump for a clock offset"))
        store.put("logs", collector.collect())  # the history alone: its stamps look hours old
        assert stacker.due() == []  # no dump before the first live lines have shown the clock's offset
        follow(store, collector, lambda: store.phase_status().steps_done >= 8)
        status = store.phase_status()
        assert status.state == "running" and status.stalled_for is None
        assert stacker.due() == []  # the stall-time dump does not fire
        assert status.clock_offset == pytest.approx(offset, abs=30)
        writer.kill()
        writer.wait()
        follow(store, collector, lambda: store.phase_status().state == "stalled", deadline=60)  # a real stall still is
    finally:
        writer.kill()
        writer.wait()
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "soon"])
def test_stall_after_takes_only_positive_finite_seconds(tmp_path: Path, value: str) -> None:
    log = tmp_path / "x.log"
    log.write_text("x\n")
    done = subprocess.run([*GKDTOP, "replay", f"--stall-after={value}", str(log)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--stall-after" in done.stderr and "Traceback" not in done.stderr


def test_every_builtin_pattern_compiles_in_every_engine() -> None:
    """Built-in rules are compiled lazily at start-up (they were checked here)."""
    from gkdtop.analysis.rules import builtin_phases, builtin_signatures
    from gkdtop.config import DEFAULT_FILTER, DRIVER_PATTERNS, FAIL_PATTERN, IDLE_PATTERNS

    texts = [DEFAULT_FILTER, FAIL_PATTERN, *IDLE_PATTERNS, *DRIVER_PATTERNS]
    texts += [p.text for rule in builtin_phases() for p in (rule.start, rule.done, rule.fail) if p is not None]
    texts += [p.text for sig in builtin_signatures() for p in (sig.match, *sig.extra)]
    from gkdtop.analysis.profiles import builtin_profiles

    profiles = builtin_profiles()
    texts += [p.text for prof in profiles.profiles for p in (*prof.evidence, *prof.commands)]
    texts += [value.match.text for values in profiles.traits.values() for value in values]
    # RE2 and, where installed, Hyperscan (which lets go of the GIL while it compiles: two at a time).
    with ThreadPoolExecutor(max_workers=2) as pool:
        patterns = list(pool.map(compile_pattern, texts))
    assert len(Matcher(patterns).patterns) == len(texts)


def test_a_stretch_no_rule_knows_is_said_not_charged_to_a_phase(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 4000, upto="rollout")
    lines += [ray("WorkerDict", 21, f"[{asctime(last + i)}] sglang: loading weight part {i}") for i in range(37)]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last + 36, last + 36))  # written when its last line was, as the job left it
    rep = strict_json(subprocess.run([*GKDTOP, "replay", "--json", "--stall-after", "10", str(log)],
                                     capture_output=True, text=True, timeout=60, check=True).stdout)
    assert rep["unrecognised"]["lines"] == 38 and "init_model START" in rep["unrecognised"]["after"]
    text = subprocess.run([*GKDTOP, "snapshot", "--log", str(log)], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert "init_model START | pid=2003 | rank=0`: 38 lines no rule knows" in text  # 37 + an NCCL WARN
    analysis = Analysis(load_config(None).rules())  # live: the same count
    t = time.time()
    analysis.feed([LogLine("f", "Initializing Rollout Worker...", t, t)] +
                  [LogLine("f", f"chatter {i}", t, t) for i in range(25)])
    status = analysis.status(t + 10_000)
    assert status.state == "stalled"
    assert status.unsure == "after `Initializing Rollout Worker...`: 25 lines no rule knows"


def test_the_scan_says_which_markers_a_chunk_holds(engine: str) -> None:
    """Literal markers (curves.LINE_BY_LINE) are reported per chunk by the same pass, never as a line's hit."""
    m = Matcher([compile_pattern(p) for p in PATTERNS], message=message_of, markers=(b"nan", b"'rewards/"))
    hits, _, marked = m.scan_plain(b"step:1 - loss:nan\nstep:2 - x\n")
    assert marked == {0} and hits == m.scan(b"step:1 - loss:nan\nstep:2 - x\n")
    assert all(i < len(PATTERNS) for _start, _end, ids in hits for i in ids)
    assert m.scan_plain(b"{'rewards/acc': 1.0}\n")[2] == {1}
    assert m.scan_plain(b"step:3 - loss:0.5\n")[2] == set()


@pytest.mark.parametrize("chunk", [b"plain ascii\tline\r\nstep:1 - x\n", b"a bell \x07 in it\nstep:1 - x\n",
                                   b"\x7f\nstep:1 - x\n", "caf\u00e9 step:1 - x\n".encode(), b"", b"\x1b[0m\n"])
def test_the_scan_says_whether_a_chunk_is_plain_as_plain_ascii_does(engine: str, chunk: bytes) -> None:
    """History's fast path reads plain chunks from their bytes; the scan finds out in the same pass."""
    from gkdtop.analysis.lines import plain_ascii

    m = Matcher([compile_pattern(p) for p in PATTERNS], message=message_of)
    hits, plain, _ = m.scan_plain(chunk)
    assert plain == plain_ascii(chunk)
    assert hits == m.scan(chunk)
    assert all(ids for _start, _end, ids in hits)
    assert all(i < len(PATTERNS) for _start, _end, ids in hits for i in ids)  # the check's own ids never leak


def test_the_p95_of_a_few_steps_is_their_slowest() -> None:
    """Two steps of 33.6 s and 44.65 s read 'p95 33.60s' (below their mean: the index was floored)."""
    from array import array

    from gkdtop.analysis.steps import summarize

    got = summarize(array("d", [44.65, 33.6]), array("q", [29, 28]))
    assert (got["p50_s"], got["p95_s"], got["max_s"]) == (33.6, 44.65, 44.65)
    many = summarize(array("d", range(1, 101)), array("q", range(1, 101)))
    assert (many["p50_s"], many["p95_s"]) == (50, 95)
