"""The phase the log's last lines speak of, by their words, where no rule placed the run that far.

Rules know the lines of the stacks someone wrote them for; a stack nobody tuned for still says what it
does in plain words: `Avg generation throughput … Running: 2 reqs`, `[epoch 1] starting train_epoch`,
`R0 STEP0 -> backward`, `Saving model checkpoint to …`. Read at verdict time over the log's last lines
(no cost per line), only the stretch after the line that started the phase the rules name and before a
failure's own lines, and only to move the verdict forward (a later phase, or a part of a step where the
rules know only the loop): what the rules know is never taken back. The verdict says it is read from
words, and cites the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gkdtop.analysis.lines import split_prefix, strip_ansi

# Each phase's words, most specific first: the first that a line matches is its phase. A line's message
# (past its Ray prefix) and the source a warning names are read; frames and error lines are not (a
# traceback's frames are stackphase's; an error is the failure, not where the run was).
WORDS: tuple[tuple[str, str], ...] = (
    # Data words first: `Generating train split: … examples/s` and `building train, validation, and test datasets`
    # prepare data, whatever other phase's word they hold.
    ("dataset generation",
     r"\b(?:train|test|validation|eval) split\b|\bexamples/s\b|\bdatasets?\b|\btokeniz\w*|\bdata ?loaders?\b"),
    ("reference log-prob", r"\bref(?:erence)?[_ ](?:model[_ ])?log[_ -]?probs?\b"),
    ("old log-prob", r"\blog[_ -]?probs?\b"),
    ("generation",
     r"\bgenerat(?:e|es|ing)\b(?! (?:\w+ )?(?:split|config|a |the (?:dataset|config)))"
     r"|(?<!dataset )\bgeneration\b(?![_ .-]?(?:config|kwargs|split|throughput))"
     r"|/generation/\w+\.py:\d+: \w*Warning"  # a warning raised in generate()
     r"|Running: [1-9]\d* reqs|\bProcessed prompts\b|\b(?:Received|Finished) request\b"
     r"|\bPOST /v1/(?:chat/)?completions\b|\bDecode batch\b|\brolling out\b|\brollout(?:s)? (?:step|batch|of)\b"),
    ("actor update",
     r"\bforward\b|\bbackward\b|\boptimi[sz]er[ ._-]?step\b|\bstep_begin\b|\bupdate[_ ](?:actor|policy)\b"
     r"|\bpolicy update\b|\bupdating (?:the )?(?:policy|actor|model)\b"),
    ("checkpoint save",
     r"\bsav(?:e|es|ing)\b.{0,40}\b(?:checkpoints?|model|weights|state)\b|\bcheckpoint\b.{0,30}\bsav(?:e|ing)\b"
     r"|\bUploading\b.{0,30}\b(?:model|checkpoint)\b"),
    ("validation", r"\bvalidat(?:e|ing|ion)\b|\bevaluat(?:e|ing|ion)\b|\beval(?:uation)? (?:loop|step|batch)\b"),
    ("training loop",
     r"\[?\b(?:epoch|step|iteration|iter)\]? ?[=:#]? ?\d+(?! ?(?:steps|epochs))\b|\btrain(?:ing)?[_ ]epoch\b"
     r"|\bloss\b ?[=:] ?-?\d|\btrain(?:ing)? throughput\b"),
    ("rollout init",
     r"\bKV cache\b|\bCUDA graphs?\b|\bgraph captur\w*|\bcapturing (?:the model|cudagraph)|\binit engine\b"
     r"|\bInitializing an LLM engine\b"),
    ("actor init",
     r"\bLoading (?:checkpoint shards|(?:the )?model|weights|state[_ ]dict)\b|\bfrom_pretrained\b|\bnum_params\b"
     r"|\bfused kernels\b|\bmodel (?:loading|weights)\b"),
    ("nccl init", r"\binit_process_group\b|\bprocess group\b|\brendezvous\b|\bNCCL INFO\b"),
)
_WORDS = [(phase, re.compile(pattern, re.IGNORECASE)) for phase, pattern in WORDS]

# A line that says its part is over (`validation done`, `Loading … took 6 s`): it names no phase still running.
_OVER_RE = re.compile(r"\b(?:done|finished|complete[ds]?|completed|took|end|ended|ends)\b", re.IGNORECASE)
# Lines that are a failure's, not the run's: a traceback's header, frames and code, an exception, a rank's
# header before its traceback (`[Rank 0]:`), Ray's tab-indented fields.
_NOT_RUN_RE = re.compile(
    r"^\s|Traceback \(most recent call last\)|^\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b"
    r"|\b(?:ERROR|FATAL|CRITICAL)\b|\b(?:[Ee]rror|[Ee]xception|failed|Failed|FAILED|died|killed|[Tt]imed? ?out)\b"
    r"|^\[[Rr]ank ?\d+\]:?\s*$"
)
# Settings and summaries name phases without being in them: `Total training steps: 105`, `num_train_epochs=3`.
_SETTING_RE = re.compile(r"\b(?:total|max|num|number of)[_ ]\w*|\w+_(?:steps|epochs|size)\b|Namespace\(|\{'",
                         re.IGNORECASE)
# A metric record (`step:116 - actor/pg_loss:-0.001 - timing_s/update_actor:40.1`, `{'loss': 0.4, …}`) is a step's
# numbers, which the step rules read; the names of its timings are no phase the run is in.
# An engine's stats line with requests in flight is generation, though it is a record of numbers too.
_SERVING_RE = re.compile(r"\bRunning: [1-9]\d* reqs\b|#running-req: [1-9]")
# Python logging's default `INFO:trl.generation.vllm_client:`: a logger is named after its module, whatever it says.
_LOGGER_RE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:")
_OUTER_RE = re.compile(r"^(?:[\w.-]*\d[\w.-]*: )?(?:\[rank\d{1,6}\]: ?)?")
_BAR_RE = re.compile(r"(?P<pct>\d{1,3})%\|[^|]{0,200}\|\s*(?P<n>\d{1,9})/(?P<total>\d{1,9})\b")
_METRIC_RE = re.compile(r"[\w/.'-]+'?\s?[:=]\s?-?\d")
TAIL_LINES = 400  # the log's last lines the verdict reads (replay and the store hand this many at most)


@dataclass(frozen=True)
class Worded:
    phase: str  # a phase rule's name (phases.yaml)
    text: str  # the line that names it, as written
    back: int  # how many lines before the end of the stretch it is (0: the last)


def _message(text: str) -> str:
    """A line past its Ray prefix, a rank's (`[rank3]:`) and a launcher's host (`node-7: `): a traceback's code keeps
    its indentation, which tells it from the run's own lines."""
    message = split_prefix(strip_ansi(text))[1].rstrip()
    return _LOGGER_RE.sub("", _OUTER_RE.sub("", message, count=1), count=1)


