"""History on two cores: a forked process reads and scans a file's next chunks while this one applies
the chunk before, so a replay costs about the larger of the two halves rather than their sum.

The scan is bytes only (`Analysis._scan_chunk`: no state), so it runs the same in either process and
the verdicts are the same. A chunk's bytes come back through a small shared ring (a pipe would copy
each byte twice more); what the scan found comes back pickled. Fork only where no other thread runs
(`gkdtop replay`): a fork copies locks held by other threads, never their owners.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

SLOTS = 3  # chunks the reader may run ahead
SLOT = 6 << 20  # bytes per slot: a chunk (4 MiB) and its carried partial line; a larger one is pickled


class Scanned(Protocol):
    data: bytes


S = TypeVar("S", bound=Scanned)


def usable_cores() -> int:
    """Cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def scan_ahead(chunks: Iterable[bytes], scan: Callable[[bytes], S]) -> Iterator[S]:
    """`scan(chunk)` for each of `chunks`, in order, computed by a forked process up to SLOTS chunks
    ahead. Both iterables are consumed in the child; an exception there (an unreadable file) is
    raised here. Stopping early (an exception in the consumer) stops the child."""
    context = multiprocessing.get_context("fork")
    ring = mmap.mmap(-1, SLOTS * SLOT)  # anonymous and shared with the child
    ours, theirs = context.Pipe()
    reader = context.Process(target=_read_ahead, args=(chunks, scan, theirs, ours, ring), daemon=True)
    reader.start()
    theirs.close()
    try:
        while True:
            try:
                message = ours.recv()
            except EOFError:  # killed (the OOM killer?) before it said it was done
                reader.join(1)
                raise OSError(f"the history reader stopped (exit code {reader.exitcode})") from None
            if message is None:
                return
            if isinstance(message, BaseException):
                raise message
            slot, size, item = message
            if slot is not None:
                item.data = ring[slot * SLOT : slot * SLOT + size]
                ours.send(slot)  # free again (the reader waits for our close before it exits)
            yield item
    finally:
        ours.close()  # the reader's cue to exit (a write to a closed socket would be SIGPIPE here)
        reader.join(5)
        if reader.is_alive():
            reader.kill()
            reader.join()
        ring.close()


def _read_ahead(chunks: Iterable[bytes], scan: Callable[[bytes], Any], conn: Any, consumer: Any,
                ring: mmap.mmap) -> None:
    consumer.close()  # the consumer's end, inherited: held here, our reads would never see it close
    free = list(range(SLOTS))
    try:
        for chunk in chunks:
            item = scan(chunk)
            size = len(item.data)
            slot = None
            if size <= SLOT:
                if not free:
                    free.append(conn.recv())
                slot = free.pop()
                ring[slot * SLOT : slot * SLOT + size] = item.data
                item.data = b""
            conn.send((slot, size, item))
        conn.send(None)
        with contextlib.suppress(EOFError, OSError):
            while True:  # freed slots, until the consumer closes its end
                conn.recv()
    except Exception as exc:  # an unreadable or vanished file: the consumer raises it, as reading in-process would
        try:
            conn.send(exc)
        except Exception:  # not picklable: its words
            conn.send(OSError(f"{type(exc).__name__}: {exc}"))
