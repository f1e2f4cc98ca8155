"""Trust nothing another user can write (issue 30): each hostile file or user below is planted for real,
as the second Unix user `nobody` where one is needed (root runs the suite, as tests/test_cleanup.py)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gkdtop import probe
from gkdtop.actions.bundle import build_bundle
from gkdtop.actions.collectives import collect, read_pipe_dumps, report_json, report_lines
from gkdtop.capture.faulthandler import faulthandler_dump
from gkdtop.capture.proc import proc_info
from gkdtop.config import load_config
from gkdtop.model.stacks import NcclTrace
from gkdtop.monitor import Monitor

ROOT = Path(__file__).resolve().parents[1]
SETPRIV = shutil.which("setpriv")
NOBODY = 65534
AS_NOBODY = [SETPRIV or "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
needs_second_user = pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None,
                                       reason="needs root to act as a second user (nobody)")
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAroot\n-----END OPENSSH PRIVATE KEY-----\n"


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def hostile_dir(path: Path, mode: int = 0o777) -> Path:
    """A folder the other user made (owned by nobody, open to all), as on a shared cache or HOME=/tmp."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    return path


def planted(path: Path, data: bytes) -> Path:
    """A file the other user wrote."""
    path.write_bytes(data)
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    return path


def sleeper(*prefix: str, env_: dict[str, str] | None = None, code: str = "") -> subprocess.Popen[bytes]:
    """A process that says `up` once ready, then waits (killed by the test)."""
    proc = subprocess.Popen([*prefix, sys.executable, "-c", f"{code}\nimport time\nprint('up', flush=True)\n"
                             "time.sleep(120)", "main_gkd"], env=env_ or env(), stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


# ------------------------------------------------------------------ the bundle takes the rank user's dumps only


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isfile()}


