"""Writing the archive: where it goes, what its members are called, and the bytes and modes they get.

A bundle leaves the machine and may be written where a hostile name waits, so the rules live in one
place: never through or over a symbolic link, never onto a device, pipe or socket, never under /dev,
/proc or /sys; a private temporary file (0600 from its first byte) renamed into place when complete;
members named once, never outside the archive's root, 0600 with no owner names; JSON strict (no bare
NaN). What goes in is gather.py's; nothing here reads the job.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import stat
import tarfile
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from gkdtop import jsonout


def default_bundle_path(now: float | None = None) -> Path:
    """./gkdtop-bundle-HOST-YYYYmmdd-HHMMSS.tar.gz, or under ~/.cache/gkdtop/bundles if . is not writable."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    name = f"gkdtop-bundle-{safe_name(socket.gethostname())}-{stamp}.tar.gz"
    if os.access(".", os.W_OK):
        return Path(name).absolute()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gkdtop" / "bundles"
    cache.mkdir(parents=True, exist_ok=True)
    return cache / name


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "x"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, re.Pattern):
        return obj.pattern
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=str)
    return str(obj)


def json_bytes(obj: Any) -> bytes:
    """Strict JSON (a NaN loss is null plus a "nonfinite" note, never a bare NaN)."""
    doc = jsonout.document(obj) if isinstance(obj, dict) else jsonout.strict(obj)
    return (json.dumps(doc, indent=1, default=_json_default, allow_nan=False) + "\n").encode()


class ArchiveWriter:
    """Members of the archive, each named once, with 0600 modes and no owner names."""

    def __init__(self, tar: tarfile.TarFile, root: str, now: float) -> None:
        self.tar, self.root, self.now = tar, root, now
        self.files: list[dict[str, Any]] = []
        self._names: set[str] = set()

    def add(self, name: str, data: bytes, what: str, **extra: Any) -> None:
        base, n = name, 1
        while name in self._names:
            n += 1
            stem, dot, ext = base.rpartition(".")
            name = f"{stem}-{n}.{ext}" if dot and "/" not in ext else f"{base}-{n}"
        self._names.add(name)
        parts = [part for part in name.split("/") if part not in ("", ".", "..")]  # never outside the root
        info = tarfile.TarInfo("/".join([self.root, *parts]))
        info.size, info.mtime, info.mode = len(data), int(self.now), 0o600
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        self.tar.addfile(info, io.BytesIO(data))
        self.files.append({"name": name, "what": what, "bytes": len(data), **extra})


class BundlePathError(ValueError):
    """`-o` names something the bundle must not be written to (said in one line)."""


SYSTEM_TREES = ("/dev", "/proc", "/sys")  # device nodes and kernel files; /dev/shm (a tmpfs) is fine


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundlePathError(f"{path}: {exc.strerror or exc}") from None


def output_path(out: Path, now: float) -> Path:
    """Where to write: `out`, or a new name in it when it is a directory. Never through or over a symbolic
    link, never onto a device, pipe or socket, never under /dev, /proc or /sys."""
    st = _lstat(out)
    if st is not None and stat.S_ISDIR(st.st_mode):
        out = out / default_bundle_path(now).name
        st = _lstat(out)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise BundlePathError(f"{out} is a symbolic link: name a new file (the link is left as it is)")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BundlePathError(f"{out} is not a regular file: name a new file")
    real = os.path.realpath(out.parent)

    def under(tree: str) -> bool:
        return real == tree or real.startswith(tree + "/")

    if any(under(tree) for tree in SYSTEM_TREES) and not under("/dev/shm"):
        raise BundlePathError(f"{out}: not writing a bundle under {real} (a system tree)")
    return out


def root_name(path: Path) -> str:
    """The archive's top directory: the file's name, made safe (`...tar.gz` must not give `..`)."""
    stem = path.name.removesuffix(".tar.gz").removesuffix(".tgz")
    return safe_name(stem).strip(".") or "gkdtop-bundle"


def open_private(path: Path) -> tuple[int, Path]:
    """A new file beside `path`, mode 0600 from its first byte: renamed over `path` when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.fchmod(fd, 0o600)
    return fd, tmp
