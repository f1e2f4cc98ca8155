"""Follow every log file the patterns name, now or later, and hand on what's new as one `LogBatch`.

One file is followed in follow.py; this is the many: patterns re-globbed as files appear, a read
budget shared in turns so no flood starves the others, fewer polls while all is quiet, and the
registry's SPEC.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gkdtop.collectors.follow import PARK_DELAY, Follower, OpenFiles, keep_freed_chunks, open_limit
from gkdtop.collectors.registry import CollectorSpec

if TYPE_CHECKING:
    from gkdtop.collectors.follow import Sieve
    from gkdtop.model import LogFileState, LogLine

# Bytes read per file per collect(): a flood is spread over polls (the collector polls again at once
# while behind), and no single C-level pass over a chunk holds the GIL from the UI for long.
READ_LIMIT = 1 << 20
TOTAL_LIMIT = 16 << 20  # bytes read per collect() over all files, so many floods can't stall it
GLOB_EVERY = 2.0  # seconds between two expansions of the patterns
QUIET_AFTER = 8  # empty polls in a row (2 s at the default 0.25 s) before the files are polled less often
QUIET_INTERVAL = 1.0  # ... then once a second, until a poll finds something


@dataclass(slots=True)
class LogBatch:
    """What one collect() found: new complete lines, unfinished-bar updates, and every file's state."""

    lines: list[LogLine] = field(default_factory=list)
    progress: dict[str, LogLine] = field(default_factory=dict)  # source -> latest `\r` state
    files: list[LogFileState] = field(default_factory=list)
    skipped: int = 0  # flood lines the sieve found nothing in: counted, not parsed (see Sieve)
    skipped_time: float = 0.0  # the time of the last of them
    # Files there at start-up: (path, bytes, mtime, finished) of what they held. The analysis reads that
    # as history (analysis/engine.read_history); the lines delivered from it are marked `backlog`.
    history: list[tuple[str, int, float, bool]] = field(default_factory=list)

    def slices(self, size: int) -> list[LogBatch]:
        """The same batch as several of at most `size` lines (bar updates with the last), in order."""
        if len(self.lines) <= size:
            return [self]
        parts = [LogBatch(self.lines[i:i + size], {}, self.files) for i in range(0, len(self.lines), size)]
        parts[0].skipped, parts[0].skipped_time, parts[0].history = self.skipped, self.skipped_time, self.history
        parts[-1].progress = self.progress
        return parts


class LogCollector:
    """Follows every file the patterns name, now or later; a collect() returns what's new since the last."""

    name = "logs"

    def __init__(
        self, patterns: list[str], backlog: int = 200, max_line: int = 16384, interval: float = 0.25,
        sieve: Sieve | None = None, max_open: int | None = None, park_delay: float = PARK_DELAY,
    ) -> None:
        keep_freed_chunks()
        self.patterns = [os.path.expanduser(p) for p in patterns]
        self.sieve = sieve  # in a flood, parse only the lines the analysis needs (None: every line)
        self.backlog = backlog
        self.max_line = max_line
        self.base_interval = interval
        self._files: dict[str, Follower] = {}
        self._open_files = OpenFiles(max_open if max_open is not None else open_limit(), park_delay)
        self.glob_every = GLOB_EVERY  # seconds between two expansions of the patterns
        self._next_glob = 0.0
        self._started = False
        self._turn = 0  # which file reads first: turns go round, so no flood starves the others
        self.behind = False  # the last collect() left unread bytes (its read budget ran out)
        self._quiet = 0  # polls in a row that found nothing new

    @property
    def interval(self) -> float:
        """The configured interval while lines come; once a second after QUIET_AFTER empty polls: an idle
        dashboard's polls were mostly of files that said nothing. The first line after a silence shows
        within the second, and the polls speed up again with it."""
        return max(self.base_interval, QUIET_INTERVAL) if self._quiet >= QUIET_AFTER else self.base_interval

    def _expand(self) -> None:
        """Add the paths the patterns name now. Named paths are followed even before they exist."""
        for pattern in self.patterns:
            if glob.has_magic(pattern):
                try:
                    found = sorted(glob.glob(pattern))
                except ValueError:  # a NUL in the pattern: it names nothing
                    found = []
                for path in found:
                    path = os.path.normpath(path)
                    # A glob may match directories (`logs/*`): those are no log files, skip them.
                    if path not in self._files and not os.path.isdir(path):
                        self._add(path)
            elif (path := os.path.normpath(pattern)) not in self._files:
                self._add(path)

    def _add(self, path: str) -> None:
        # Files there at start-up begin with their last lines; those that appear later, at their start.
        self._files[path] = Follower(path, self.max_line, at_start_up=not self._started, sieve=self.sieve,
                                      pool=self._open_files)

    def collect(self) -> LogBatch:
        now = time.monotonic()
        if now >= self._next_glob:
            self._expand()
            self._next_glob = now + self.glob_every
        self._started = True
        batch = LogBatch()
        followers = list(self._files.values())
        if followers:
            self._turn %= len(followers)
            budget = TOTAL_LIMIT
            for follower in followers[self._turn :] + followers[: self._turn]:
                budget -= follower.poll(batch.lines, batch.progress, self.backlog, min(budget, READ_LIMIT))
                if follower.history is not None:
                    batch.history.append(follower.history)
                    follower.history = None
                if follower.skipped:
                    batch.skipped += follower.skipped
                    batch.skipped_time = max(batch.skipped_time, follower.skipped_time)
                    follower.skipped, follower.skipped_time = 0, 0.0
            self._turn += 1
        self.behind = any(follower.behind for follower in followers)
        batch.files = [follower.snapshot() for follower in followers]
        news = batch.lines or batch.progress or batch.history or batch.skipped
        self._quiet = 0 if news else self._quiet + 1
        return batch

    def close(self) -> None:
        for follower in self._files.values():
            follower.close()


SPEC: CollectorSpec[LogBatch] = CollectorSpec(
    result=LogBatch,
    write=lambda store, batch: store.write_logs(batch),
    build=lambda wiring, interval: LogCollector(
        wiring.log_sources, backlog=wiring.backlog, max_line=wiring.max_line, interval=interval, sieve=wiring.sieve),
)