@needs_second_user
@pytest.mark.parametrize("aim", ["", "id_ed", "cred"])
def test_bundle_takes_no_file_another_users_job_names(tmp_path: Path, aim: str) -> None:
    """A job-looking process of `nobody` names a dump prefix in root's 0700 folder (the folder itself, or
    `id_ed` so `id_ed25519` reads as rank 25519): root's bundle ships neither file, and names them."""
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    (private / "id_ed25519").write_text(SSH_KEY)
    (private / "credentials").write_text("[default]\naws_secret_access_key = wJalrXUtnFEMIsecretvalue\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    theirs = hostile_dir(tmp_path / "theirs")
    # Their own dump, in their own folder: the rank's, taken (parsed and redacted).
    frames = [{"name": "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx"}]
    planted(theirs / "nccl_trace_rank_0", pickle.dumps({"version": "2.10", "entries": [
        {"collective_seq_id": 5, "profiling_name": "nccl:all_reduce", "frames": frames}]}))
    foreign = sleeper(*AS_NOBODY, env_=env(TORCH_NCCL_DEBUG_INFO_TEMP_FILE=f"{private}/{aim}"))
    rank = sleeper(*AS_NOBODY, env_=env(TORCH_NCCL_DEBUG_INFO_TEMP_FILE=f"{theirs}/nccl_trace_rank_"))
    try:
        config_path = tmp_path / "config.yaml"
        config_path.write_text("stall_after: 60\n")
        monitor = Monitor(load_config(config_path), logs=[], ray_address="http://127.0.0.1:9")

        async def once() -> None:
            await monitor.collect_once()
            await monitor.stop()

        import asyncio

        asyncio.run(once())
        assert {foreign.pid, rank.pid} <= {p.pid for p in monitor.store.processes}, "not seen as jobs"
        out = build_bundle(monitor, tmp_path / "out" / "b.tar.gz", stacks_dir=tmp_path / "no-stacks",
                           trace_prefix=str(mine / "nccl_trace_rank_"), ray_tmp=tmp_path / "no-ray")
    finally:
        stop(foreign)
        stop(rank)
    members = _members(out)
    for name, data in members.items():
        assert b"OPENSSH PRIVATE KEY" not in data and b"wJalrXUtnFEMIsecretvalue" not in data, name
        assert b"hf_abcdefghijklmnopqrstuvwx" not in data, name
    dump = json.loads(members["flight-recorder/nccl_trace_rank_0.json"])
    assert dump["entries"][0]["collective_seq_id"] == 5
    notes = json.loads(members["manifest.json"])["notes"]
    named = "\n".join(n for n in notes if "root-only" in n)
    if aim == "id_ed":  # named like a rank's dump, but root's file: not the process's
        assert "left out, owned by root (uid 0), not by nobody (uid 65534): not trusted: " in named, notes
    if aim != "id_ed":
        assert f"left out, not named {private}/{aim}<rank>: {private}/credentials" in named, notes


@needs_second_user
def test_bundle_names_and_skips_links_fifos_and_others_files_at_our_prefix(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SSH_KEY)
    secret.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "nccl_trace_rank_0").symlink_to(secret)
    planted(shared / "nccl_trace_rank_1", SSH_KEY.encode())  # torch's default name, rewritten by another user
    os.mkfifo(shared / "nccl_trace_rank_2")  # would block a plain open
    (shared / "nccl_trace_rank_3").write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b".")
    stacks = tmp_path / "stacks"  # the stack dumps' folder, where another user left a link to root's file
    stacks.mkdir()
    (tmp_path / "plain").write_text("root-only-content-7f3a\n")
    (stacks / "stacks-20990101-000000.txt").symlink_to(tmp_path / "plain")
    config_path = tmp_path / "config.yaml"
    config_path.write_text("stall_after: 60\n")
    monitor = Monitor(load_config(config_path), logs=[], ray_address="http://127.0.0.1:9")
    out = build_bundle(monitor.store, tmp_path / "b.tar.gz", stacks_dir=stacks,
                       trace_prefix=str(shared / "nccl_trace_rank_"), ray_tmp=tmp_path / "no-ray")
    members = _members(out)
    assert not [n for n in members if n.startswith("flight-recorder/")]
    assert all(b"OPENSSH" not in data and b"root-only-content" not in data for data in members.values())
    notes = "\n".join(json.loads(members["manifest.json"])["notes"])
    assert f"left out, a symbolic link, not followed: {shared}/nccl_trace_rank_0" in notes
    assert f"stack dump left out, a symbolic link, not followed: {stacks}/stacks-20990101-000000.txt" in notes
    assert ("left out, owned by nobody (uid 65534), not by root (uid 0): not trusted: "
            f"{shared}/nccl_trace_rank_1") in notes
    assert f"left out, a FIFO, not read: {shared}/nccl_trace_rank_2" in notes
    assert "left out, not a Flight Recorder dump: declares a string larger than memory (a length the file does not " \
           f"hold): {shared}/nccl_trace_rank_3" in notes


# ------------------------------------------------------------------ private state: the rule cache

SCAN = textwrap.dedent("""
    import os, sys
    from gkdtop.analysis.matcher import Matcher, compile_pattern
    if len(sys.argv) > 1:
        sys.stdin.readline()  # the test plants its files, knowing our PID
    m = Matcher([compile_pattern("step \\\\d+ done"), compile_pattern("CUDA out of memory")])
    print(m.scan(b"step 3 done\\nCUDA out of memory\\n"), flush=True)
""")


