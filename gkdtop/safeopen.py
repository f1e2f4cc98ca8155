"""Opening a path that should be a regular file without ever blocking on what it really is.

Used by every reader of user-named files: the log follower, the history reader (replay, snapshot),
the config loader and the bundle.
"""

from __future__ import annotations

import io
import os
import stat


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
