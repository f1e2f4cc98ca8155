"""Secret redaction for everything that leaves the process (the bundle, the web view, notifications).

Pure functions, no I/O. Every pass runs over every line, each marking spans of the original text;
the union of the spans is replaced by `<redacted>` (so one match never hides another on the same line):
- by NAME: a key, variable or `--flag` whose name holds a secret word (token, key, secret, password,
  pass, pwd, auth, credential, ...; plurals and camel case too) has its value marked: `k=V`, `k: V`,
  `"k": "V"`, `'k': 'V'`, `k = "V"`, `k := V`, `k => V`, `k<TAB>V`, `--k=V`, `--k V`,
  `Authorization: Basic V`, `aws_secret_access_key V` (a credential-shaped V), a YAML block scalar
  (`key: |` and the indented lines under it);
- by TOOL: the short flags of known tools (`mysql -pV`, `sshpass -p V`, `redis-cli -a V`,
  `curl -u user:V`, `docker login -p V`, `wandb login V`);
- by SHAPE: values that are secrets whatever they are called (`hf_...`, `sk-proj-...`, `AKIA...` and
  the 40-character secret near it, `glpat-`, `AIza`, JWTs, URL user info, presigned-URL signatures,
  the body lines of a private key even when its BEGIN line is not in view).
Names are matched after NFKC normalisation with format characters dropped (`ＴＯＫＥＮ`, `TO\u200bKEN`).
Linear in a line's length: a line is cut at MAX_LINE first, patterns that could rescan a long run
are RE2's, and a secret's value is never searched again for keys.
Each function also returns the NAMES or KINDS of what it redacted (never the values), for the manifest.
Over-redaction is the accepted failure mode: a diagnostic bundle loses a little; a leak cannot be undone.
Measured on a corpus of planted secrets and benign diagnostic lines: bench/redaction.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

import re2

REDACTED = "<redacted>"
MAX_LINE = 64 << 10  # characters of one line kept; the rest is cut (a secret in it goes with it)
CUT = " <cut: {} more characters>"

# A name is a secret when one of its words is, or ends like one (`PGPASSWORD`, `hftoken`): `HF_TOKEN`,
# `wandbApiKey`, `--db-pass`, `MYSQL_PWD`, and their plurals (`API_KEYS`). (`key` and `pass` only whole:
# `monkey`, `bypass`.)
SECRET_WORDS = frozenset({
    "key", "secrets", "pass", "auth", "authorization", "cookie", "dsn", "accesskey", "secretkey", "privatekey",
})
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "passphrase", "pwd", "apikey", "authkey", "credential",
                  "credentials")
# ... unless another word says it is a count, an id or a tokenizer setting (`pad_token_id`,
# `max_token_len_per_gpu`, `num_key_value_heads`, `KeyError`), which a diagnosis needs.
BENIGN_WORDS = frozenset({
    "id", "ids", "type", "types", "count", "num", "len", "length", "per", "size", "max", "min", "limit",
    "budget", "total", "pad", "bos", "eos", "unk", "sep", "cls", "mask", "error", "path", "file", "dir",
    "rate", "at", "heads", "dim", "padding",
})
PATH_NAMES = frozenset({"pwd", "oldpwd"})  # the shell's working directories: a path is not their secret
_WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

# (kind for the manifest, pattern, what the lower-cased text must hold for the pattern to be tried:
# substrings, any of them). The secret is the group named `s` where there is one, else the whole match.
# No left boundary on unambiguous prefixes: a token glued to other text (`xhf_...`) must still go.
# RE2 (no backtracking) wherever a pattern has no look-around; those with one start only where a run of
# its characters starts, so Python's engine stays linear on them too.
_AWS_IDS = "akia|asia|abia|acca|agpa|aida|aroa|anpa"
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
SHAPES: list[tuple[str, Any, str]] = [
    ("Hugging Face token", re2.compile(r"hf_[A-Za-z0-9]{20,}"), "hf_"),
    ("GitHub token", re2.compile(r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
     "ghp_|gho_|ghu_|ghs_|ghr_|github_pat_"),
    ("GitLab token", re2.compile(r"glpat-[A-Za-z0-9_-]{20,}"), "glpat-"),
    ("API key (sk-...)", re2.compile(r"sk-(?:proj|ant|svcacct|admin)-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_"
                                     r"[A-Za-z0-9]{16,}"), "sk-|k_live_|k_test_"),
    ("API key (sk-...)", re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}"), "sk-"),
    ("AWS access key id", re2.compile(r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}"), _AWS_IDS),
    # An AWS secret key has no prefix: 40 base64 characters on a line that holds its key id (or near one).
    ("AWS secret key", _AWS_SECRET, _AWS_IDS),
    ("Google API key", re2.compile(r"AIza[0-9A-Za-z_-]{35}"), "aiza"),
    ("Slack token", re2.compile(r"xox[abposre]-[A-Za-z0-9-]{10,}"), "xox"),
    ("JWT", re2.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "eyj"),
    ("bearer token", re2.compile(r"(?i:bearer)\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), "bearer"),
    ("wandb key", re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])"), "wandb"),
    # A presigned URL's signature and credential (S3, GCS, Azure SAS, CloudFront): the URL is the key.
    ("presigned URL", re2.compile(
        r"(?i)[?&;](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
        r"x-goog-credential|googleaccessid|key-pair-id|policy)=(?P<s>[^&\s#\"'<>]+)"),
     "sig=|signature=|x-amz-|x-goog-|googleaccessid=|key-pair-id=|policy="),
    # A private key's body line, 64-76 base64 characters with both cases and a digit (a sha256 in hex
    # has no capital): found even when the tail starts inside the block.
    ("private key block", re.compile(
        r"(?:^|(?<=[\s\"'(\[=:>])|(?<=\\n))(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])"
        r"[A-Za-z0-9+/]{64,76}={0,2}(?=$|[\s\"',;)\]<]|\\n)"), ""),
]
_NEEDS = {needs: tuple(needs.split("|")) for _, _, needs in SHAPES}
# URL user info, both halves (`https://TOKEN@host`, `redis://:pw@host`, `https://user:pw@host`).
_PLAIN_USERS = frozenset({"git", "hg", "ubuntu", "ec2-user"})  # `ssh://git@github.com`: a login, no secret
_URL_USER_RE = re2.compile(r"://(?P<u>[^\s/?#@:]*)(?::(?P<s>[^\s/]*))?@")

# A name and what joins it to its value: `--name=`, `--name `, `name=`, `name: `, `"name": `, `\"name\": `,
# `name := `, `name => `, `name<TAB>`.
_KEY_RE = re.compile(
    r"(?<![\w.-])(?:(?P<flag>--?[A-Za-z][\w.-]*)(?:=|[ \t]+)"
    r"|\\?[\"']?(?P<name>[A-Za-z_][\w.-]*)\\?[\"']?(?:[ \t]*(?::=|=>|[:=])[ \t]*|\t[ \t]*))"
)
# The value at the end of a key: quoted (the inside), or one word; after an HTTP auth scheme the next word.
_VALUE_RE = re.compile(
    r"(?:(?:Basic|Bearer|Token|Digest|Bot|token|bearer|basic)[ \t]+)?"
    r"(?:\\\"(?P<e>[^\"\\\n]*)\\\"|\"(?P<d>[^\"\n]*)\"|'(?P<q>[^'\n]*)'|[\"']?(?P<w>[^\s,;)}\]\"'\\{\[(][^\s,;)}\]\"'\\]*))"
)
# A secret name, spaces, a credential-shaped value (`aws_secret_access_key wJalr...`): 16+ characters.
_SPACED_RE = re.compile(
    r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]*?(?:secret|token|passw(?:or)?d|api_?key|access_?key)s?)[ \t]+"
    r"(?P<v>[A-Za-z0-9/+=_.-]{16,})(?![^\s,;])", re.IGNORECASE)
_NOT_SECRETS = frozenset({"", "true", "false", "none", "null", "yes", "no", REDACTED})
# A `ROLE_key` argument names the data set's field that holds that role (OpenRLHF's `input_key`, `label_key`,
# `chosen_key`; verl's `data.prompt_key`); its value is the field's name (`prompt`, `chosen_messages`).
FIELD_WORDS = frozenset({"input", "output", "label", "prompt", "response", "chosen", "rejected", "image", "images",
                         "video", "videos", "text", "answer", "query", "question", "context", "messages",
                         "conversation", "conversations", "completion", "target", "tools", "system"})
_FIELD_VALUE_RE = re.compile(r"[a-z][a-z_]{0,39}")
_FLOAT_RE = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")  # `Time to first token: 45.1 ms`; an integer may be a PIN

_BEGIN_KEY_RE = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_END_KEY_RE = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# The last word of the line before an END line, when it is base64: a key's short last line (its full-width
# lines are a SHAPE), found when the BEGIN line is out of view.
_B64_TAIL_RE = re.compile(r"(?:^|(?<=[\s#:>]))(?P<s>[A-Za-z0-9+/]+={0,2})[ \t]*$")
# A YAML block scalar under a name: `password: |`, `- key: >-`; its indented lines are the value.
_BLOCK_RE = re.compile(r"(?<![^\s\"'])(?P<n>[^\s:\"']+)[\"']?[ \t]*:[ \t]*[|>][-+1-9]*[ \t]*$")
_BLOCK_ENDS = ("|", ">", "|-", ">-", "|+", ">+", *(f"{c}{d}" for c in "|>" for d in "123456789"))

# Known tools' flags that carry a password, given as `-pV`, `-p V` or `--flag=V` (`mysql -P 3306` is a port).
TOOL_FLAGS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mariadb",
                     "mariadb-dump", "mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport",
                     "sshpass"), ("-p",)),
    **dict.fromkeys(("redis-cli", "keydb-cli", "valkey-cli"), ("-a",)),
    **dict.fromkeys(("curl", "lftp"), ("-u", "--user", "-U", "--proxy-user")),
    "smbclient": ("-U", "--user"),
    **dict.fromkeys(("docker", "podman", "nerdctl", "helm", "buildah", "skopeo", "oras"), ("-p",)),
    "wandb": (),
}
LOGIN_TOOLS = frozenset({"docker", "podman", "nerdctl", "helm", "buildah", "skopeo", "oras", "wandb"})  # `X login`
POSITIONAL_LOGIN = frozenset({"wandb"})  # `wandb login KEY`
_COMMAND_ENDS = frozenset({";", "|", "||", "&&", "&"})
_TOOL_NEEDLES = (*TOOL_FLAGS, "login")
_TOOL_ALTERNATIVES = "|".join(sorted(map(re.escape, _TOOL_NEEDLES), key=len, reverse=True))
_TOOL_RE = re.compile(rf"(?<![\w.-])(?:{_TOOL_ALTERNATIVES})(?![\w.-])")

# Every rule needs one of these (lower-cased) or a long base64 run: other lines are returned as they are.
_NEEDLES = ("token", "key", "secret", "pass", "pwd", "auth", "credential", "cookie", "dsn", "-----", "://",
            *_TOOL_NEEDLES, *sorted({n for needs in _NEEDS.values() for n in needs if n}))
_LONG_RUN_RE = re.compile(r"[A-Za-z0-9+/]{64}")


def normalise(text: str) -> tuple[str, list[int] | None]:
    """`text` with each character NFKC-normalised and format characters (zero-width, soft hyphen, bidi)
    dropped, and where each character of the result came from (None: ASCII, unchanged)."""
    if text.isascii():
        return text, None
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            out.append(ch)
            where.append(i)
            continue
        if unicodedata.category(ch) == "Cf":
            continue
        norm = unicodedata.normalize("NFKC", ch)
        out.append(norm)
        where += [i] * len(norm)
    where.append(len(text))
    return "".join(out), where


@lru_cache(maxsize=4096)
def _name_kind(name: str) -> int:
    """0: not a secret name; 1: a secret; 2: a secret only as a plural (`tokens: 512` may be a count)."""
    name = normalise(name)[0].strip().lstrip("-")
    words = {w.lower() for w in _WORD_RE.findall(name)}
    if words & BENIGN_WORDS:
        return 0
    if words & SECRET_WORDS or any(w.endswith(SECRET_ENDINGS) for w in words):
        return 1
    singular = {w[:-1] for w in words if w.endswith("s") and len(w) > 3}
    return 2 if singular & SECRET_WORDS or any(w.endswith(SECRET_ENDINGS) for w in singular) else 0


def secret_block_indent(line: str) -> int | None:
    """For a line that opens a YAML block scalar under a secret name (`  db_password: |`): its indent, so
    a view that redacts line by line can hide the block's lines after it (deeper, or blank); else None."""
    if not line.rstrip(" \t").endswith(_BLOCK_ENDS) or (m := _BLOCK_RE.search(line)) is None:
        return None
    return _indent(line) if is_secret_name(normalise(m.group("n"))[0]) else None


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag or key name says its value is a secret."""
    return (_name_kind(name) if len(name) <= 256 else _name_kind.__wrapped__(name)) != 0


def _is_secret_value(name: str, value: str) -> bool:
    """Whether the value of a secret name is worth hiding: not `true`, `none`, `45.1`, PWD's path, or a
    plural's count (`tokens: 512`)."""
    value = value.strip()
    kind = _name_kind(name) if len(name) <= 256 else _name_kind.__wrapped__(name)
    return not (value.lower() in _NOT_SECRETS or _FLOAT_RE.fullmatch(value)
                or (kind == 2 and value.isdigit())
                or (name.lower() in PATH_NAMES and value.startswith(("/", "~"))))


