"""Hostile input never hangs or crashes gkdtop (issue 16).

Special files where a log was expected (FIFOs, a path flipping between a file and a FIFO,
directories, devices, /proc files), globs over thousands of files under a low `ulimit -n`, files
truncated and regrown between two polls, YAML bombs and duplicate keys, and nonsense numbers on the
command line. Each case ends in a one-line error naming the thing, or is simply handled; no
traceback, no hang. Every file and FIFO is real (tmp_path), every CLI case a real subprocess.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gkdtop.collectors.logs import LogBatch, LogCollector
from gkdtop.safeopen import NotRegularFile, open_regular

ROOT = Path(__file__).resolve().parents[1]


def texts(batch: LogBatch) -> list[str]:
    return [line.text for line in batch.lines]


def file_state(batch: LogBatch, path: Path):  # type: ignore[no-untyped-def]
    return next(f for f in batch.files if f.path == str(path))


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def returns_within(fn: Callable[[], object], timeout: float = 30.0) -> object:
    """fn() in a daemon thread: a call blocked in the kernel (open of a FIFO) fails the test, not hangs it."""
    result: list[object] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{fn} blocked for {timeout} s"
    if errors:
        raise errors[0]
    return result[0]


# --- special files where a log was expected --------------------------------------------------------


def test_open_regular_refuses_special_files_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, kind in [(fifo, "a FIFO"), (tmp_path, "a directory"), ("/dev/null", "a device"),
                           (sock_path, None)]:
            with pytest.raises(OSError) as info:
                returns_within(lambda p=path: open_regular(str(p)))
            if kind is not None:  # a socket can't be opened at all (ENXIO): also an OSError, never a hang
                assert isinstance(info.value, NotRegularFile) and info.value.strerror == kind
                assert info.value.filename == str(path)
    finally:
        sock.close()
    log = tmp_path / "ok.log"
    log.write_text("x\n")
    with open_regular(str(log)) as fh:
        assert fh.read() == b"x\n"


def test_a_fifo_log_is_an_error_state_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    c = LogCollector([str(fifo), str(tmp_path / "*.log")])
    batch = returns_within(c.collect)
    assert isinstance(batch, LogBatch)
    st = file_state(batch, fifo)
    assert (st.state, st.error) == ("error", f"a FIFO: {fifo}")
    c.close()


def test_a_path_flipping_between_file_and_fifo_never_blocks_the_collector(tmp_path: Path) -> None:
    log = tmp_path / "train.log"

    def put_file(text: str) -> None:
        tmp = tmp_path / "tmp.file"
        tmp.write_text(text)
        os.replace(tmp, log)

    def put_fifo() -> None:
        tmp = tmp_path / "tmp.fifo"
        os.mkfifo(tmp)
        os.replace(tmp, log)

    # In steps: each flip is seen and said.
    put_file("a1\n")
    c = LogCollector([str(log)])
    assert texts(returns_within(c.collect)) == ["a1"]  # type: ignore[arg-type]
    put_fifo()
    batch = returns_within(c.collect)
    assert file_state(batch, log).error == f"a FIFO: {log}"  # type: ignore[arg-type]
    put_file("b1\nb2\n")
    batch = returns_within(c.collect)
    assert texts(batch) == ["b1", "b2"] and file_state(batch, log).state == "following"  # type: ignore[arg-type]

    # Flipping as fast as it can while the collector polls: the race between its stat (a file) and
    # its open (a FIFO by then) is what blocked before; every poll must still return.
    stop = threading.Event()
    flips = [0]

    def flipper() -> None:
        while not stop.is_set():
            put_fifo()
            put_file(f"f{flips[0]}\n")
            flips[0] += 1

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    states: set[str] = set()
    polls = 0
    try:
        while polls < 300 or flips[0] < 300:
            batch = returns_within(c.collect, timeout=10)
            states.add(file_state(batch, log).state)  # type: ignore[arg-type]
            polls += 1
    finally:
        stop.set()
        thread.join(10)
    assert states <= {"following", "error"}
    put_file("last\n")
    wait_for(lambda: "last" in texts(c.collect()))
    c.close()


# --- bounded open files --------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_glob_holds_a_bounded_number_of_files_open_and_loses_no_line(tmp_path: Path) -> None:
    n, cap = 300, 16
    paths = [tmp_path / f"worker-{i:03d}.log" for i in range(n)]
    for i, p in enumerate(paths):
        p.write_text(f"start {i}\n")
    before = open_fds()
    # No reopen delay: each poll delivers everything, so the test can say what each poll holds.
    c = LogCollector([str(tmp_path / "*.log")], max_open=cap, park_delay=0)
    assert sorted(texts(c.collect())) == sorted(f"start {i}" for i in range(n))
    assert open_fds() - before <= cap
    for round_ in range(3):  # every file grows: all are reopened where they were, in turn
        for i, p in enumerate(paths):
            with open(p, "a") as fh:
                fh.write(f"r{round_} {i}\n")
        assert sorted(texts(c.collect())) == sorted(f"r{round_} {i}" for i in range(n))
        assert open_fds() - before <= cap
    # A parked file rotated, one truncated and regrown, one growing a line in two halves.
    os.replace(paths[0], tmp_path / "worker-000.log.1")
    paths[0].write_text("new 0\n")
    paths[1].write_text("rewritten 1 and longer than it was before\n")
    with open(paths[2], "a") as fh:
        fh.write("hal")
    c.collect()
    with open(paths[2], "a") as fh:
        fh.write("ves\n")
    for p in paths[3:]:  # the others grow: paths[2] is parked between its two halves
        with open(p, "a") as fh:
            fh.write("more\n")
    batch = c.collect()
    got = texts(batch)
    assert got.count("more") == n - 3 and "halves" in got
    assert file_state(batch, paths[0]).rotations == 1
    assert file_state(batch, paths[1]).truncations == 1
    assert open_fds() - before <= cap
    c.close()
    assert open_fds() == before


def test_files_parked_while_written_wait_a_moment_then_deliver_everything(tmp_path: Path) -> None:
    """More growing files than descriptors: a file parked while being written reopens after the delay,
    so each open reads a second's worth instead of one poll's; nothing is lost, nothing waits for ever."""
    n, cap = 40, 8
    paths = [tmp_path / f"w{i:02d}.log" for i in range(n)]
    for p in paths:
        p.write_text("")
    c = LogCollector([str(tmp_path / "*.log")], max_open=cap, park_delay=0.5)
    c.collect()
    want: list[str] = []
    got: list[str] = []
    waited = 0
    for round_ in range(6):  # every file grows every poll
        for i, p in enumerate(paths):
            with open(p, "a") as fh:
                fh.write(f"r{round_} w{i}\n")
            want.append(f"r{round_} w{i}")
        got += texts(c.collect())
        waiting = sum(1 for f in c._files.values() if f.parked and f.reopen_at > time.monotonic())
        waited = max(waited, waiting)
    assert waited > 0  # some parked files did wait: those polls did not reopen them
    wait_for(lambda: (got.extend(texts(c.collect())), sorted(got) == sorted(want))[1], timeout=10)
    for i in range(n):  # each file's lines once, in order
        assert [t for t in got if t.endswith(f" w{i}")] == [f"r{r} w{i}" for r in range(6)]
    assert sum(1 for f in c._files.values() if f.fh is not None) <= cap
    c.close()


FD_SCRIPT = r"""
import os, resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from gkdtop.collectors.logs import LogCollector
from gkdtop.collectors.procs import ProcCollector
tmp = sys.argv[1]
n = 5000
for i in range(n):
    with open(os.path.join(tmp, f"w{i}.log"), "w") as fh:
        fh.write(f"line {i}\n")
