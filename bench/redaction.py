"""Redaction measured on the planted-secret corpus (tests/secret_corpus.py): leaks and false redactions,
for gkdtop's rules and, when it is installed (`pip install detect-secrets`), for detect-secrets 1.x.

    .venv/bin/python bench/redaction.py [--seed 16] [--per-syntax 10] [--show 5]

A leak is a planted value found, whole, in the redacted text. A false redaction is a benign diagnostic
line that came out changed. detect-secrets is scored as a redactor would use it: every `secret_value`
it reports on a line is replaced.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--per-syntax", type=int, default=10)
    ap.add_argument("--show", type=int, default=3, help="examples of leaks and false redactions to print")
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

if __name__ == "__main__":
    main()