def _last_bar(message: str) -> tuple[str, bool] | None:
    """A progress bar's description and whether it reached its total (of the last redraw where several are glued)."""
    bars = list(_BAR_RE.finditer(message))
    if not bars:
        return None
    found = bars[-1]
    before = message[: found.start()]
    desc = before[before.rfind("]") + 1:] if "]" in before else before  # past a glued redraw's `[00:03<00:09]`
    return desc.strip(" :\r"), int(found["n"]) >= int(found["total"]) > 0


def _words(message: str) -> str | None:
    for phase, pattern in _WORDS:
        if pattern.search(message):
            return phase
    return None


def phase_of_words(text: str) -> tuple[str, bool] | None:
    """The phase one line's words name and whether the line says it is over (`validation generation end`, a bar at
    its total), or None (no phase word, a traceback's or an error's line, a setting, a metric record). A progress
    bar is read by its description (`Compute log probs:  76%|…| 243/320`), not by the numbers after it."""
    message = _message(text)
    if not message.strip() or _NOT_RUN_RE.search(message):
        return None
    bar = _last_bar(message) if "%|" in message else None
    if bar is not None:
        phase = _words(bar[0]) if bar[0] else None
        return (phase, bar[1]) if phase is not None else None
    if _SETTING_RE.search(message):
        return None
    if _SERVING_RE.search(message):
        return "generation", False
    if len(_METRIC_RE.findall(message, 0, 400)) >= 2:
        return None
    phase = _words(message)
    return (phase, _OVER_RE.search(message) is not None) if phase is not None else None


def _same(line: str, cited: str) -> bool:
    """Whether a tail line is the line an evidence cites (cut at its length)."""
    return bool(cited) and line.startswith(cited.rstrip()[:200])


def stretch(tail: list[str], started_by: str = "", failed_by: str = "", held: bool = False) -> list[str]:
    """The tail's lines after the one that started the rules' phase (`started_by`, where the tail holds it; with
    `held`, none unless it does) and before the failure's own lines (`failed_by`: its exception line; the traceback
    above it is left out)."""
    end = len(tail)
    if failed_by:
        for i in range(len(tail) - 1, -1, -1):
            if _same(tail[i], failed_by) or failed_by.strip()[:200] in tail[i]:
                end = i
                break
        while end > 0 and _NOT_RUN_RE.search(_message(tail[end - 1]) or " "):
            end -= 1  # the traceback and error lines above the exception
    start = end if held else 0
    if started_by:
        for i in range(end - 1, -1, -1):
            if _same(tail[i], started_by):
                start = i + 1
                break
    return tail[start:end]


def read_words(lines: list[str]) -> Worded | None:
    """The phase the last line of `lines` that names one is in; None where that line says its part is over
    (what runs after it, its words do not say)."""
    for back, line in enumerate(reversed(lines)):
        found = phase_of_words(line)
        if found is not None:
            return None if found[1] else Worded(found[0], line.strip()[:300], back)
    return None