c = LogCollector([os.path.join(tmp, "*.log")])
seen = set()
deadline = time.monotonic() + 60
while len(seen) < n and time.monotonic() < deadline:
    seen.update(line.text for line in c.collect().lines)
for i in range(n):
    with open(os.path.join(tmp, f"w{i}.log"), "a") as fh:
        fh.write(f"again {i}\n")
again = set()
while len(again) < n and time.monotonic() < deadline:
    again.update(line.text for line in c.collect().lines)
fds = len(os.listdir("/proc/self/fd"))
procs = ProcCollector().collect()
errors = [f.error for f in c.collect().files if f.error]
print(len(seen), len(again), fds, isinstance(procs, list), errors[:3])  # no EMFILE: it ran
"""


def test_five_thousand_files_under_ulimit_256(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", FD_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    seen, again, fds, procs_ok, errors = proc.stdout.split(maxsplit=4)
    assert (int(seen), int(again)) == (5000, 5000)
    assert int(fds) <= 64 + 16  # the quarter of 256 the collector allows itself, and Python's own
    assert procs_ok == "True" and errors.strip() == "[]"


# --- truncate and regrow -------------------------------------------------------------------------


def test_truncated_and_regrown_past_the_old_size_between_two_polls(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    with open(log, "a") as fh:
        fh.write("old 1\nold 2\n")
    assert texts(c.collect()) == ["old 1", "old 2"]
    with open(log, "r+") as fh:  # the same inode: truncated, then written past where we were
        fh.truncate(0)
        fh.write("".join(f"new {i}\n" for i in range(20)))
    batch = c.collect()
    assert texts(batch) == [f"new {i}" for i in range(20)]
    assert file_state(batch, log).truncations == 1
    with open(log, "a") as fh:
        fh.write("new 20\n")
    assert texts(c.collect()) == ["new 20"]
    c.close()


def test_rewritten_to_the_same_size_between_two_polls(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    c = LogCollector([str(log)])
    c.collect()
    with open(log, "a") as fh:
        fh.write("step 1\n")
    assert texts(c.collect()) == ["step 1"]
    before = log.stat().st_mtime_ns
    with open(log, "r+") as fh:
        fh.truncate(0)
        fh.write("step 2\n")
    # The kernel's file clock ticks every few ms: two writes inside one tick leave the mtime alone.
    # A real rewrite comes later than that; say so explicitly rather than sleep.
    os.utime(log, ns=(before + 10**9, before + 10**9))
    batch = c.collect()
    assert texts(batch) == ["step 2"] and file_state(batch, log).truncations == 1
    c.close()


def test_truncated_and_regrown_while_parked(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("a old\n")
    b.write_text("b 1\n")
    c = LogCollector([str(a), str(b)], max_open=1, park_delay=0)
    assert sorted(texts(c.collect())) == ["a old", "b 1"]
    with open(a, "r+") as fh:
        fh.truncate(0)
        fh.write("a new, longer than the old content\n")
    batch = c.collect()
    assert texts(batch) == ["a new, longer than the old content"]
    assert file_state(batch, a).truncations == 1
    c.close()


# --- config bombs and mistakes -------------------------------------------------------------------


def gkdtop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent", "XDG_CACHE_HOME": os.environ.get("GKDTOP_TEST_CACHE", "")}
    env = {k: v for k, v in env.items() if v}
    return subprocess.run([sys.executable, "-m", "gkdtop.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    assert proc.returncode not in (0, 1) and proc.returncode > 0, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


NESTING_BOMBS = {  # name: (text, the line the error names)
    "flow_seq": ("phases: " + "[" * 50_000 + "]" * 50_000 + "\n", 1),
    "flow_map": ("refresh: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n", 1),
    "block_seq": ("logs:\n" + "- " * 50_000 + "x\n", 2),
    "unclosed": ("[" * 1_000_000, 1),
}


@pytest.mark.parametrize("name", sorted(NESTING_BOMBS))
def test_deep_nesting_is_a_one_line_error_not_a_segfault(tmp_path: Path, name: str) -> None:
    cfg = tmp_path / "bomb.yaml"
    text, where = NESTING_BOMBS[name]
    cfg.write_text(text)
    line = assert_one_line_error(gkdtop("replay", "--config", str(cfg), "/etc/hostname"), f"{cfg}:{where}:")
    assert "nested more than 64 levels" in line


@pytest.mark.parametrize(("text", "where", "key", "first"), [
    ("stall_after: 5\nbacklog: 3\nstall_after: 7\n", 3, "stall_after", 1),
    ("refresh:\n  ui: 2\n  gpus: 1\n  ui: 3\n", 4, "refresh.ui", 2),
    ("phases:\n  - name: a\n    start: x\n    name: b\n", 4, "phases[0].name", 2),
    ("filters: {x: a, y: b, x: c}\n", 1, "filters.x", 1),
])
def test_duplicate_keys_name_file_line_and_key(tmp_path: Path, text: str, where: int, key: str, first: int) -> None:
    from gkdtop.config import ConfigError, load_config

    cfg = tmp_path / "dup.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value) == f"{cfg}:{where}: {key}: duplicate key (first given at line {first})"


@pytest.mark.parametrize(("text", "key", "says"), [
    ("backlog: 1e12\n", "backlog", "whole number from 0 to 100,000"),
    ("backlog: 1.5\n", "backlog", "whole number"),
    ("backlog: -1\n", "backlog", "whole number"),
    ("max_line: 0\n", "max_line", "whole number from 80"),
    ("max_line: .inf\n", "max_line", "whole number"),
    ("refresh: {ui: 1e-9}\n", "refresh.ui", "0.01 to 3600 seconds"),
    ("refresh: {logs: 1e9}\n", "refresh.logs", "0.01 to 3600 seconds"),
    ("stall_after: .nan\n", "stall_after", "expected a number of seconds"),
    ("stall_after: nan\n", "stall_after", "positive and finite"),
    ("stall_after: -5\n", "stall_after", "positive and finite"),
    ("logs: ['ok.log', \"a\\0b\"]\n", "logs[1]", "not a usable path"),
    ("logs: ''\n", "logs[0]", "not a usable path"),
])
def test_bad_numbers_and_paths_name_the_key(tmp_path: Path, text: str, key: str, says: str) -> None:
    from gkdtop.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert str(info.value).startswith(f"{cfg}:1: {key}: ") and says in str(info.value)


@pytest.mark.parametrize(("text", "says"), [
    ("!!map x\n", "1: (top level): a single value tagged 'map'"),
    ("stall_after: !!map 1\n", "1: stall_after: a single value tagged 'map'"),
    ("logs: !!seq {a: 1}\n", "1: logs: a mapping tagged 'seq'"),
    ("logs: !!str [a, b]\n", "1: logs: a list tagged 'str'"),
    ("refresh:\n  ui: !x [1]\n", "2: refresh.ui: a list tagged '!x'"),
])
def test_a_tag_that_lies_about_the_shape_is_an_error(tmp_path: Path, text: str, says: str) -> None:
    from gkdtop.config import ConfigError, load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:  # before: ValueError / AttributeError deep in the validators
        load_config(cfg)
    assert str(info.value) == f"{cfg}:{says}"


def test_backlog_zero_is_allowed(tmp_path: Path) -> None:
    from gkdtop.config import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("backlog: 0\nmax_line: 80\n")
    assert (load_config(cfg).backlog, load_config(cfg).max_line) == (0, 80)


def test_config_path_naming_no_config_file(tmp_path: Path) -> None:
    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"stall_after: 3\n\xff\xfe\x00junk")
    from gkdtop.config import ConfigError, load_config

    for path, says in [(fifo, "a FIFO"), (tmp_path, "a directory"), ("/dev/zero", "a device"),
                       (big, "larger than 1 MiB"), (binary, "2: cannot read config: not UTF-8"),
                       (tmp_path / "missing.yaml", "No such file")]:
        with pytest.raises(ConfigError) as info:
            returns_within(lambda p=path: load_config(p))
        assert str(info.value).startswith(str(path)) and says in str(info.value)
    line = assert_one_line_error(gkdtop("replay", "--config", str(fifo), "/etc/hostname"), str(fifo))
    assert line == f"gkdtop: {fifo}: cannot read config: a FIFO"


YAML_TOKENS = st.one_of(
    st.sampled_from([
        "[", "]", "{", "}", ": ", ":", "- ", "-", "\n", "  ", "    ", "? ", ", ", "'", '"', "#", "|\n", ">\n",
        "&a ", "*a", "&b ", "*b", "<<: ", "!!str ", "!!map ", "!!seq ", "!!python/object:os.system ", "!x ",
        "%YAML 1.1\n", "---\n", "...\n", "\t", "\0", "\ufeff", "\x85", "\u2028", "é", "1e400", ".nan", "-0",
        "0x1F", "1_000", "~", "null", "true", "stall_after", "phases", "refresh", "ui", "backlog", "max_line",
        "logs", "filters", "default", "name", "start", "stall_stacks", "phases_mode",
    ]),
    st.integers(1, 200).map(lambda n: "[" * n),
    st.integers(1, 200).map(lambda n: "- " * n),
    st.text(max_size=8),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(YAML_TOKENS, max_size=60).map("".join))
def test_yaml_garbage_gives_a_config_or_a_one_line_error(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    from gkdtop.config import Config, ConfigError, load_config

    cfg = tmp_path_factory.mktemp("garbage") / "c.yaml"
    cfg.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        assert isinstance(load_config(cfg), Config)
    except ConfigError as exc:
        assert str(exc).startswith(str(cfg)) and "\n" not in str(exc)


# --- the command line ----------------------------------------------------------------------------

BAD_ARGS = [
    (["stacks", "--", "-5"], "argument PID", "-5"),
    (["stacks", "99999999999"], "argument PID", "99999999999"),
    (["stacks", "--timeout", "inf", "1"], "argument --timeout", "inf"),
    (["stacks", "--timeout", "nan", "1"], "argument --timeout", "nan"),
    (["stacks", "--timeout", "-1", "1"], "argument --timeout", "-1"),
    (["stacks", "--timeout", "1e300", "1"], "argument --timeout", "1e300"),
    (["snapshot", "--duration", "inf"], "argument --duration", "inf"),
    (["snapshot", "--duration", "-2"], "argument --duration", "-2"),
    (["snapshot", "--lines", "-3"], "argument --lines", "-3"),
    (["snapshot", "--stall-after", "nan"], "argument --stall-after", "nan"),
    (["--refresh", "nan"], "argument --refresh", "nan"),
    (["--refresh", "0"], "argument --refresh", "0"),
    (["--stall-after=-inf"], "argument --stall-after", "-inf"),
    (["replay", "--stall-after", "0", "x.log"], "argument --stall-after", "0"),
    (["cleanup", "--grace", "inf"], "argument --grace", "inf"),
    (["doctor", "--nodes", "0"], "argument --nodes", "0"),
    (["doctor", "--actor-gpus", "-1"], "argument --actor-gpus", "-1"),
    (["demo", "--steps", "x"], "argument --steps", "x"),
    (["run", "--refresh", "inf", "--", "true"], "argument --refresh", "inf"),
]


@pytest.mark.parametrize(("args", "names", "value"), BAD_ARGS, ids=[" ".join(a[0]) for a in BAD_ARGS])
def test_bad_numbers_on_the_command_line_are_one_line_usage_errors(args: list[str], names: str, value: str) -> None:
    line = assert_one_line_error(gkdtop(*args, timeout=60), names, repr(value))
    assert line.startswith("gkdtop") and ": error: " in line and line.endswith("--help)")


def test_run_with_an_unwritable_log_file_blames_the_log_not_the_command(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("")
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    cache = tmp_path / "cache"
    cases = [(blocker / "x.log", "is not a directory"), (blocker / "sub" / "x.log", "Not a directory"),
             (tmp_path, "Is a directory"), (fifo, "a FIFO nobody reads"), ("/dev/null", "not a regular file"),
             ("/proc/1/nope/x.log", "cannot create")]
    for n, (log, says) in enumerate(cases):
        # With and without the dashboard: the dashboard path must fail before it starts anything.
        for ui in (["--no-ui"], []) if n < 2 else (["--no-ui"],):
            proc = subprocess.run([sys.executable, "-m", "gkdtop.cli", "run", *ui, "--log-file", str(log), "--",
                                   sys.executable, "-c", "print('ran')"], capture_output=True, text=True,
                                  timeout=60, cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(cache)},
                                  stdin=subprocess.DEVNULL)
            line = assert_one_line_error(proc, f"cannot write the log file {log}", says)
            assert sys.executable not in line and "ran" not in proc.stdout


def test_run_with_an_unwritable_run_directory_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("")  # XDG_CACHE_HOME is a file: no run directory under it
    proc = subprocess.run([sys.executable, "-m", "gkdtop.cli", "run", "--no-ui", "--", "true"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(blocker)},
                          stdin=subprocess.DEVNULL)
    assert_one_line_error(proc, "cannot create the run directory", str(blocker))


# --- replay / snapshot on things that are no logs -------------------------------------------------


def test_replay_refuses_what_is_no_log_with_one_line_naming_it(tmp_path: Path) -> None:
    import gzip

    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(b"step:1 - loss 1\n"))
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    cases = [(fifo, "a FIFO, not a log file"), (tmp_path, "a directory, not a log file"),
             ("/dev/null", "a device"), ("/proc/self/status", "a /proc or /sys file?"),
             (gz, "gzip-compressed"), (binary, "a binary file"), (sys.executable, None),
             (tmp_path / "missing.log", "No such file or directory")]
    sysfs = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if sysfs.is_file():  # 4096 bytes by its size, a line by its content
        cases.append((sysfs, "a /proc or /sys file?"))
    from gkdtop.replay import check_input

    for path, says in cases:
        problem = returns_within(lambda p=path: check_input(str(p)))
        assert isinstance(problem, str) and problem.startswith(f"{path}: ") and "\n" not in problem
        if says is not None:
            assert says in problem
    good = tmp_path / "train.log"
    good.write_text("step:1 - loss 1\n\x1b[31mERROR\x1b[0m junk \x00 byte\n")
    assert check_input(str(good)) is None
    # The command line says it, whichever way it reads (the /proc file gave `[Errno 22]` without a name).
    line = assert_one_line_error(gkdtop("replay", str(good), "/proc/self/status"), "gkdtop replay: /proc/self/status: ")
    assert "a /proc or /sys file?" in line
    assert gkdtop("replay", str(good)).returncode == 0


def test_snapshot_with_special_files_as_logs_returns(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    good = tmp_path / "train.log"
    good.write_text("hello\n")
    proc = gkdtop("snapshot", "--json", "--log", str(fifo), "--log", str(tmp_path), "--log", "/dev/null",
                  "--log", "/proc/self/status", "--log", str(good), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    import json

    files = {f["path"]: f for f in json.loads(proc.stdout)["logs"]["files"]}
    assert files[str(fifo)]["error"] == f"a FIFO: {fifo}"
    assert files[str(tmp_path)]["error"] == f"a directory: {tmp_path}"
    assert files["/dev/null"]["error"] == "a device: /dev/null"
    assert files[str(good)]["state"] == "following"


def without_root_powers() -> list[str]:
    """A command prefix under which file permissions hold: root's DAC override dropped (setpriv), or none."""
    if os.geteuid() != 0:
        return []
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: file permissions can't be made to hold")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps, "--"]


