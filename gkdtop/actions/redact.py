"""Secret redaction for everything that leaves the machine (the bundle).

Pure functions, no I/O. Two passes, BOTH run over every line, each marking spans of the original text;
the union of the spans is replaced by `<redacted>` (so one match never hides another on the same line):
- by NAME: a key, variable or `--flag` whose name holds a secret word (token, key, secret, password,
  pass, pwd, auth, credential, ...) has its value marked: `k=V`, `k: V`, `"k": "V"`, `'k': 'V'`,
  `k = "V"`, `--k=V`, `--k V`, `Authorization: Basic V`;
- by SHAPE: values that are secrets whatever they are called (`hf_...`, `sk-proj-...`, `AKIA...` and
  the 40-character secret beside it, `glpat-`, `AIza`, JWTs, `user:pass@` in URLs, the body lines of
  a private key even when its BEGIN line is not in view).
Each function also returns the NAMES or KINDS of what it redacted (never the values), for the manifest.
Over-redaction is the accepted failure mode: a diagnostic bundle loses a little; a leak cannot be undone.
Measured on a corpus of planted secrets and benign diagnostic lines: bench/redaction.py.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

# A name is a secret when one of its words is, or ends like one (`PGPASSWORD`, `hftoken`): `HF_TOKEN`,
# `wandbApiKey`, `--db-pass`, `MYSQL_PWD`. (`key` and `pass` only whole: `monkey`, `bypass`.)
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
_AWS_IDS = "akia|asia|abia|acca|agpa|aida|aroa|anpa"
SHAPES: list[tuple[str, re.Pattern[str], str]] = [
    ("Hugging Face token", re.compile(r"hf_[A-Za-z0-9]{20,}"), "hf_"),
    ("GitHub token", re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
     "ghp_|gho_|ghu_|ghs_|ghr_|github_pat_"),
    ("GitLab token", re.compile(r"glpat-[A-Za-z0-9_-]{20,}"), "glpat-"),
    ("API key (sk-...)", re.compile(r"sk-(?:proj|ant|svcacct|admin)-[A-Za-z0-9_-]{16,}|(?<![A-Za-z0-9_-])"
                                    r"sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
     "sk-|k_live_|k_test_"),
    ("AWS access key id", re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}"), _AWS_IDS),
    # An AWS secret key has no prefix: 40 base64 characters on a line that holds its key id.
    ("AWS secret key", re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), _AWS_IDS),
    ("Google API key", re.compile(r"AIza[0-9A-Za-z_-]{35}"), "aiza"),
    ("Slack token", re.compile(r"xox[abposre]-[A-Za-z0-9-]{10,}"), "xox"),
    ("JWT", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "eyj"),
    ("bearer token", re.compile(r"(?i:bearer)\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), "bearer"),
    ("wandb key", re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])"), "wandb"),
    ("URL password", re.compile(r"[A-Za-z][\w+.-]*://[^\s/:@]*:(?P<s>[^\s/]+)@"), "://"),
    # A private key's body line, 64-76 base64 characters with both cases and a digit (a sha256 in hex
    # has no capital): found even when the tail starts inside the block.
    ("private key block", re.compile(
        r"(?:^|(?<=[\s\"'(\[=:>])|(?<=\\n))(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])"
        r"[A-Za-z0-9+/]{64,76}={0,2}(?=$|[\s\"',;)\]<]|\\n)"), ""),
]
_NEEDS = {needs: tuple(needs.split("|")) for _, _, needs in SHAPES}

# A name and what joins it to its value: `--name=`, `--name `, `name=`, `name: `, `"name": `, `\"name\": `.
_KEY_RE = re.compile(
    r"(?<![\w.-])(?:(?P<flag>--?[A-Za-z][\w.-]*)(?:=|[ \t]+)"
    r"|\\?[\"']?(?P<name>[A-Za-z_][\w.-]*)\\?[\"']?[ \t]*[:=][ \t]*)"
)
# The value at the end of a key: quoted (the inside), or one word; after an HTTP auth scheme the next word.
_VALUE_RE = re.compile(
    r"(?:(?:Basic|Bearer|Token|Digest|Bot|token|bearer|basic)[ \t]+)?"
    r"(?:\\\"(?P<e>[^\"\\\n]*)\\\"|\"(?P<d>[^\"\n]*)\"|'(?P<q>[^'\n]*)'|[\"']?(?P<w>[^\s,;)}\]\"'\\{\[(][^\s,;)}\]\"'\\]*))"
)
_NOT_SECRETS = frozenset({"", "true", "false", "none", "null", "yes", "no", REDACTED})
_FLOAT_RE = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")  # `Time to first token: 45.1 ms`; an integer may be a PIN

_BEGIN_KEY_RE = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_END_KEY_RE = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# The last word of the line before an END line, when it is base64: a key's short last line (its full-width
# lines are a SHAPE), found when the BEGIN line is out of view.
_B64_TAIL_RE = re.compile(r"(?:^|(?<=[\s#:>]))(?P<s>[A-Za-z0-9+/]+={0,2})[ \t]*$")

# Every rule needs one of these (lower-cased) or a long base64 run: other lines are returned as they are.
_NEEDLES = ("token", "key", "secret", "pass", "pwd", "auth", "credential", "cookie", "dsn", "-----",
            *sorted({n for needs in _NEEDS.values() for n in needs if n}))
_LONG_RUN_RE = re.compile(r"[A-Za-z0-9+/]{64}")


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag or key name says its value is a secret."""
    name = name.strip().lstrip("-")
    words = {w.lower() for w in _WORD_RE.findall(name)}
    secret = words & SECRET_WORDS or any(w.endswith(SECRET_ENDINGS) for w in words)
    return bool(secret) and not words & BENIGN_WORDS


