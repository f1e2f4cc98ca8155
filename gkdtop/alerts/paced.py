"""What `watch` would have told while a finished log was being written, at the pace of its own stamps
(`gkdtop replay --alerts`): the check that a healthy run pages nobody, and a way to tune stall_after
on a log that did page."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from gkdtop.alerts.events import AlertEvent, AlertWatcher
from gkdtop.analysis.lines import clean_line, parse_line
from gkdtop.analysis.phases import PhaseEngine, parse_record_step
from gkdtop.collectors.logs import LogBatch
from gkdtop.model import LogFileState, LogLine
from gkdtop.store import Store

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gkdtop.config import Config

GAP = 1.0  # seconds between two lines' stamps worth asking "was it stalled just before the second?"
CHUNK = 1 << 20
FIRST_STEPS = 100  # the highest number a writer's first step line is taken to count from 0 (a log interval)
STATED_SLACK = 60.0  # seconds of a gap its step line's stated time may leave unexplained (a save, the log's write)


def paced_events(path: str, config: Config, job: str = "") -> list[AlertEvent]:
    """Feed `path` line by line as if each line arrived at its own stamp (lines with none at the last
    stamp before them) and collect the events a watcher would have sent. The log's end is not a
    silence: nothing is checked past its last line. A stall is told only where the file shows one: where lines
    with no stamp came between two stamps, they could have come any time in between, and a gap they could have
    split into silences shorter than the stall limit is no stall the file shows (audits 17 and 18: an agent's
    sandbox output through an 11-minute gap between two stamps, read as a 10-minute STALLED)."""
    mtime = os.stat(path).st_mtime
    reference = _reference(path, mtime)
    store = Store(config)
    store.log_polls = 2  # the clock is settled: every line arrives on its own stamp
    watcher = AlertWatcher(store, job or os.path.basename(path), config.notify_every)
    watcher.replayed = True
    files = [LogFileState(path, "following")]
    events: list[AlertEvent] = []
    pending: list[LogLine] = []
    undated: list[LogLine] = []  # lines before the first stamp: they arrived with it
    last: float | None = None
    unstamped = 0  # lines with no stamp since the last stamped one
    zones: dict[tuple[str, int | None], float] = {}  # per writer: its clock's zone against the file's first
    bars: dict[str, tuple[float, float]] = {}  # per tqdm bar: when its first redraw came and the elapsed it showed
    reach = 0.0  # the longest clock of a steady bar (_steady_bar) among the lines dated at `last`
    steps: dict[tuple[str, int | None], int] = {}  # per writer: the number of its last step line
    undated_in_batch: list[LogLine] = []  # the pending lines that carried no stamp of their own
    stated_after = 0.0  # seconds the pending unstamped step lines state their steps took, past the last stamp
    for raw in _lines(path, config.max_line * 4):  # up to 4 bytes a character, as the follower keeps
        if not raw.strip():
            continue
        # A year-less stamp (vLLM's `INFO 06-09 05:36:49`) is placed by the line before it, not by the
        # file's mtime, which may be a checkout's; the first one by the file's own full dates where they are far
        # older than its mtime (audit 26: torchrun's `W1003 …` before 2024 stamps, in a copy made in 2026), as
        # replay places it.
        line = parse_line(clean_line(raw), path, reference if last is None else min(mtime, last + 3600))
        stamp = line.ts
        if stamp is not None:
            stamp -= _zone(zones, (line.worker, line.pid), stamp, last)
            if stamp > mtime + 5:
                stamp = None  # ahead of the file's own last write: not a time this line was written
        covered = False  # a moving bar's redraw: its own clock says the run went on all through the gap
        dated = stamp is not None  # the line's own stamp, not a bar's clock reckoned from the stamp before it
        if last is not None and (bar := _bar_time(bars, line, last, mtime, stamp)) is not None:
            stamp, covered = bar
        if stamp is None and last is None:
            undated.append(line)
            continue
        at = last if stamp is None else stamp if last is None else max(stamp, last)  # a stamp never rewinds
        for early in undated:
            early.seen = early.ts = at
        pending += undated
        undated = []
        line.seen = line.ts = at
        if stamp is None and last is not None:
            # (no stamp of its own: it came after the stamp it is dated at, as history marks such a line)
            line.ts, line.backlog = None, True
        steady = _steady_bar(line.text, config.stall_after)
        if last is not None and (clock := max(reach, steady)) and clock + config.stall_after >= at - last:
            covered = True  # a steady bar's clock spans the gap (but less than a stall): its steps went on through it
        stated = _stated_steps(line, steps)
        if not dated:
            stated_after += stated
        if last is not None and stated and stated >= at - last - max(STATED_SLACK, 0.05 * (at - last)):
            covered = True  # the steps since the writer's last step line took the gap, they state: work, no silence
        if last is None or at > last:
            reach = 0.0
        reach = max(reach, steady)
        if last is not None and at - last >= GAP and pending:
            store.write_logs(LogBatch(pending, {}, files), local=False)
            pending = []
            # As the lines before the gap arrived (a stall's recovery, a failure, the end are told then: audit 19, a
            # "recovered" told five hours late, by the first check that found no stall), then within the gap.
            runs = watcher.runs_seen
            events += _past(watcher.check(last), last, min(stated_after, at - last))
            stated_after = 0.0
            # A finished run is told when its wait is over, as watch tells it, not at the next stamp (audit 21: a
            # "finished" 8 minutes late, in the second of the failure that followed).
            if (due := watcher.finish_due()) is not None and due < at:
                events += watcher.check(due)
            # A failure held for its block's end is told when its wait is over, where the next line comes past it
            # (review 26: not at that later stamp, however late; audit 22: not before the block's stamped echo).
            if (due := watcher.failed_due(line)) is not None:
                events += watcher.check(due)
            # (a job started again by an unstamped line before the gap: the earlier run had ended, and when the next
            # one began within the gap no stamp says; the gap is no stall of either)
            restarted = watcher.runs_seen > runs and _unstamped_start(store, undated_in_batch)
            undated_in_batch = []
            before = None if covered or restarted else _fired(store, at - 1e-3, (at - last) / (unstamped + 1))
            if before is not None and before > last:
                events += watcher.check(before)
        pending.append(line)
        if dated:
            stated_after = 0.0  # a stamp of its own: the steps before it are behind it
        if stamp is None:
            undated_in_batch.append(line)
        # (a bar's first draw at `0/32 [00:00<?` reckons no time past the stamp before it: it says no more than an
        # unstamped line of when it came; audit 22, a start-up's unstamped lines read as a 10-minute silence)
        unstamped = unstamped + 1 if stamp is None or (not dated and at <= (last or at)) else 0
        last = at
    for early in undated:  # no stamp at all: every line at the file's last write
        early.seen = early.ts = mtime
    pending += undated
    if pending:
        store.write_logs(LogBatch(pending, {}, files), local=False)
    events += _past(watcher.check(last or mtime, final=True), last, min(stated_after, mtime - (last or mtime)))
    return events


def _reference(path: str, mtime: float) -> float:
    """What places the file's first year-less stamp: its mtime, or its own full dates' year where they are far
    older (analysis/time.yearless_reference on the file's first and last TAIL_BYTES, as history reads them)."""
    from gkdtop.analysis.time import TAIL_BYTES, yearless_reference
    from gkdtop.safeopen import open_regular

    try:
        with open_regular(path) as fh:
            head = fh.read(TAIL_BYTES) or b""
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(len(head), size - TAIL_BYTES))
            tail = fh.read(TAIL_BYTES) or b""
    except OSError:
        return mtime
    return yearless_reference(head + b"\n" + tail, mtime)


