"""CPU of the stack-phase sampler (collectors/stackphase.py), as a share of one core.

Usage: .venv/bin/python bench/bench_stack_phase.py [--seconds 60] [--samples 20] [--ranks 8]

Starts a verl-like driver blocked in `fit` on `generate_sequences` and R ranks blocked in
`update_actor` (tests/stackjob.py), then, in the same run:
- baseline: one bare `py-spy dump --nonblocking --json` of the driver, N times; CPU per dump
  (py-spy's, from the reaped children's rusage);
- the sampler's `sample()` of the driver, N times: CPU per sample (py-spy's plus ours: parsing,
  the rules, the source lines), and the ratio to the bare dump;
- the same for all ranks at once (what a stall costs per sample);
- the sampler as the monitor runs it (one look a second: `due`, then `sample` when due) for S
  seconds with the log silent (the driver is read), then S seconds stalled (every rank is read):
  CPU over wall time is the share of a core. The answer never changes here, so the intervals
  back off (10, 20, 40 s ...); a job whose phase keeps changing is read every 10 s at most.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from gkdtop.actions.stacks import find_py_spy, proc_info
from gkdtop.collectors.stackphase import BASE, BUDGET, LONGEST, StackPhaseSampler
from tests import stackjob


def cpu() -> float:
    """CPU seconds of this process (every thread) plus its reaped children (each py-spy run)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    before = cpu()
    for _ in range(n):
        fn()
    return (cpu() - before) / n


def run(sampler: StackPhaseSampler, reason: str, procs: list, seconds: float) -> tuple[float, int]:
    """The sampler as the monitor runs it (one look a second) for `seconds`: (share of a core, samples)."""
    sampler.reset()
    start_cpu, start, samples = cpu(), time.monotonic(), 0
    while time.monotonic() - start < seconds:
        now = time.time()
        targets = sampler.due(reason, procs, now)
        if targets:
            sampler.sample(targets, reason, now)
            samples += 1
        time.sleep(1.0)
    return (cpu() - start_cpu) / (time.monotonic() - start), samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    exe = find_py_spy()
    if exe is None:
        print("py-spy not found", file=sys.stderr)
        return 1
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            procs.append(stackjob.start(Path(tmp) / "driver", "driver"))
            for i in range(args.ranks):
                procs.append(stackjob.start(Path(tmp) / f"rank{i}", "driver", "--update"))
            driver = proc_info(procs[0].pid)
            driver.role = "driver"
            ranks = [proc_info(p.pid) for p in procs[1:]]
            for rank in ranks:
                rank.role = "actor"
            env = {**os.environ, "RUST_BACKTRACE": "0"}
            argv = [exe, "dump", "--pid", str(driver.pid), "--json", "--nonblocking"]
            bare = per_call(lambda: subprocess.run(argv, capture_output=True, check=True, env=env), args.samples)
            sampler = StackPhaseSampler()
            one = per_call(lambda: sampler.sample([driver], "bench"), args.samples)
            found = sampler.sample([driver], "bench")
            assert found.phase == "generation", found
            every = per_call(lambda: sampler.sample([driver, *ranks], "stalled"), max(1, args.samples // 4))

            shares = {reason: run(sampler, reason, [driver, *ranks], args.seconds)
                      for reason in ("log silent for 60s", "stalled")}
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    print(f"bare py-spy dump --nonblocking: {bare * 1000:.1f} ms CPU; sampler, driver: {one * 1000:.1f} ms CPU "
          f"({one / bare:.2f}x); every rank ({args.ranks + 1} processes): {every * 1000:.1f} ms CPU")
    (silent, n_silent), (stalled, n_stalled) = shares.values()
    print(f"as the monitor runs it, {args.seconds:.0f} s each: log silent (driver) {silent * 100:.3f}% of a core "
          f"({n_silent} samples); stalled (every rank) {stalled * 100:.3f}% ({n_stalled} samples); "
          f"budget per sample schedule: {BUDGET * 100:.1f}%, intervals {BASE:.0f}-{LONGEST:.0f} s")
    report("stack-phase sampler, CPU per sample (driver / every rank of a stall)",
           f"{one * 1000:.1f} / {every * 1000:.1f} ms ({args.ranks + 1} processes)",
           f"bare `py-spy dump --nonblocking`: {bare * 1000:.1f} ms", one / bare,
           "bench/bench_stack_phase.py")
    report(f"stack-phase sampler, share of a core over {args.seconds:.0f} s: log silent (driver) / stalled "
           f"(every rank, {args.ranks + 1} processes)", f"{silent * 100:.3f}% / {stalled * 100:.3f}%",
           "budget: 1% of a core", max(silent, stalled) / 0.01, "bench/bench_stack_phase.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
