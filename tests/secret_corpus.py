"""A corpus of planted secrets in the syntaxes a training job's logs, command lines, environments and
configs carry them in, plus benign diagnostic lines that must come through untouched.

Values are random (seeded) and shaped like the real thing; none is a real key. Each `Plant` is one or
more lines and the values in them that must never leave the machine.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
PASSWORD_CHARS = ALNUM + "!#$%^&*_+.@-"


@dataclass(frozen=True)
class Plant:
    syntax: str
    lines: tuple[str, ...]
    values: tuple[str, ...]


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def password(rng: random.Random) -> str:
    """A password with letters, digits and punctuation; at least one digit, so it is not an English word."""
    return _s(rng, ALNUM, 3) + _s(rng, PASSWORD_CHARS, rng.randint(6, 17)) + _s(rng, string.digits, 1)


def opaque(rng: random.Random) -> str:
    return _s(rng, ALNUM, rng.randint(16, 40))


def hf_token(rng: random.Random) -> str:
    return "hf_" + _s(rng, ALNUM, 34)


def sk_proj(rng: random.Random) -> str:
    """OpenAI project keys: `sk-proj-`, then ~156 URL-safe characters (dashes and underscores inside)."""
    return "sk-proj-" + _s(rng, URLSAFE, rng.randint(120, 160))


def sk_key(rng: random.Random) -> str:
    return rng.choice([lambda: "sk-" + _s(rng, ALNUM, 48), lambda: sk_proj(rng),
                       lambda: "sk-ant-api03-" + _s(rng, URLSAFE, 93) + "AA"])()


def github(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice("pousr").join(["gh", "_"]) + _s(rng, ALNUM, 36)
    return "github_pat_" + _s(rng, ALNUM, 22) + "_" + _s(rng, ALNUM, 59)


def glpat(rng: random.Random) -> str:
    return "glpat-" + _s(rng, URLSAFE, 20)


def aiza(rng: random.Random) -> str:
    return "AIza" + _s(rng, URLSAFE, 35)


def slack(rng: random.Random) -> str:
    return f"xox{rng.choice('bpas')}-{_s(rng, string.digits, 11)}-{_s(rng, string.digits, 12)}-{_s(rng, ALNUM, 24)}"


def jwt(rng: random.Random) -> str:
    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    head = part({"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"})
    body = part({"sub": _s(rng, ALNUM, 10), "exp": rng.randint(1_700_000_000, 1_900_000_000)})
    return f"{head}.{body}.{_s(rng, URLSAFE, 43)}"


def aws_pair(rng: random.Random) -> tuple[str, str]:
    return rng.choice(["AKIA", "ASIA"]) + _s(rng, string.ascii_uppercase + "234567", 16), _s(rng, B64, 40)


def wandb_key(rng: random.Random) -> str:
    return _s(rng, HEX, 40)


def pem_body(rng: random.Random, lines: int) -> list[str]:
    """A private key's base64 body: 64-character lines, the last one shorter."""
    data = base64.b64encode(rng.randbytes(48 * lines - rng.randint(4, 30))).decode()
    return [data[i:i + 64] for i in range(0, len(data), 64)]


def any_token(rng: random.Random) -> str:
    return rng.choice([hf_token, sk_key, github, glpat, aiza, slack, jwt, opaque, password])(rng)


# Names a job gives its secrets; each holds token/key/secret/password/pass/pwd/auth/credential.
ENV_NAMES = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY", "OPENAI_KEY", "MYSQL_PWD",
             "SMTP_PASS", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN",
             "ANTHROPIC_API_KEY", "REDIS_PASSWORD", "PGPASSWORD", "SLACK_BOT_TOKEN", "COMET_API_KEY",
             "NEPTUNE_API_TOKEN", "MLFLOW_TRACKING_PASSWORD", "VLLM_API_KEY", "HF_HUB_TOKEN", "RAY_AUTH_TOKEN",
             "GOOGLE_CREDENTIALS", "AZURE_CLIENT_SECRET", "S3_SECRET_KEY", "SENTRY_AUTH_TOKEN"]