def _past(events: list[AlertEvent], last: float | None, stated: float) -> list[AlertEvent]:
    """Events told at the last stamp `last` after unstamped step lines that state their steps took `stated`
    seconds: they came no earlier than that past it, a bound (never past the next stamp or the file's last write)."""
    if last is None or stated <= 0:
        return events
    return [replace(e, time=e.time + stated, at_least=True) if abs(e.time - last) < 1e-6 else e for e in events]


def _lines(path: str, keep: int) -> Iterator[bytes]:
    """The file's lines, each cut at `keep` bytes, read in chunks: a 1 GiB line costs `keep`, not 1 GiB."""
    from gkdtop.safeopen import open_regular

    with open_regular(path) as fh:
        held = b""
        cut = False  # the current line is past `keep`: the rest of it is skipped
        while chunk := fh.read(CHUNK):
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if not cut:
                    yield (held + chunk[start:end])[:keep]
                held, cut, start = b"", False, end + 1
            if not cut:
                held += chunk[start:]
                if len(held) > keep:
                    yield held[:keep]
                    held, cut = b"", True
        if held and not cut:
            yield held


def _bar_time(bars: dict[str, tuple[float, float]], line: LogLine, last: float, mtime: float,
              stamp: float | None = None) -> tuple[float, bool] | None:
    """An unstamped tqdm bar's time: its first redraw's arrival plus the elapsed time it has shown since (HF's,
    Axolotl's bars carry no stamp, and a run's stamps are minutes apart: audit 16, a false STALLED on a healthy run at
    the last stamp before 80 redraws), never past the file's last write; and whether it moved on from a redraw
    before it (a file keeps a few of a bar's redraws: the ones between were progress too). A bar glued to a stamped
    line (`100%|…| 940/940 [4:51:42<00:00, …][INFO|trainer.py:3503] 2026-07-03 15:54:24,006 >>`) keeps its `stamp`
    and anchors the bar's clock there: the file's one exact pair of the two. None for any other line."""
    from gkdtop.analysis.phases import BAR_KEY_DIGITS_RE, stated_elapsed

    text = line.text
    cut = text.find("%|")
    if cut < 0 or (shown := stated_elapsed(text[cut:], bar=True)) is None:  # (glued redraws: the furthest)
        return None
    # The bar is its text before the percentage: tqdm right-aligns that (`requests:   0%`, `requests: 100%`), and
    # with the padding in the key a bar's last redraw was a new bar dated at the stamp before it (audit 21).
    key = f"{line.worker}:{line.pid}:" + BAR_KEY_DIGITS_RE.sub("#", text[:cut].rstrip("0123456789. ")).strip()
    anchor = bars.get(key)
    moved = anchor is not None and shown > anchor[1]  # (a bar that ran steadily through a gap: _steady_bar)
    if anchor is None or shown < anchor[1] or stamp is not None:  # its first redraw, the bar started again, a stamp
        if len(bars) > 1000:
            bars.clear()
        # (a bar first drawn after the line before it: its redraw came the elapsed time it shows after that line,
        # not with it; an lm-eval bar seen only at its 100% was dated at its start, a STALLED through it, audit 21)
        bars[key] = anchor = (min(mtime, last + shown) if stamp is None else stamp, shown)
    return min(mtime, anchor[0] + shown - anchor[1]), moved


