"""Score gkdtop's verdicts on the real-format log corpus (tests/corpus/, docs/real-logs.md).

    python -m tests.corpus_eval              # the training logs: a row per log and mode, then totals
    python -m tests.corpus_eval --heldout    # the held-out third: totals only (nobody tunes on these)
    python -m tests.corpus_eval --set posted [--heldout]   # the corpus rebuilt from users' issue threads
    python -m tests.corpus_eval --set posted --only HELDOUT3  # only one held-out draw

Two sets: `corpus` (tests/corpus/, written from the frameworks' source) and `posted`
(tests/corpus/posted/, written in the shapes of logs users posted in public issue threads; SOURCES.md
names the thread of each). Each has its own HELDOUT third; the posted set has more draws (HELDOUT2-21),
each made from the names added in one go before any of their fixtures was written. A list named in the set's
RETIRED file was scored blind and then looked at: its logs count as training. `--heldout` scores every list not
retired, `--only LIST` one of them.
The posted set also prints a summary of the four measures the team tracks (phase right, culprit named,
right fix, false statements and how many).

Each log runs through `gkdtop replay --json LOG` and `gkdtop snapshot --json --log COPY`, the
second on a copy whose mtime is set `quiet_for` seconds back (how long the log had been silent
when someone looked, from NAME.expect.yaml), so a hang reads as it would on a live job. Scored
per run: state, phase (gkdtop's phase names mapped to the corpus vocabulary by PHASE_MAP),
culprit named, right fix mentioned, no wrong claims. Not a pytest module on purpose: the pass
rates are a measurement; the lead wires assertions after the rules change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import yaml

CORPUS = Path(__file__).parent / "corpus"
# Each set is a folder of NAME.log + NAME.expect.yaml with a HELDOUT list; `corpus` is the original one.
SETS = {"corpus": CORPUS, "posted": CORPUS / "posted"}

# gkdtop's phase names (gkdtop/data/phases.yaml) -> the corpus vocabulary. Names not listed
# pass through unchanged (a new rule named in the vocabulary's words needs no entry).
PHASE_MAP = {
    "config": "config",
    "dataset generation": "dataset",
    "resource pool": "waiting for resources",
    "actor init": "model load",
    "rollout init": "rollout init",
    # The plain names shown where the framework is no RL trainer (phases.yaml `plain`): the same phases.
    "engine init": "rollout init",
    "model update": "actor update",
    "teacher": "teacher init",
    "weight sync": "weight sync",
    "training loop": "training loop",
    "finished": "finished",
    "after training finished": "finished",  # a failure after the run's end (the corpus: phase finished, state failed)
}

# Sub-phases of a training step: 'training loop' is right but coarse for these (the lenient score).
STEP_PHASES = {
    "generation",
    "old log-prob",
    "reference log-prob",
    "advantage",
    "actor update",
    "model update",
    "critic update",
    "weight sync",
    "checkpoint save",
    "validation",
    "training loop",
}

CHECKS = ("state", "phase", "culprit", "fix", "claims", "framework")


@dataclass
class Case:
    name: str
    log: Path
    expect: dict


@dataclass
class Verdict:
    """What one gkdtop run said, reduced to what the scoring reads."""

    state: str = ""
    phase: str = ""
    culprit_text: str = ""  # findings (name, fields, sample), errors, failure: where a culprit is named
    advice_text: str = ""  # findings' cause/fix and the hint: where a fix is proposed
    claims_text: str = ""  # everything gkdtop asserts: phase, failure, hint, findings
    error_findings: int = 0
    framework: str = ""  # the detected profile's name (gkdtop/data/frameworks.yaml)
    error: str = ""


@dataclass
class Score:
    case: str
    mode: str
    got_state: str
    got_phase: str
    ok: dict[str, bool | None] = field(default_factory=dict)  # None: not applicable
    phase_lenient: bool = False
    got_framework: str = ""
    error: str = ""
    wrong_hits: list[str] = field(default_factory=list)  # the wrong claims gkdtop made (the claims check's detail)

    @property
    def passed(self) -> bool:
        return all(v is not False for v in self.ok.values())


# each set's seeded held-out draws, in the order they were made
HELDOUT_LISTS = (
    "HELDOUT", "HELDOUT2", "HELDOUT3", "HELDOUT4", "HELDOUT5", "HELDOUT6", "HELDOUT7", "HELDOUT8", "HELDOUT9",
    "HELDOUT10", "HELDOUT11", "HELDOUT12", "HELDOUT13", "HELDOUT14", "HELDOUT15", "HELDOUT16", "HELDOUT17",
    "HELDOUT18", "HELDOUT19", "HELDOUT20", "HELDOUT21",
)


def load_cases(heldout: bool | None = False, corpus_set: str = "corpus", only: str | None = None) -> list[Case]:
    """heldout=False: the training logs; True: the held-out logs (every draw not RETIRED); None: all (of
    `corpus_set`, a key of SETS). only: just that held-out list's names (a set without that file has none)."""
    folder = SETS[corpus_set]
    held = held_out_names(folder)
    picked = set(heldout_names(folder, only)) if only else None
    cases = []
    for exp in sorted(folder.glob("*.expect.yaml")):
        name = exp.name.removesuffix(".expect.yaml")
        if picked is not None:
            if name not in picked:
                continue
        elif heldout is not None and (name in held) != heldout:
            continue
        cases.append(Case(name, folder / f"{name}.log", yaml.safe_load(exp.read_text())))
    return cases