def _is_secret_value(name: str, value: str) -> bool:
    """Whether the value of a secret name is worth hiding: not `true`, `none`, `45.1`, or PWD's path."""
    value = value.strip()
    return not (value.lower() in _NOT_SECRETS or _FLOAT_RE.fullmatch(value)
                or (name.lower() in PATH_NAMES and value.startswith(("/", "~"))))


def _maybe_secret(text: str) -> bool:
    low = text.lower()
    return any(needle in low for needle in _NEEDLES) or _LONG_RUN_RE.search(text) is not None


def _spans(text: str, found: list[str]) -> list[tuple[int, int]]:
    """Where the secrets are in one line (or text): both passes, every match of each."""
    spans: list[tuple[int, int]] = []
    low = text.lower()
    for kind, pattern, needs in SHAPES:
        if needs and not any(n in low for n in _NEEDS[needs]):
            continue
        for m in pattern.finditer(text):
            spans.append(m.span("s") if "s" in pattern.groupindex else m.span())
            found.append(kind)
    for m in _KEY_RE.finditer(text):  # keys only are consumed: `DEBUG: token=V` finds DEBUG, then token
        name = m.group("flag") or m.group("name")
        if not is_secret_name(name):
            continue
        value = _VALUE_RE.match(text, m.end())
        if value is None:
            continue
        group = next(g for g in ("e", "d", "q", "w") if value.group(g) is not None)
        word = value.group(group)
        if not _is_secret_value(name, word) or (m.group("flag") and not m.group(0).endswith("=")
                                                and word.startswith("-")):
            continue  # not a secret, or a valueless flag followed by the next flag
        spans.append(value.span(group))
        found.append(name)
    return spans


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


def _redact_line(line: str, found: list[str]) -> str:
    if not line or not _maybe_secret(line):
        return line
    spans = [s for s in _spans(line, found) if s[1] > s[0]]
    return _replace(line, spans) if spans else line


def _redact_lines(lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """Lines in order: a private key is hidden from its BEGIN line through its base64 body lines to its END
    line; an END line with no BEGIN in view (the tail started inside the key) hides the base64 word just
    before it too (the key's short last line; the full-width ones are a SHAPE). An item
    holding newlines is taken line by line and given back whole."""
    items = list(lines)
    source = [line for item in items for line in item.split("\n")]
    out: list[str] = []
    found: list[str] = []
    in_key = cut = False  # cut: the key's body just ended without its END line (its short last line)
    for line in source:
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
        out.append(head + _redact_line(rest, found))
    if len(source) != len(items):
        joined, pos = [], 0
        for item in items:
            n = item.count("\n") + 1
            joined.append("\n".join(out[pos:pos + n]))
            pos += n
        out = joined
    return out, found


def redact_text(text: str) -> tuple[str, list[str]]:
    """One line or a whole document (a private key spanning lines included)."""
    if not text or not _maybe_secret(text):
        return text, []
    lines, found = _redact_lines([text])
    return lines[0], found


def redact_argv(argv: Iterable[str]) -> tuple[list[str], list[str]]:
    """A command line as a list: `--token V` spans two words, so the word after a secret flag goes too."""
    out: list[str] = []
    found: list[str] = []
    take_next = ""
    for word in argv:
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
