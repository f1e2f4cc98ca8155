"""Rules and lines another user can write stay bounded (issue 30).

Rules: a pattern matches a line that is not ASCII through Hyperscan as it does through RE2 (`.`,
`[^…]`, `\\W`, `\\S`, `(?i)` take a whole character, not a byte); a pattern that matches every line
(an empty one) is refused with its file:line; a rule too costly to compile is refused in one line,
and Ctrl-C stops a compile at once. Lines: the history reader keeps at most `max_line` of a line, so
replay's memory stays flat on a 1 GiB line and on a file of `\\r` bars with no newline.
Every file is real (tmp_path), every CLI case a real subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkdtop.analysis import matcher
from gkdtop.analysis.matcher import Matcher, PatternError, compile_pattern
from gkdtop.config import load_config
from gkdtop.replay import replay
from tests.test_hostile import assert_one_line_error

ROOT = Path(__file__).resolve().parents[1]
needs_hyperscan = pytest.mark.skipif(matcher.hyperscan is None, reason="Hyperscan has no wheel here: RE2 alone")


def gkdtop(*args: str, cache: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent"}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run([sys.executable, "-m", "gkdtop.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)




# --- non-ASCII lines: Hyperscan's answer is RE2's ---------------------------------------------------

CASES = [  # (pattern, a line it matches through RE2)
    ("训练.完成", "训练已完成"),
    ("训练[^x]完成", "训练已完成"),
    (r"a\Wb", "a训b"),
    (r"a\Sb", "a训b"),
    (r"a\Db", "a训b"),
    ("(?i)ошибка", "ОШИБКА в шаге 3"),
    ("(?i)é", "É"),
    ("(?i)kill", "\u212aill -9"),  # the Kelvin sign folds to k in RE2
    ("(?i)[a-z]ill", "\u212aill -9"),
    ("(?i)σ", "ς"),
    (r"a.{2}b", "a训练b"),
    (r"x[^a-z]{2}y", "x好好y"),
    ("[训练]完", "练完"),
    ("训{2}", "训训"),
    (r"^\S+ done$", "好 done"),
    (r"[\W_]z", "训z"),
    (r"\xe8t", "èt"),
    ("[一-龥]+OK", "中文OK"),
    (r"[^\d\s]q", "好q"),
    ("^.$", "好"),
    ("[a-é]Z", "éZ"),
]


@needs_hyperscan
@pytest.mark.parametrize(("text", "line"), CASES)
def test_a_line_that_is_not_ascii_matches_through_hyperscan_as_through_re2(text: str, line: str) -> None:
    pattern = compile_pattern(text)
    assert pattern.search(line) is not None  # RE2's answer
    found = Matcher([pattern]).scan_texts([line, "plain ascii line", line.encode("ascii", "replace").decode()])
    assert found.get(0) == [0], (text, line)
    assert 1 not in found


@needs_hyperscan
def test_random_patterns_and_lines_agree_with_re2() -> None:
    """Seeded: patterns built of the atoms that differ by engine, over lines of mixed scripts, and raw
    bytes that are not UTF-8 (the chunk scan of history: no line RE2 matches is missed)."""
    rng = random.Random(30)
    atoms = [".", r"\W", r"\S", r"\D", r"\w", r"\s", "[^a]", "[^训]", "[a训]", "[a-é]", "[\\W_]", "a", "训", "é",
             "k", "s", ".{2}", ".{0,3}", "[^ ]{1,2}", r"\S{2,}", "(?:a|训)", r"\xe9", r"\x{8bad}", r"\b"]
    chars = ["a", "b", " ", "训", "练", "é", "É", "x", "_", "3", "٣", "\ufffd", "K", "\u212a", "k", "s", "ſ", "-"]
    patterns = []
    while len(patterns) < 150:
        text = ("(?i)" if rng.random() < 0.25 else "") + ("^" if rng.random() < 0.1 else "")
        text += "".join(rng.choice(atoms) for _ in range(rng.randint(1, 4))) + ("$" if rng.random() < 0.1 else "")
        with contextlib.suppress(PatternError):  # an empty match, or a `\b` that can never match
            patterns.append(compile_pattern(text))
    scan = Matcher(patterns)
    lines = ["".join(rng.choice(chars) for _ in range(rng.randint(0, 8))) for _ in range(600)]
    found = scan.scan_texts(lines)
    for i, line in enumerate(lines):
        want = [k for k, p in enumerate(patterns) if p.search(line) is not None]
        assert sorted(found.get(i, [])) == want, (line, [patterns[k].text for k in set(want) ^ set(found.get(i, []))])
    raw = [line.encode() + bytes([rng.choice([0x80, 0xFF, 0xC3])]) for line in lines]
    hits = {start: set(ids) for start, _end, ids in scan.scan(b"\n".join(raw))}
    start = 0
    for line in raw:
        text = line.decode("utf-8", "replace")
        want_ids = {k for k, p in enumerate(patterns) if p.search(text) is not None}
        assert want_ids <= hits.get(start, set()), (line, [patterns[k].text for k in want_ids - hits.get(start, set())])
        start += len(line) + 1


def test_replay_finds_a_rule_of_chinese_text_with_a_dot(tmp_path: Path) -> None:
    """Through the history reader's chunk scan (raw bytes), as `gkdtop replay` runs it."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("findings:\n  - name: train_done\n    severity: info\n    match: '训练.完成'\n", encoding="utf-8")
    log = tmp_path / "train.log"
    log.write_text("2024-05-01 10:00:00 start\n2024-05-01 10:00:05 训练已完成 step 9\n", encoding="utf-8")
    proc = gkdtop("replay", "--config", str(cfg), "--json", str(log))
    assert proc.returncode in (0, 1), proc.stderr
    names = [f["name"] for f in json.loads(proc.stdout)["findings"]]
    assert "train_done" in names