def held_out_names(folder: Path) -> set[str]:
    """The names still held out: every held-out list's, except the lists RETIRED names (scored blind, then
    looked at; they are training logs now, and a fresh draw holds their place)."""
    retired = set(heldout_names(folder, "RETIRED"))
    return {n for which in HELDOUT_LISTS if which not in retired for n in heldout_names(folder, which)}


def heldout_names(folder: Path, which: str) -> list[str]:
    """The names listed in folder/which (HELDOUT, HELDOUT2, ..., RETIRED); none where the file does not exist."""
    path = folder / which
    return _names(path) if path.exists() else []


def _names(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _run_gkdtop(args: list[str], home: Path) -> tuple[dict | None, str]:
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gkdtop", *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        return None, "timed out after 120 s"
    try:
        return json.loads(proc.stdout), ""
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"exit {proc.returncode}: {tail}"


def _findings_text(findings: list[dict]) -> tuple[str, str, str, int]:
    named, advice, claims = [], [], []
    errors = 0
    for f in findings:
        sample = f.get("sample") or ""
        sample = sample if isinstance(sample, str) else json.dumps(sample)
        named += [f.get("name", ""), json.dumps(f.get("fields", {})), sample]
        advice += [f.get("cause", ""), f.get("fix", "")]
        claims += [f.get("name", ""), f.get("cause", ""), f.get("fix", "")]
        errors += f.get("severity") == "error"
    return "\n".join(named), "\n".join(advice), "\n".join(claims), errors


def _hint_text(hint: dict | None) -> str:
    if not hint:
        return ""
    return "\n".join([*hint.get("causes", []), *hint.get("actions", [])])


_QUOTED_RE = re.compile(r"`[^`\n]*`")


def _quoted(line: str | None) -> str:
    """A log line gkdtop cites, as its text shows it (`…`): _claimed leaves it out of the claims."""
    return f"`{line}`" if line else ""


# gkdtop's own hedges that hold a wrong claim's word without claiming it (a fixture's `hang`): "It failed with an error,
# not a hang", "replay cannot tell a hang there from a log copied mid-run".
_HEDGE_RE = re.compile(r"\bnot a hang\b|cannot tell a hang there from")


def _claimed(text: str) -> str:
    """What gkdtop says in its own words: the log lines it quotes (`…`) are the log's words, not its claims (a
    verdict that quotes `Failed to decode tool call` claims no failure)."""
    return _QUOTED_RE.sub("``", text)


def replay_verdict(case: Case, home: Path) -> Verdict:
    doc, err = _run_gkdtop(["replay", "--json", str(case.log)], home)
    if doc is None:
        return Verdict(error=err)
    named, advice, claims, n_err = _findings_text(doc.get("findings", []))
    errors = "\n".join(e.get("exception", "") for e in doc.get("errors", []))
    hint = _hint_text(doc.get("hint"))
    failure = doc.get("failure", "") or ""
    phase = doc.get("stopped_in", "") or ""
    # A log that ends mid-phase: where it ended and what to check if the job stopped there.
    end = doc.get("open_end") or {}
    # (the last line a rule knew is the log's own words, quoted: a culprit's evidence, never a claim of gkdtop's)
    stopped = "\n".join([_quoted(doc.get("last_known")), doc.get("finished_by") or "", end.get("text", "")])
    end_hint = _hint_text(end.get("hint"))
    return Verdict(
        state=doc.get("state", ""),
        phase=phase,
        culprit_text="\n".join([named, errors, failure, stopped]),
        advice_text="\n".join([advice, hint, end_hint]),
        claims_text="\n".join([phase, failure, hint, claims, _claimed(stopped), end_hint]),
        error_findings=n_err + len(doc.get("errors", [])),
        framework=(doc.get("framework") or {}).get("name") or "",
    )


# The stamp forms the corpus uses (docs/real-logs.md), each with the fields that make a datetime.
_FULL = re.compile(r"(?P<Y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)(?P<sep>[ T_])(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)")
_VLLM = re.compile(
    r"\b(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<m>\d\d)-(?P<d>\d\d) (?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)\b"
)
# glog / c10: `I0612 10:31:02.123` (Python logging pads the month) and `[rank0]:[W326 22:36:28.884…` (c10 does not:
# 3 digits for January-September).
_GLOG = re.compile(r"(?<![\w])(?P<lvl>[IWEF])(?P<m>\d\d?)(?P<d>\d\d) (?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)\.")
_EPOCH = re.compile(r"\btime=(?P<e>\d{9,10})\b")


def shift_stamps(text: str, delta: timedelta, year: int) -> str:
    """Every timestamp in text moved by delta (year-less stamps taken to be in `year`), so that a
    log written long ago reads, to a live snapshot, as if its last line came `quiet_for` ago."""

    def when(m: re.Match, y: int) -> datetime:
        return datetime(y, int(m["m"]), int(m["d"]), int(m["H"]), int(m["M"]), int(m["S"])) + delta

    def full(m: re.Match) -> str:
        t = when(m, int(m["Y"]))
        return t.strftime(f"%Y-%m-%d{m['sep']}%H:%M:%S")

    def vllm(m: re.Match) -> str:
        return f"{m['lvl']} " + when(m, year).strftime("%m-%d %H:%M:%S")

    def glog(m: re.Match) -> str:
        t = when(m, year)
        month = f"{t.month:02d}" if len(m["m"]) == 2 else str(t.month)  # keep c10's unpadded month unpadded
        return m["lvl"] + month + t.strftime("%d %H:%M:%S.")

    def epoch(m: re.Match) -> str:
        return f"time={int(m['e']) + int(delta.total_seconds())}"

    for rx, fn in ((_FULL, full), (_VLLM, vllm), (_GLOG, glog), (_EPOCH, epoch)):
        text = rx.sub(fn, text)
    return text


def live_copy(case: Case, home: Path, now: float) -> Path:
    """A copy of the log as a user would find it: last written quiet_for seconds before now."""
    quiet = float(case.expect.get("quiet_for", 0))
    ends_at = datetime.fromisoformat(case.expect["clock"]["ends_at"])
    delta = timedelta(seconds=round(now - quiet - time.mktime(ends_at.timetuple())))
    copy = home / case.log.name
    copy.write_text(shift_stamps(case.log.read_text(), delta, ends_at.year))
    os.utime(copy, (now - quiet, now - quiet))
    return copy


def snapshot_verdict(case: Case, home: Path) -> Verdict:
    copy = live_copy(case, home, time.time())
    # An address nothing listens on: the snapshot must not attach to some other Ray cluster here.
    doc, err = _run_gkdtop(["snapshot", "--json", "--log", str(copy), "--ray-address", "127.0.0.1:9"], home)
    if doc is None:
        return Verdict(error=err)
    ph = doc.get("phases", {}) or {}
    named, advice, claims, n_err = _findings_text(doc.get("findings", []))
    hint = _hint_text(ph.get("hint"))
    failure = ph.get("failure", "") or ""
    phase = ph.get("current", "") or ""
    stopped = "\n".join([_quoted(ph.get("last_known")), ph.get("finished_by") or ""])  # the last line a rule knew
    # What the text shows beside it: the log's own last line, where a step's time goes, a running job's latest line.
    unrecognised = ph.get("unrecognised") or {}
    latest = unrecognised.get("after", "") if ph.get("state") == "running" else ""
    pace = (ph.get("steps") or {}).get("pace") or ""
    quoted = "\n".join([unrecognised.get("last") or "", latest])  # the log's words, not claims of gkdtop's
    return Verdict(
        state=ph.get("state", ""),
        phase=phase,
        culprit_text="\n".join([named, failure, stopped, pace, quoted]),
        advice_text="\n".join([advice, hint]),
        claims_text="\n".join([phase, failure, hint, claims, _claimed(stopped), pace]),
        error_findings=n_err,
        framework=(doc.get("framework") or {}).get("name") or "",
    )


def score(case: Case, mode: str, v: Verdict) -> Score:
    exp = case.expect
    got_phase = PHASE_MAP.get(v.phase, v.phase)
    s = Score(case.name, mode, v.state, got_phase, error=v.error)
    if v.error:
        s.ok = dict.fromkeys(CHECKS, False)
        return s
    s.ok["state"] = v.state == exp["state"]
    s.ok["phase"] = got_phase == exp["phase"]
    s.phase_lenient = s.ok["phase"] or (got_phase == "training loop" and exp["phase"] in STEP_PHASES)
    if exp["culprit"] == "none":
        s.ok["culprit"] = v.error_findings == 0
    else:
        low = v.culprit_text.lower()
        s.ok["culprit"] = any(c.lower() in low for c in exp.get("culprit_any", []))
    fixes = exp.get("fix") or []
    s.ok["fix"] = any(f.lower() in v.advice_text.lower() for f in fixes) if fixes else None
    wrong = exp.get("wrong_claims") or []
    said = _HEDGE_RE.sub("", v.claims_text)  # (its hedges claim nothing)
    claims = said.lower()
    # A claim in capitals is a verdict's word (`STALLED`, `FAILED`): matched as written, so a cause that says "a GPU
    # stalled under it" is not the verdict STALLED.
    s.wrong_hits = [w for w in wrong if (w in said if w.isupper() else w.lower() in claims)]
    s.ok["claims"] = not s.wrong_hits if wrong else None
    s.ok["framework"] = v.framework == exp["framework"]
    s.got_framework = v.framework
    return s


def evaluate(cases: list[Case], modes: tuple[str, ...] = ("replay", "snapshot"), jobs: int = 1) -> list[Score]:
    """Every case in every mode, `jobs` gkdtop processes at a time; scores in (case, mode) order."""
    with tempfile.TemporaryDirectory(prefix="gkdtop-corpus-") as tmp:
        home = Path(tmp)

        def one(item: tuple[Case, str]) -> Score:
            case, mode = item
            v = replay_verdict(case, home) if mode == "replay" else snapshot_verdict(case, home)
            return score(case, mode, v)

        items = [(case, mode) for case in cases for mode in modes]
        if jobs <= 1:
            return [one(item) for item in items]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, items))


