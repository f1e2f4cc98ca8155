"""Secret redaction for everything that leaves the machine (the bundle) or is shown in full.

Pure functions, no I/O. Two nets, both always applied:
- by NAME: an environment variable, `--flag`, `key=value` / `"key": value` whose name looks like a
  secret (TOKEN, SECRET, PASSWORD, API_KEY, ...) has its value replaced;
- by SHAPE: values that are secrets whatever they are called (`hf_...`, `AKIA...`, `sk-...`,
  GitHub/Slack tokens, JWTs, `-----BEGIN ... PRIVATE KEY-----` blocks, `user:pass@` in URLs).
Each function also returns the NAMES of what it redacted (never the values), for the manifest.
Over-redaction is the accepted failure mode: a diagnostic bundle loses a little; a leak cannot be undone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

# A name that says "secret". TOKEN is not a secret in token counts and tokenizers (vLLM's
# `--max-num-batched-tokens`, `pad_token_id`), which a diagnosis needs, so those are left alone.
SECRET_NAME_RE = re.compile(
    r"TOKEN(?!S|IZ|_?IDS?\b|_?(?:LEN|COUNT|NUM|THROUGHPUT|TYPE|PER)\b)|SECRET|PASSW(?:OR)?D|PASSPHRASE"
    r"|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|SIGNING_?KEY|CREDENTIAL|AUTH|COOKIE|(?:^|_)DSN$",
    re.IGNORECASE,
)

# (label for the manifest, pattern). No left word boundary on the unambiguous shapes: a token glued
# to other text (`xhf_...`, `idAKIA...`) must still go.
SHAPES: list[tuple[str, re.Pattern[str]]] = [
    ("private key block", re.compile(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL)),
    ("Hugging Face token (hf_...)", re.compile(r"hf_[A-Za-z0-9]{20,}")),
    ("AWS access key id", re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}")),
    ("API key (sk-...)", re.compile(r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{8,}")),
    ("GitHub token", re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("Slack token", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("JWT", re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer token", re.compile(r"(?<=Bearer )[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)),
    ("URL password", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")),
]
# Every pattern above and every secret name needs one of these substrings (lower-cased): a line
# without any of them (most log lines) is returned as it is, without running the patterns.
_NEEDLES = ("token", "secret", "passw", "passphrase", "key", "credential", "auth", "cookie", "dsn", "hf_", "akia",
            "asia", "abia", "acca", "agpa", "aida", "aroa", "anpa", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
            "github_pat_", "xox", "eyj", "bearer", "://", "-----begin")


def _maybe_secret(text: str) -> bool:
    low = text.lower()
    return any(needle in low for needle in _NEEDLES)


_BEGIN_KEY_RE = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_END_KEY_RE = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")

# `--api-key=V`, `--token V`, `-p=V`: a flag whose name is a secret takes the next word as its value
# (unless that word is itself a flag).
_FLAG_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)(=|\s+)(?!-)(\"[^\"]*\"|'[^']*'|\S+)")
# `NAME=V`, `NAME: V`, `"name": "V"`, `name='V'` in free text, env dumps, JSON-ish logs.
_ASSIGN_RE = re.compile(
    r"(?<![\w-])([A-Za-z_][\w.-]*)([\"']?)(\s*[:=]\s*)(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;)}\]]+)"
)


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag or key name says its value is a secret."""
    return bool(SECRET_NAME_RE.search(name.strip().lstrip("-").replace("-", "_")))


def _quoted(original: str) -> str:
    """Keep the quoting of a value so a redacted JSON or shell line stays well formed."""
    if len(original) >= 2 and original[0] == original[-1] and original[0] in "\"'":
        return f"{original[0]}{REDACTED}{original[0]}"
    return REDACTED


def redact_shapes(text: str) -> tuple[str, list[str]]:
    """Replace values that are secrets by their shape alone; returns the labels of what was found."""
    found: list[str] = []
    for label, pattern in SHAPES:
        text, count = pattern.subn(REDACTED, text)
        if count:
            found.append(label)
    return text, found


def redact_text(text: str) -> tuple[str, list[str]]:
    """Shapes, then secret-named flags and assignments, in one line or a whole document."""
    if not text or not _maybe_secret(text):
        return text, []
    text, found = redact_shapes(text)

    def flag(match: re.Match[str]) -> str:
        name, sep, value = match.groups()
        if not is_secret_name(name):
            return match.group(0)
        found.append(name)
        return match.group(0) if value == REDACTED else f"{name}{sep}{_quoted(value)}"

    def assign(match: re.Match[str]) -> str:
        name, quote, sep, value = match.groups()
        if not is_secret_name(name):
            return match.group(0)
        found.append(name)
        return match.group(0) if value.strip("\"'") == REDACTED else f"{name}{quote}{sep}{_quoted(value)}"

    text = _FLAG_RE.sub(flag, text)
    text = _ASSIGN_RE.sub(assign, text)
    return text, found


def redact_argv(argv: Iterable[str]) -> tuple[list[str], list[str]]:
    """A command line as a list: `--token V` spans two words, so the word after a secret flag goes too."""
    out: list[str] = []
    found: list[str] = []
    take_next = ""
    for word in argv:
        if take_next:
            if word.startswith("-"):
                take_next = ""  # a valueless flag: what follows is the next flag, not its value
            else:
                found.append(take_next)
                out.append(REDACTED)
                take_next = ""
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
    """Environment variables: a secret name hides the value; any value is also checked by shape."""
    out: dict[str, str] = {}
    found: list[str] = []
    for name, value in env.items():
        if is_secret_name(name):
            out[name] = REDACTED
            found.append(name)
            continue
        clean, names = redact_text(value)
        out[name] = clean
        found += [f"{name} ({n})" for n in names]
    return out, found


def redact_obj(obj: Any) -> tuple[Any, list[str]]:
    """A JSON-like tree: keys that name secrets hide their value; every string is redacted as text."""
    found: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            clean, names = redact_text(node)
            found.extend(names)
            return clean
        if isinstance(node, Mapping):
            result = {}
            for key, value in node.items():
                if isinstance(key, str) and is_secret_name(key) and value not in (None, "", REDACTED) \
                        and not isinstance(value, (bool, int, float)):
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
    """Redacts a stream of lines (a log) and remembers what it hid, per place, for the manifest.

    A private key spread over many lines is hidden from its BEGIN line through its END line, which a
    line-by-line `redact_text` could not do.
    """

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}  # name or label -> the places it was redacted in
        self._in_key = False

    def note(self, where: str, names: Iterable[str]) -> None:
        for name in names:
            self.seen.setdefault(name[:80], set()).add(where)

    def text(self, text: str, where: str) -> str:
        clean, names = redact_text(text)
        self.note(where, names)
        return clean

    def line(self, line: str, where: str) -> str:
        if self._in_key:
            end = _END_KEY_RE.search(line)
            if end is None:
                return REDACTED
            self._in_key = False
            line = REDACTED + line[end.end():]
        begin = _BEGIN_KEY_RE.search(line) if "-----BEGIN" in line else None
        if begin is not None and _END_KEY_RE.search(line, begin.end()) is None:
            self._in_key = True
            self.note(where, ["private key block"])
            return self.text(line[: begin.start()], where) + REDACTED
        return self.text(line, where)

    def lines(self, lines: Iterable[str], where: str) -> list[str]:
        self._in_key = False
        out = [self.line(line, where) for line in lines]
        self._in_key = False
        return out

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
        """What was redacted: names and places, never values."""
        return [{"name": name, "in": sorted(places)} for name, places in sorted(self.seen.items())]