def test_unreadable_and_unwritable_paths_are_named(tmp_path: Path) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text("step:1 - loss 1\n")
    secret.chmod(0)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    prefix = without_root_powers()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, sys.executable, "-m", "gkdtop.cli", *args], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
                              env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})

    assert_one_line_error(cli("replay", str(secret)), f"gkdtop replay: {secret}: Permission denied")
    assert_one_line_error(cli("replay", "--config", str(secret), "/etc/hostname"),
                          f"{secret}: cannot read config: Permission denied")
    for ui in (["--no-ui"], []):
        assert_one_line_error(cli("run", *ui, "--log-file", str(locked / "x.log"), "--", "true"),
                              f"gkdtop run: cannot write the log file {locked / 'x.log'}: Permission denied")
    proc = cli("snapshot", "--json", "--log", str(secret))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    import json

    files = {f["path"]: f for f in json.loads(proc.stdout)["logs"]["files"]}
    assert files[str(secret)]["error"] == f"Permission denied: {secret}"


# --- a random life of a few log files, followed with one descriptor --------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["append", "append", "append", "rotate", "rewrite", "delete", "fifo",
                                          "collect"]),
                         st.integers(0, 2), st.integers(1, 30)), max_size=40)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, max_open=st.sampled_from([1, 2, 8]))
