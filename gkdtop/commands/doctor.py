"""`gkdtop doctor`: run the node and environment checks (gkdtop/doctor.py) and print them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gkdtop.commands.options import int_in

if TYPE_CHECKING:
    from gkdtop.config import Config

PIPE_FILTER = True


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser("doctor", help="check this node and environment before a run")
    parser.add_argument("--config", metavar="FILE")
    parser.add_argument("--ray-address", metavar="ADDR")
    parser.add_argument("--json", action="store_true", help="print JSON (schema in docs/schemas.md)")
    parser.add_argument("--actor-gpus", type=int_in(0, 1_000_000), metavar="N")
    parser.add_argument("--rollout-gpus", type=int_in(0, 1_000_000), metavar="M")
    parser.add_argument("--teacher-gpus", type=int_in(0, 1_000_000), metavar="K")
    parser.add_argument("--nodes", type=int_in(1, 100_000), metavar="X")
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """1 when a check failed, else 0 (warnings are advice)."""
    import json
    from dataclasses import asdict

    from gkdtop.doctor import SCHEMA, run_checks

    checks = run_checks(args.ray_address, gpu_plan(args))
    if args.json:
        print(json.dumps({"schema": SCHEMA, "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
        for c in checks:
            print(f"{marks[c.status]}  {c.name:<20} {c.detail}")
            if c.fix and c.status != "ok":
                print(f"      {'':<20} fix: {c.fix}")
    return 1 if any(c.status == "fail" for c in checks) else 0


def gpu_plan(args: argparse.Namespace) -> dict[str, int] | None:
    """The planned GPU split from --actor/--rollout/--teacher-gpus and --nodes; None when none was given."""
    if args.actor_gpus is None and args.rollout_gpus is None and args.teacher_gpus is None:
        return None
    return {"actor": args.actor_gpus or 0, "rollout": args.rollout_gpus or 0, "teacher": args.teacher_gpus or 0,
            "nodes": args.nodes or 1}
