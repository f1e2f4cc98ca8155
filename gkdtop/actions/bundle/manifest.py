"""The manifest: the bundle's table of contents and its redaction record, written last.

It lists every member (name, what it is, size, where it came from), what was redacted by name or kind
and place, never by value, and the notes and errors of the steps, so a reader knows both what the
bundle holds and what it does not. Paths and notes can carry names too: they are redacted as well.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from gkdtop.actions.redact import redact_obj

if TYPE_CHECKING:
    from gkdtop.actions.bundle.gather import Gatherer
    from gkdtop.actions.bundle.write import ArchiveWriter

SCHEMA = 1


def manifest(bundle: Gatherer, writer: ArchiveWriter, now: float) -> dict[str, Any]:
    from gkdtop import __version__

    versions: dict[str, str] = {}
    from importlib import metadata

    for name in ("ray", "torch", "vllm", "sglang", "verl"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return {
        "schema": SCHEMA,
        "gkdtop": __version__,
        "packages": versions,
        "host": socket.gethostname(),
        "time": now,
        "time_text": time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(now)),
        "user": _user(),
        "files": redact_obj(writer.files)[0],  # paths and notes can carry names too
        "redacted": bundle.redactor.summary(),
        "redaction": "values of secret names (a word token, key, secret, password, pass, pwd, auth, credential, "
                     "cookie, dsn; not counts or tokenizer settings such as pad_token_id) and secret-shaped values "
                     "(hf_, ghp_, glpat-, sk-, AKIA/ASIA and their secret, AIza, xox?-, JWTs, URL passwords, "
                     "private keys, ...) are replaced by <redacted>; `redacted` lists names or kinds, counts and "
                     "places, never values. The environment holds allow-listed names only.",
        "notes": redact_obj(bundle.notes)[0],
        "errors": redact_obj(bundle.errors)[0],
    }


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())
