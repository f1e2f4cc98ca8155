"""The fallback when py-spy cannot read a process: the faulthandler dump of gkdtop.probe.

A job that imports gkdtop.probe answers a signal by writing every thread's stack to its stack
file; this module asks for it (only after checking the file names this very process) and parses it.
"""

from __future__ import annotations

import os
import re
import time

from gkdtop.capture.proc import owner, process_environ
from gkdtop.model.stacks import ThreadStack, parse_faulthandler_lines
from gkdtop.safeopen import Untrusted, open_owned

MAX_STACK_BYTES = 16 << 20  # every thread of a big job is a few hundred KB

STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")  # a standard library file
FH_HEADER_RE = re.compile(r"pid=(\d+) start=(\d*) signal=(\d+) main=(0x[0-9a-fA-F]+)")


def short_path(path: str) -> str:
    """py-spy-like short file name: below site-packages, or the stdlib directory, else the base name."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if m := STDLIB_RE.search(path):
        return path[m.end():]
    return path.rsplit("/", 1)[-1]


def parse_faulthandler(text: str, main_thread: int = 0) -> list[ThreadStack]:
    """The probe's all-threads text (innermost frame first) as ThreadStacks; raises ValueError if none."""
    threads = parse_faulthandler_lines(text.splitlines(), main_thread, short_path)
    if not threads:
        raise ValueError("no thread in faulthandler's output")
    return threads


def faulthandler_dump(pid: int, timeout: float = 5.0) -> tuple[list[ThreadStack], str]:
    """Ask a process running gkdtop.probe for its stacks (its signal) and read them from its stack file.

    Returns (threads, "") or ([], why not). The header of the file must name this very process (PID
    and start time): a process without the probe would be killed by the signal, so it is never sent one.
    """
    from gkdtop import probe

    path = probe.stack_file(pid, process_environ(pid))
    uid = owner(pid)
    try:  # the process's own file only: another user's could name any signal (SIGKILL) for us to send
        with open_owned(path, uid) as f:
            header = f.readline(4096).decode(errors="replace")
            before = f.seek(0, os.SEEK_END)
    except Untrusted as exc:
        return [], str(exc)
    except OSError:
        return [], "no gkdtop.probe stack file (the job does not import gkdtop.probe)"
    m = FH_HEADER_RE.search(header)
    if not header.startswith(probe.HEADER) or m is None or int(m.group(1)) != pid:
        return [], f"{path}: not this process's probe file"
    if m.group(2) != probe.process_start(pid):
        return [], f"{path}: left by an earlier process with the same PID"
    try:
        os.kill(pid, int(m.group(3)))
    except OSError as exc:
        return [], f"cannot signal the process: {exc.strerror or exc}"
    # The C handler writes at once, even while Python is blocked; wait until the file stops growing.
    deadline, size, stable_since = time.monotonic() + timeout, before, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            now = path.stat().st_size
        except OSError:
            return [], f"{path} vanished during the dump"
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > before and time.monotonic() - stable_since >= 0.2:
            break
    if size <= before:
        return [], f"faulthandler wrote nothing within {timeout:g} s"
    try:
        with open_owned(path, uid) as f:
            f.seek(before)
            text = f.read(min(size - before, MAX_STACK_BYTES)).decode(errors="replace")
    except OSError as exc:
        return [], str(exc) if isinstance(exc, Untrusted) else f"{path}: {exc.strerror or exc}"
    try:
        return parse_faulthandler(text, int(m.group(4), 16)), ""
    except ValueError as exc:
        return [], f"unreadable faulthandler output: {exc}"