# --- patterns that match every line -----------------------------------------------------------------

@pytest.mark.parametrize(("key", "text"), [("fail_pattern", '""'), ("fail_pattern", "'x*'"),
                                           ("fail_pattern", "'(?:)'"), ("fail_pattern", "'^'"),
                                           ("idle_patterns", "['a|']")])
def test_a_pattern_that_matches_every_line_is_refused_with_its_file_and_line(
        tmp_path: Path, key: str, text: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"stall_after: 60\n{key}: {text}\n")
    log = tmp_path / "train.log"
    log.write_text("2024-05-01 10:00:00 epoch 1 ok\n")
    error = assert_one_line_error(gkdtop("replay", "--config", str(cfg), str(log)), f"{cfg}:2", key, "every line")
    assert "empty" in error


def test_a_pattern_for_empty_lines_is_still_a_pattern(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("idle_patterns: ['^$', '^\\s*$']\n")
    assert load_config(cfg).idle_patterns == ["^$", "^\\s*$"]


# --- compile time ----------------------------------------------------------------------------------

def costly_rules(count: int) -> list[str]:
    """Rules of 1.2 KB of repeats then alternatives: ~1.2 s of CPU each for Hyperscan (as the issue's
    config of 40 rules that took 85 s to load)."""
    rng = random.Random(1)

    def word(n: int) -> str:
        return "".join(rng.choice("abcdefghij") for _ in range(n))

    out = []
    for _ in range(count):
        text = "".join(f"\\S+{word(2)}" for _ in range(180)) + "(?:" + "|".join(word(6) for _ in range(200)) + ")"
        out.append(text[:1200].rsplit("|", 1)[0] + ")")
    return out


@needs_hyperscan
def test_a_rule_too_costly_to_compile_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("findings:\n" + "".join(f"  - name: rule{i}\n    match: '{text}'\n"
                                            for i, text in enumerate(costly_rules(40))))
    log = tmp_path / "train.log"
    log.write_text("2024-05-01 10:00:00 epoch 1 ok\n")
    error = assert_one_line_error(gkdtop("replay", "--config", str(cfg), str(log), cache=tmp_path / "cache"),
                           f"{cfg}:3", "findings[0].match", "too costly to compile")
    assert f"{matcher.RULE_COMPILE_S:g} s" in error


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@needs_hyperscan
def test_ctrl_c_stops_a_compile_at_once(tmp_path: Path) -> None:
    """A compile of 40 costly rules takes a minute; SIGINT sent once it is under way ends the process
    as Ctrl-C would, not after the compile."""
    # Ctrl-C as a shell gives it: Python's own handler, whatever SIGINT disposition the test process passed on
    # (an ignored SIGINT is inherited, and Python then installs no handler).
    code = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from gkdtop.analysis.matcher import _hyperscan_db, for_chunks\n"
            f"rules = {costly_rules(40)!r}\n"
            "print('compiling', flush=True)\n"
            "_hyperscan_db([for_chunks(r)[0] for r in rules])\nprint('compiled', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "compiling\n"
        started = cpu_seconds(proc.pid)
        deadline = time.monotonic() + 60
        while cpu_seconds(proc.pid) < started + 1.0:  # a second of CPU: the compile is under way
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        masks = [ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ln.startswith("Sig")]
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=20)  # the compile alone takes far longer
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGINT did not stop the compile ({'; '.join(masks)})")
        assert "KeyboardInterrupt" in err and proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- bounded lines ---------------------------------------------------------------------------------

