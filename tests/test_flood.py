"""In a flood the log collector parses only the lines the rules need (FloodSieve); the verdicts must
be the same as when every line is parsed and fed, and the dashboard must say what it skipped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkdtop.collectors import logs as logs_module
from gkdtop.collectors.follow import FLOOD_SHOWN, FLOOD_TAIL
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import load_config
from gkdtop.store import Store
from tests.gkdlog import asctime, ray, startup

NOISE = [
    "root INFO kv block alloc free batch seq len done mem GiB {n}",  # "lock " is in it: a near miss
    "root INFO NCCL INFO Channel {n}/0 : 1[1] -> 2[2] via P2P/CUMEM/read",
    "root INFO [ACTOR] update_policy micro_batch={n} loss=0.{n}1",
    "root INFO Waiting for the next batch {n}",  # "Waiting for" without " to be ready": not idle
]

EVENTS = [  # rare lines the rules react to (blocks: lines that must stay close), each followed by noise
    "root INFO resource request cannot be scheduled right now: {'GPU': 8.0}",  # idle + a finding
    # The ActorDied finding's extra fields come a few lines later, within its window.
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    "root INFO still nothing\nroot INFO still nothing\n\tclass_name: vLLMRollout\n\tpid: 4242",
    "Training Progress:  40%|████      | 4/10 [00:40<01:00, 10.0s/it]",
    # The failure the phase engine reports is the exception line that ends the traceback.
    "Traceback (most recent call last):\n"
    '  File "/verl/trainer/ppo/ray_trainer.py", line 1020, in fit\n'
    "root INFO still nothing\n"
    "RuntimeError: NCCL communicator was aborted on rank 1.",
]


def flood_lines(t0: float, per_gap: int = 150) -> list[str]:
    """The GKD start-up log and EVENTS with `per_gap` timestamped noise lines after each of their lines."""
    lines, t_end = startup(t0, steps=4)
    lines += ["\n".join(ray("TaskRunner", 133947, part) for part in block.split("\n")) for block in EVENTS]
    out: list[str] = []
    step = (t_end - t0) / (len(lines) * per_gap)
    t = t0
    for i, line in enumerate(lines):
        out.append(line)
        for k in range(per_gap):
            t += step
            body = NOISE[(i + k) % len(NOISE)].format(n=k)
            out.append(ray("WorkerDict", 2000 + k % 4, f"{asctime(t)} {body}", color=k % 3 == 0))
    return "\n".join(out).split("\n")


def follow(path: Path, sieve: bool, piece: int | None = None) -> Store:
    """A store fed by a collector following `path` while LINES are written to it, `piece` lines at a time."""
    store = Store(load_config(None))
    collector = LogCollector([str(path)], backlog=0, sieve=store.flood_sieve() if sieve else None)
    collector.collect()  # opened empty: everything written after is new
    piece = piece or len(LINES)
    for i in range(0, len(LINES), piece):
        with path.open("a") as fh:
            fh.write("".join(line + "\n" for line in LINES[i : i + piece]))
        while True:
            batch = collector.collect()
            if not batch.lines and not batch.skipped:
                break
            store.put("logs", batch)
    return store


def verdicts(store: Store) -> dict[str, object]:
    phases = store.phases
    return {
        "timeline": [(s.name, s.status, s.start, s.end) for s in phases.timeline],
        "current": phases.current.name if phases.current else None,
        "failure": phases.failure,
        "steps": list(phases.recent_steps), "run": phases.stats.summary(),
        "last_progress": phases.last_progress,
        "last_activity": phases.last_activity,
        "findings": sorted((f.name, sorted(f.fields.items()), f.count) for f in store.findings()),
    }


LINES = flood_lines(time.time() - 3600)


def test_the_sieve_gives_the_same_verdicts_as_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)  # untimed lines take the read time: the same in both runs
    every = follow(tmp_path / "every.log", sieve=False)
    sieved = follow(tmp_path / "sieved.log", sieve=True)
    # it did sieve: nearly every line before the newest FLOOD_TAIL is noise
    assert sieved.skipped_lines > 0.9 * (len(LINES) - FLOOD_TAIL)
    assert sieved.total_lines + sieved.skipped_lines == every.total_lines == len(LINES)
    expected = verdicts(every)
    assert expected["failure"] == "RuntimeError: NCCL communicator was aborted on rank 1."
    assert ("ray-actor-died", [("actor_class", "vLLMRollout"), ("pid", "4242")], 1) in expected["findings"]
    assert len(expected["steps"]) == 4
    assert verdicts(sieved) == expected


def repeats_lines(t0: float) -> list[str]:
    """A run in its loop whose steps are mostly repeats: two workers' vLLM `Processed prompts` bars and the driver's
    `Training Progress` bar, redrawn between noise lines, then each step's record."""
    lines, t = startup(t0, steps=2)
    for step in range(3, 7):
        for n in range(1, 65):
            t += 0.05
            for pid in (2000, 2001):
                rate = f"{n % 9 + 1}.50it/s"
                bar = f"Processed prompts: {100 * n // 64:3d}%|#   | {n}/64 [00:{n // 10:02d}<00:05, {rate}]"
                lines.append(ray("WorkerDict", pid, bar, color=pid == 2000))
            lines += [ray("WorkerDict", 2002, f"{asctime(t)} {NOISE[k % len(NOISE)].format(n=n)}") for k in range(20)]
            if n % 16 == 0:
                bar = f"Training Progress:  {step}0%|##  | {step}/10 [0{step}:00<01:00, {n / 100:.2f}s/it]"
                lines.append(ray("TaskRunner", 133947, bar))
        lines.append(ray("TaskRunner", 133947, f"{asctime(t)} root INFO step:{step} - actor/pg_loss:0.{step} - "
                                               "timing_s/step:30.0"))
    return lines