KEY_NAMES = ["token", "api_key", "apiKey", "password", "passwd", "secret", "client_secret", "access_token",
             "auth_token", "hf_token", "wandb_key", "private_key", "db_pass", "smtp_pwd", "credential",
             "refresh_token", "x-api-key", "authToken", "secret_key", "auth"]
FLAG_NAMES = ["--wandb-key", "--hf-token", "--api-key", "--token", "--password", "--db-pass", "--mysql-pwd",
              "--auth", "--credential", "--secret", "--client-secret", "--auth-token", "--access-key",
              "--openai-key", "--redis-password"]
PREFIXES = ["", "DEBUG: ", "INFO:root:", "env: ", "[2026-01-01 10:00:00,123] WARNING ", "(WorkerDict pid=4242) ",
            "2026-01-01 10:00:00 ERROR ", "I0101 10:00:00.123 1234 main.py:42] ", "config: ",
            "(TaskRunner pid=77, ip=10.0.0.3) "]
SUFFIXES = ["", " ok", ", step=3", " (from env)", " -- retrying in 5 s"]


def _line(rng: random.Random, body: str) -> str:
    return rng.choice(PREFIXES) + body + rng.choice(SUFFIXES)


def _one(syntax: str, body: Callable[[random.Random, str], str], value: Callable[[random.Random], str]
         ) -> Callable[[random.Random], Plant]:
    def make(rng: random.Random) -> Plant:
        v = value(rng)
        return Plant(syntax, (_line(rng, body(rng, v)),), (v,))
    return make


def _aws(rng: random.Random) -> Plant:
    key_id, secret = aws_pair(rng)
    body = rng.choice([f"aws credentials {key_id} {secret}", f"using {key_id}:{secret} for s3",
                       f"[default] aws_access_key_id={key_id} / {secret}"])
    return Plant("AWS key id and secret", (_line(rng, body),), (key_id, secret))


def _basic(rng: random.Random) -> Plant:
    user, pw = _s(rng, string.ascii_lowercase, 6), password(rng)
    b64 = base64.b64encode(f"{user}:{pw}".encode()).decode()
    body = rng.choice([f"Authorization: Basic {b64}", f"-H 'Authorization: Basic {b64}'",
                       f'headers={{"Authorization": "Basic {b64}"}}', f"proxy-authorization: basic {b64}"])
    return Plant("HTTP Basic", (_line(rng, body),), (b64,))


def _url(rng: random.Random) -> Plant:
    pw, user = password(rng).replace("@", "%40"), rng.choice(["", "admin", "root", "oauth2", "x-access-token"])
    body = rng.choice([f"redis://{user}:{pw}@10.0.0.5:6379/0", f"postgresql://{user or 'app'}:{pw}@db:5432/x",
                       f"https://{user or 'u'}:{pw}@git.example.com/org/repo.git",
                       f"connecting to mongodb+srv://{user or 'svc'}:{pw}@cluster0.example.net/?retryWrites=true",
                       f"amqp://{user or 'guest'}:{pw}@rabbit:5672//"])
    return Plant("URL user info", (_line(rng, body),), (pw,))


def _pem_cut(rng: random.Random) -> Plant:
    """The tail starts inside the key: no BEGIN line, body lines, the END line."""
    body = pem_body(rng, rng.randint(4, 12))
    start = rng.randint(1, len(body) - 2)
    lines = (*body[start:], f"-----END {rng.choice(['', 'RSA ', 'EC '])}PRIVATE KEY-----", "key loaded")
    return Plant("PEM block, start cut off", lines, tuple(body[start:]))


def _pem_whole(rng: random.Random) -> Plant:
    body = pem_body(rng, rng.randint(3, 8))
    kind = rng.choice(["", "RSA ", "OPENSSH "])
    lines = (f"{rng.choice(PREFIXES)}-----BEGIN {kind}PRIVATE KEY-----", *body, f"-----END {kind}PRIVATE KEY-----")
    return Plant("PEM block", lines, tuple(body))


