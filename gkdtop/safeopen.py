"""Opening a path that should be a regular file without ever blocking on what it really is, and
trusting only what this user (or the job's user) wrote.

Used by every reader of user-named files: the log follower, the history reader (replay, snapshot),
the config loader and the bundle; `read_owned` by every reader of a file a job names (Flight Recorder
dumps, probe answers); `private_dir`, `write_private` and the cache functions by gkdtop's own state
(run directories, the compiled-rule cache). docs/security.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import io
import os
import secrets
import stat
from collections.abc import Collection, Mapping


class NotRegularFile(OSError):
    """A path that names a FIFO, socket, device or directory where a log file was expected."""


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str) -> io.FileIO:
    """`path` opened for reading, refused (NotRegularFile) unless it is a regular file.

    Opened non-blocking, so a FIFO that took the path after our stat can't block the open (no writer)
    or a read, and checked on the opened descriptor, so what we read is what we checked.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(0, kind_of(mode), path)
    except BaseException:
        os.close(fd)
        raise
    return io.FileIO(fd, "rb", closefd=True)


# ------------------------------------------------------------------ files another user may have written

class Untrusted(OSError):
    """A file or folder gkdtop will not use: a link, not regular, another user's, too large, or too open.

    str() is one line naming the path and why, for a note or an error message.
    """

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(why)
        self.path, self.why = os.fspath(path), why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def user_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def open_owned(path: str | os.PathLike[str], uid: int | Collection[int]) -> io.FileIO:
    """`path` opened for reading only if it is a regular file owned by `uid` (or one of them); else Untrusted.

    Opened without following a link (O_NOFOLLOW) and without blocking (a FIFO or device put there never
    hangs us), and judged on the opened descriptor, so what we read is what we checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Untrusted(path, "a symbolic link, not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(path, f"{kind_of(st.st_mode)}, not read")
        uids = {uid} if isinstance(uid, int) else set(uid)
        if st.st_uid not in uids:
            named = " or ".join(sorted(user_name(u) for u in uids)) or "the job's user"
            raise Untrusted(path, f"owned by {user_name(st.st_uid)}, not by {named}: not trusted")
    except BaseException:
        os.close(fd)
        raise
    return io.FileIO(fd, "rb", closefd=True)


def read_owned(path: str | os.PathLike[str], uid: int | Collection[int], max_bytes: int) -> bytes:
    """The bytes of `path` (open_owned's checks), refused (Untrusted) when larger than `max_bytes`."""
    with open_owned(path, uid) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise Untrusted(path, f"{size} bytes, over the limit of {max_bytes}")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Untrusted(path, f"grew over the limit of {max_bytes} bytes while read")
    return data


def _check_dir(path: str, st: os.stat_result, euid: int, final: bool) -> None:
    if not stat.S_ISDIR(st.st_mode):
        kind = "a file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
        raise Untrusted(path, f"{kind} where a directory was expected")
    if final:
        if st.st_uid != euid:
            raise Untrusted(path, f"owned by {user_name(st.st_uid)}, not by you ({user_name(euid)}): refused")
        if st.st_mode & 0o022:
            raise Untrusted(path, f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): refused")
    elif st.st_uid not in (euid, 0) or (_others_write(st, euid) and not st.st_mode & stat.S_ISVTX):
        raise Untrusted(path, f"in a folder another user can change (owner {user_name(st.st_uid)}, mode "
                              f"{stat.S_IMODE(st.st_mode):04o}): refused")


def _others_write(st: os.stat_result, euid: int) -> bool:
    """Whether a user other than `euid` (or root) may write in the folder. Group write counts unless the
    group is this user's own private group (a 2775 home under user-private groups: group `me`, no members
    but `me`)."""
    if st.st_mode & 0o002:
        return True
    if not st.st_mode & 0o020:
        return False
    import grp
    import pwd

    try:
        me = pwd.getpwuid(euid)
        group = grp.getgrgid(st.st_gid)
    except KeyError:
        return True
    return not (st.st_gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name})