def test_a_flood_reads_a_run_of_repeats_at_its_ends_to_the_same_verdicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bar's redraws and an engine's `Processed prompts` are most of a generating run's matched lines (4 in 100 of
    bench/writer.py's). In a flood, a run of them is read at each worker's first and last line: the verdicts are
    those of reading every line, and most of the run is left out (bench/flood_cpu.py: 22-25% -> 19-20% of a core)."""
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    monkeypatch.setattr(sys.modules[__name__], "LINES", repeats_lines(now - 3600))
    every = follow(tmp_path / "every.log", sieve=False)
    sieved = follow(tmp_path / "sieved.log", sieve=True)
    matched = sum("Processed prompts" in line or "Training Progress" in line for line in LINES)
    assert matched > 500
    assert sieved.total_lines < FLOOD_SHOWN + matched / 4  # the runs' middle lines were left out
    expected = verdicts(every)
    assert expected["current"] == "training loop" and len(expected["steps"]) == 6
    assert verdicts(sieved) == expected


def test_a_trickle_is_not_sieved(tmp_path: Path) -> None:
    """A poll of FLOOD_TAIL lines or fewer that reaches the file's end keeps them all: no line of a log written at a
    readable pace is left out of the Logs pane (only a flood's older lines are sieved)."""
    store = follow(tmp_path / "trickle.log", sieve=True, piece=FLOOD_TAIL)
    assert store.skipped_lines == 0 and store.total_lines == len(LINES)


def test_a_collector_behind_its_file_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll that stopped at its read budget asks to be run again at once (run_forever reads `behind`)."""
    monkeypatch.setattr(logs_module, "READ_LIMIT", 64 << 10)
    path = tmp_path / "train.log"
    path.write_text("")
    collector = LogCollector([str(path)], backlog=0)
    collector.collect()
    path.write_text(("x" * 100 + "\n") * 2000)  # 200 KB: four polls
    collector.collect()
    assert collector.behind
    while collector.behind:
        collector.collect()
    assert collector.collect().lines == []


def test_rules_anchored_at_the_message_start_see_it_behind_a_ray_prefix(tmp_path: Path) -> None:
    """The sieve tests a line as the rules do: without its `(Worker pid=...)` prefix."""
    config_file = tmp_path / "gkdtop.yaml"
    config_file.write_text('phases:\n  - name: evaluation\n    start: "^Eval epoch \\\\d+ begins"\n')
    store = Store(load_config(config_file))
    log = tmp_path / "train.log"
    log.write_text("")
    collector = LogCollector([str(log)], backlog=0, sieve=store.flood_sieve())
    collector.collect()
    noise = [ray("WorkerDict", 7, f"{asctime(time.time())} root INFO tick {i}") for i in range(6000)]
    noise[100] = ray("WorkerDict", 7, "Eval epoch 3 begins")
    log.write_text("\n".join(noise) + "\n")
    store.put("logs", collector.collect())
    assert store.skipped_lines > 3000
    assert store.phases.current is not None and store.phases.current.name == "evaluation"


def test_a_flood_keeps_its_rule_lines_and_newest_lines_with_their_numbers(tmp_path: Path) -> None:
    """A flood's older lines are sieved as bytes and only the kept ones decoded, one by one; its newest FLOOD_SHOWN
    are kept whole. Each keeps its line number in the file, also past a C1 control (`\\xc2\\x85`, gone from the text
    only) and a coloured prefix; the lines left out are counted, and the newest of them dates the stall clock."""
    store = Store(load_config(None))
    log = tmp_path / "train.log"
    log.write_text("")
    collector = LogCollector([str(log)], backlog=0, sieve=store.flood_sieve())
    collector.collect()
    t0 = time.time() - 60
    lines = [ray("WorkerDict", 7, f"{asctime(t0 + i / 1000)} root INFO tick {i}", color=i % 2 == 0)
             for i in range(FLOOD_TAIL + 3000)]
    lines[10] = lines[10] + " caf\u00e9 \x85 noise"  # non-ASCII and a C1 control in a line the sieve drops
    lines[1000] = ray("TaskRunner", 9, "Traceback (most recent call last):")
    lines[1001] = ray("TaskRunner", 9, "RuntimeError: NCCL communicator was aborted on rank 1.")
    log.write_text("\n".join(lines) + "\n")
    store.put("logs", collector.collect())
    kept = list(store.lines)
    first = kept[0].number  # the file's line 1001 (numbered from where the follower began: differences are lines)
    assert [(line.number - first, line.text) for line in kept[:2]] == [
        (0, "Traceback (most recent call last):"), (1, "RuntimeError: NCCL communicator was aborted on rank 1.")]
    newest = [line.number - first for line in kept[-FLOOD_SHOWN:]]
    assert newest == list(range(len(lines) - FLOOD_SHOWN - 1000, len(lines) - 1000))
    assert kept[-1].text.endswith(f"tick {len(lines) - 1}")
    assert store.total_lines + store.skipped_lines == len(lines)
    assert store.skipped_lines >= len(lines) - FLOOD_SHOWN - 10
    assert store.phases.failure == "RuntimeError: NCCL communicator was aborted on rank 1."
    assert store.phases.last_progress is not None and store.phases.last_progress >= t0 + (len(lines) - 1) / 1000 - 1


def test_a_flood_of_one_hint_s_evidence_costs_one_hit_per_scan() -> None:
    """A hint's evidence (`seen:` / `unless_seen:`) needs one line to be known: `torch.distributed` warnings every
    few lines of a flood (bench/writer.py prints them) came back from the scan one by one, each a turn of the
    Python loops that sieve and date lines (live analysis at 100k lines/s rose from 17% to 19-22% of a core).
    The scan now reports such a pattern's first line only; the hint it gates still sees it."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.matcher import hyperscan

    analysis = Analysis(load_config(None).rules())
    evidence = next(i for i, text in analysis.phases.seen_ids.items() if "torch\\.distributed" in text)
    chunk = b"".join(b"WARN torch.distributed: barrier took 1.%ds\nstep:%d - loss:0.1\n" % (n % 10, n)
                     for n in range(2000))
    hits = [ids for _start, _end, ids in analysis.matcher.scan(chunk) if evidence in ids]
    assert len(hits) == (1 if hyperscan is not None else 2000)
    steps = [ids for _start, _end, ids in analysis.matcher.scan(chunk) if analysis.phases.step_id in ids]
    assert len(steps) == 2000  # a rule's own pattern is not cut short


def test_lines_no_pattern_matched_take_the_short_way_to_the_same_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood's tail is mostly lines no pattern matched: Analysis.feed dates them and counts them as progress
    without the whole per-line analysis (Analysis._feed_unmatched). Fed so, or each the whole way, the state is the
    same, around the lines that need more: an autoscaler's `+Ns`, a bar's redraws, a finding's window, the traceback
    after `Exception ignored in`, a worker first seen on an unmatched line."""
    from gkdtop.analysis.engine import Analysis
    from gkdtop.analysis.lines import clean_line, parse_into

    t0 = time.time() - 600
    runner = ("TaskRunner", 133947)
    extra = [
        "(autoscaler +1m5s) Resized to 8 CPUs.",
        "(autoscaler +2m5s) Adding 1 node(s) of type worker.",
        ray("Runner", 77, f"{asctime(t0 + 300)} root INFO kv block alloc free 3"),  # a framework's worker, first seen
        # an unraisable traceback, cut by another process's line: its exception is a failure again
        ray(*runner, "Exception ignored in: <function Loader.__del__ at 0x7f00deadbeef>"),
        ray("WorkerDict", 2001, "root INFO cache ok"),
        ray(*runner, "Traceback (most recent call last):"),
        ray(*runner, "ValueError: loader closed twice"),
        # a window of 20 lines after the actor's death: 20 lines no pattern matched close it before its pid comes
        ray(*runner, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        *(ray(*runner, f"root INFO cache ok {k}") for k in range(20)),
        ray(*runner, "\tpid: 4343"),
        "epoch 3 |####      | 40/100 [00:10<00:20]",  # a `|` redraw no pattern matches, again: no progress
        "epoch 3 |####      | 40/100 [00:11<00:19]",
        ray("WorkerDict", 2001, f"{asctime(t0 + 310)} root INFO kv block alloc free 4"),
    ]
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    lines: list = []
    parse_into(lines, [clean_line(text.encode()) for text in [*LINES, *extra]], "train.log", now)

    def fed(short: bool) -> tuple[object, ...]:
        analysis = Analysis(load_config(None).rules())
        if not short:
            analysis._feed_unmatched = lambda line: False  # every line the whole way
        for i in range(0, len(lines), 500):
            analysis.feed(lines[i : i + 500])
        phases = analysis.phases
        progress = phases._progress_line
        return (analysis.started, analysis.ended, analysis.lines_read, phases.last_progress, phases.last_activity,
                progress.raw if progress is not None else None, phases._last_stamp, phases._unraisable,
                phases._bar_keys,
                [(s.name, s.status, s.start, s.end, s.clock_jump) for s in phases.timeline], phases.failure,
                sorted((f.name, sorted(f.fields.items()), f.count) for f in analysis.findings()),
                analysis.profiles.hits, sorted(analysis.errors), analysis.recognised_at)

    assert fed(short=True) == fed(short=False)


def test_a_flood_s_megabyte_chunks_come_back_from_the_allocator_not_the_kernel() -> None:
    """Each freed megabyte chunk went back to the kernel and the next was faulted in page by page (15k page faults
    a second at 100k lines/s): once a log collector exists, freed chunks stay in the process (keep_freed_chunks)."""
    script = (
        "import resource\n"
        "from gkdtop.collectors.logs import LogCollector\n"
        "LogCollector([])\n"
        "faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "before = faults()\n"
        "for _ in range(100):\n"
        "    chunk = b'x\\x1b' * (1 << 19)\n"
        "    cleaned = chunk.translate(None, b'\\x1b')\n"
        "    del chunk, cleaned\n"
        "print(faults() - before)\n")
    from gkdtop.collectors.follow import keep_freed_chunks

    if not keep_freed_chunks():
        pytest.skip("no glibc mallopt here (musl, macOS): the allocator is the platform's own")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert int(out) < 5000  # (each cycle's two chunks faulted in anew: 48,000)