def _steady_bar(text: str, slack: float) -> float:
    """The elapsed time of a bar on this line whose items at its pace account for all that time but `slack` seconds
    or 5% of it (it moved all along), else 0. Unstamped lines are dated at the stamp before them: HF's bar glued
    before a stamped DeepSpeed line (`1999/24128 [1:53:09<…, 3.33s/it][[2026-…`, audit 18) and the dicts before it
    seem to leave the gap since that stamp silent, where the bar's own clock says its steps went on through it. A bar
    that stood still for long shows it: its items at its recent pace fall short of its elapsed time."""
    from gkdtop.analysis.phases import BAR_COUNT_RE, BAR_RATE_RE, stated_elapsed

    if "%|" not in text or (elapsed := stated_elapsed(text, bar=True)) is None:
        return 0.0
    counts = list(BAR_COUNT_RE.finditer(text))
    if not counts or (rate := BAR_RATE_RE.search(text, counts[-1].end())) is None or not float(rate.group(1)):
        return 0.0
    pace = float(rate.group(1)) if rate.group(2) == "s/it" else 1 / float(rate.group(1))
    # (its shown pace is the recent one, smoothed: a first step's warm-up leaves a few percent of the time unexplained)
    return float(elapsed) if int(counts[-1].group(1)) * pace >= elapsed - max(slack, 0.05 * elapsed) else 0.0


def _stated_steps(line: LogLine, steps: dict[tuple[str, int | None], int]) -> float:
    """The seconds a step line states its steps since the writer's last step line took: their count times its own
    time a step (Megatron's `iteration 10/ … | elapsed time per iteration (ms): 116823.4` each log interval of 10,
    verl's `timing_s/step`), else 0. A writer's first step line counts the steps from 0 where its number is at most
    FIRST_STEPS (audit 23, a first log interval of 10 slow iterations read as "STALLED for 10m01s"); past that, the
    run resumed where the line does not say, and it states no time: the gap gets the stall allowance, no more
    (review 26: `iteration 5010` at 12 s each, credited 100 of them, hid a 20-minute silence)."""
    text = line.text
    parsed = PhaseEngine.parse_step(text) or parse_record_step(text)
    if parsed is None or parsed[0] is None:
        return 0.0
    writer = (line.worker, line.pid)
    before = steps.get(writer)
    steps[writer] = parsed[0]
    count = parsed[0] - before if before is not None else parsed[0] if parsed[0] <= FIRST_STEPS else 0
    return max(count, 0) * parsed[2].get("step", 0.0)


def _unstamped_start(store: Store, undated: list[LogLine]) -> bool:
    """The last run began at a line that carried no stamp (its time is anywhere in the gap after it)."""
    runs = store.phase_status().earlier_runs
    if not runs:
        return False
    first = runs[-1].evidence.text[:200]
    return any((line.raw or line.text).startswith(first) for line in undated)


def _fired(store: Store, before: float, silence: float) -> float | None:
    """When a stall that holds at `before` was first declared (its limit past its last progress): the
    time watch would have told it, with the silence it had then, not the whole gap's. None where the gap's
    unstamped lines may have broken it into silences of `silence`, under the limit: no check then."""
    status = store.phase_status(before)
    if status.state == "stalled" and status.last_progress is not None:
        if silence < status.stall_after:
            return None
        return min(before, status.last_progress + status.stall_after + GAP)
    return before


def _zone(zones: dict[tuple[str, int | None], float], writer: tuple[str, int | None], ts: float,
          last: float | None) -> float:
    """A writer's offset, fixed by its first stamp: a driver in UTC and workers in UTC+8 in one file
    jump whole hours at the first worker line, which is a zone, not eight hours of silence."""
    if writer in zones:
        return zones[writer]
    zones[writer] = 0.0
    if last is not None and abs(ts - last) >= 3000:
        # Whole half-hours are the zone; what is left (up to a quarter hour) is time that really passed.
        halves = int((ts - last + 300) // 1800)
        if halves and abs(halves) <= 28 and -300 <= ts - last - halves * 1800 <= 900:  # zones: within 14 h
            zones[writer] = halves * 1800.0
    return zones[writer]