def test_random_rotations_rewrites_and_fifos_lose_no_line(ops: list[tuple[str, int, int]], max_open: int) -> None:
    """Every line written reaches the collector once, in order, whatever happens to the files in between.

    Destructive steps (rotate, rewrite, delete, FIFO) come after a collect(): what was never read when a
    file is truncated or deleted is gone for any reader. A rewrite starts with a new generation line
    and never leaves the file at the size we had read to (a same-size rewrite within one tick of the
    file clock is the documented blind spot).
    """
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"w{i}.log" for i in range(3)]
        c = LogCollector([str(p) for p in paths], max_open=max_open, park_delay=0)
        got: dict[str, list[str]] = {str(p): [] for p in paths}
        want: dict[str, list[str]] = {str(p): [] for p in paths}
        serial = [0]

        def collect() -> None:
            batch = c.collect()
            for line in batch.lines:
                got[line.source].append(line.text)
            assert all(f.state in ("following", "waiting", "deleted", "error") for f in batch.files)
            open_now = sum(1 for f in c._files.values() if f.fh is not None)
            assert open_now <= max_open

        def lines(i: int, n: int) -> str:
            out = []
            for _ in range(n):
                serial[0] += 1
                out.append(f"w{i} line {serial[0]}")
            want[str(paths[i])].extend(out)
            return "".join(f"{x}\n" for x in out)

        def ensure_file(p: Path) -> None:
            if p.exists() and not p.is_file():
                p.unlink()

        collect()
        for op, i, n in ops:
            p = paths[i]
            if op == "append":
                ensure_file(p)
                with open(p, "a") as fh:
                    fh.write(lines(i, n))
            elif op == "collect":
                collect()
            else:
                collect()
                if op == "rotate" and p.is_file():
                    os.replace(p, p.with_suffix(f".{serial[0]}"))
                    p.write_text(lines(i, n))
                elif op == "rewrite" and p.is_file():
                    old = p.stat().st_size
                    text = lines(i, n)
                    if len(text.encode()) == old:
                        text += lines(i, 1)
                    with open(p, "r+") as fh:
                        fh.truncate(0)
                        fh.write(text)
                elif op == "delete" and p.exists():
                    p.unlink()
                elif op == "fifo":
                    if p.exists():
                        p.unlink()
                    os.mkfifo(p)
        for p in paths:
            ensure_file(p)
        collect()
        collect()
        c.close()
        assert got == want