def totals(scores: list[Score]) -> dict[str, tuple[int, int]]:
    t: dict[str, tuple[int, int]] = {}
    for key in (*CHECKS, "phase~", "all"):
        if key == "phase~":
            vals = [s.phase_lenient for s in scores]
        elif key == "all":
            vals = [s.passed for s in scores]
        else:
            vals = [s.ok[key] for s in scores if s.ok.get(key) is not None]
        t[key] = (sum(bool(x) for x in vals), len(vals))
    return t


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("ok" if v else "NO")


def print_table(scores: list[Score], cases: list[Case], per_log: bool = True) -> None:
    exp = {c.name: c.expect for c in cases}
    if per_log:
        print(f"{'log':40} {'mode':8} {'state (want/got)':26} {'phase (want/got)':46} cul fix clm fw")
        for s in scores:
            e = exp[s.case]
            st = f"{e['state']}/{s.got_state or '?'}"
            ph = f"{e['phase']}/{s.got_phase or '?'}"
            print(
                f"{s.case:40} {s.mode:8} {_mark(s.ok['state']):2} {st:23} {_mark(s.ok['phase']):2} {ph:43} "
                f"{_mark(s.ok['culprit']):3} {_mark(s.ok['fix']):3} {_mark(s.ok['claims']):3} "
                f"{_mark(s.ok['framework']):2}{'' if s.ok['framework'] else ' (' + (s.got_framework or '?') + ')'}"
                + (f"  [{s.error}]" if s.error else "")
            )
        print()
    for mode in sorted({s.mode for s in scores}):
        t = totals([s for s in scores if s.mode == mode])
        print(f"{mode:8} " + "  ".join(f"{k} {a}/{b}" for k, (a, b) in t.items()))
    t = totals(scores)
    print(f"{'total':8} " + "  ".join(f"{k} {a}/{b}" for k, (a, b) in t.items()))