def _pem_json(rng: random.Random) -> Plant:
    body = pem_body(rng, rng.randint(3, 6))
    value = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(body) + "\\n-----END PRIVATE KEY-----\\n"
    return Plant("PEM in a JSON string", (f'service account: {{"type": "service_account", "pkey": "{value}"}}',),
                 tuple(body))


def _several(rng: random.Random) -> Plant:
    parts, values = [], []
    for _ in range(rng.randint(2, 4)):
        plant = rng.choice(SINGLE_LINE)(rng)
        parts.append(plant.lines[0])
        values += plant.values
    return Plant("several on one line", (" | ".join(parts),), tuple(values))


def _kv(rng: random.Random, v: str) -> str:
    return f"{rng.choice(KEY_NAMES)}={v}"


SINGLE_LINE: list[Callable[[random.Random], Plant]] = [
    _one("key=value", _kv, lambda r: r.choice([password, opaque])(r)),
    _one("key: value", lambda r, v: f"{r.choice(KEY_NAMES)}: {v}", lambda r: r.choice([password, opaque])(r)),
    _one("JSON", lambda r, v: f'kwargs: {{"{r.choice(KEY_NAMES)}": "{v}", "lr": 1e-06}}', any_token),
    _one("escaped JSON", lambda r, v: f'runtime_env="{{\\"{r.choice(KEY_NAMES)}\\": \\"{v}\\"}}"', any_token),
    _one("YAML", lambda r, v: f"  {r.choice(KEY_NAMES)}: {r.choice(['', chr(34)])}{v}", opaque),
    _one("TOML", lambda r, v: f'{r.choice(KEY_NAMES)} = "{v}"', any_token),
    _one("Python dict", lambda r, v: f"{{'{r.choice(KEY_NAMES)}': '{v}', 'step': 3}}", any_token),
    _one("Python kwargs", lambda r, v: f"login({r.choice(KEY_NAMES)}='{v}', relogin=True)", any_token),
    _one("env dump", lambda r, v: f"{r.choice(['', 'export ', 'declare -x '])}{r.choice(ENV_NAMES)}={v}",
         lambda r: r.choice([password, opaque, hf_token])(r)),
    _one("HTTP Bearer", lambda r, v: f"Authorization: Bearer {v}", lambda r: r.choice([opaque, jwt])(r)),
    _basic,
    _one("HTTP Token", lambda r, v: r.choice([f"Authorization: Token {v}", f"X-Api-Key: {v}",
                                              f"PRIVATE-TOKEN: {v}"]), opaque),
    _url,
    _one("--flag=V", lambda r, v: f"python main.py {r.choice(FLAG_NAMES)}={v} --epochs 3",
         lambda r: r.choice([password, opaque, hf_token])(r)),
    _one("--flag V", lambda r, v: f"python main.py {r.choice(FLAG_NAMES)} {v} --epochs 3",
         lambda r: r.choice([password, opaque, wandb_key])(r)),
    _one("hf_", lambda r, v: f"downloading with {v}", hf_token),
    _one("ghp_/github_pat_", lambda r, v: f"git clone https://{v}@github.com/org/repo", github),
    _one("glpat-", lambda r, v: f"gitlab {v} set", glpat),
    _one("sk-/sk-proj-", lambda r, v: f"openai client ({v})", sk_key),
    _aws,
    _one("AIza", lambda r, v: f"maps?key2={v}&q=x", aiza),
    _one("xox?-", lambda r, v: f"slack notify via {v}", slack),
    _one("JWT", lambda r, v: f"session {v} accepted", jwt),
    _one("wandb 40-hex", lambda r, v: r.choice([f"wandb login {v}", f"wandb: using key {v}",
                                                f"wandb.login(relogin=True) {v}"]), wandb_key),
]
# Shapes the second adversarial pass (issue 30) found leaking: plurals, other operators, known tools' short
# flags, presigned URLs, `wandb login V`, block scalars, disguised names, URL user names, a far AWS secret.
PLURAL_NAMES = ["HF_HUB_TOKENS", "API_KEYS", "DB_PASSWORDS", "access_tokens", "apiKeys", "SECRETS", "clientSecrets",
                "AUTH_TOKENS", "refreshTokens", "PASSWDS"]
