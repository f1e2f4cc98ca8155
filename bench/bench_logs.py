"""Log pipeline throughput against `grep -cE` on a realistic verl log.

Usage: .venv/bin/python bench/bench_logs.py [--mb N] [--keep DIR]
Writes an N MB log (Ray prefixes, ANSI colour, mixed timestamps, tqdm `\\r` bars, step lines,
NCCL / warning / traceback noise) to a temp dir, times `grep -cE <default filter>` on it, then
times the whole gkdtop pipeline over the same file: the LogCollector following it from its start
as fast as it can (decode, ANSI strip, `\\r` collapse, split, parse_line) plus the same filter
searched on every line, as the logs pane does. Prints lines/s and the pipeline/grep time ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from gkdtop.collectors.logs import LogCollector

DEFAULT_FILTER = r"\[ACTOR\]|\[ROLLOUT\]|\[SYNC\]|ERROR|NCCL|Traceback|✓|✗|WARN|step:\d+ -"
ESC = "\x1b"


def _asctime(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _glog(t: float) -> str:
    return time.strftime("I%m%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1e6) % 1000000:06d}"


def _vllm(t: float) -> str:
    return time.strftime("INFO %m-%d %H:%M:%S", time.localtime(t))


def _ray(name: str, pid: int, color: bool) -> str:
    prefix = f"({name} pid={pid}, ip=10.0.0.{pid % 7 + 1})" if name != "TaskRunner" else f"({name} pid={pid})"
    return f"{ESC}[36m{prefix}{ESC}[0m " if color else prefix + " "


def _step_line(step: int, rng: random.Random) -> str:
    metrics = [f"actor/{k}:{rng.random():.4f}" for k in ("pg_loss", "entropy", "kl_loss", "grad_norm", "lr")]
    metrics += [f"timing_s/{k}:{rng.uniform(1, 60):.3f}" for k in ("gen", "update_actor", "step", "sync")]
    metrics += [f"response_length/{k}:{rng.uniform(50, 900):.1f}" for k in ("mean", "max", "min")]
    return f"step:{step} - " + " - ".join(metrics)


def _tqdm(rng: random.Random, label: str, total: int) -> str:
    frames = []
    for done in range(0, total + 1, max(1, total // rng.randint(5, 20))):
        pct = done * 100 // total
        bar = "█" * (pct // 10) + " " * (10 - pct // 10)
        rate = f"{rng.uniform(1, 9):.2f}it/s"
        frames.append(f"{label}: {pct:3d}%|{bar}| {done}/{total} [00:{done % 60:02d}<00:10, {rate}]")
    return "\r" + "\r".join(frames)


WORDS = [
    "loading", "shard", "model", "tokenizer", "config", "rank", "cache", "batch", "seq",
    "len", "done", "ok", "mem", "GiB", "alloc", "free", "kv", "block",
]


def _line(rng: random.Random, t: float, pid: int, step: int) -> str:
    """One message (no prefix) of a kind drawn with roughly the mix a verl GKD run shows."""
    r = rng.randint
    kind = rng.random()
    if kind < 0.30:
        return (f"{_asctime(t)} root INFO [ACTOR] update_policy micro_batch={r(0, 63)} "
                f"loss={rng.random():.5f} grad_norm={rng.uniform(0, 3):.4f}")
    if kind < 0.45:
        return (f"{_vllm(t)} [llm_engine.py:{r(100, 999)}] Avg prompt throughput: "
                f"{rng.uniform(100, 9000):.1f} tokens/s, Running: {r(0, 256)} reqs")
    if kind < 0.55:
        return (f"{_glog(t)} {pid} nccl_utils.cc:{r(10, 400)}] NCCL INFO Channel {r(0, 31):02d}/0 : "
                f"{r(0, 7)}[{r(0, 7)}] -> {r(0, 7)}[{r(0, 7)}] via P2P/CUMEM/read")
    if kind < 0.63:
        return f"[{_asctime(t)}] [ROLLOUT] generate_sequences batch={r(0, 9999)} tokens={r(1000, 90000)}"
    if kind < 0.68:
        return _tqdm(rng, rng.choice(["Processed prompts", "Training Progress"]), 100)
    if kind < 0.70:
        return _step_line(step, rng)
    if kind < 0.73:
        return f"{ESC}[33m{_iso(t)} WARN torch.distributed: barrier took {rng.uniform(1, 9):.1f}s{ESC}[0m"
    if kind < 0.74:
        return f"[SYNC] ✓ weights synced in {rng.uniform(0.5, 9):.2f}s"
    if kind < 0.745:
        return "Traceback (most recent call last):"
    if kind < 0.75:
        return f"{ESC}[31mERROR{ESC}[0m ✗ worker {pid} failed: CUDA error [repeated 3x across cluster]"
    return " ".join(rng.choice(WORDS) for _ in range(r(4, 20)))


def generate(path: Path, megabytes: float, seed: int = 7) -> int:
    """Write about `megabytes` MB of verl-like log to `path`; returns the number of lines."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    t = time.time() - 86400
    written = count = 0
    workers = [("WorkerDict", 2000 + i) for i in range(8)]
    workers += [("TaskRunner", 133947), ("OnPolicyDistillActor", 3001)]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        while written < target:
            batch: list[str] = []
            for _ in range(2000):
                t += rng.uniform(0.0005, 0.01)
                name, pid = rng.choice(workers)
                line = _ray(name, pid, rng.random() < 0.7) + _line(rng, t, pid, count // 50)
                batch.append(line + ("\r\n" if rng.random() < 0.02 else "\n"))
            chunk = "".join(batch)
            fh.write(chunk)
            written += len(chunk.encode("utf-8"))
            count += len(batch)
    return count


def time_grep(path: Path, pattern: str) -> tuple[float, int]:
    # POSIX ERE has no \d (GNU grep reads it as a plain `d`, with a warning): same meaning, ERE spelling.
    pattern = pattern.replace(r"\d", "[0-9]")
    started = time.perf_counter()
    proc = subprocess.run(["grep", "-cE", pattern, str(path)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    return elapsed, int(proc.stdout.strip() or 0)


def time_pipeline(source: Path, pattern: str) -> tuple[float, int, int]:
    """(seconds, lines, matching lines) for following the file from its start through the filter."""
    import re

    search = re.compile(pattern).search
    path = source.with_name("followed.log")
    path.unlink(missing_ok=True)
    collector = LogCollector([str(path)], backlog=0)
    collector.collect()  # not there yet: "waiting", so when it appears it's read from its start
    os.link(source, path)
    lines = matched = 0
    started = time.perf_counter()
    while True:
        batch = collector.collect()
        if not batch.lines and not batch.progress:
            break
        lines += len(batch.lines)
        matched += sum(1 for line in batch.lines if search(line.raw))
    elapsed = time.perf_counter() - started
    collector.close()
    path.unlink()
    return elapsed, lines, matched


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=200, help="size of the generated log in MB (default 200)")
    parser.add_argument("--keep", metavar="DIR", help="write the log here and keep it (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs of each (default 3)")
    args = parser.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gkdtop-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        log = tmp / "train.log"
        started = time.perf_counter()
        n = generate(log, args.mb)
        size_mb = log.stat().st_size / 1e6
        took = time.perf_counter() - started
        print(f"bench_logs: generated {size_mb:.0f} MB, {n} lines in {took:.1f}s", flush=True)
        time_grep(log, DEFAULT_FILTER)  # warm the page cache
        grep_s, grep_n = min(time_grep(log, DEFAULT_FILTER) for _ in range(args.runs))
        pipe_s, lines, matched = min(time_pipeline(log, DEFAULT_FILTER) for _ in range(args.runs))
        print(
            f"bench_logs: {size_mb:.0f} MB, {lines} lines: pipeline {pipe_s:.2f}s = "
            f"{lines / pipe_s / 1e3:.0f}k lines/s ({size_mb / pipe_s:.0f} MB/s), {matched} matches; "
            f"grep -cE {grep_s:.2f}s ({grep_n} matches); ratio pipeline/grep {pipe_s / grep_s:.1f}x"
        )
        report(f"log pipeline (decode, split, ANSI, prefix, timestamp, filter), {size_mb:.0f} MB verl-like log",
               f"{pipe_s:.2f} s, {lines / pipe_s / 1e3:.0f}k lines/s", f"`grep -cE` same filter: {grep_s:.2f} s",
               pipe_s / grep_s, "bench/bench_logs.py")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
