"""`make bench`: every benchmark in bench/, one after the other, then one table of the results.

Each script prints its own lines and one `@@BENCH {json}` row (bench/common.report); this runner
passes their output through, shares one local Ray cluster between the scripts that want one (when
Ray is installed), and prints the table at the end with the machine it ran on.
Options: --quick (smaller sizes, for a smoke run), --skip NAME (repeatable).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MARK, RAY_ENV, machine, ray_available  # noqa: E402

# (script, arguments, arguments with --quick)
SCRIPTS: list[tuple[str, list[str], list[str]]] = [
    ("first_frame.py", ["--runs", "7"], ["--runs", "3"]),
    ("idle_cpu.py", ["--seconds", "30"], ["--seconds", "10"]),
    ("watch_idle.py", ["--seconds", "30"], ["--seconds", "10", "--rounds", "1", "--warmup", "5"]),
    ("cpu.py", ["--seconds", "15"], ["--seconds", "5", "--rates", "0,100000"]),
    ("flood_ui.py", [], ["--seconds", "8", "--presses", "8"]),
    ("flood_ui.py", ["--rate", "10000"], ["--rate", "10000", "--seconds", "8", "--presses", "8"]),
    ("bench_logs.py", ["--mb", "200"], ["--mb", "20", "--runs", "1"]),
    ("rss.py", [], ["--lines", "1000000", "--chunk", "250000"]),
    ("bench_stacks.py", [], ["--rounds", "1"]),
    ("bench_stack_phase.py", [], ["--seconds", "20", "--samples", "5"]),
    ("bench_ray_pane.py", [], ["--runs", "3"]),
    ("bench_curves.py", [], ["--steps", "20000", "--runs", "3"]),
    ("snapshot_latency.py", [], ["--runs", "3"]),
    ("redaction.py", [], ["--per-syntax", "3"]),
    ("bench_ray_tasks.py", [], ["--tasks", "2000", "--polls", "5"]),  # after the others that use the cluster
    ("serve.py", [], ["--seconds", "3", "--presses", "2"]),  # needs a system Chromium
]
RAY_USERS = {"cpu.py", "snapshot_latency.py"}


def run(script: str, args: list[str], env: dict[str, str]) -> list[dict[str, str]]:
    """Run one script, echoing its output; its result rows (a failed script gives a row saying so)."""
    print(f"\n== {script} {' '.join(args)}", flush=True)
    rows = []
    proc = subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=HERE.parent)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(MARK):
            rows.append(json.loads(line[len(MARK):]))
        else:
            print(line, end="", flush=True)
    if proc.wait() != 0 and not rows:
        rows.append({"what": script, "gkdtop": f"failed (exit {proc.returncode})", "baseline": "-", "ratio": "-",
                     "command": f"bench/{script}"})
    return rows


def table(rows: list[dict[str, str]]) -> str:
    out = ["| what | gkdtop | baseline (same run) | ratio | command |", "|---|---|---|---|---|"]
    out += [f"| {r['what']} | {r['gkdtop']} | {r['baseline']} | {r['ratio']} | `{r['command']}` |" for r in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", action="append", default=[], metavar="SCRIPT")
    args = parser.parse_args()
    started = time.monotonic()
    before = machine()
    env = dict(os.environ)
    cluster = None
    wanted = [s for s in SCRIPTS if s[0] not in args.skip and s[0].removesuffix(".py") not in args.skip]
    if ray_available() and any(s[0] in RAY_USERS for s in wanted):
        from tests.raycluster import new_cluster

        cluster = new_cluster()
        try:
            cluster.start(num_cpus=1)
            env[RAY_ENV] = f"{cluster.address}|{cluster.dashboard}|{cluster.temp_root}"
        except Exception as exc:  # no Ray: the scripts run without it and say so
            print(f"no Ray cluster for the benches: {exc}", flush=True)
            cluster.remove()
            cluster = None
    rows: list[dict[str, str]] = []
    try:
        for script, full, quick in wanted:
            rows += run(script, quick if args.quick else full, env)
    finally:
        if cluster is not None:
            cluster.remove()
    print(f"\nMachine: {before}")
    print(f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{(time.monotonic() - started) / 60:.1f} min in all{' (--quick sizes)' if args.quick else ''}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
