"""The diagnostic bundle from a real job process and a real followed log: complete, 0600, and with no
secret value in any member (every byte of every member is searched). Plus the redaction functions
under hypothesis: a planted hf_/AKIA token never survives, whatever text surrounds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import stat
import string
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gkdtop.actions.bundle import build_bundle, bundle_command, env_allowed, tail_lines
from gkdtop.actions.redact import (
    REDACTED,
    Redactor,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_obj,
    redact_text,
)
from gkdtop.config import load_config
from gkdtop.monitor import Monitor

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
AWS_ID = "AKIAIOSFODNN7GKDTOP1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYgkdtopKEY"
SK = "sk-secret123"
TOKEN_ARG = "tok3nValue9"  # the value after `--token`
KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7gkdtop"
STACK_PASSWORD = "hunter2stacks"
CONFIG_SECRET = "wandbSecretValue42"
WORKER_SECRET = "hf_" + "WorkerLogTokenWorkerLogToken123456"
SECRETS = [HF, AWS_ID, AWS_SECRET, SK, "secret123", TOKEN_ARG, KEY_BODY, STACK_PASSWORD, CONFIG_SECRET, WORKER_SECRET]


@dataclass
class Job:
    proc: subprocess.Popen[bytes]
    log: Path
    tmp: Path
    config_path: Path


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    log = tmp_path / "train.log"
    log.write_text(
        "2026-01-01 10:00:00 [ACTOR] init model\n"
        f"2026-01-01 10:00:01 loading weights with HF_TOKEN={HF} from the hub\n"
        "2026-01-01 10:00:02 NCCL INFO Bootstrap : Using eth0\n"
        "2026-01-01 10:00:03 -----BEGIN PRIVATE KEY-----\n"
        f"{KEY_BODY}\n"
        "-----END PRIVATE KEY-----\n"
        f"2026-01-01 10:00:04 aws id {AWS_ID} secret AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"
        "step:1 - timing_s/gen:1.5 - timing_s/update_actor:2.0\n"
    )
    env = {**os.environ, "HF_TOKEN": HF, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_ACCESS_KEY_ID": AWS_ID,
           "NCCL_DEBUG": "INFO", "MASTER_PORT": "29500"}
    proc = subprocess.Popen(
        # The job holds its log open for writing, as a job writing its log does: tied to it, its command line
        # may name the framework (Store.voters).
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); print('up', flush=True); time.sleep(60)",
         str(log), "main_gkd",
         f"--api-key={SK}", "--token", TOKEN_ARG, "--max-num-batched-tokens", "8192"],
        env=env, stdout=subprocess.PIPE)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(f"# wandb api_key: {CONFIG_SECRET}\nstall_after: 60\n")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        yield Job(proc, log, tmp_path, config_path)
    finally:
        proc.kill()
        proc.wait()


def _fixtures_around(tmp: Path) -> dict[str, object]:
    """A Ray session with a worker log, stack dumps, and Flight Recorder dumps, all under tmp."""
    session = tmp / "ray" / "session_2026-01-01_10-00-00_000001_1"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "worker-abc-01000000-1.out").write_text(
        f"(WorkerDict pid=1) step ok\n(WorkerDict pid=1) token={WORKER_SECRET}\n")
    (session / "logs" / "worker-abc-01000000-1.err").write_text("")
    (tmp / "ray" / "session_latest").symlink_to(session)
    stacks = tmp / "stacks"
    stacks.mkdir()
    (stacks / "stacks-1.txt").write_text(f"Thread 1 main\n  all_reduce (torch/distributed.py:10)\n"
                                         f"  cmd: run --password={STACK_PASSWORD}\n")
    dump = {"version": "2.10", "entries": [{"collective_seq_id": 3, "profiling_name": "nccl:all_reduce",
                                            "frames": [{"name": f"run --password={STACK_PASSWORD}", "line": 1}]}]}
    (tmp / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump))  # torch's own format: a pickle of plain data
    os.mkfifo(tmp / "nccl_trace_rank_0.pipe")  # the trigger pipe must not be read (it would block)
    return {"stacks_dir": stacks, "trace_prefix": str(tmp / "nccl_trace_rank_"), "ray_tmp": tmp / "ray"}


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for member in tar.getmembers():
            assert member.isfile() and member.mode == 0o600, member.name
            handle = tar.extractfile(member)
            assert handle is not None
            out[member.name.split("/", 1)[1]] = handle.read()
        return out


def test_bundle_has_the_job_and_no_secret(job: Job) -> None:
    config = load_config(job.config_path)
    monitor = Monitor(config, logs=[str(job.log)], ray_address="http://127.0.0.1:9")

    async def once() -> None:
        await monitor.collect_once()
        await monitor.stop()

    asyncio.run(once())
    assert job.proc.pid in {p.pid for p in monitor.store.processes}, "the job is not seen as the driver"
    steps: list[tuple[str, int, int]] = []
    out = build_bundle(monitor, job.tmp / "out" / "b.tar.gz", progress=lambda *a: steps.append(a),
                       **_fixtures_around(job.tmp))  # type: ignore[arg-type]

    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not list(out.parent.glob(".*part"))
    total = steps[-1][2]
    assert steps[-1] == ("done", total, total) and [s[1] for s in steps] == list(range(total + 1))

    members = _members(out)
    for name, data in members.items():
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret!r} leaked into {name}"

    manifest = json.loads(members["manifest.json"])
    assert manifest["schema"] == 1 and manifest["errors"] == []
    assert {f["name"] for f in manifest["files"]} >= {
        "snapshot.json", "phases.json", "logs/filtered.log", "gpus.json", "ray.json", "processes.json",
        "processes.txt", "environ.json", "packages.json", "config.json", "config.yaml",
        "flight-recorder/nccl_trace_rank_0.json", "stacks/stacks-1.txt"}
    redacted = {r["name"] for r in manifest["redacted"]}
    assert {"HF_TOKEN", "--token", "api_key", "private key block", "AWS access key id",
            "AWS_SECRET_ACCESS_KEY", "--password"} <= redacted, redacted

    # The job: its PID, its command line (redacted), its environment's NCCL_DEBUG; HF_TOKEN by name only.
    procs = json.loads(members["processes.json"])
    mine = next(p for p in procs if p["pid"] == job.proc.pid)
    assert mine["role"] == "driver" and "main_gkd" in mine["cmdline"] and REDACTED in mine["cmdline"]
    assert "--max-num-batched-tokens 8192" in mine["cmdline"]  # not a secret: kept
    env = json.loads(members["environ.json"])
    group = next(g for g in env["groups"] if job.proc.pid in g["pids"])
    assert group["env"]["NCCL_DEBUG"] == "INFO" and group["env"]["MASTER_PORT"] == "29500"
    assert group["env"]["HF_TOKEN"] == REDACTED
    assert "AWS_SECRET_ACCESS_KEY" not in group["env"] and "AWS_ACCESS_KEY_ID" not in group["env"]

    followed = [n for n in members if n.startswith("logs/followed/")]
    assert len(followed) == 1
    log = members[followed[0]].decode()
    assert "step:1 - timing_s/gen:1.5" in log and "NCCL INFO Bootstrap" in log and "HF_TOKEN=<redacted>" in log
    assert "10:00:03 <redacted>\n<redacted>\n<redacted>\n" in log  # the key block, BEGIN through END
    worker = [n for n in members if n.startswith("logs/ray-session/")]
    assert len(worker) == 1 and b"step ok" in members[worker[0]]  # the empty .err is left out
    assert b"[ACTOR] init model" in members["logs/filtered.log"]
    fr = json.loads(members["flight-recorder/nccl_trace_rank_0.json"])  # parsed, redacted (the frame's password)
    assert fr["entries"][0]["collective_seq_id"] == 3 and fr["version"] == "2.10"
    assert json.loads(members["snapshot.json"])["schema"] == 1
    # The framework, told from the job's command line too; that evidence is redacted like the rest.
    framework = json.loads(members["phases.json"])["framework"]
    assert framework["name"] == "verl" and "processes" in framework["source"], framework
    # The verdict cites its lines (issue 25): the JSON's evidence and the text's `why:` rows.
    evidence = json.loads(members["phases.json"])["evidence"]
    assert evidence and all(e["claim"] and e["text"] for e in evidence), evidence
    assert f"why: {evidence[0]['claim']}: " in members["phases.txt"].decode()
    assert json.loads(members["snapshot.json"])["framework"]["name"] == "verl"
    assert json.loads(members["config.json"])["stall_after"] == 60
    assert json.loads(members["packages.json"])["packages"]["psutil"]


def test_bundle_command_writes_and_prints_the_path(job: Job, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(job.tmp / "no-ray"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(job.tmp / "cache"))
    monkeypatch.setenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", str(job.tmp / "none" / "nccl_trace_rank_"))
    monkeypatch.chdir(job.tmp)
    code = bundle_command(None, [str(job.log)], load_config(job.config_path), "http://127.0.0.1:9")
    captured = capsys.readouterr()
    assert code == 0
    path = Path(captured.out.strip())
    assert path.parent == job.tmp and path.name.startswith("gkdtop-bundle-") and path.name.endswith(".tar.gz")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "[1/" in captured.err
    members = _members(path)
    for data in members.values():
        for secret in SECRETS:
            assert secret.encode() not in data
    manifest = json.loads(members["manifest.json"])
    assert any("no Ray session" in n for n in manifest["notes"])


def test_bundle_quotes_a_stalled_log_s_own_last_line(tmp_path: Path) -> None:
    """A job stalled after lines no rule knows: phases.txt and phases.json quote what it printed last, as
    the Phases pane and snapshot do, its secret redacted."""
    import time

    from gkdtop.config import Config, builtin_phases
    from tests.gkdlog import ray, startup

    lines, last = startup(time.time() - 1200, upto="sync")  # weight sync, silent for ~19 minutes
    lines.append(ray("WorkerDict", 2001, f"  Variable._execution_engine.run_backward(  # HF_TOKEN={HF}"))
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    os.utime(log, (last, last))
    monitor = Monitor(Config(phases=builtin_phases()), logs=[str(log)], ray_address="http://127.0.0.1:9")

    async def once() -> None:
        await monitor.collect_once()
        await monitor.stop()

    asyncio.run(once())
    (tmp_path / "stacks").mkdir()
    out = build_bundle(monitor, tmp_path / "b.tar.gz", stacks_dir=tmp_path / "stacks",
                       trace_prefix=str(tmp_path / "nccl_trace_rank_"), ray_tmp=tmp_path / "ray")
    members = _members(out)
    phases = json.loads(members["phases.json"])
    assert phases["state"] == "stalled", phases["state"]
    assert phases["unrecognised"]["lines"] == 2 and "Starting weight synchronization" in phases["unrecognised"]["after"]
    quoted = "(WorkerDict pid=2001, ip=10.0.0.7)   Variable._execution_engine.run_backward(  # HF_TOKEN=<redacted>"
    assert phases["unrecognised"]["last"] == quoted, phases["unrecognised"]
    assert f"\nlast line: {quoted}\n" in members["phases.txt"].decode(), members["phases.txt"].decode()
    assert not any(HF.encode() in data for data in members.values())


def test_tail_lines_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_text("".join(f"line {i}\n" for i in range(10000)) + "bar 10%\rbar 100%\n")
    assert tail_lines(path, lines=3) == ["line 9998", "line 9999", "bar 100%"]
    assert tail_lines(path, lines=5000, max_bytes=100)[0].startswith("line ")  # the cut first line is dropped
    assert len(tail_lines(path, lines=5000, max_bytes=100)) < 20


def test_env_allow_list() -> None:
    for name in ("NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "RAY_ADDRESS", "MASTER_ADDR", "WORLD_SIZE", "VLLM_USE_V1"):
        assert env_allowed(name)
    for name in ("AWS_SECRET_ACCESS_KEY", "HOME", "SSH_AUTH_SOCK", "OPENAI_API_KEY"):
        assert not env_allowed(name)


# --- redaction ------------------------------------------------------------------------------------

def test_names_that_are_secrets() -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "--token", "--api-key", "api_key", "AWS_SECRET_ACCESS_KEY",
                 "WANDB_API_KEY", "DB_PASSWORD", "passwd", "GOOGLE_APPLICATION_CREDENTIALS", "Authorization",
                 "cookie", "ssh_private_key", "SENTRY_DSN", "AWS_SESSION_TOKEN"):
        assert is_secret_name(name), name
    for name in ("NCCL_DEBUG", "--max-num-batched-tokens", "max_tokens", "--tokenizer", "pad_token_id",
                 "MASTER_PORT", "timing_s/gen", "WORLD_SIZE"):
        assert not is_secret_name(name), name


def test_redact_text_shapes_and_arguments() -> None:
    line = f"python x.py --api-key={SK} --token {TOKEN_ARG} --password=pw1 --max-tokens 16 url=https://u:pw@h/x"
    clean, names = redact_text(line)
    assert SK not in clean and TOKEN_ARG not in clean and "pw1" not in clean and ":pw@" not in clean
    assert "--max-tokens 16" in clean
    assert {"--api-key", "--token", "--password", "URL password"} <= set(names)
    clean, _ = redact_text('{"api_key": "abc", "n": 1, "Authorization": "Bearer abcdefghijkl"}')
    assert json.loads(clean) == {"api_key": REDACTED, "n": 1, "Authorization": REDACTED}
    assert redact_text("step:3 - timing_s/gen:1.2 - perf/total_num_tokens:100")[1] == []


def test_redact_argv_env_obj_and_multiline_keys() -> None:
    argv, names = redact_argv(["vllm", "serve", "--api-key", SK, "--token", "abc", "--trust-remote-code", "m"])
    assert argv == ["vllm", "serve", "--api-key", REDACTED, "--token", REDACTED, "--trust-remote-code", "m"]
    assert names == ["--api-key", "--token"]
    assert redact_argv(["x", "--use-auth-token", "--port", "80"])[0] == ["x", "--use-auth-token", "--port", "80"]
    env, names = redact_env({"HF_TOKEN": HF, "NCCL_DEBUG": "INFO", "NOTE": f"key {AWS_ID}"})
    assert env == {"HF_TOKEN": REDACTED, "NCCL_DEBUG": "INFO", "NOTE": f"key {REDACTED}"}
    obj, names = redact_obj({"a": [{"password": "x"}, f"t={HF}"], "token_count": 5})
    assert obj == {"a": [{"password": REDACTED}, f"t={REDACTED}"], "token_count": 5}
    red = Redactor()
    lines = red.lines(["before", "x -----BEGIN RSA PRIVATE KEY-----", KEY_BODY, "-----END RSA PRIVATE KEY----- ok",
                       "after"], "f.log")
    assert lines == ["before", f"x {REDACTED}", REDACTED, f"{REDACTED} ok", "after"]
    assert red.summary() == [{"name": "private key block", "count": 1, "in": ["f.log"]}]


ALNUM = string.ascii_letters + string.digits
hf_tokens = st.text(ALNUM, min_size=34, max_size=34).map(lambda s: "hf_" + s)
aws_ids = st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(lambda s: "AKIA" + s)
noise = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(before=noise, token=st.one_of(hf_tokens, aws_ids), after=noise)
def test_planted_tokens_never_survive(before: str, token: str, after: str) -> None:
    text = before + token + after
    assert token not in redact_text(text)[0]
    assert token not in Redactor().line(text, "x")
    assert all(token not in w for w in redact_argv(text.split(" "))[0])
    assert token not in json.dumps(redact_env({"SOME_VAR": text})[0])
    assert token not in json.dumps(redact_obj({"k": [text]})[0])


@settings(max_examples=200, deadline=None)
@given(st.text(string.ascii_lowercase + " .,\n", max_size=200))
def test_plain_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == (text, [])