def print_summary(scores: list[Score]) -> None:
    """Per mode: logs whose phase was right, culprit named, right fix given (of those that name one), and logs with a
    false statement (of those that list wrong claims) with how many false statements in all."""
    for mode in sorted({s.mode for s in scores}):
        mine = [s for s in scores if s.mode == mode]
        fixes = [s for s in mine if s.ok.get("fix") is not None]
        claims = [s for s in mine if s.ok.get("claims") is not None]
        false = [s for s in claims if s.wrong_hits]
        print(
            f"{mode:8} phase right {sum(bool(s.ok['phase']) for s in mine)}/{len(mine)}"
            f"  culprit named {sum(bool(s.ok['culprit']) for s in mine)}/{len(mine)}"
            f"  right fix {sum(bool(s.ok['fix']) for s in fixes)}/{len(fixes)}"
            f"  logs with a false statement {len(false)}/{len(claims)}"
            f" ({sum(len(s.wrong_hits) for s in false)} statements)"
        )


# The first row; the rest are "other stacks".
VERL_FAMILY = {"verl", "verl-sft", "openrlhf", "easyr1", "llamafactory"}


def print_groups(scores: list[Score], cases: list[Case]) -> None:
    """The summary split as issue 25's table: the verl family, then the other stacks on the same engines."""
    family = {c.name: c.expect.get("framework", "") in VERL_FAMILY for c in cases}
    for label, mine in (("verl family", True), ("other stacks", False)):
        for mode in sorted({s.mode for s in scores}):
            ss = [s for s in scores if s.mode == mode and family[s.case] == mine]
            fixes = [s for s in ss if s.ok.get("fix") is not None]
            print(
                f"{label:12} {mode:8} phase {sum(bool(s.ok['phase']) for s in ss)}/{len(ss)}"
                f"  culprit {sum(bool(s.ok['culprit']) for s in ss)}/{len(ss)}"
                f"  fix {sum(bool(s.ok['fix']) for s in fixes)}/{len(fixes)}"
                f"  false {sum(bool(s.wrong_hits) for s in ss)}/{len(ss)}"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heldout", action="store_true", help="score the held-out logs (draws not RETIRED)")
    ap.add_argument("--only", choices=HELDOUT_LISTS, help="score only this held-out draw's names; totals only")
    ap.add_argument("--heldout2", action="store_const", const="HELDOUT2", dest="only", help="= --only HELDOUT2")
    ap.add_argument("--set", dest="corpus_set", choices=sorted(SETS), default="corpus", help="which corpus to score")
    ap.add_argument("--mode", choices=["replay", "snapshot", "both"], default="both")
    ap.add_argument("--jobs", type=int, default=1, help="gkdtop processes at a time")
    args = ap.parse_args(argv)
    held_out = args.heldout or bool(args.only)
    cases = load_cases(heldout=held_out, corpus_set=args.corpus_set, only=args.only)
    modes = ("replay", "snapshot") if args.mode == "both" else (args.mode,)
    scores = evaluate(cases, modes, jobs=args.jobs)
    which = args.only or ("held-out" if args.heldout else "training")
    print(f"{len(cases)} {which} logs of the {args.corpus_set} set, modes: {', '.join(modes)}")
    print_table(scores, cases, per_log=not held_out)
    if args.corpus_set == "posted":
        print()
        print_summary(scores)
        print()
        print_groups(scores, cases)
        if not held_out:
            print()
            for s in scores:
                if s.wrong_hits:
                    print(f"false statements: {s.case} ({s.mode}): {', '.join(s.wrong_hits)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
