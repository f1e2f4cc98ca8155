"""Safe to trust: no secret leaves the machine in a bundle, and `-o` cannot be turned against the user.

The corpus (tests/secret_corpus.py: hundreds of random secrets in the syntaxes a job's logs, command
lines, environments and configs carry them in) is planted in a real job process's environment and
command line, its followed log (cut so the tail starts inside a private key), a Ray worker log, a stack
dump and the config; `gkdtop bundle` runs through the same function the CLI calls; every member of the
extracted archive is searched for every planted value. Each case from the issue is also a unit test,
and generated keys in random log context go through hypothesis.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import stat
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gkdtop.actions.bundle import TAIL_LINES, build_bundle, bundle_command
from gkdtop.actions.redact import REDACTED, Redactor, redact_argv, redact_env, redact_obj, redact_text
from gkdtop.config import load_config
from gkdtop.monitor import Monitor
from tests import secret_corpus as sc
from tests.raycluster import wait_for

CORPUS = sc.corpus()
VALUES = sorted({v for plant in CORPUS for v in plant.values})
CUT_KEY = sc.pem_body(random.Random(3), 12)  # the followed log's tail starts inside this key


def test_the_corpus_is_big_and_varied() -> None:
    syntaxes = {p.syntax for p in CORPUS}
    assert len(VALUES) >= 500 and len(syntaxes) >= 35
    assert {"plural name", "other operators", "--flag: a known tool's short flag", "presigned URL", "wandb login V",
            "YAML block scalar", "disguised name", "URL user name", "AWS secret away from its key id"} <= syntaxes


# --- the rules -------------------------------------------------------------------------------------

ISSUE_CASES = [  # (line, the value that must go), as the issue reported them leaking
    ("DEBUG: token=Xq7TzY2kLm9PwR4s", "Xq7TzY2kLm9PwR4s"),
    ("env: HF_TOKEN=Xq7TzY2kLm9PwR4s", "Xq7TzY2kLm9PwR4s"),
    ("INFO:root:password=Xq7TzY2kLm9PwR4s", "Xq7TzY2kLm9PwR4s"),
    ('kwargs: {"token": "Xq7TzY2kLm9PwR4s"}', "Xq7TzY2kLm9PwR4s"),
    ("Authorization: Basic dXNlcjpYcTdUelkya0xtOQ==", "dXNlcjpYcTdUelkya0xtOQ=="),
    ("connecting to redis://:Xq7TzY2kLm9@10.0.0.5:6379/0", "Xq7TzY2kLm9"),
    ("python main.py --wandb-key 0123456789abcdef0123456789abcdef01234567 --epochs 3",
     "0123456789abcdef0123456789abcdef01234567"),
    ("MYSQL_PWD=Xq7TzY2kLm9", "Xq7TzY2kLm9"),
    ("SMTP_PASS=Xq7TzY2kLm9", "Xq7TzY2kLm9"),
    ("OPENAI_KEY=Xq7TzY2kLm9", "Xq7TzY2kLm9"),
    ("gitlab glpat-Xq7TzY2kLm9PwR4s_a-b set", "glpat-Xq7TzY2kLm9PwR4s_a-b"),
    ("maps key AIzaSyXq7TzY2kLm9PwR4s_a-bXq7TzY2kLm9Ab ok", "AIzaSyXq7TzY2kLm9PwR4s_a-bXq7TzY2kLm9Ab"),
]


@pytest.mark.parametrize(("line", "value"), ISSUE_CASES)
def test_each_case_from_the_issue(line: str, value: str) -> None:
    clean, names = redact_text(line)
    assert value not in clean and REDACTED in clean and names


V = "Xq7TzY2kLm9PwR4s"
AWS_ID, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
ISSUE30_CASES = [  # (text, the value that must go): the shapes issue 30 found leaking
    *((f"{name}={V}", V) for name in ("HF_HUB_TOKENS", "API_KEYS", "DB_PASSWORDS", "apiKeys", "clientSecrets")),
    (f"access_tokens: {V}", V),
    (f"token := {V}", V), (f"PASSWORD => {V}", V), (f"api_key\t{V}", V),
    (f"mysql -u root -p{V} train", V), (f"mysql -u root -p {V}", V), (f"sshpass -p {V} ssh node2", V),
    (f"redis-cli -a {V} ping", V), (f"curl -u admin:{V} https://x/api", V), (f"docker login -u me -p {V} reg", V),
    (f"https://b.s3.amazonaws.com/x?X-Amz-Signature={V}&X-Amz-Date=1", V),
    (f"https://acct.blob.core.windows.net/c?sv=2020-01-01&sig={V}", V),
    (f"https://storage.googleapis.com/b/o?X-Goog-Signature={V}", V),
    (f"wandb login {V}", V), (f"wandb login --relogin {V}", V),
    (f"TO\u200bKEN={V}", V), (f"HF\u2060_TOKEN={V}", V), (f"\uff34\uff2f\uff2b\uff25\uff2e={V}", V),
    (f"git clone https://{V}@github.com/org/repo", V), (f"https://user:{V}@host/x", V),
    (f"aws_secret_access_key {AWS_SECRET}", AWS_SECRET),
    (f"using access key {AWS_ID}\nand its secret {AWS_SECRET}", AWS_SECRET),
    (f"password: |\n  {V}\n  second line\nlr: 0.1", V),
]


@pytest.mark.parametrize(("text", "value"), ISSUE30_CASES)
def test_each_shape_from_issue_30(text: str, value: str) -> None:
    clean, names = redact_text(text)
    assert value not in clean and REDACTED in clean and names, clean
    assert value not in "\n".join(Redactor().lines(text.split("\n"), "x"))


def test_a_block_scalar_hides_its_lines_and_no_more() -> None:
    out = Redactor().lines(["db:", "  password: >-", f"    {V}", "", "    more", "  host: db.internal"], "x")
    assert out == ["db:", f"  password: {REDACTED}", f"    {REDACTED}", "", f"    {REDACTED}", "  host: db.internal"]


def test_known_tools_flags_as_argv_words() -> None:
    assert redact_argv(["mysql", "-u", "root", f"-p{V}", "-P", "3306"])[0] == [
        "mysql", "-u", "root", f"-p{REDACTED}", "-P", "3306"]
    assert redact_argv(["/usr/bin/sshpass", "-p", V, "ssh"])[0] == ["/usr/bin/sshpass", "-p", REDACTED, "ssh"]
    assert redact_argv(["wandb", "login", V])[0] == ["wandb", "login", REDACTED]
    # ... and only theirs: `docker run -p` is a port, `mysql -p` alone prompts.
    assert redact_argv(["docker", "run", "-p", "8080:80", "img"])[0] == ["docker", "run", "-p", "8080:80", "img"]
    assert redact_argv(["mysql", "-p", "--host", "db"])[0] == ["mysql", "-p", "--host", "db"]


def test_a_disguised_name_keeps_the_rest_of_the_line() -> None:
    """Names are matched normalised; the text around the value comes out as it went in."""
    line = f"\u00e9t\u00e9 TO\u200bKEN={V} caf\u00e9"
    assert redact_text(line)[0] == f"\u00e9t\u00e9 TO\u200bKEN={REDACTED} caf\u00e9"


def test_a_huge_line_is_cut_before_it_is_searched() -> None:
    """Issue 30: a 1 MB line of `pass:` made redaction quadratic (the bundle hung). Lines are cut at
    MAX_LINE first; within it every pattern is linear (bench/redaction.py measures both)."""
    from gkdtop.actions.redact import MAX_LINE

    line = "pass:" * ((1 << 20) // 5)
    clean = Redactor().line(line, "x")
    assert len(clean) < MAX_LINE + 100 and clean.endswith("more characters>")
    assert redact_text(f"token={V}\n{line}")[0].startswith(f"token={REDACTED}\n")


def test_names_and_shapes_both_apply_to_one_line() -> None:
    hf, pw = sc.hf_token(random.Random(1)), "Pw0rd-Xq7TzY2k"
    clean, names = redact_text(f"INFO:root:kwargs: {{'password': '{pw}'}} downloading with {hf} --token=abc12345x")
    assert pw not in clean and hf not in clean and "abc12345x" not in clean
    assert {"password", "Hugging Face token", "--token"} <= set(names)


def test_sk_proj_keys_go_whole() -> None:
    """The issue: 651 of 1,000 realistic sk-proj- keys kept 20+ characters. Now none keeps 8."""
    rng = random.Random(651)
    for _ in range(1000):
        key = sc.sk_proj(rng)
        clean = redact_text(f"openai client ({key}) ready")[0]
        assert clean == f"openai client ({REDACTED}) ready", clean


def test_a_private_key_whose_start_is_cut_off() -> None:
    """The tail begins inside the key: body lines with no BEGIN, the short last line, the END line."""
    body = sc.pem_body(random.Random(2), 6)
    lines = ["(WorkerDict pid=1) " + body[2], *body[3:], "-----END PRIVATE KEY-----", "loaded"]
    red = Redactor()
    out = red.lines(lines, "w.log")
    assert out == ["(WorkerDict pid=1) " + REDACTED, *[REDACTED] * (len(body) - 3), REDACTED, "loaded"]
    assert red.summary()[0]["name"] == "private key block" and red.summary()[0]["count"] >= 1
    # Without the END line in view either, the full-width body lines still go.
    assert all(line not in "\n".join(Redactor().lines(body[:-1], "x")) for line in body[:-1])


def test_every_planted_value_is_redacted() -> None:
    leaked = [(p.syntax, v) for p in CORPUS for v in p.values if v in "\n".join(Redactor().lines(list(p.lines), "x"))]
    assert leaked == []


def test_benign_diagnostic_lines_come_through() -> None:
    changed = [(line, redact_text(line)[0]) for line in sc.BENIGN if redact_text(line)[0] != line]
    assert changed == []


def test_a_count_and_a_fields_name_are_kept_where_the_same_name_with_a_secret_is_not() -> None:
    """Audit 21: SGLang's `#token: 2417` and OpenRLHF's `input_key='question'` came out <redacted>. A `#` says a
    count, a role before `_key` a data set's field; a bare `token: 2417` (a PIN) and a key's random value still go."""
    for line in ("token: 2417", "input_key='Zq81pX0wTt'", "db_key=question", "api_key=prompt", "#token: a81Fq0"):
        assert REDACTED in redact_text(line)[0], line


def test_argv_env_and_objects() -> None:
    assert redact_argv(["vllm", "--api-key", "Xq7TzY2k", "--max-num-batched-tokens", "8192"])[0] == [
        "vllm", "--api-key", REDACTED, "--max-num-batched-tokens", "8192"]
    env, names = redact_env({"MYSQL_PWD": "Xq7TzY2k", "PWD": "/home/u", "NCCL_DEBUG": "INFO",
                             "RAY_ADDRESS": "redis://:Xq7TzY2k@h:6379"})
    assert env == {"MYSQL_PWD": REDACTED, "PWD": "/home/u", "NCCL_DEBUG": "INFO",
                   "RAY_ADDRESS": f"redis://:{REDACTED}@h:6379"}
    assert names == ["MYSQL_PWD", "URL password"]  # names and kinds, never values
    job = {"entrypoint": "python main.py --wandb-key=Xq7TzY2k", "runtime_env": {"env_vars": {"HF_TOKEN": "hf_x"}},
           "pad_token_id": 0, "use_auth_token": True}
    assert redact_obj(job)[0] == {"entrypoint": f"python main.py --wandb-key={REDACTED}",
                                  "runtime_env": {"env_vars": {"HF_TOKEN": REDACTED}},
                                  "pad_token_id": 0, "use_auth_token": True}


KEYS = st.sampled_from([sc.sk_proj, sc.hf_token, sc.jwt, sc.github, sc.glpat, sc.aiza, sc.slack])
CONTEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)


@settings(max_examples=400, deadline=None)
@given(make=KEYS, seed=st.integers(0, 2**32), before=CONTEXT, after=CONTEXT)
def test_generated_keys_in_random_context_never_survive(make: Callable[[random.Random], str], seed: int, before: str,
                                                        after: str) -> None:
    key = make(random.Random(seed))
    text = before + key + after
    assert key not in redact_text(text)[0]
    assert key not in Redactor().line(text, "x")
    assert key not in json.dumps(redact_env({"GKDTOP_X": text})[0])
    assert key not in json.dumps(redact_obj({"k": [text]})[0])


NAME_WORDS = st.lists(st.sampled_from(["db", "hf", "wandb", "openai", "smtp", "client", "app", "access", "my"]),
                      max_size=2)
PLURALS = ["tokens", "keys", "secrets", "passwords", "api_keys", "apiKeys"]
SECRET_WORD = st.sampled_from(["token", "key", "secret", "password", "pass", "pwd", "auth", "credential", "passwd",
                               "api_key", "credentials", *PLURALS])


@settings(max_examples=400, deadline=None)
@given(words=NAME_WORDS, secret=SECRET_WORD, upper=st.booleans(), sep=st.sampled_from(["_", "-", "."]),
       syntax=st.sampled_from(["{n}={v}", "{n}: {v}", '"{n}": "{v}"', "'{n}': '{v}'", '{n} = "{v}"', "--{n}={v}",
                               "--{n} {v}", "export {n}={v}", "{n} := {v}", "{n} => {v}", "{n}\t{v}",
                               "{n}:={v}"]),
       prefix=st.sampled_from(sc.PREFIXES), suffix=st.sampled_from(sc.SUFFIXES),
       # A decimal number is taken for a measurement (`Time to first token: 45.1 ms`), not a secret.
       value=st.text(sc.ALNUM + "!#$%^&*_+.@", min_size=8, max_size=40).filter(
           lambda v: not re.fullmatch(r"\d+\.\d+", v)))
def test_generated_named_secrets_never_survive(words: list[str], secret: str, upper: bool, sep: str, syntax: str,
                                               prefix: str, value: str, suffix: str) -> None:
    name = sep.join([*words, secret])
    name = name.upper() if upper else name
    if syntax.startswith("--"):
        value = "x" + value  # a value after `--flag ` that starts with `-` is the next flag
    if secret in PLURALS and value.isdigit():
        value += "x"  # `tokens: 512` is a count
    line = prefix + syntax.format(n=name, v=value) + suffix
    assert value not in redact_text(line)[0], line


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["actor/pg_loss", "perf/total_num_tokens", "timing_s/gen", "tokens/s",
                                           "response_length/mean", "critic/score/mean", "val/pass_rate"]),
                          st.floats(0, 1e6, allow_nan=False)), min_size=1, max_size=8),
       st.integers(0, 10**6))
def test_step_metrics_are_left_alone(metrics: list[tuple[str, float]], step: int) -> None:
    line = f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in metrics)
    assert redact_text(line) == (line, [])


# --- end to end: a real job, a real bundle ---------------------------------------------------------

@dataclass
class Planted:
    proc: subprocess.Popen[bytes]
    log: Path
    config: Path
    tmp: Path


def _plant_files(tmp: Path) -> tuple[Path, Path]:
    """The followed log (its 2,000-line tail starts inside a private key), a Ray worker log, a stack dump,
    the config file with secrets in comments."""
    plant_lines = [line for plant in CORPUS for line in plant.lines]
    key = CUT_KEY
    inside = 5  # body lines in the tail
    after = [*plant_lines, *sc.BENIGN]
    filler = TAIL_LINES - inside - 1 - len(after)
    assert filler > 0
    log = tmp / "train.log"
    log.write_text("\n".join(["2026-01-01 10:00:00 [ACTOR] init model", "-----BEGIN RSA PRIVATE KEY-----",
                              *key[: len(key) - inside], *key[len(key) - inside:], "-----END RSA PRIVATE KEY-----",
                              *(f"step:{i} - actor/pg_loss:0.1 - timing_s/gen:1.5" for i in range(filler)),
                              *after]) + "\n")
    session = tmp / "ray" / "session_2026-01-01_10-00-00_000001_1"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "worker-abc-01000000-1.out").write_text(
        "".join(f"(WorkerDict pid=4242) {line}\n" for line in plant_lines))
    (tmp / "ray" / "session_latest").symlink_to(session)
    stacks = tmp / "cache" / "gkdtop" / "stacks"
    stacks.mkdir(parents=True)
    (stacks / "stacks-1.txt").write_text("Thread 1 main\n" + "".join(f"  cmd: {line}\n" for line in plant_lines))
    config = tmp / "config.yaml"
    config.write_text("backlog: 5000\nstall_after: 60\n" + "".join(f"# {line}\n" for line in plant_lines))
    return log, config


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    log, config = _plant_files(tmp_path)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "MASTER_PORT": "29500"}
    env.update({name: VALUES[i] for i, name in enumerate(sc.ENV_NAMES)})
    env.update({f"GKDTOP_PLANT_{i}": "\n".join(p.lines) for i, p in enumerate(CORPUS)})
    argv = [sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(120)", "main_gkd",
            "--max-num-batched-tokens", "8192"]
    for plant in CORPUS:  # CLI plants as separate words, the rest one argument each
        argv += plant.lines[0].split() if plant.syntax.startswith("--flag") else ["\n".join(plant.lines)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", str(tmp_path / "none" / "nccl_trace_rank_"))
    monkeypatch.chdir(tmp_path)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        yield Planted(proc, log, config, tmp_path)
    finally:
        proc.kill()
        proc.wait()


def test_no_planted_secret_reaches_the_bundle(planted: Planted, capsys: pytest.CaptureFixture[str]) -> None:
    values = VALUES + CUT_KEY
    # The plants are really there: in the job's environment, its command line, the log's tail.
    environ = Path(f"/proc/{planted.proc.pid}/environ").read_bytes()
    cmdline = Path(f"/proc/{planted.proc.pid}/cmdline").read_bytes()
    assert all(v.encode() in environ for v in VALUES) and sum(v.encode() in cmdline for v in VALUES) >= 200
    tail = planted.log.read_text().splitlines()[-TAIL_LINES:]
    assert tail[0] == CUT_KEY[-5]  # the tail starts inside the key, its BEGIN line out of view

    out = planted.tmp / "out" / "b.tar.gz"
    assert bundle_command(str(out), [str(planted.log)], load_config(planted.config), "http://127.0.0.1:9") == 0
    assert Path(capsys.readouterr().out.strip()) == out
    dest = planted.tmp / "extracted"
    with tarfile.open(out, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    files = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    leaks = [(name, v) for name, data in files.items() for v in values
             if v.encode() in data or json.dumps(v)[1:-1].encode() in data]
    syn = {v: p.syntax for p in CORPUS for v in p.values}
    assert leaks == [], sorted({(n, syn.get(v)) for n, v in leaks})

    # ... and the bundle still holds what a diagnosis needs, from each place the secrets were planted.
    root = next(iter({name.split("/")[0] for name in files}))
    member = {name.split("/", 1)[1]: data for name, data in files.items()}
    mine = next(p for p in json.loads(member["processes.json"]) if p["pid"] == planted.proc.pid)
    assert "main_gkd --max-num-batched-tokens 8192" in mine["cmdline"] and REDACTED in mine["cmdline"]
    group = next(g for g in json.loads(member["environ.json"])["groups"] if planted.proc.pid in g["pids"])
    assert group["env"]["NCCL_DEBUG"] == "INFO" and group["env"]["HF_TOKEN"] == REDACTED
    assert REDACTED in group["env"]["GKDTOP_PLANT_0"]
    followed = member[next(n for n in member if n.startswith("logs/followed/"))].decode()
    assert followed.startswith(f"{REDACTED}\n") and all(line in followed for line in sc.BENIGN)
    assert any(n.startswith("logs/ray-session/") for n in member) and "stacks/stacks-1.txt" in member
    assert b"backlog: 5000" in member["config.yaml"]
    snapshot = [line["text"] for line in json.loads(member["snapshot.json"])["logs"]["lines"]]
    assert snapshot[-1] in sc.BENIGN and REDACTED in "\n".join(snapshot)  # a cut key does not eat the rest
    manifest = json.loads(member["manifest.json"])
    counts = {r["name"]: r["count"] for r in manifest["redacted"]}
    assert counts["private key block"] >= 1 and counts["HF_TOKEN"] >= 1 and sum(counts.values()) >= len(VALUES)
    assert root == "b"


# --- where the bundle is written --------------------------------------------------------------------

def _cli(out: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    log = tmp / "train.log"
    log.write_text("step:1 - timing_s/gen:1.5\n")
    code = bundle_command(out, [str(log)], load_config(None), "http://127.0.0.1:9")
    return code, capsys.readouterr().err


def test_dots_as_the_name_give_no_member_outside_the_root(tmp_path: Path) -> None:
    config = load_config(None)
    out = build_bundle(Monitor(config, logs=[]), tmp_path / "...tar.gz", stacks_dir=tmp_path / "none",
                       trace_prefix=str(tmp_path / "none" / "t_"), ray_tmp=tmp_path / "none")
    assert out == tmp_path / "...tar.gz"
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
    assert names and all(n.startswith("gkdtop-bundle/") and ".." not in n.split("/") for n in names)


def test_a_symlink_is_neither_followed_nor_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "dir").mkdir()
    for link, to in ((tmp_path / "b.tar.gz", target), (tmp_path / "d", tmp_path / "dir")):
        link.symlink_to(to)
        code, err = _cli(str(link), tmp_path, capsys)
        assert code == 1 and err.count("\n") == 1 and "symbolic link" in err and str(link) in err
        assert link.is_symlink() and os.readlink(link) == str(to)
    assert target.read_text() == "keep me" and list((tmp_path / "dir").iterdir()) == []


def test_no_writing_to_a_device_or_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out in ("/dev/null", str(fifo), "/dev/gkdtop-test.tar.gz", "/proc/self/x.tar.gz"):
        code, err = _cli(out, tmp_path, capsys)
        assert code == 1 and err.count("\n") == 1 and err.startswith("gkdtop bundle: ") and out in err, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not Path("/dev/gkdtop-test.tar.gz").exists()


def test_a_regular_file_or_a_directory_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.tar.gz"
    old.write_text("an older bundle")
    assert _cli(str(old), tmp_path, capsys)[0] == 0 and tarfile.is_tarfile(old)
    assert _cli(str(tmp_path), tmp_path, capsys)[0] == 0
    assert len(list(tmp_path.glob("gkdtop-bundle-*.tar.gz"))) == 1



def test_ray_json_has_no_secret_from_a_job(ray_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A job submitted to a real cluster with secrets on its entrypoint (one cut at the 200-character limit
    mid-token) and in its runtime env: ray.json lists the job, and no member holds the secrets or a piece."""
    rng = random.Random(7)
    wandb, hf, pw, cut = sc.wandb_key(rng), sc.hf_token(rng), sc.password(rng), sc.hf_token(rng)
    entrypoints = [f"echo main_gkd --wandb-key {wandb} --hf-token={hf} redis://:{pw}@10.0.0.5:6379",
                   f"echo {'x' * 180} {cut}"]
    ids = []
    for entry in entrypoints:
        body = json.dumps({"entrypoint": entry, "runtime_env": {"env_vars": {"HF_TOKEN": hf}}}).encode()
        request = urllib.request.Request(f"{ray_cluster.dashboard}/api/jobs/", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            ids.append(json.loads(response.read())["submission_id"])

    def listed() -> bool:
        with urllib.request.urlopen(f"{ray_cluster.dashboard}/api/jobs/", timeout=10) as response:
            jobs = {j.get("submission_id"): j.get("status") for j in json.loads(response.read())}
        return all(jobs.get(i) in ("SUCCEEDED", "FAILED", "STOPPED") for i in ids)

    wait_for(listed, timeout=120, interval=1)
    monitor = Monitor(load_config(None), logs=[], ray_address=ray_cluster.dashboard)

    async def once() -> None:
        await monitor.collect_once()
        await monitor.stop()

    asyncio.run(once())
    out = build_bundle(monitor, tmp_path / "r.tar.gz", stacks_dir=tmp_path / "none",
                       trace_prefix=str(tmp_path / "none" / "t_"), ray_tmp=ray_cluster.temp_root / "ray")
    with tarfile.open(out, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    jobs = {j["id"]: j for j in json.loads(members["ray.json"])["jobs"]}
    pieces = [v[i:i + 8] for v in (wandb, hf, pw, cut) for i in range(len(v) - 7)]
    found = [(name, p) for name, data in members.items() for p in pieces if p.encode() in data]
    assert found == []
    assert set(ids) <= set(jobs) and "--wandb-key" in jobs[ids[0]]["entrypoint"]
    assert jobs[ids[1]]["entrypoint"].endswith(" …")


def test_secret_spans_are_what_redact_text_hides() -> None:
    """The web view keeps its styles around the spans; they must hide what redact_text hides."""
    from gkdtop.actions.redact import MAX_LINE, secret_spans

    for line in [text for text, _ in ISSUE30_CASES if "\n" not in text] + [f"a {HF_LIKE} b password={V} c"]:
        spans = secret_spans(line)
        kept, pos = [], 0
        for start, end in spans:
            kept.append(line[pos:start])
            pos = end
        assert REDACTED.join([*kept, line[pos:]]) == redact_text(line)[0], line
    assert secret_spans("x" * MAX_LINE + "token=abc") == [(MAX_LINE, MAX_LINE + 9)]  # never searched: hidden


HF_LIKE = "hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb"


def test_replay_and_snapshot_print_no_secret_a_log_line_holds_unless_asked(tmp_path: Path) -> None:
    """Audit 21: a failure line with a password in its URL, a results header with an HF token: replay (its text,
    --why, --json) and snapshot printed them verbatim, though their output is pasted into issues."""
    password, token = "Tr0ub4dor-9x2", "hf_" + "QmZk3PvTnR8sW2yXcB5dLfHgJ7aE4uN1oK"
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-03-04 10:00:00,100 INFO hf (pretrained=/m/q7,token=" + token + "), gen_kwargs: (None), limit: None",
        "2026-03-04 10:00:02,100 INFO Traceback (most recent call last):",
        '  File "/app/push.py", line 12, in <module>',
        f"subprocess.CalledProcessError: Command '['git', 'clone', 'https://mlops:{password}@git.lab.example/rl/"
        "reward.git']' returned non-zero exit status 128.",
    ]) + "\n")
    command = [sys.executable, "-m", "gkdtop"]
    outputs = {
        "replay --why": subprocess.run([*command, "replay", "--why", str(log)], capture_output=True, text=True),
        "replay --json": subprocess.run([*command, "replay", "--json", str(log)], capture_output=True, text=True),
        "snapshot --json": subprocess.run([*command, "snapshot", "--json", "--log", str(log), "--ray-address",
                                           "127.0.0.1:9"], capture_output=True, text=True, timeout=120),
    }
    for name, done in outputs.items():
        assert done.returncode == 0, (name, done.stderr)
        assert password not in done.stdout and token not in done.stdout, (name, done.stdout)
        assert "CalledProcessError" in done.stdout, name  # the failure itself is still shown
    json.loads(outputs["replay --json"].stdout)  # still JSON
    shown = subprocess.run([*command, "replay", "--show-secrets", str(log)], capture_output=True, text=True)
    assert password in shown.stdout


def test_a_report_keeps_its_own_words_and_the_log_s_paths_where_a_name_only_says_key_or_token(tmp_path: Path) -> None:
    """Review of session 25: redacting a report by names turned a file `no_loss_keys.log`'s duration, a store's
    `keys: /barrier/0/1422` and a finding's `generates no tokens:` into `<redacted>`. A report hides only what has a
    secret's own shape; a bundle and a message redact fully."""
    log = tmp_path / "no_loss_keys.log"
    log.write_text("\n".join([
        "2026-03-04 10:00:00,100 INFO trainer started, tokens: 8192 per batch",
        "2026-03-04 10:05:00,100 INFO Traceback (most recent call last):",
        "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /barrier/0/1422",
    ]) + "\n")
    command = [sys.executable, "-m", "gkdtop", "replay", "--why", str(log)]
    shown = subprocess.run([*command, "--show-secrets"], capture_output=True, text=True).stdout
    assert subprocess.run(command, capture_output=True, text=True).stdout == shown
    assert "keys: /barrier/0/1422" in shown and REDACTED not in shown
