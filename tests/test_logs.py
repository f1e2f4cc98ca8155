"""The log follower against real files in tmp_path: growth, rotation, truncation, junk, floods."""

from __future__ import annotations

import calendar
import itertools
import json
import os
import random
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkdtop.analysis.lines import parse_line, repeat_count, strip_ansi
from gkdtop.analysis.time import parse_timestamp
from gkdtop.collectors import logs
from gkdtop.collectors.logs import LogBatch, LogCollector
from gkdtop.model import LogFileState, LogLine

ESC = "\x1b"
PRINTABLE = st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs", "Cc"))
TS_LIKE = r"[\[IWE]?\d{4}[-/ ]\d\d[-/]?\d\d[T ]\d\d:\d\d:\d\d[.,]?\d*[Z+-]?\d*:?\d*"
CONTROL = {chr(c) for c in range(32) if c != 9} | {chr(c) for c in range(0x7F, 0xA0)}


def append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def texts(batch: LogBatch) -> list[str]:
    return [line.text for line in batch.lines]


def state(batch: LogBatch, path: Path) -> str:
    return next(f.state for f in batch.files if f.path == str(path))


def file_state(batch: LogBatch, path: Path) -> LogFileState:
    return next(f for f in batch.files if f.path == str(path))


def assert_clean(line: LogLine, max_line: int) -> None:
    assert len(line.text) <= max_line and len(line.raw) <= max_line
    assert not CONTROL & set(line.raw), repr(line.raw)
    assert not CONTROL & set(line.text), repr(line.text)


# --- following ---------------------------------------------------------------------------------