def scan_in_child(cache: Path, wait: bool = False, plant: object = None) -> str:
    proc = subprocess.Popen([sys.executable, "-c", SCAN, *(["wait"] if wait else [])],
                            env=env(XDG_CACHE_HOME=str(cache)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if callable(plant):
        plant(proc.pid)
    try:
        out, err = proc.communicate("go\n" if wait else "", timeout=60)  # a FIFO opened blocking would hang here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    return out.strip()


def _db_name(cache: Path) -> str:
    names = [p.name for p in (cache / "gkdtop" / "hyperscan").iterdir() if p.name.endswith(".db")]
    assert len(names) == 1
    return names[0]


def _never_matching_db() -> bytes:
    import hyperscan

    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=[b"zzzneverzzz", b"qqqneverqqq"], ids=[0, 1], elements=2)
    return hyperscan.dumpb(db)


@needs_second_user
def test_a_cache_folder_another_user_made_is_not_used(tmp_path: Path) -> None:
    """`nobody` made the cache folder (a shared XDG_CACHE_HOME) and planted a database that never matches, and
    a link at the temp name root would write, to a 0600 file: the crash is still found, the file untouched."""
    good = tmp_path / "good"
    expected = scan_in_child(good)
    assert expected == "[(0, 11, [0]), (12, 30, [1])]"
    name = _db_name(good)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    folder = hostile_dir(shared / "gkdtop" / "hyperscan")
    os.chown(folder.parent, NOBODY, NOBODY)
    planted(folder / name, _never_matching_db())
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    victim.chmod(0o600)

    def plant(pid: int) -> None:
        link = folder / f"{name}.{pid}.tmp"  # the old temp name: predictable
        link.symlink_to(victim)
        os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
        (folder / name).unlink()  # and no database to load, so the writer runs
    assert scan_in_child(shared, wait=True, plant=plant) == expected
    assert victim.read_bytes() == b"root's own\n"
    planted(folder / name, _never_matching_db())
    assert scan_in_child(shared) == expected


def test_a_cached_database_is_used_only_if_this_user_wrote_it(tmp_path: Path) -> None:
    """In our own private folder: a database without our keyed digest (another tool's, an old gkdtop's, one
    copied in) is compiled again."""
    cache = tmp_path / "cache"
    expected = scan_in_child(cache)
    folder = cache / "gkdtop" / "hyperscan"
    name = _db_name(folder.parent.parent)
    (folder / name).write_bytes(_never_matching_db())
    assert scan_in_child(cache) == expected
    assert (folder / name).stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700


def test_a_fifo_in_the_cache_never_hangs(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    expected = scan_in_child(cache)
    path = cache / "gkdtop" / "hyperscan" / _db_name(cache)
    path.unlink()
    os.mkfifo(path)
    assert scan_in_child(cache) == expected


# ------------------------------------------------------------------ private state: run and probe directories


def gkdtop_cli(*args: str, cache: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gkdtop", *args], env=env(XDG_CACHE_HOME=str(cache)),
                          capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]


@needs_second_user
def test_run_refuses_a_runs_folder_another_user_owns(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    hostile_dir(shared / "gkdtop" / "runs")
    result = gkdtop_cli("run", "--no-ui", "--", "true", cache=shared)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot create the run directory" in result.stderr
    assert "gkdtop/runs: in a folder another user can change (owner nobody (uid 65534), mode 0777)" in result.stderr
    assert not list((shared / "gkdtop" / "runs").iterdir())


def test_run_directory_is_private(tmp_path: Path) -> None:
    result = gkdtop_cli("run", "--no-ui", "--", sys.executable, "-c", "import gkdtop.probe", cache=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "gkdtop" / "runs").iterdir())
    for path in (run_dir, run_dir / "probe", tmp_path / "gkdtop" / "runs"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert (run_dir / "run.json").stat().st_mode & 0o777 == 0o600
    assert json.loads((run_dir / "run.json").read_text())["outcome"].startswith("exited with code 0")


@needs_second_user
def test_probe_stays_off_in_a_directory_another_user_can_write(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    folder = hostile_dir(run_dir / "probe")
    result = subprocess.run([sys.executable, "-c", "import gkdtop.probe"], capture_output=True, text=True, timeout=60,
                            env=env(GKDTOP_PROBE="1", GKDTOP_RUN_DIR=str(run_dir)))
    assert result.returncode == 0
    assert f"probe off: {folder}: owned by uid 65534" in result.stderr and result.stderr.count("\n") == 1
    assert not list(folder.iterdir())


@needs_second_user
def test_a_stack_file_another_user_planted_never_signals_our_process(tmp_path: Path) -> None:
    """The stack file names the signal gkdtop sends: `nobody` plants one naming SIGKILL for root's job."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    folder = hostile_dir(shared / "gkdtop" / "probe")
    victim = sleeper(env_=env(XDG_CACHE_HOME=str(shared)))
    try:
        planted(folder / f"faulthandler-{victim.pid}.txt",
                f"{probe.HEADER} pid={victim.pid} start={probe.process_start(victim.pid)} signal=9 main=0x0\n".encode())
        threads, why = faulthandler_dump(victim.pid, timeout=1.0)
        assert victim.poll() is None, "the planted file had root kill its own job"
        assert threads == [] and "owned by nobody (uid 65534), not by root (uid 0): not trusted" in why
    finally:
        stop(victim)


# ------------------------------------------------------------------ dumps: hostile contents, one line each

HOSTILE_DUMPS = {
    "bytes8-2^62": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b".",  # 12 bytes declaring 4 EiB
    "bytearray8-2^62": b"\x80\x05\x96" + struct.pack("<Q", 1 << 62) + b"..",
    "json-100k-deep": b'{"entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "pickle-100k-deep": b"\x80\x04}\x8c\x07entries" + b"]" * 100_000 + b"a" * 99_999 + b"s.",
    "global": b"cos\nsystem\n(S'true'\ntR.",
    "wrong-types": json.dumps({"entries": [1, {"collective_seq_id": "x"}], "pg_config": [], "pg_status": 5}).encode(),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_DUMPS))
def test_hostile_dump_is_one_line_not_a_traceback(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(HOSTILE_DUMPS[kind])
    me = proc_info(os.getpid())
    dumps = read_pipe_dumps([NcclTrace(os.getpid(), 0, "", str(path), True)], [me])
    assert len(dumps) == 1
    if kind == "wrong-types":  # a dump, with the entries it cannot use left out
        assert dumps[0].ok and dumps[0].trace["entries"] == [] and dumps[0].trace["pg_config"] == {}
    else:
        assert not dumps[0].ok and "\n" not in dumps[0].error and "not a Flight Recorder dump" in dumps[0].error


@needs_second_user
def test_default_dump_rewritten_by_another_user_is_not_the_ranks(tmp_path: Path) -> None:
    """torch's default /tmp/nccl_trace_rank_N is anyone's to write."""
    path = planted(tmp_path / "nccl_trace_rank_0", pickle.dumps({"entries": [{"collective_seq_id": 99}]}))
    dumps = read_pipe_dumps([NcclTrace(os.getpid(), 0, "", str(path), True)], [proc_info(os.getpid())])
    assert not dumps[0].ok and dumps[0].error == (f"{path}: owned by nobody (uid 65534), not by root (uid 0): "
                                                  "not trusted")


def test_probe_answer_of_the_wrong_types_is_no_crash(tmp_path: Path) -> None:
    """A job whose probe answers junk (its own code replaced flight_record): `stacks` / collectives go on."""
    junk = textwrap.dedent("""
        import gkdtop.probe as p
        p.flight_record = lambda token="": {"token": token, "identity": 5, "error": ["x"],
            "groups": [5, {"name": 3}, {"name": "0", "rank": 0, "ranks": [0], "size": 1}],
            "trace": {"version": 2, "pg_config": [], "pg_status": "x", "entries": [1, {"collective_seq_id": "x"},
                      {"collective_seq_id": 2, "process_group": ["0", ""], "pg_id": [1], "record_id": "z"}]}}
    """)
    job = sleeper(env_=env(GKDTOP_PROBE="1", XDG_CACHE_HOME=str(tmp_path)), code=junk)
    try:
        report = collect([proc_info(job.pid)], wait=20.0)
    finally:
        stop(job)
    assert [d.pid for d in report.dumps] == [job.pid]
    json.dumps(report_json(report))
    assert report_lines(report)


# ------------------------------------------------------------------ the lows: replay's inputs and names


def test_replay_reads_a_crashed_log_with_a_nul_tail_and_utf16(tmp_path: Path) -> None:
    text = "".join(f"2026-01-01 10:00:0{i},000 step:{i} - loss:1.0\n" for i in range(1, 6))
    crashed = tmp_path / "crashed.log"
    crashed.write_bytes(text.encode() + b"\0" * 4096)  # the blocks a crash left unwritten
    wide = tmp_path / "wide.log"
    wide.write_bytes(text.encode("utf-16"))
    snap = gkdtop_cli("snapshot", "--log", str(crashed), cache=tmp_path)
    result = gkdtop_cli("replay", str(crashed), cache=tmp_path)
    assert result.returncode == snap.returncode == 0, result.stderr
    assert "steps: 5" in result.stdout
    result = gkdtop_cli("replay", str(wide), cache=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "UTF-16 text" in result.stderr and "iconv -f UTF-16" in result.stderr and result.stderr.count("\n") == 1


def test_replay_shows_a_hostile_file_name_escaped(tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/run\x1b]0;pwned\x07\xff.log"
    with open(name, "wb") as fh:
        fh.write(b"2026-01-01 10:00:01,000 step:1 - loss:1.0\nTraceback (most recent call last):\nValueError: x\n")
    path = os.fsdecode(name)
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", path], env=env(XDG_CACHE_HOME=str(tmp_path)),
                          capture_output=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert b"\x1b" not in text.stdout and b"\x07" not in text.stdout
    assert b"run\\x1b]0;pwned\\x07\\xff.log" in text.stdout


def test_replay_json_of_an_undecodable_file_name_is_valid_unicode(tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/run\x1b]0;pwned\x07\xff.log"
    with open(name, "wb") as fh:
        fh.write(b"2026-01-01 10:00:01,000 step:1 - loss:1.0\n")
    path = os.fsdecode(name)
    doc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", path],
                         env=env(XDG_CACHE_HOME=str(tmp_path)), capture_output=True, timeout=120)
    files = json.loads(doc.stdout)["files"]
    files[0].encode("utf-8")  # no lone surrogate: every JSON parser takes it
    assert files[0].endswith("run\x1b]0;pwned\x07\\xff.log")


# ------------------------------------------------------------------ the lows: `gkdtop run`'s Ctrl-C and daemons


@pytest.fixture
def run_cli(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_second_ctrl_c_stops_a_job_that_ignores_the_first(tmp_path: Path, run_cli: list) -> None:
    job = ("import signal, time; signal.signal(signal.SIGINT, lambda *a: print('ignored', flush=True)); "
           "print('ready', flush=True)\nwhile True: time.sleep(1)")
    proc = subprocess.Popen([sys.executable, "-m", "gkdtop", "run", "--no-ui", "--", sys.executable, "-c", job],
                            env=env(XDG_CACHE_HOME=str(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    run_cli.append(proc)
    assert proc.stderr is not None and proc.stdout is not None
    assert proc.stderr.readline().startswith("gkdtop run: job pid")  # printed once our handlers are in place
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == "ignored\n"  # the first reached the job: a second is not merged into it
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)  # (before: passed on again, ignored again: gkdtop waited forever)
    assert "press it again" in err and "Ctrl-C again" in err and "SIGTERM" in err
    assert proc.returncode == 128 + signal.SIGTERM


def test_run_names_a_daemon_the_job_left_behind(tmp_path: Path, run_cli: list) -> None:
    job = ("import subprocess, sys; d = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
           "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(d.pid, flush=True)")
    result = gkdtop_cli("run", "--no-ui", "--", sys.executable, "-c", job, cache=tmp_path)
    daemon = int(result.stdout.split()[0])
    try:
        assert result.returncode == 0
        assert f"the job left 1 process running: {daemon} (python" in result.stderr, result.stderr
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_a_home_writable_only_by_the_user_s_own_group_is_not_another_user_s(tmp_path: Path) -> None:
    """Under user-private groups a home is often 2775, group `me` with no other member: private folders
    under it are fine; a folder another group can write in still is not."""
    import grp
    import pwd

    from gkdtop.safeopen import Untrusted, private_dir

    me = pwd.getpwuid(os.geteuid())
    if grp.getgrgid(me.pw_gid).gr_name != me.pw_name:
        pytest.skip("this user has no private group")
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, me.pw_uid, me.pw_gid)
    home.chmod(0o2775)
    assert private_dir(home / ".cache" / "gkdtop")  # was: "in a folder another user can change": refused
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, me.pw_uid, grp.getgrnam("nogroup").gr_gid)
    shared.chmod(0o775)
    with pytest.raises(Untrusted, match="another user can change"):
        private_dir(shared / "gkdtop")