def peak_rss_of(*args: str) -> tuple[int, str]:
    """(peak RSS in bytes of `gkdtop ARGS` and the processes it waited for, its stdout): measured by a
    parent of its own, so no other child of the tests counts."""
    code = ("import resource, subprocess, sys\n"
            "out = subprocess.run([sys.executable, '-m', 'gkdtop.cli', *sys.argv[1:]], capture_output=True,\n"
            "                     text=True)\n"
            "sys.stderr.write(out.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\nprint(out.stdout)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    rss, out = proc.stdout.split("\n", 1)
    return int(rss), out


LIMIT = 300 << 20  # replay of a small log: ~70 MB


def test_replay_of_a_one_gib_line_keeps_flat_memory(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with log.open("wb") as fh:
        fh.write(b"2024-05-01 10:00:00 start\n")
        block = b"x" * (1 << 20)
        for _ in range(8):  # 8 MiB written, the rest of the GiB a hole (read as NUL bytes)
            fh.write(block)
        fh.seek(1 << 30)
        fh.write(b"\n2024-05-01 10:00:09 Traceback (most recent call last):\n"
                 b"2024-05-01 10:00:09 RuntimeError: CUDA error: out of memory\n")
    rss, out = peak_rss_of("replay", "--json", str(log))
    report = json.loads(out)
    assert report["state"] == "failed" and report["lines_read"] == 4
    assert rss < LIMIT, f"peak RSS {rss >> 20} MiB"


def test_replay_of_carriage_return_bars_without_a_newline_keeps_flat_memory(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    bar = b"".join(b"\rTraining:  %3d%%|#####     | %d/100000 [01:02<05:00, 12.00it/s]" % (i % 100, i)
                   for i in range(10_000))
    with log.open("wb") as fh:
        fh.write(b"2024-05-01 10:00:00 epoch 1\n")
        for _ in range(400):  # ~240 MB of redraws, no newline
            fh.write(bar)
    rss, out = peak_rss_of("replay", "--json", str(log))
    assert json.loads(out)["lines_read"] == 2
    assert rss < LIMIT, f"peak RSS {rss >> 20} MiB"


def test_history_keeps_at_most_max_line_of_a_line(tmp_path: Path) -> None:
    """A 1 MB line a rule names comes out as the follower would deliver it live: max_line characters."""
    log = tmp_path / "train.log"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
    log.write_text(f"2024-05-01 10:00:00 start\n2024-05-01 10:00:05 {oom}" + "y" * (1 << 20) + "\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("max_line: 1000\n")
    report = replay([str(log)], load_config(cfg))
    samples = [text for finding in report.findings for text in finding.sample]
    assert samples and max(map(len, samples)) <= 1000
    assert report.status.state == "failed"


def test_no_built_in_pattern_makes_every_hit_a_second_regex_search() -> None:
    """A bounded repeat of a negated class (`[^|]{0,80}`) counts characters in RE2 and bytes in Hyperscan, so every
    hit of its pattern is searched again by RE2: on the training loop's pattern that is every step line of a run
    (the dense 60k-step replay spent ~0.9 s of 3.8 s profiled there). Phase rules, whose lines are a run's bulk,
    keep clear of it (a finding's rare error lines may not)."""
    import yaml

    from gkdtop.analysis.matcher import for_chunks
    from gkdtop.data import __file__ as data_init

    data = Path(data_init).parent
    texts = [rule[key] for rule in yaml.safe_load((data / "phases.yaml").read_text())["phases"]
             for key in ("start", "done", "fail") if rule.get(key)]
    slow = [t[:80] for t in texts if "always" in for_chunks(t)[1]]
    assert not slow, slow


def test_no_hint_evidence_pattern_matches_a_run_s_bulk_lines() -> None:
    """A hint line's evidence (`seen:` / `unless_seen:`) is read the careful way, line by line: a pattern that
    matches every step line (a `timing_s/` gate tried this session) sent the dense 60k-step replay down that path
    for every step, 0.27 s to 0.60 s on its first 20 MB. Step lines, bars and NCCL's INFO chatter stay clear."""
    import random

    from gkdtop.analysis.matcher import compile_pattern
    from gkdtop.config import builtin_phases
    from tests.verlrun import step_line

    bulk = [step_line(n, 10.0, random.Random(n)) for n in range(1, 4)] + [
        "(WorkerDict pid=7790, ip=10.1.1.5) Processed prompts:  37%|#######      | 48/128 [00:06<00:10, 12.1it/s]",
        "(TaskRunner pid=7781) Training Progress:  12%|█▏        | 120/1000 [20:02<2:27:01, 10.02s/it]",
        "{'loss': 1.9312, 'grad_norm': 0.81, 'learning_rate': 9.9e-06, 'epoch': 0.04}",
        " [2024-03-30 14:22:03] iteration       52/     400 | consumed samples:  6656 | elapsed time per iteration "
        "(ms): 9581.1 | throughput per GPU (TFLOP/s/GPU): 130.5 |",
        # vLLM's stats, every few seconds of every rollout (half the dense bench log's lines): a gate on them made
        # its replay 1.5x slower
        "(WorkerDict pid=7790, ip=10.1.1.5) INFO 03-02 09:00:01 [metrics.py:455] Avg prompt throughput: 482.3 "
        "tokens/s, Avg generation throughput: 1462.8 tokens/s, Running: 15 reqs, Swapped: 0 reqs, Pending: 0 reqs",
    ]
    evidence = {text for rule in builtin_phases()
                for hint in (rule.hint, rule.fail_hint, rule.timeout_hint) if hint is not None
                for text in (*hint.seen.values(), *hint.unseen.values())}
    hits = [(p[:60], line[:60]) for p in evidence for line in bulk
            if compile_pattern(p, every_engine=False).search(line)]
    assert evidence and not hits, hits


def test_a_verl_step_line_takes_the_watched_metrics_fast_path() -> None:
    """Replay reads only the metrics its anomaly checks watch, one pattern each over a chunk's step lines
    (Curves._add_only). A check that sent verl's lines down the line-by-line path (TRL's `'rewards/` parts matched
    verl's `critic/rewards/mean`) made the dense 60k-step replay 1.9 s → 3.2 s."""
    import random

    from gkdtop.analysis.anomalies import watched
    from gkdtop.analysis.curves import Curves
    from tests.verlrun import step_line

    rng = random.Random(2)
    lines = [step_line(n, 10.0, rng, extra=" - critic/rewards/mean:0.5 - critic/score/std:0.1").split(") ", 1)[1]
             .encode() for n in range(1, 9)]
    curves = Curves(only=watched())
    curves.count = 1  # (a run under way: its first call goes line by line in any case)
    assert curves._add_only(list(range(1, 9)), lines, b"\n".join(lines))