def _count_or_field(text: str, start: int, name: str, value: str) -> bool:
    """A number of them (`#` before the name: SGLang's `#token: 1738`, `#cached-token: 112`), or the name of a data
    set's field given to a `ROLE_key` argument (`input_key='prompt'`, `label_key='answer'`: OpenRLHF's, verl's): no
    secret, and what a diagnosis compares (audit 21)."""
    if value.isdigit() and start > 0 and text[start - 1] == "#":
        return True
    words = [w.lower() for w in _WORD_RE.findall(name)]
    return (len(words) >= 2 and words[-1] == "key" and words[-2] in FIELD_WORDS
            and _FIELD_VALUE_RE.fullmatch(value) is not None)


def _maybe_secret(text: str) -> bool:
    if not text.isascii():
        return True  # a name may hide behind fullwidth or zero-width characters
    low = text.lower()
    return any(needle in low for needle in _NEEDLES) or _LONG_RUN_RE.search(text) is not None


def _credential(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def tool_secrets(words: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    """(word index, where in the word the secret starts, the flag) for each password a known tool's flag
    carries in a command's words: `mysql -pV`, `mysql -p V`, `docker login -p V`, `wandb login V`."""
    tool, login, take = "", False, ""
    for i, word in enumerate(words):
        if take:
            flag, take = take, ""
            if not word.startswith("-"):  # else a valueless flag (`mysql -p` prompts): the next flag follows
                yield i, 0, flag
                continue
        if word in _COMMAND_ENDS:
            tool = ""
            continue
        base = word.rsplit("/", 1)[-1]
        if base in TOOL_FLAGS:
            tool, login = base, False
            continue
        if not tool:
            continue
        if word == "login" and tool in LOGIN_TOOLS:
            login = True
            continue
        if tool in LOGIN_TOOLS and not login:
            continue
        if tool in POSITIONAL_LOGIN and not word.startswith("-"):
            if len(word) >= 8 and _credential(word):  # `wandb login to sign in` names no key
                yield i, 0, f"{tool} login"
            tool = ""
            continue
        for flag in TOOL_FLAGS[tool]:
            if word == flag:
                take = f"{tool} {flag}"
            elif len(flag) == 2 and word.startswith(flag):
                yield i, 2, f"{tool} {flag}"
            elif word.startswith(flag + "="):
                yield i, len(flag) + 1, f"{tool} {flag}"


def _spans(text: str, found: list[str], aws_near: bool = False) -> list[tuple[int, int]]:
    """Where the secrets are in one line: every pass, every match of each. `aws_near`: an AWS key id was on
    a line just above, so a lone 40-character secret here is its."""
    spans = _shape_spans(text, found, aws_near)
    _name_spans(text, found, spans)
    return spans


def _shape_spans(text: str, found: list[str], aws_near: bool = False) -> list[tuple[int, int]]:
    """The secrets a line holds by their own shape: a known token's format, a URL's user and password."""
    spans: list[tuple[int, int]] = []
    low = text.lower()
    for kind, pattern, needs in SHAPES:
        if needs and not any(n in low for n in _NEEDS[needs]) and not (aws_near and pattern is _AWS_SECRET):
            continue
        group = pattern.groupindex.get("s", 0)
        for m in pattern.finditer(text):
            spans.append(m.span(group))
            found.append(kind)
    if "://" in text:
        user, secret = _URL_USER_RE.groupindex["u"], _URL_USER_RE.groupindex["s"]
        for m in _URL_USER_RE.finditer(text):
            for kind, group in (("URL user", user), ("URL password", secret)):
                start, end = m.span(group)
                if end > start and not (group == user and m.group(secret) is None and m.group(user) in _PLAIN_USERS):
                    spans.append((start, end))
                    found.append(kind)
    return spans


def _name_spans(text: str, found: list[str], spans: list[tuple[int, int]]) -> None:
    """The values a secret's name holds (`token=V`, `--password V`, a known tool's flag), added to `spans`."""
    pos = 0
    # Keys only are consumed: `DEBUG: token=V` finds DEBUG, then token.
    while (m := _KEY_RE.search(text, pos)) is not None:
        pos = m.end()
        name = m.group("flag") or m.group("name")
        if not is_secret_name(name):
            continue
        value = _VALUE_RE.match(text, m.end())
        if value is None:
            continue
        group = next(g for g in ("e", "d", "q", "w") if value.group(g) is not None)
        word = value.group(group)
        if not _is_secret_value(name, word) or (m.group("flag") and not m.group(0).endswith("=")
                                                and word.startswith("-")) or _count_or_field(text, m.start(), name,
                                                                                             word):
            continue  # not a secret, or a valueless flag followed by the next flag, or a count or a field's name
        spans.append(value.span(group))
        found.append(name)
        if group == "w":  # a bare word is not searched for more keys: `pass:pass:...` stays linear (a quoted
            pos = max(pos, value.end())  # value may run to the next key's quote, so its keys are still found)
    for m in _SPACED_RE.finditer(text):
        if is_secret_name(m.group("name")) and _credential(m.group("v")):
            spans.append(m.span("v"))
            found.append(m.group("name"))
    if _TOOL_RE.search(text) is not None:
        words = list(re.finditer(r"\S+", text))
        for i, offset, flag in tool_secrets([w.group() for w in words]):
            spans.append((words[i].start() + offset, words[i].end()))
            found.append(flag)


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """The text with the union of the spans replaced, each run of overlapping spans by one marker."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, pos = [], 0
    for start, end in merged:
        out += [text[pos:start], REDACTED]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _redact_line(line: str, found: list[str], aws_near: bool = False, names: bool = True) -> str:
    """`names`: also the values secret names hold (else only secrets with a shape of their own: redact_shapes)."""
    if not line or not (aws_near or _maybe_secret(line)):
        return line
    norm, where = normalise(line)
    spans = _spans(norm, found, aws_near) if names else _shape_spans(norm, found, aws_near)
    spans = [s for s in spans if s[1] > s[0]]
    if where is not None:  # back to the original's characters: a span covers every one its characters came from
        spans = [(where[start], where[end - 1] + 1) for start, end in spans]
    return _replace(line, spans) if spans else line


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + CUT.format(len(line) - MAX_LINE)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _in_block(line: str, lead: str, column: int, indent: int) -> int | None:
    """Where a block scalar's line starts its text (len(line): a blank line), or None once the block ended:
    indented past the name after the same lead as the name's line (`# `, a log prefix), or past that line."""
    if lead and line.startswith(lead):
        rest = line[len(lead):]
        if not rest.strip():
            return len(line)
        if len(lead) + _indent(rest) > column:
            return len(lead) + _indent(rest)
    if not line.strip():
        return len(line)
    return _indent(line) if _indent(line) > indent else None


def _redact_lines(lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """Lines in order: a private key is hidden from its BEGIN line through its base64 body lines to its END
    line; an END line with no BEGIN in view (the tail started inside the key) hides the base64 word just
    before it too (the key's short last line; the full-width ones are a SHAPE). A YAML block scalar under a
    secret name hides its indented lines; an AWS key id makes a 40-character secret on the next lines its.
    Each line is cut at MAX_LINE first. An item holding newlines is taken line by line and given back whole."""
    items = list(lines)
    source = [_cut(line) for item in items for line in item.split("\n")]
    out: list[str] = []
    found: list[str] = []
    in_key = cut = False  # cut: the key's body just ended without its END line (its short last line)
    block: tuple[str, int, int] | None = None  # a secret block scalar's lead, name column and line indent
    aws_left = 0  # lines still near an AWS key id
    for line in source:
        if block is not None:
            if (hidden := _in_block(line, *block)) is not None:
                out.append(line[:hidden] + REDACTED if hidden < len(line) else line)
                continue
            block = None
        aws_near, aws_left = aws_left > 0, max(aws_left - 1, 0)
        if any(n in line for n in ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "ANPA")):
            aws_left = 3
        if line.rstrip(" \t").endswith(_BLOCK_ENDS) and (m := _BLOCK_RE.search(line)) is not None \
                and is_secret_name(m.group("n")):
            column = m.start("n")
            block = (line[:column].rstrip(" \t-"), column, _indent(line))
            found.append(normalise(m.group("n"))[0])
        end = _END_KEY_RE.search(line)
        head, rest = "", line
        was_cut, cut = cut, False
        if in_key and end is None:
            if (m := _B64_TAIL_RE.search(line)) is not None and len(m.group("s")) >= 40:
                out.append(_redact_line(line[: m.start("s")], found) + REDACTED)
                continue
            in_key, cut = False, True  # not a full body line: the last one, or the key was cut (END filtered out)
        if end is not None and (in_key or not _BEGIN_KEY_RE.search(line, 0, end.start())):
            if not in_key:  # the key's start is not in view: the line above may be its short last line
                found += [] if was_cut else ["private key block"]
                if out and (m := _B64_TAIL_RE.search(out[-1])) is not None:
                    out[-1] = out[-1][: m.start("s")] + REDACTED
                head = _redact_line(line[: end.start()], found)
            in_key = False
            head, rest = head + REDACTED, line[end.end():]
        while (begin := _BEGIN_KEY_RE.search(rest)) is not None:
            found.append("private key block")
            head += _redact_line(rest[: begin.start()], found) + REDACTED
            end = _END_KEY_RE.search(rest, begin.end())
            if end is None:
                in_key, rest = True, ""
                break
            rest = rest[end.end():]
        out.append(head + _redact_line(rest, found, aws_near))
    if len(source) != len(items):
        joined, pos = [], 0
        for item in items:
            n = item.count("\n") + 1
            joined.append("\n".join(out[pos:pos + n]))
            pos += n
        out = joined
    return out, found


def secret_spans(line: str) -> list[tuple[int, int]]:
    """Where one line's secrets are, merged and in order: for a view that keeps its own styling around
    them (the web view). What lies past MAX_LINE counts as secret: it is never searched."""
    if not line or not _maybe_secret(line):
        return []
    norm, where = normalise(line[:MAX_LINE])
    spans = [s for s in _spans(norm, []) if s[1] > s[0]]
    if where is not None:
        spans = [(where[start], where[end - 1] + 1) for start, end in spans]
    if len(line) > MAX_LINE:
        spans.append((MAX_LINE, len(line)))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact_text(text: str) -> tuple[str, list[str]]:
    """One line or a whole document (a private key spanning lines included)."""
    if not text or not _maybe_secret(text):
        return text, []
    lines, found = _redact_lines([text])
    return lines[0], found


def redact_shapes(obj: Any) -> Any:
    """A report (replay's, snapshot's: text or a JSON-like tree) with the secrets that have a shape of their own
    hidden: a known token's format, a URL's password. Names are not read here: a report's own sentences and the log
    words it quotes say `key` and `token` of what is no secret (`keys: /barrier/0/1`, a file `no_loss_keys.log`,
    `generates no tokens: `), and a report that lost its paths and numbers to `<redacted>` would say less than the log
    (the review of session 25). A bundle or a message redacts fully (redact_text)."""
    if isinstance(obj, str):
        if not obj or not _maybe_secret(obj):
            return obj
        return "\n".join(_redact_line(line, [], names=False) for line in obj.split("\n"))
    if isinstance(obj, Mapping):
        return {key: redact_shapes(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_shapes(item) for item in obj]
    return obj


def redact_argv(argv: Iterable[str]) -> tuple[list[str], list[str]]:
    """A command line as a list: `--token V` spans two words, so the word after a secret flag goes too, and so
    does a known tool's password flag's (`mysql -p V`, `wandb login V`)."""
    words = list(argv)
    tools = {i: (offset, flag) for i, offset, flag in tool_secrets(words)}
    out: list[str] = []
    found: list[str] = []
    take_next = ""
    for i, word in enumerate(words):
        if i in tools:
            offset, flag = tools[i]
            take_next = ""
            found.append(flag)
            out.append(word[:offset] + REDACTED)
            continue
        if take_next:
            take_next, flag = "", take_next
            if not word.startswith("-"):  # else a valueless flag: what follows is the next flag
                found.append(flag)
                out.append(REDACTED)
                continue
        if word.startswith("-") and "=" not in word and is_secret_name(word):
            take_next = word
            out.append(word)
            continue
        clean, names = redact_text(word)
        out.append(clean)
        found += names
    return out, found


def redact_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Environment variables: a secret name hides the value; any value is also checked as text."""
    out: dict[str, str] = {}
    found: list[str] = []
    for name, value in env.items():
        if is_secret_name(name) and _is_secret_value(name, value):
            out[name] = REDACTED
            found.append(name)
            continue
        clean, names = redact_text(value)
        out[name] = clean
        found += names
    return out, found


def redact_obj(obj: Any) -> tuple[Any, list[str]]:
    """A JSON-like tree: keys that name secrets hide their (string) value; every string is redacted as text."""
    found: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            clean, names = redact_text(node)
            found.extend(names)
            return clean
        if isinstance(node, Mapping):
            result = {}
            for key, value in node.items():
                if isinstance(key, str) and is_secret_name(key) and isinstance(value, str) \
                        and _is_secret_value(key, value):
                    found.append(key)
                    result[key] = REDACTED
                else:
                    result[key] = walk(value)
            return result
        if isinstance(node, (list, tuple)):
            return [walk(item) for item in node]
        return node

    return walk(obj), found


class Redactor:
    """Redacts the bundle's members and counts what it hid, per kind or name and place, for the manifest."""

    def __init__(self) -> None:
        self.seen: dict[str, Counter[str]] = {}  # name or kind -> place -> how many

    def note(self, where: str, names: Iterable[str]) -> None:
        for name in names:
            self.seen.setdefault(name[:80], Counter())[where] += 1

    def text(self, text: str, where: str) -> str:
        clean, names = redact_text(text)
        self.note(where, names)
        return clean

    def line(self, line: str, where: str) -> str:
        return self.lines([line], where)[0]

    def lines(self, lines: Iterable[str], where: str) -> list[str]:
        clean, names = _redact_lines(lines)
        self.note(where, names)
        return clean

    def env(self, env: Mapping[str, str], where: str) -> dict[str, str]:
        clean, names = redact_env(env)
        self.note(where, names)
        return clean

    def argv(self, argv: Iterable[str], where: str) -> list[str]:
        clean, names = redact_argv(argv)
        self.note(where, names)
        return clean

    def obj(self, obj: Any, where: str) -> Any:
        clean, names = redact_obj(obj)
        self.note(where, names)
        return clean

    def summary(self) -> list[dict[str, Any]]:
        """What was redacted: names or kinds, how many, and where; never values."""
        return [{"name": name, "count": sum(places.values()), "in": sorted(places)}
                for name, places in sorted(self.seen.items())]