def private_dir(path: str | os.PathLike[str]) -> str:
    """`path` as a folder only this user can use: created 0700 (with its missing parents), else checked.

    Refused (Untrusted) when it or a folder above it is a link, another user's, or writable by others
    (a sticky folder such as /tmp excepted above it); a folder of ours that others can only read is made
    0700. Returns the absolute path.
    """
    path = os.path.abspath(os.fspath(path))
    euid = os.geteuid()
    missing = []
    probe = path
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        missing.append(probe)
        probe = os.path.dirname(probe)
    # What exists is checked before anything is made in it; then each folder made is ours, 0700.
    parts = [probe]
    while os.path.dirname(parts[-1]) != parts[-1]:
        parts.append(os.path.dirname(parts[-1]))
    for i, folder in enumerate(parts):
        st = os.lstat(folder)
        final = i == 0 and not missing
        if stat.S_ISLNK(st.st_mode):
            if final:
                raise Untrusted(folder, "a symbolic link where a private directory was expected: refused")
            if st.st_uid not in (euid, 0):
                raise Untrusted(folder, f"a link owned by {user_name(st.st_uid)}: refused")
            st = os.stat(folder)  # a link above ours (/var/tmp -> ..., a home on another disk): its target counts
        _check_dir(folder, st, euid, final=final)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _check_dir(path, st, euid, final=True)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)  # ours and only readable by others: nobody else could have put anything in
    finally:
        os.close(fd)
    return path


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` (in a folder private_dir checked) with `data`, through a new 0600 temp file beside it.

    The temp file's name is random and opened O_EXCL|O_NOFOLLOW, so nothing planted there is written
    through; the rename replaces a link at `path` itself, never what it points to.
    """
    path = os.fspath(path)
    tmp = f"{path}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with io.FileIO(fd, "wb", closefd=False) as fh:
            fh.write(data)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ a cache only this user's gkdtop wrote

CACHE_MAGIC = b"gkdtop-cache-1\n"
CACHE_KEY_BYTES = 32


def cache_root(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gkdtop")


def _cache_key(root: str) -> bytes:
    """This user's cache key (32 random bytes, a 0600 file in the private cache folder), made on first use."""
    path = os.path.join(private_dir(root), "cache.key")
    try:
        key = read_owned(path, os.geteuid(), CACHE_KEY_BYTES)
    except FileNotFoundError:
        key = secrets.token_bytes(CACHE_KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:  # another gkdtop of ours made it meanwhile
            return _cache_key(root)
        with io.FileIO(fd, "wb", closefd=True) as fh:
            fh.write(key)
        return key
    st = os.stat(path, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) & 0o077 or len(key) != CACHE_KEY_BYTES:
        raise Untrusted(path, "not a 0600 key of 32 bytes: the cache is not used")
    return key


def _cache_mac(key: bytes, name: str, data: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).digest()


def cache_load(kind: str, name: str, max_bytes: int, root: str | None = None) -> bytes | None:
    """What cache_store kept under `kind/name`, or None: missing, or not provably written by this user's gkdtop.

    Each entry carries an HMAC keyed with a secret only this user can read, so an entry another user
    planted or changed (a shared XDG_CACHE_HOME, HOME=/tmp) is never used. Raises Untrusted when the
    cache folder itself is not private; callers then go without a cache.
    """
    root = root or cache_root()
    key = _cache_key(root)
    folder = private_dir(os.path.join(root, kind))
    try:
        raw = read_owned(os.path.join(folder, name), os.geteuid(), max_bytes + len(CACHE_MAGIC) + 32)
    except FileNotFoundError:
        return None
    head, mac, data = raw[:len(CACHE_MAGIC)], raw[len(CACHE_MAGIC):len(CACHE_MAGIC) + 32], raw[len(CACHE_MAGIC) + 32:]
    if head != CACHE_MAGIC or not hmac.compare_digest(mac, _cache_mac(key, name, data)):
        return None
    return data


def cache_store(kind: str, name: str, data: bytes, root: str | None = None) -> None:
    """Keep `data` under `kind/name` in this user's private cache (see cache_load); Untrusted / OSError if not."""
    root = root or cache_root()
    key = _cache_key(root)
    folder = private_dir(os.path.join(root, kind))
    write_private(os.path.join(folder, name), CACHE_MAGIC + _cache_mac(key, name, data) + data)