def test_bundle_with_a_fifo_as_a_log_notes_it_and_finishes(tmp_path: Path) -> None:
    import json
    import tarfile

    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)  # no writer: a blocking open in the bundle's log tail hung it
    out = tmp_path / "b.tar.gz"
    proc = gkdtop("bundle", "--log", str(fifo), "-o", str(out), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    with tarfile.open(out) as tar:
        name = next(n for n in tar.getnames() if n.endswith("manifest.json"))
        manifest = tar.extractfile(name).read().decode()  # type: ignore[union-attr]
    assert f"{fifo}: not read (a FIFO)" in json.loads(manifest)["notes"]


TUI_SCRIPT = r"""
import os, sys, threading
from gkdtop.config import load_config
from gkdtop.monitor import Monitor
from gkdtop.tui.app import GkdtopApp

log = sys.argv[1]
stop = threading.Event()
flips = [0]


def flipper():  # the path turns into a FIFO with no writer and back, as fast as it can
    while not stop.is_set():
        os.mkfifo(log + ".fifo")
        os.replace(log + ".fifo", log)
        with open(log + ".new", "w") as fh:
            fh.write(f"line {flips[0]}\n")
        os.replace(log + ".new", log)
        flips[0] += 1


config = load_config(None)
config.refresh["logs"] = 0.01
monitor = Monitor(config, logs=[log], ray_address="http://127.0.0.1:9")
app = GkdtopApp(config, monitor)


async def pilot(p):
    while flips[0] < 2000:
        await p.pause(0.05)
    await p.press("q")


threading.Thread(target=flipper, daemon=True).start()
app.run(headless=True, size=(120, 40), auto_pilot=pilot)
stop.set()
print("quit after", flips[0], "flips")
"""


def test_the_dashboard_quits_while_its_log_flips_between_file_and_fifo(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "none"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # With a blocking open the collector's thread sticks in open(2) and q never gets the process out.
    proc = subprocess.run([sys.executable, "-c", TUI_SCRIPT, str(tmp_path / "train.log")], capture_output=True,
                          text=True, timeout=90, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "quit after" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


@pytest.mark.parametrize("where", ["--config", "XDG"])
def test_the_dashboard_reads_a_config_before_it_starts(tmp_path: Path, where: str) -> None:
    """The dashboard makes its monitor after the first frame, but a config the user wrote is read first:
    a mistake in it is a one-line error on the terminal, not a dashboard that flashes and quits."""
    cfg = tmp_path / "gkdtop" / "config.yaml"
    cfg.parent.mkdir()
    cfg.write_text("refresh: {ui: -1}\n")
    if where == "--config":
        proc = gkdtop("--config", str(cfg), "--log", "/etc/hostname")
    else:
        env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
        proc = subprocess.run([sys.executable, "-m", "gkdtop.cli", "--log", "/etc/hostname"], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "refresh.ui" in assert_one_line_error(proc, f"{cfg}:1:")