def test_appends_across_polls_and_a_line_written_in_two_halves(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    assert state(c.collect(), log) == "following"
    append(log, "one\ntwo\n")
    before = time.time()
    batch = c.collect()
    assert texts(batch) == ["one", "two"]
    assert all(line.seen >= before and not line.backlog and line.source == str(log) for line in batch.lines)
    append(log, "thr")
    assert c.collect().lines == []
    append(log, "ee\nfour")
    assert texts(c.collect()) == ["three"]
    append(log, "\n")
    batch = c.collect()
    assert texts(batch) == ["four"]
    assert file_state(batch, log).lines == 4
    assert c.collect().lines == []
    c.close()


def test_rotation_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("a0\n")
    c = LogCollector([str(log)])
    assert texts(c.collect()) == ["a0"]
    with open(log, "a") as writer:
        writer.write("a1\na2\n")
        writer.flush()
        assert texts(c.collect()) == ["a1", "a2"]
        os.rename(log, tmp_path / "train.log.1")  # logrotate: move away, the writer keeps its handle
        writer.write("a3\n")
        writer.flush()
        log.write_text("b1\n")  # ... create the new file; the writer still finishes a line in the old
        writer.write("a4\n")
        writer.flush()
        batch = c.collect()
    assert texts(batch) == ["a3", "a4", "b1"]
    assert file_state(batch, log).rotations == 1
    append(log, "b2\n")
    assert texts(c.collect()) == ["b2"]
    c.close()


def test_rotation_seen_between_rename_and_create(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    with open(log, "a") as writer:
        writer.write("a1\n")
        writer.flush()
        os.rename(log, tmp_path / "train.log.1")
        writer.write("a2\npart")
        writer.flush()
        batch = c.collect()  # the path is gone: the renamed file is still read
        assert texts(batch) == ["a1", "a2"] and state(batch, log) == "deleted"
        writer.write("ial\n")
        writer.flush()
        assert texts(c.collect()) == ["partial"]
        writer.write("a3\n")
        writer.flush()
    log.write_text("b1\n")
    batch = c.collect()
    assert texts(batch) == ["a3", "b1"]
    assert state(batch, log) == "following" and file_state(batch, log).rotations == 1


def test_rotation_with_a_flood_left_in_the_old_file(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(log, "".join(f"old {i}\n" for i in range(600_000)) + "old tail, no newline")  # ~6 MB
    os.rename(log, tmp_path / "train.log.1")
    log.write_text("new 1\n")
    got: list[str] = []
    for _ in range(10):  # ~7 polls of READ_LIMIT drain the old file
        got += texts(c.collect())
    assert got == [f"old {i}" for i in range(600_000)] + ["old tail, no newline", "new 1"]
    assert file_state(c.collect(), log).rotations == 1


def test_copytruncate(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(log, "".join(f"old line {i}\n" for i in range(100)))
    assert len(c.collect().lines) == 100
    (tmp_path / "train.log.1").write_bytes(log.read_bytes())
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, "new 1\nnew 2\n")
    batch = c.collect()
    assert texts(batch) == ["new 1", "new 2"]
    assert file_state(batch, log).truncations == 1
    append(log, "new 3\n")
    assert texts(c.collect()) == ["new 3"]


def test_deletion_then_recreation(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(log, "x1\n")
    assert texts(c.collect()) == ["x1"]
    log.unlink()
    batch = c.collect()
    assert batch.lines == [] and state(batch, log) == "deleted"
    assert state(c.collect(), log) == "deleted"
    log.write_text("y1\ny2\n")  # may well reuse the inode number: still read from its start
    batch = c.collect()
    assert texts(batch) == ["y1", "y2"] and state(batch, log) == "following"
    append(log, "y3\n")
    assert texts(c.collect()) == ["y3"]


def test_a_file_that_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    c = LogCollector([str(log)], backlog=1)
    batch = c.collect()
    assert batch.lines == [] and state(batch, log) == "waiting"
    log.write_text("first\nsecond\nthird\n")
    batch = c.collect()
    assert texts(batch) == ["first", "second", "third"]
    assert not any(line.backlog for line in batch.lines)


def test_glob_picks_up_new_files(tmp_path: Path) -> None:
    (tmp_path / "worker-1.out").write_text("w1 old\n")
    (tmp_path / "subdir.out").mkdir()  # a directory the glob matches: skipped, not an error row
    c = LogCollector([str(tmp_path / "*.out")])
    c.glob_every = 0  # re-expand on every collect instead of every 2 s
    batch = c.collect()
    assert texts(batch) == ["w1 old"] and batch.lines[0].backlog
    assert [f.path for f in batch.files] == [str(tmp_path / "worker-1.out")]
    (tmp_path / "worker-2.out").write_text("w2 a\nw2 b\n")
    batch = c.collect()
    assert texts(batch) == ["w2 a", "w2 b"]
    assert {line.source for line in batch.lines} == {str(tmp_path / "worker-2.out")}
    assert not any(line.backlog for line in batch.lines)
    assert len(batch.files) == 2


def test_reads_are_bounded_per_poll(tmp_path: Path) -> None:
    log = tmp_path / "flood.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    line = "x" * 99 + "\n"
    append(log, line * 100_000)  # 10 MB
    first = c.collect()
    assert 0 < len(first.lines) <= logs.READ_LIMIT // len(line)
    got = len(first.lines)
    for _ in range(10):
        got += len(c.collect().lines)
    assert got == 100_000


def test_unreadable_paths_are_errors_and_the_rest_goes_on(tmp_path: Path) -> None:
    # Tests run as root, so chmod 000 would not stop a read: use things no one can follow.
    good = tmp_path / "good.log"
    good.write_text("")
    directory = tmp_path / "adir"
    directory.mkdir()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block: it must not even be opened
    loop = tmp_path / "loop"
    os.symlink(loop, loop)  # ELOOP, whoever asks
    c = LogCollector([str(good), str(directory), str(fifo), str(loop)])
    c.collect()
    append(good, "still here\n")
    batch = c.collect()
    assert texts(batch) == ["still here"]
    assert state(batch, good) == "following"
    for path in (directory, fifo, loop):
        info = file_state(batch, path)
        assert info.state == "error" and info.error and "\n" not in info.error, info
    assert "directory" in file_state(batch, directory).error
    assert "symbolic links" in file_state(batch, loop).error
    c.close()


def test_close_releases_handles(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("x\n")
    c = LogCollector([str(log)])
    c.collect()
    fds = len(os.listdir("/proc/self/fd"))
    c.close()
    assert len(os.listdir("/proc/self/fd")) == fds - 1


# --- start-up backlog --------------------------------------------------------------------------


def _read_bytes() -> int:
    with open("/proc/self/io") as fh:
        return next(int(row.split()[1]) for row in fh if row.startswith("rchar:"))


def test_backlog_is_the_last_lines_read_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "w") as fh:
        for block in range(200):
            fh.write("".join(f"line {block * 1000 + i} {'.' * 80}\n" for i in range(1000)))  # ~18 MB
    mtime = time.time() - 3600
    os.utime(log, (mtime, mtime))
    c = LogCollector([str(log)], backlog=50)
    before = _read_bytes()
    batch = c.collect()
    assert _read_bytes() - before < 1 << 20  # the tail only, not the 18 MB
    assert [line.text.split()[1] for line in batch.lines] == [str(i) for i in range(199_950, 200_000)]
    assert all(line.backlog and line.seen == pytest.approx(mtime) for line in batch.lines)
    assert file_state(batch, log).lines == 50
    append(log, "fresh\n")
    batch = c.collect()
    assert texts(batch) == ["fresh"] and not batch.lines[0].backlog and batch.lines[0].seen > mtime


def test_backlog_with_an_unfinished_last_line_and_a_small_file(tmp_path: Path) -> None:
    log = tmp_path / "small.log"
    log.write_text("a\nb\nhalf")
    c = LogCollector([str(log)], backlog=10)
    assert texts(c.collect()) == ["a", "b"]
    append(log, " done\n")
    batch = c.collect()
    assert texts(batch) == ["half done"] and not batch.lines[0].backlog


def test_backlog_zero_still_completes_the_last_line_and_shows_a_bar(tmp_path: Path) -> None:
    log = tmp_path / "bar.log"
    log.write_text("old 1\nold 2\n\rEpoch 1:  40%|####  | 4/10\rEpoch 1:  50%|#####  | 5/10")
    c = LogCollector([str(log)], backlog=0)
    batch = c.collect()
    assert batch.lines == []
    bar = batch.progress[str(log)]
    assert bar.text == "Epoch 1:  50%|#####  | 5/10" and bar.progress and bar.backlog
    append(log, "\rEpoch 1: 100%|##########| 10/10\n")
    assert texts(c.collect()) == ["Epoch 1: 100%|##########| 10/10"]


def test_permission_denied_is_an_error() -> None:
    """chmod 000 stops no root: as root, the collect runs in a child that dropped to `nobody`."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        secret, public = Path(tmp) / "secret.log", Path(tmp) / "public.log"
        secret.write_text("x\n")
        secret.chmod(0)
        public.write_text("readable\n")
        os.chmod(public, 0o644)
        if os.geteuid() != 0:
            batch = LogCollector([str(secret), str(public)]).collect()
            result = [(f.state, f.error) for f in batch.files] + [(texts(batch)[0], "")]
        else:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child reports through the pipe
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    batch = LogCollector([str(secret), str(public)]).collect()
                    rows = [(f.state, f.error) for f in batch.files] + [(texts(batch)[0], "")]
                    os.write(write_end, json.dumps(rows).encode())
                finally:
                    os._exit(0)
            os.close(write_end)
            with os.fdopen(read_end) as fh:
                reply = fh.read()
            os.waitpid(pid, 0)
            result = [tuple(row) for row in json.loads(reply)]
    assert result == [("error", f"Permission denied: {secret}"), ("following", ""), ("readable", "")]


def test_many_floods_share_one_bounded_poll(tmp_path: Path) -> None:
    paths = [tmp_path / f"worker-{i}.out" for i in range(6)]
    for path in paths:
        path.write_text("")
    c = LogCollector([str(tmp_path / "*.out")])
    c.collect()
    line = "y" * 63 + "\n"
    for path in paths:
        append(path, line * 80_000)  # 5 MB each, 30 MB in all
    first = c.collect()
    assert 0 < len(first.lines) * len(line) <= logs.TOTAL_LIMIT
    counts = {str(p): 0 for p in paths}
    for ln in first.lines:
        counts[ln.source] += 1
    for _ in range(20):
        for ln in c.collect().lines:
            counts[ln.source] += 1
    assert set(counts.values()) == {80_000}


# --- hostile content ---------------------------------------------------------------------------


def test_junk_bytes_never_raise(tmp_path: Path) -> None:
    log = tmp_path / "junk.log"
    log.write_text("")
    c = LogCollector([str(log)], max_line=200)
    c.collect()
    rng = random.Random(3)
    junk = bytes(rng.randrange(256) for _ in range(300_000))
    junk += b"\x00\x00nul\x00line\n\xff\xfe\xc3\x28 invalid utf8 \xe2\x82\n"
    junk += b"\x1b]0;title\x07\x1b[1;31mred\x1b[0m\x9b \xc2\x9b c1\n"
    for i in range(0, len(junk), 7919):
        append(log, junk[i : i + 7919])
        for line in c.collect().lines:
            assert_clean(line, 200)
    append(log, "\nafter\n")
    batch = c.collect()
    assert texts(batch)[-1] == "after"
    assert state(batch, log) == "following"


def test_huge_lines_are_capped_and_counted(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    log.write_text("")
    c = LogCollector([str(log)], max_line=1000)
    c.collect()
    follower = c._files[str(log)]
    append(log, "a" * 3_000_000 + "\nok 1\n")  # 3 MB: three polls
    lines = c.collect().lines
    while c.behind:
        lines += c.collect().lines
    assert [(len(line.text), line.truncated) for line in lines] == [(1000, 3_000_000 - 1000), (4, 0)]
    assert lines[1].text == "ok 1"
    ten_mb = 10 * 1024 * 1024
    for _ in range(0, ten_mb, 1 << 20):  # 10 MB and no newline yet, written while we poll
        append(log, "b" * (1 << 20))
        batch = c.collect()
        assert batch.lines == [] and batch.progress == {}
        assert len(follower.partial) <= follower.cap  # never holds the line in memory
    append(log, "\nok 2\n")
    batch = c.collect()
    assert [(len(line.text), line.truncated) for line in batch.lines] == [(1000, ten_mb - 1000), (4, 0)]
    assert batch.lines[0].text == "b" * 1000 and batch.lines[1].text == "ok 2"


def test_long_multibyte_line_cut_counts_bytes(tmp_path: Path) -> None:
    log = tmp_path / "utf.log"
    log.write_text("")
    c = LogCollector([str(log)], max_line=10)
    c.collect()
    append(log, "é" * 25 + "\n")
    (line,) = c.collect().lines
    assert line.text == "é" * 10 and line.truncated == 30


def test_tqdm_storm_is_one_line_with_progress_updates(tmp_path: Path) -> None:
    log = tmp_path / "tqdm.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    seen_progress = []
    for pct in range(0, 100, 5):
        append(log, f"\rTraining:  {pct:3d}%|{'#' * (pct // 10)}| {pct}/100 [00:{pct:02d}<00:10, 9.1it/s]")
        batch = c.collect()
        assert batch.lines == []
        (line,) = batch.progress.values()
        assert line.progress and line.source == str(log)
        seen_progress.append(line.text)
    assert seen_progress[-1].startswith("Training:   95%")
    assert len(set(seen_progress)) == len(seen_progress)
    assert c.collect().progress == {}  # unchanged: no update
    # A storm far larger than the line cap, in one write, still ends as one line: the latest state.
    append(log, "".join(f"\rTraining: {i}/100000" for i in range(100_000)))  # 2 MB: polls until not behind
    batch = c.collect()
    while c.behind:
        assert batch.progress == {}  # no half-read redraw ("Traini") is shown
        batch = c.collect()
    assert batch.progress[str(log)].text == "Training: 99999/100000"
    assert len(c._files[str(log)].partial) < 100
    append(log, "\rTraining: 100000/100000 done\r\n")
    batch = c.collect()
    assert texts(batch) == ["Training: 100000/100000 done"] and batch.progress == {}
    # Complete lines arriving in one read collapse the same way.
    append(log, "\r 10%\r 50%\r 100%\nplain\n\r\x1b[2K\r")
    batch = c.collect()
    assert texts(batch) == [" 100%", "plain"] and batch.progress == {}


def test_crlf_is_a_plain_newline_even_split_across_reads(tmp_path: Path) -> None:
    log = tmp_path / "crlf.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(log, "one\r\ntwo\r")
    batch = c.collect()
    assert texts(batch) == ["one"] and batch.progress == {}  # "two\r" may be a CRLF: no bar
    append(log, "\nthree\r\n")
    assert texts(c.collect()) == ["two", "three"]


def test_ansi_colored_ray_lines(tmp_path: Path) -> None:
    log = tmp_path / "ray.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(
        log,
        f"{ESC}[36m(WorkerDict pid=1234, ip=10.0.0.1){ESC}[0m {ESC}[1;31mERROR{ESC}[0m boom\n"
        f"{ESC}[36m(TaskRunner pid=133947){ESC}[0m step:3 - actor/lr:0.1\n"
        f"(pid=42) plain\n"
        f"{ESC}[33m(OnPolicyDistillActor pid=5, ip=10.0.0.2){ESC}[0m hello [repeated 3x across cluster]\n"
        f"{ESC}]8;;http://x{ESC}\\link{ESC}]8;;{ESC}\\ and {ESC}[?25l{ESC}(Bcursor\n",
    )
    lines = c.collect().lines
    assert [(ln.worker, ln.pid, ln.ip, ln.text) for ln in lines] == [
        ("WorkerDict", 1234, "10.0.0.1", "ERROR boom"),
        ("TaskRunner", 133947, "", "step:3 - actor/lr:0.1"),
        ("", 42, "", "plain"),
        ("OnPolicyDistillActor", 5, "10.0.0.2", "hello [repeated 3x across cluster]"),
        ("", None, "", "link and cursor"),
    ]
    assert lines[0].raw == "(WorkerDict pid=1234, ip=10.0.0.1) ERROR boom"
    assert repeat_count(lines[3].text) == 3 and repeat_count(lines[0].text) == 1
    # The bulk path and parse_line agree on every line (the follower numbers its lines; parse_line cannot).
    for line in lines:
        assert parse_line(line.raw, line.source, line.seen) == replace(line, number=None)


# --- parsing -----------------------------------------------------------------------------------


def test_parse_line_prefixes() -> None:
    line = parse_line("(WorkerDict pid=7, ip=10.1.2.3) 2026-01-11 10:00:05,123 root INFO hi", "f", 1.0)
    assert (line.worker, line.pid, line.ip) == ("WorkerDict", 7, "10.1.2.3")
    assert line.text == "2026-01-11 10:00:05,123 root INFO hi"
    assert line.ts == pytest.approx(time.mktime((2026, 1, 11, 10, 0, 5, 0, 0, -1)) + 0.123)
    assert line.raw.startswith("(WorkerDict")
    not_ray = parse_line("(note) this is not a prefix", "f", 1.0)
    assert not_ray.worker == "" and not_ray.pid is None and not_ray.text == "(note) this is not a prefix"
    bare = parse_line("(TaskRunner pid=9)", "f", 1.0)
    assert bare.pid == 9 and bare.text == ""
    assert parse_line("", "f", 1.0).text == ""


def _local(*fields: int) -> float:
    return time.mktime((*fields, 0, 0, -1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-11T10:00:05.123Z x", calendar.timegm((2026, 1, 11, 10, 0, 5)) + 0.123),
        ("2026-01-11T10:00:05.123+08:00 x", calendar.timegm((2026, 1, 11, 2, 0, 5)) + 0.123),
        ("2026-01-11T10:00:05-0130 x", calendar.timegm((2026, 1, 11, 11, 30, 5))),
        ("2026-01-11T10:00:05 x", _local(2026, 1, 11, 10, 0, 5)),
        ("2026-01-11 10:00:05 x", _local(2026, 1, 11, 10, 0, 5)),
        ("2026-01-11 10:00:05,123 root INFO x", _local(2026, 1, 11, 10, 0, 5) + 0.123),
        ("[2026-01-11 10:00:05] [INFO] x", _local(2026, 1, 11, 10, 0, 5)),
        ("[2026-01-11 10:00:05,123][INFO] x", _local(2026, 1, 11, 10, 0, 5) + 0.123),
        ("2026/01/11 10:00:05 x", _local(2026, 1, 11, 10, 0, 5)),
        ("2026-01-11 10:00:05.123456", _local(2026, 1, 11, 10, 0, 5) + 0.123456),
        ("2026-13-11 10:00:05 bad month", None),
        ("2026-01-11 25:00:05 bad hour", None),
        ("2026-01-11 10:00:05123 digits run on", None),
        ("20260111 compact", None),
        ("[ACTOR] init_model START", None),
        ("Initializing Actor Worker...", None),
        ("INFO: not vllm", None),
        ("", None),
    ],
)
def test_parse_timestamp(text: str, expected: float | None) -> None:
    got = parse_timestamp(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-6)


def test_yearless_timestamps_glog_and_vllm() -> None:
    now = datetime.now()
    recent = now - timedelta(days=2)
    glog = recent.strftime("I%m%d %H:%M:%S") + ".250000 1234 file.cc:12] NCCL INFO"
    expected = recent.replace(microsecond=250000).timestamp()
    assert parse_timestamp(glog) == pytest.approx(expected, abs=1e-3)
    vllm = recent.strftime("INFO %m-%d %H:%M:%S") + " [llm_engine.py:1] x"
    assert parse_timestamp(vllm) == pytest.approx(recent.replace(microsecond=0).timestamp(), abs=1e-3)
    # Three days ahead is more than a day in the future: it was last year.
    ahead = now + timedelta(days=3)
    got = parse_timestamp(ahead.strftime("W%m%d %H:%M:%S") + " 1 x.cc:1] w")
    assert got is not None
    assert datetime.fromtimestamp(got).year == ahead.year - 1
    assert parse_timestamp("E1399 10:00:00.1 1 x.cc:1]") is None  # month 13


def test_timestamps_through_the_follower(tmp_path: Path) -> None:
    log = tmp_path / "ts.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    append(log, f"{ESC}[36m(WorkerDict pid=1, ip=1.2.3.4){ESC}[0m [2026-01-11 10:00:05,500] [ACTOR] x\n"
                "2026-01-11T10:00:05Z plain\nno time\n")
    lines = c.collect().lines
    assert lines[0].ts == pytest.approx(_local(2026, 1, 11, 10, 0, 5) + 0.5)
    assert lines[1].ts == calendar.timegm((2026, 1, 11, 10, 0, 5))
    assert lines[2].ts is None
    assert lines[0].time == lines[0].ts  # in the past: the line's own time wins
    assert datetime.fromtimestamp(lines[1].ts, tz=timezone.utc).hour == 10  # type: ignore[arg-type]


def test_strip_ansi() -> None:
    assert strip_ansi(f"{ESC}[1;32m✓ ok{ESC}[0m\tdone{ESC}[K") == "✓ ok\tdone"
    assert strip_ansi(f"{ESC}]0;title{ESC}\\x\x07y\x00z") == "xyz"


# --- properties --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.binary(max_size=12_000),
    cuts=st.lists(st.integers(min_value=0, max_value=12_000), max_size=6),
    max_line=st.sampled_from([1, 7, 80, 1000]),
)
def test_random_bytes_never_raise_and_stay_capped(data: bytes, cuts: list[int], max_line: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "r.log"
        log.write_bytes(b"")
        c = LogCollector([str(log)], max_line=max_line)
        c.collect()
        bounds = sorted({0, len(data), *(min(x, len(data)) for x in cuts)})
        produced: list[LogLine] = []
        for start, end in itertools.pairwise(bounds):
            append(log, data[start:end])
            batch = c.collect()
            produced += batch.lines
            produced += batch.progress.values()
        append(log, b"\n")
        produced += c.collect().lines
        c.close()
        for line in produced:
            assert_clean(line, max_line)
        assert len([ln for ln in produced if not ln.progress]) == data.count(b"\n") + 1


@settings(max_examples=40, deadline=None, database=None)
@given(
    lines=st.lists(
        st.text(PRINTABLE, max_size=60),
        max_size=40,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=5),
)
def test_plain_lines_arrive_intact_however_they_are_cut(lines: list[str], cuts: list[int]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "p.log"
        log.write_bytes(b"")
        c = LogCollector([str(log)])
        c.collect()
        bounds = sorted({0, len(data), *(min(x, len(data)) for x in cuts)})
        got: list[str] = []
        for start, end in itertools.pairwise(bounds):
            append(log, data[start:end])
            got += [line.raw for line in c.collect().lines]
        c.close()
    assert got == lines


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(max_size=80) | st.from_regex(TS_LIKE))
def test_parse_timestamp_and_parse_line_never_raise(text: str) -> None:
    ts = parse_timestamp(text)
    assert ts is None or isinstance(ts, float)
    line = parse_line(text, "s", 0.0)
    assert line.raw == text


def test_quiet_files_are_polled_once_a_second_until_a_line_comes(tmp_path: Path) -> None:
    from gkdtop.collectors.logs import QUIET_AFTER, QUIET_INTERVAL, LogCollector

    log = tmp_path / "train.log"
    log.write_text("start\n")
    collector = LogCollector([str(log)], backlog=10, interval=0.25)
    assert collector.collect().lines and collector.interval == 0.25
    for _ in range(QUIET_AFTER):
        assert collector.interval == 0.25
        assert not collector.collect().lines
    assert collector.interval == QUIET_INTERVAL  # an idle file: once a second
    with log.open("a") as fh:
        fh.write("step:1 - loss:0.3\n")
    assert [ln.text for ln in collector.collect().lines] == ["step:1 - loss:0.3"]
    assert collector.interval == 0.25  # lines again: as fast as configured
    collector.close()