OPERATORS = [" := ", ":=", " => ", "=>", "\t", " \t", "\t\t"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]


def _tool(rng: random.Random) -> Plant:
    v = password(rng)
    body = rng.choice([f"mysql -h db -u root -p{v} train", f"mysql -u root -p {v} -e 'select 1'",
                       f"mysqldump -uroot -p{v} gkd", f"sshpass -p {v} ssh node2 hostname",
                       f"sshpass -p{v} scp a node2:", f"redis-cli -h r -a {v} ping", f"curl -s -u admin:{v} http://x/api",
                       f"docker login -u me -p {v} registry.example", f"mongosh --host h -u u -p {v}",
                       f"/usr/bin/mysql --user=root -p{v} -P 3306"])
    return Plant("--flag: a known tool's short flag", (_line(rng, body),), (v,))


def _presigned(rng: random.Random) -> Plant:
    sig = _s(rng, HEX, 64)
    key_id = aws_pair(rng)[0]
    body = rng.choice([
        f"downloading https://ckpt.s3.amazonaws.com/run/model.pt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        f"{key_id}%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600"
        f"&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}",
        f"GET https://storage.googleapis.com/b/o.bin?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=svc%40p.iam."
        f"gserviceaccount.com%2F20260101%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Expires=900&X-Goog-Signature={sig}",
        f"sas url: https://acct.blob.core.windows.net/c/ckpt.pt?sv=2022-11-02&sp=r&se=2026-01-02T00:00:00Z&sig={sig}",
        f"cdn https://d111.cloudfront.net/x.tar?Expires=1700000000&Signature={sig}&Key-Pair-Id=K2JCJMDEHXQW5F"])
    return Plant("presigned URL", (_line(rng, body),), (sig,))


def _wandb_login(rng: random.Random) -> Plant:
    v = rng.choice([wandb_key, lambda r: "local-" + wandb_key(r), opaque])(rng)
    if not any(c.isdigit() for c in v):
        v += "7"
    body = rng.choice([f"wandb login {v}", f"$ wandb login --relogin {v}", f"running: wandb login {v} && python t.py"])
    return Plant("wandb login V", (_line(rng, body),), (v,))


def _block_scalar(rng: random.Random) -> Plant:
    values = tuple(rng.choice([opaque, password])(rng) for _ in range(rng.randint(1, 3)))
    indent = rng.choice(["", "  ", "    "])
    name = rng.choice([*KEY_NAMES, "service_account_json", "credentials", "sshPrivateKey"])
    lines = (f"{indent}{name}: {rng.choice(['|', '>', '|-', '>-', '|+'])}", *(f"{indent}  {v}" for v in values),
             f"{indent}lr: 0.001")
    return Plant("YAML block scalar", lines, values)


def _disguised(rng: random.Random) -> Plant:
    """A secret name with a zero-width character inside or in fullwidth letters: a human reads it as the name."""
    v, name = rng.choice([password, opaque])(rng), rng.choice(ENV_NAMES + KEY_NAMES)
    if rng.random() < 0.5:
        at = rng.randint(1, len(name) - 1)
        name = name[:at] + rng.choice(ZERO_WIDTH) + name[at:]
    else:
        name = "".join(chr(ord(c) + 0xFEE0) if rng.random() < 0.7 else c for c in name)
    return Plant("disguised name", (_line(rng, f"{name}{rng.choice(['=', ': '])}{v}"),), (v,))


