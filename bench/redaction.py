"""Redaction measured on the planted-secret corpus (tests/secret_corpus.py): leaks and false redactions,
for gkdtop's rules and, when it is installed (`pip install detect-secrets`), for detect-secrets 1.x.

    .venv/bin/python bench/redaction.py [--seed 16] [--per-syntax 10] [--show 5] [--against REV]

It also times hostile long lines (1 MB of `pass:`, `token: "`, `eyJ`, ...): each line's time and the
ratio of a 1 MB line to a 64 KB one without the MAX_LINE cut (linear: about 16; quadratic: about 256).
`--against REV` times `pass:` lines through gkdtop/actions/redact.py as it was at REV (e.g. main) too.

A leak is a planted value found, whole, in the redacted text. A false redaction is a benign diagnostic
line that came out changed. detect-secrets is scored as a redactor would use it: every `secret_value`
it reports on a line is replaced.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report

from gkdtop.actions.redact import REDACTED, Redactor
from tests.secret_corpus import BENIGN, Plant, corpus

Redact = Callable[[list[str]], list[str]]


def gkdtop_redact(lines: list[str]) -> list[str]:
    return Redactor().lines(lines, "bench")


def detect_secrets_redact() -> Redact | None:
    """detect-secrets as a file scanner (its normal mode, default plugins and filters), each line's reported
    values replaced. (Its ad-hoc `scan_line` flags nearly every word by entropy: unusable here.)"""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def redact(lines: list[str]) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "job.log"
            path.write_text("\n".join(lines) + "\n")
            found = SecretsCollection()
            with default_settings():
                found.scan_file(str(path))
            out = list(lines)
            for _, secret in found:
                if secret.secret_value:
                    i = secret.line_number - 1
                    out[i] = out[i].replace(secret.secret_value, REDACTED)
            return out

    return redact


def score(redact: Redact, plants: list[Plant]) -> tuple[Counter[str], list[tuple[str, str]], list[str]]:
    leaks: Counter[str] = Counter()
    examples: list[tuple[str, str]] = []
    for plant in plants:
        text = "\n".join(redact(list(plant.lines)))
        for value in plant.values:
            if value in text:
                leaks[plant.syntax] += 1
                examples.append((plant.syntax, text))
    false = [line for line in BENIGN if redact([line]) != [line]]
    return leaks, examples, false


HOSTILE = ["pass:", 'token: "', '"token": "a', "a", "eyJ", "x://", "AKIA", "mysql -p ", " key: |", "\uff21"]


def _line(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _time(redact: Callable[[str], object], text: str) -> float:
    started = time.perf_counter()
    redact(text)
    return time.perf_counter() - started


def long_lines(against: str | None) -> None:
    """Hostile long lines: each costs time linear in its length, and a 1 MB one is cut at MAX_LINE first."""
    from gkdtop.actions import redact

    worst = 0.0
    for unit in HOSTILE:
        cut = _time(lambda t: redact.redact_text(t), _line(unit, 1 << 20))
        saved, redact.MAX_LINE = redact.MAX_LINE, 1 << 30
        try:
            small = _time(redact.redact_text, _line(unit, 64 << 10))
            big = _time(redact.redact_text, _line(unit, 1 << 20))
        finally:
            redact.MAX_LINE = saved
        worst = max(worst, big / small)
        print(f"  {unit!r:14} 1 MB line {cut * 1000:6.1f} ms (cut at {saved >> 10} KB); uncut 64 KB "
              f"{small * 1000:6.1f} ms, 1 MB {big * 1000:7.1f} ms: x{big / small:.1f}")
    line_ms = _time(redact.redact_text, _line("pass:", 1 << 20)) * 1000
    baseline = "-"
    if against:
        source = subprocess.run(["git", "show", f"{against}:gkdtop/actions/redact.py"], capture_output=True, text=True,
                                check=True, cwd=Path(__file__).resolve().parents[1]).stdout
        spec = importlib.util.spec_from_loader("redact_then", loader=None)
        assert spec is not None
        old = importlib.util.module_from_spec(spec)
        exec(compile(source, f"{against}:redact.py", "exec"), old.__dict__)
        times = {size: _time(old.redact_text, _line("pass:", size)) for size in (16 << 10, 32 << 10, 64 << 10)}
        for size, took in times.items():
            print(f"  {against}: a {size >> 10} KB `pass:` line {took * 1000:7.1f} ms")
        ratio = times[64 << 10] / times[32 << 10]
        baseline = (f"{against}: 64 KB `pass:` line {times[64 << 10] * 1000:.0f} ms, x{ratio:.1f} per doubling; "
                    f"1 MB ~{times[64 << 10] * ratio ** 4:.0f} s (extrapolated)")
        print(f"  {baseline}")
    report("redaction of a 1 MB `pass:` line", f"{line_ms:.0f} ms; 1 MB/64 KB uncut, worst of {len(HOSTILE)} shapes: "
           f"x{worst:.1f}", baseline, command=f"bench/redaction.py{' --against ' + against if against else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--per-syntax", type=int, default=10)
    ap.add_argument("--show", type=int, default=3, help="examples of leaks and false redactions to print")
    ap.add_argument("--against", metavar="REV", help="also time long lines through redact.py as it was at REV")
    args = ap.parse_args()
    plants = corpus(args.seed, args.per_syntax)
    planted = sum(len(p.values) for p in plants)
    syntaxes = len({p.syntax for p in plants})
    print(f"corpus: {planted} planted secrets in {len(plants)} snippets, {syntaxes} syntaxes; "
          f"{len(BENIGN)} benign diagnostic lines")
    redactors: list[tuple[str, Redact | None]] = [("gkdtop", gkdtop_redact),
                                                  ("detect-secrets", detect_secrets_redact())]
    results: dict[str, str] = {}
    for name, redact in redactors:
        if redact is None:
            print(f"{name}: not installed")
            results[name] = "not installed"
            continue
        leaks, examples, false = score(redact, plants)
        results[name] = f"{sum(leaks.values())} leaked, {len(false)} false"
        print(f"{name}: leaked {sum(leaks.values())} of {planted}; false redactions {len(false)} of {len(BENIGN)}")
        for syntax, count in leaks.most_common():
            print(f"  leaked {count:3d}  {syntax}")
        for syntax, text in examples[: args.show]:
            print(f"  e.g. [{syntax}] {text[:160]!r}")
        for line in false[: args.show]:
            print(f"  false: {line[:120]!r} -> {redact([line])[0][:120]!r}")
    lines = (BENIGN * (100_000 // len(BENIGN) + 1))[:100_000]  # nearly all hold a needle: the slow path
    started = time.perf_counter()
    Redactor().lines(lines, "bench")
    rate = len(lines) / (time.perf_counter() - started)
    print(f"gkdtop: {rate:,.0f} lines/s on the benign lines")
    report(f"redaction: {planted} planted secrets ({syntaxes} syntaxes), {len(BENIGN)} benign lines",
           f"{results['gkdtop']}; {rate / 1000:.0f}k lines/s", f"detect-secrets: {results['detect-secrets']}",
           command="bench/redaction.py")
    print("long lines:")
    long_lines(args.against)

if __name__ == "__main__":
    main()
