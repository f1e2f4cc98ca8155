"""History on two cores: a forked process reads and scans a file's next chunks while this one applies
the chunk before, so a replay costs about the larger of the two halves rather than their sum.

The scan is bytes only (`HistoryReader._scan_chunk` in analysis/history.py: no state), so it runs the
same in either process and the verdicts are the same. A chunk's bytes come back through a small
shared ring (a pipe would copy each byte twice more), what the scan found pickled through a one-way
pipe, and a semaphore counts the free slots: this process never writes to the reader, so a reader
that died cannot take it down with SIGPIPE. Fork only where no other thread runs (`gkdtop replay`):
a fork copies locks held by other threads, never their owners.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

SLOTS = 3  # chunks the reader may run ahead
SLOT = 6 << 20  # bytes per slot: a chunk (4 MiB) and the kept start of a longer line; a larger one is pickled


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
    ahead. Both are consumed in the child; an exception there (an unreadable file) is raised here.
    Stopping early (an exception in the consumer) stops the child."""
    context = multiprocessing.get_context("fork")
    ring = mmap.mmap(-1, SLOTS * SLOT)  # anonymous and shared with the child
    free = context.Semaphore(SLOTS)
    ours, theirs = context.Pipe(duplex=False)
    reader = context.Process(target=_read_ahead, args=(chunks, scan, theirs, ours, free, ring), daemon=True)
    try:
        reader.start()
    except OSError:  # no fork to be had (a pid limit, memory): read in this process
        ours.close()
        theirs.close()
        ring.close()
        yield from map(scan, chunks)
        return
    theirs.close()
    slot = 0
    done = False
    try:
        while True:
            try:
                message = ours.recv()
            except EOFError:  # killed (the OOM killer?) before it said it was done
                reader.join(1)
                raise OSError(f"the history reader stopped (exit code {reader.exitcode})") from None
            if message is None:
                done = True
                return
            if isinstance(message, BaseException):
                done = True
                raise message
            in_ring, size, item = message
            if in_ring:
                item.data = ring[slot * SLOT : slot * SLOT + size]
                slot = (slot + 1) % SLOTS
                free.release()
            yield item
    finally:
        ours.close()
        if not done:  # stopped early: the reader only reads, nothing of it is worth waiting for
            reader.kill()
        reader.join()
        ring.close()


def _read_ahead(chunks: Iterable[bytes], scan: Callable[[bytes], Any], conn: Any, consumer: Any,
                free: Any, ring: mmap.mmap) -> None:
    consumer.close()  # the consumer's end, inherited
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to report, once
    parent = os.getppid()
    slot = 0
    try:
        for chunk in chunks:
            item = scan(chunk)
            size = len(item.data)
            in_ring = size <= SLOT
            if in_ring:
                while not free.acquire(timeout=1.0):
                    if os.getppid() != parent:  # the consumer is gone without closing (SIGKILL)
                        return
                ring[slot * SLOT : slot * SLOT + size] = item.data
                slot = (slot + 1) % SLOTS
                item.data = b""
            conn.send((in_ring, size, item))
        conn.send(None)
    except BrokenPipeError:  # the consumer stopped reading
        return
    except Exception as exc:  # an unreadable or vanished file: the consumer raises it, as reading in-process would
        try:
            conn.send(exc)
        except BrokenPipeError:
            return
        except Exception:  # not picklable: its words
            conn.send(OSError(f"{type(exc).__name__}: {exc}"))