def _url_user(rng: random.Random) -> Plant:
    v = rng.choice([opaque, github, glpat])(rng)
    body = rng.choice([f"git clone https://{v}@git.example.com/org/repo.git", f"remote: https://{v}@github.com/o/r",
                       f"pip install git+https://{v}@gitlab.example.com/o/r.git@v1"])
    return Plant("URL user name", (_line(rng, body),), (v,))


def _aws_far(rng: random.Random) -> Plant:
    key_id, secret = aws_pair(rng)
    lines = rng.choice([(f"aws_secret_access_key {secret}",), (f"{key_id} for region us-east-1 with secret {secret}",),
                        (f"using access key {key_id}", f"and its secret {secret}"),
                        (f"export AWS_ACCESS_KEY_ID={key_id}", f"echo {secret} > /tmp/s")])
    lines = tuple(_line(rng, line) for line in lines)
    return Plant("AWS secret away from its key id", lines, tuple(v for v in (key_id, secret) if v in "".join(lines)))


SINGLE_LINE += [
    _one("plural name", lambda r, v: f"{r.choice(PLURAL_NAMES)}{r.choice(['=', ': ', ' = '])}{v}",
         lambda r: r.choice([password, opaque])(r)),
    _one("other operators", lambda r, v: f"{r.choice(KEY_NAMES + ENV_NAMES)}{r.choice(OPERATORS)}{v}",
         lambda r: r.choice([password, opaque])(r)),
    _tool, _presigned, _wandb_login, _disguised, _url_user,
]
MULTI_LINE: list[Callable[[random.Random], Plant]] = [_pem_cut, _pem_whole, _pem_json, _several, _block_scalar,
                                                      _aws_far]


def corpus(seed: int = 16, per_syntax: int = 10) -> list[Plant]:
    rng = random.Random(seed)
    return [make(rng) for make in SINGLE_LINE + MULTI_LINE for _ in range(per_syntax)]


# Lines a diagnosis needs, which must come through untouched.
BENIGN = [
    "python -m vllm.entrypoints.openai.api_server --max-num-batched-tokens 8192 --max-model-len 4096",
    "vllm serve Qwen/Qwen2.5-7B --tokenizer Qwen/Qwen2.5-7B --tokenizer-mode auto --kv-cache-dtype auto",
    "--skip-tokenizer-init --enable-prefix-caching --gpu-memory-utilization 0.9 --disable-log-requests",
    "generation_config: pad_token_id=151643, eos_token_id=151645, bos_token_id=151643",
    "tokenizer.pad_token = tokenizer.eos_token  # pad_token_id: 0",
    'tokenizer_config.json: {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 32768}',
    "INFO 01-01 10:00:00 metrics.py:341] Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput:"
    " 567.8 tokens/s",
    "step:12 - actor/pg_loss:0.123 - actor/entropy:0.45 - response_length/mean:512.0 - perf/total_num_tokens:123456"
    " - perf/throughput:2345.6 - timing_s/gen:12.3",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 actor_rollout_ref.rollout.max_num_batched_tokens=8192",
    "data.max_prompt_length=1024 data.max_response_length=2048 max_tokens=1024 num_tokens=4096",
    '{"max_new_tokens": 512, "temperature": 0.7, "top_p": 0.95, "token_budget": 8192}',
    "val/pass_rate: 0.43 - val/pass_at_1: 0.41 - reward/mean: 0.7",
    "NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7",
    "NCCL INFO comm 0x55d5c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1000 commId 0x8a1b2c3d4e5f6a7b - Init COMPLETE",
    "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "NCCL WARN Cuda failure 'out of memory' ncclSocketConnect: connect to 10.0.0.2<45123> failed",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/"
    "a09a35458c702b33eeacc393d103063234e8bc28/config.json",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (HEAD -> main)",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "checksum e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 matches",
    "KeyError: 'model.layers.0.self_attn.q_proj.weight'",
    "Missing key(s) in state_dict: \"lm_head.weight\"",
    "num_key_value_heads: 8, num_attention_heads: 28, head_dim: 128",
    "TOKENIZERS_PARALLELISM=false",
    "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=16 RANK=3",
    "PWD=/home/user/verl OLDPWD=/home/user",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970,"
    " unhandled cuda error",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB",
    '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050, in all_reduce',
    "(WorkerDict pid=12345, ip=10.0.0.1) INFO: actor_rollout_generate_sequences done in 45.2s",
    "ray::WorkerDict.actor_rollout_generate_sequences() (pid=12345, ip=10.0.0.1)",
    "Ray dashboard at http://127.0.0.1:8265, address=10.0.0.1:6379, ray://10.0.0.1:10001",
    "actor_id=8a2b3c4d5e6f708192a3b4c5d6e7f801 node_id: 4f8e2b1c9d3a7e6f5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c",
    "session_2026-01-01_10-00-00_123456_7890 job_id=02000000",
    "wandb: Run data is saved locally in /tmp/wandb/run-20260101_100000-abc123xy",
    "wandb: View run at https://wandb.ai/team/gkd/runs/abc123xy",
    "Loading checkpoint shards: 100%|##########| 4/4 [00:05<00:00,  1.30s/it]",
    "Time to first token: 45.1 ms, inter-token latency: 12.3 ms",
    "use_auth_token=True trust_remote_code=True",
    "--use-auth-token --port 8000",
    "key padding mask shape: torch.Size([8, 512])",
    "keys: ['input_ids', 'attention_mask', 'position_ids']",
    "special_tokens_map.json added_tokens.json tokenizer.json",
    "token_type_ids shape [8, 512], prompt_token_ids=[151644, 872, 198]",
    "CUDA_VISIBLE_DEVICES=0,1,2,3 NCCL_DEBUG=INFO NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=eth0",
    "log_prob_max_token_len_per_gpu=32768 ppo_micro_batch_size_per_gpu=4",
    "Epoch 3/10: loss=0.2345 lr=1.0e-05 grad_norm=1.23",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/resolve/main/model-00001-of-00004.safetensors",
    "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d)",
    "Traceback (most recent call last):",
    "RuntimeError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store"
    " by key '0', but store->get('0') got error: Socket Timeout",
    "disk-cache-size-limit-bytes=10737418240 task-runner-abcdefgh12345678",
    "sort_by: tokens/s, throughput (tokens/s): 1234",
    "max_num_seqs: 256, max_num_batched_tokens: 8192, block_size: 16",
    "bypass=False passes=3 compiled 12 graphs",
    # ... and beside the shapes issue 30 added: a port, counts in plural, a login hint, a git user, a date.
    "docker run -p 8080:80 -p 6379:6379 redis:7",
    "mysql -P 3306 -h db.internal --protocol=tcp",
    "generated tokens: 512, prompt tokens: 1024, cached_tokens=4096",
    "wandb: Currently logged in as: gkd-team. Use `wandb login --relogin` to force relogin",
    "Use wandb login to sign in again",
    "pip install git+ssh://git@github.com/org/repo.git@v1.2.0",
    "https://ckpt.s3.amazonaws.com/run/model.pt?X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600",
    "def forward(self, x): signature mismatch in traced graph",
    "curl -s http://127.0.0.1:8265/api/jobs/ | jq .",
    # ... and counts and field names a diagnosis compares (audit 21): SGLang's batch lines, OpenRLHF's arguments.
    "[2026-02-03 11:20:05 TP0] Decode batch. #running-req: 3, #token: 2417, token usage: 0.02, #queue-req: 0",
    "[2026-02-03 11:19:58 TP1] Prefill batch. #new-seq: 2, #new-token: 388, #cached-token: 64, token usage: 0.01",
    "Namespace(dataset='/data/sft.jsonl', input_key='question', output_key='response', label_key='answer')",
    "data.prompt_key=prompt data.image_key=images --chosen_key chosen --rejected_key rejected",
]
