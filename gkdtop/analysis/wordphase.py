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
from typing import TYPE_CHECKING

from gkdtop.analysis.lines import HOST_PREFIX, split_prefix, strip_ansi
from gkdtop.model.stacks import FH_STACK_RE, FH_THREAD_RE, parse_faulthandler_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

# Each phase's words, most specific first: the first that a line matches is its phase. A line's message
# (past its Ray prefix) and the source a warning names are read; frames and error lines are not (a
# traceback's frames are stackphase's; an error is the failure, not where the run was).
WORDS: tuple[tuple[str, str], ...] = (
    # Data words first: `Generating train split: … examples/s` and `building train, validation, and test datasets`
    # prepare data, whatever other phase's word they hold.
    ("dataset generation",
     r"\b(?:train|test|validation|eval) split\b|\bexamples/s\b|\bdatasets?\b|\btokeniz\w*|\bdata ?loaders?\b"),
    # Resuming reads a checkpoint: not the loop its step or epoch number names, nor a save.
    ("checkpoint load",
     r"\b(?:resum|restor)\w*\b.{0,40}\bcheckpoint|\bload(?:s|ing|ed)?\b.{0,20}\bcheckpoint\b(?! shards)"),
    ("reference log-prob", r"\bref(?:erence)?[_ ](?:model[_ ])?log[_ -]?probs?\b"),
    # verl's and EasyR1's `After Ref FSDP init, memory allocated …`: the reference model's start-up.
    ("reference init", r"\bRef(?:erence)? (?:model |FSDP |policy )?init\b"),
    # verl's worker methods (`critic_update_critic`, `critic_init_model`), as Ray names the tasks that run them.
    ("critic init", r"\bcritic[_ ]init[_ ]model\b"),
    ("critic update", r"\bupdate[_ ]critic\b|\bcritic[_ ](?:update|training)\b|\btrain(?:ing)?[_ ]critic\b(?![_ ]and)"),
    # The trainer's weights pushed to the rollout engines: OpenRLHF's `_broadcast_to_vllm`, vLLM/SGLang's
    # `update_weights(_from_tensor)`, TRL's `update_named_param` (not `load_weights`: an engine's start-up).
    ("weight sync",
     r"\bbroadcast[_ ]to[_ ](?:vllm|sglang|engines?|rollout)\b|\bupdate[_ ](?:named[_ ]params?|weights?)\b"
     r"|\bsync[_ ](?:model[_ ])?weights?\b|\bweights?[_ ]sync\w*\b"
     r"|\bbroadcast(?:s|ing)?\b.{0,30}\bweights\b"  # OpenRLHF's `Broadcast actor weights to vllm engines`
     # an engine woken for the new weights (verl's `actor_rollout_wake_up`), a LoRA adapter pushed into it, verl's
     # sharding manager (entering it hands the trainer's weights to the engine)
     r"|\bwake[_ ]up\b|\b(?:add|load)[_ ]lora\b|\bsharding[_ ]manager\b"),
    ("old log-prob", r"\blog[_ -]?probs?\b"),
    # Advantages computed (SkyRL's `compute_advantages_and_returns`). Not reward scoring (OpenRLHF's `remote_rm_fn`,
    # `get_rewards`): the corpus's vocabulary has no part for it, its failures count as the training loop's.
    # GRPO's advantage: each prompt's rewards grouped (`rewards.view(-1, self.num_generations)`) to their mean and std
    ("advantage", r"\bcompute[_ ]advantages?\b|\badvantages?[_ ]and[_ ]returns\b"
                  r"|\b(?:grouped|gathered)[_ ]rewards\b|\brewards[_ ]view\b"),
    ("generation",
     r"\bgenerat(?:e|es|ing)\b(?! (?:\w+ )?(?:split|config|tables?\b|examples?\b|a |the (?:dataset|config)))"
     r"|(?<!dataset )\bgeneration\b(?![_ .-]?(?:config|kwargs|split|throughput))"
     r"|Running: [1-9]\d* reqs|\bProcessed prompts\b|\b(?:Received|Added|Finished) request\b"
     r"|\bPOST /v1/(?:chat/)?completions\b|\bDecode batch\b|\brolling out\b|\brollout(?:s)? (?:step|batch|of)\b"
     r"|\bagent[_ ]loop\b"  # verl's agent loop: multi-turn rollouts, tool calls among them
     # rollouts gathered for the next update (trlx's `[RANK 0] Collecting rollouts` and its `[rollout 80 / 128]` bar;
     # not a `make_experience` frame: OpenRLHF's also scores them and takes their log-probs, so a reward model's
     # failure under it read "likely in generation", two training logs)
     r"|\bcollect(?:s|ing)? (?:the )?rollouts?\b|\brollouts? \d+ ?/ ?\d+\b"
     # a tool the model called, as the rollout's own code logs it (`[tool] calc(9*9*9) -> 729`, `Calling tool …`; not
     # the model's own `<tool_call>` text, _content's)
     r"|\[tool\] \w+\(|\b(?:[Cc]alling|[Ee]xecuting|[Ii]nvoking) tool \w+"
     # vLLM's logits processor (`vllm/model_executor/layers/logits_processor.py`): a token being sampled
     r"|\blogits[_ ]processor\b"
     # vLLM's prefix cache emptied once new weights are in (TRL's colocated engine, verl's sharding manager): the
     # engine generates next.
     r"|\breset(?:s|ting)? (?:the )?prefix cache\b"),
    ("actor update",
     r"\bbackward\b|\boptimi[sz]er[ ._-]?step\b|\bstep_begin\b|\bupdate[_ ](?:actor|policy)\b"
     r"|\bpolicy[_ ](?:update|train(?:ing)?)\b|\bupdating (?:the )?(?:policy|actor|model)\b"
     # HF Trainer's and TRL's loss, as their frames name it (not `training_step`: the whole step, whose inputs TRL's
     # GRPO generates and whose weights it pushes to vLLM first)
     r"|\bcompute[_ ]loss\b|\bget[_ ]batch[_ ]loss[_ ]metrics\b"
     r"|\bconcatenated[_ ]forward\b"),
    ("checkpoint save",
     r"\bsav(?:e|es|ing)\b.{0,40}\b(?:checkpoints?|model|weights|state)\b|\bcheckpoint\b.{0,30}\bsav(?:e|ing)\b"
     r"|\b(?:model|weights|checkpoint|state(?:_dict)?|configuration|tokenizer|tokens) (?:\w+ )?(?:file )?saved\b"
     r"|\bcheckpoint\b.{0,40}\bto be saved\b"
     r"|\bUpload(?:ing|ed)?\b.{0,30}\b(?:model|checkpoints?|weights|files?)\b|\bUpload (?:finished|done|complete)"),
    # accelerate's `gather_for_metrics` and HF's `compute_metrics` collect an evaluation's predictions.
    ("validation", r"\bvalidat(?:e|ing|ion)\b|\bevaluat(?:e|ing|ion)\b|\beval(?:uation)? (?:loop|step|batch)\b"
                   r"|\b(?:gather[_ ]for|compute)[_ ]metrics\b"),
    ("training loop",
     r"\[?\b(?:epoch|step|iteration|iter)\]? ?[=:#]? ?\d+(?! ?(?:steps|epochs))\b|\btrain(?:ing)?[_ ]epoch\b"
     r"|\bloss\b ?[=:] ?-?\d|\btrain(?:ing)? throughput\b"
     r"|^(?:train(?:ing)?[_ ])?steps$"  # a bar over the run's steps (sd-scripts and musubi-tuner: `steps:  95%|…`)
     # a trainer's `fit`, the loop the driver runs once its workers are up (verl's `main_task` calls `trainer.fit()`,
     # its `RayPPOTrainer.fit`): a frame no deeper one names (a Ray task error cut at it) was in the loop
     r"|" + (_FIT := r"\btrainer fit\b|\bfit (?:\w+ )?trainer\b")),
    ("rollout init",
     r"\bKV cache (?:size|usage|blocks?|(?:is )?allocated|memory|pool)\b|# GPU blocks|\bCUDA graphs?\b"
     r"|\bgraph captur\w*|\bcapturing (?:the model|cudagraph)|\binit engine\b|\bInitializing an LLM engine\b"
     r"|\bcreat(?:e|es|ing) (?:the )?rollout (?:worker|engine|replica)"
     r"|\bsafetensors checkpoint shards\b"  # vLLM's own load bar (HF's says `Loading checkpoint shards`)
     # an engine sizing its KV cache at start-up (vLLM's `_initialize_kv_caches`), a trainer building its rollout
     # engine (verl's and EasyR1's `_build_rollout`), as a traceback's frames name them
     r"|\binitiali[sz]e[_ ]kv[_ ]caches?\b|\bbuild[_ ]rollout\b"),
    ("actor init",
     r"\bLoading (?:checkpoint shards|(?:the )?model|weights|state[_ ]dict)\b|\bfrom_pretrained\b|\bnum_params\b"
     r"|\bfused kernels\b|\bmodel (?:loading|weights)\b|\binitiali[sz]ing (?:the )?model\b"
     # HF prints the model's config as it loads it (`Model config Qwen2Config {`); verl's fused worker's load task.
     r"|^Model config\b|\bactor[_ ]rollout[_ ]init[_ ]model\b"),
    ("nccl init", r"\binit_process_group\b|\bprocess group\b|\brendezvous\b|\bNCCL INFO\b"),
    # verl's and EasyR1's `init_workers` (the driver's frame while the worker group's actors start).
    # SkyRL's `_setup_trainer` (it builds the trainer and imports and starts its workers).
    ("worker-group creation",
     r"\binit[_ ]workers\b|\bcreat(?:e|es|ing) (?:the )?worker ?groups?\b|\bsetup[_ ]trainer\b"),
)
_WORDS = [(phase, re.compile(pattern, re.IGNORECASE)) for phase, pattern in WORDS]
_FIT_RE = re.compile(_FIT, re.IGNORECASE)  # the loop a trainer's `fit` runs, once it has set up (frame_words)
LOOP = "training loop"
_LOOP_WORDS = dict(_WORDS)[LOOP]
# Every pattern above needs one of these (lower case): most lines hold none, and `in` is far cheaper than a search.
_STEMS = ("split", "examples/s", "dataset", "tokeniz", "data", "log", "generat", "request", "/v1/", "decode",
          "rolling", "rollout", "backward", "ref ", "reference", "optimi", "step", "update", "sav", "upload",
          "checkpoint", "validat", "evaluat", "eval", "epoch", "iter", "loss", "train", "kv cache", "gpu blocks",
          "cuda graph", "captur", "init engine", "llm engine", "load", "from_pretrained", "num_params", "fused kernel",
          "model", "initiali", "init_process_group", "process group", "rendezvous", "nccl info", "init workers",
          "init_workers", "worker group", "workergroup", "metrics", "broadcast", "weight", "wake", "lora",
          "sharding", "agent", "creat", "prefix cache", "loss", "forward", "advantage", "rewards",
          "logits", "tool")
# What a part of the step calls under frames of its own: validation generates; the reference pass and the update call
# the actor's log-prob function; a log-prob pass runs the update's forward, forward-only (Megatron's
# `forward_backward_func(forward_only=True)` under verl's compute_log_prob, audit 22). A frame below the part's
# naming these names the part, not another.
WITHIN_PART = {"validation": {"generation", "actor update"}, "reference log-prob": {"old log-prob", "actor update"},
               "old log-prob": {"actor update"}, "actor update": {"old log-prob"}}
DATASET = "dataset generation"

# A line that says its part is over (`validation done`, `Loading … took 6 s`): it names no phase still running.
# verl's `After Ref FSDP init, …` (case-sensitive: not any line that begins with "after").
_SENTENCE_END_RE = re.compile(r"(?<=[!?;])\s+|(?<=\.)\s+(?=[A-Z])")
_OVER_RE = re.compile(r"\b(?:done|finished|(?<!% )complete[ds]?|took|ended)\b|(?-i:^After\b[^,]{0,60}\binit\b)"
                      # verl's memory lines: `After sync model weights in sharding manager: 36.42 GB / 79.11 GB.`
                      r"|(?-i:^After\b.{0,100}\bGB\b)"
                      r"|(?<!be )\bsaved\b(?= (?:in|to|at|under)\b|\s*[.!]?\s*$)"  # `Model weights saved in …`
                      r"|\bends?\b(?=\s*(?:[.,;:!)]|$))",  # `validation generation end`, not `the end of the epoch`
                      re.IGNORECASE)
# Lines that are a failure's, not the run's: a traceback's header, frames and code, an exception, a rank's
# header before its traceback (`[Rank 0]:`), Ray's tab-indented fields.
_NOT_RUN_RE = re.compile(
    # a command echoed before it runs (a shell's `set -x`, `+ python -m verl.trainer.main_ppo data.train_files=…`):
    # its arguments name every phase the run will have (HELDOUT12)
    r"^\+{1,3} \S|^\$ |^(?:python3?|torchrun|deepspeed|accelerate launch|srun|mpirun)(?: -\S+)* \S+ \S+="
    r"|^\s|Traceback \(most recent call last\)|^\w[\w.]*(?:Error|Exception|Interrupt|Exit)\b"
    r"|\b(?:ERROR|FATAL|CRITICAL)\b|\b(?:[Ee]rror|[Ee]xception|failed|Failed|FAILED|died|killed|[Tt]imed? ?out)\b"
    r"|^\[[Rr]ank ?\d+\]:?\s*$"
)
# Settings and summaries name phases without being in them: `Total training steps: 105`, `num_train_epochs=3`.
_SETTING_RE = re.compile(r"\b(?:total|max|number of)[_ ]\w*|\b\w+_(?:steps|epochs|size)\b|Namespace\(|\{'"
                         r"|\bevery \d+ (?:steps|epochs|iterations)\b|\bwill (?:save|evaluate|run|generate)\b",
                         re.IGNORECASE)
# A worker idle until asked (torchtitan's async checkpoint process: `Waiting for checkpoint save request...`; a
# server's `Waiting for requests`): the work it names is not running, so the line names no phase.
_IDLE_RE = re.compile(r"\b(?:waiting|listening|ready) for (?:the |a |an )?(?:next |new |incoming )?(?:[\w-]+ ){0,3}"
                      r"(?:requests?|jobs?|tasks?|commands?|work)\b(?! to\b)(?!\s*(?:to|from) (?:finish|complete))",
                      re.IGNORECASE)
# An engine's periodic stats line (vLLM's, SGLang's), whatever its counts: no step's record.
_ENGINE_STATS_RE = re.compile(r"\bAvg prompt throughput: |\bPrefix cache hit rate: |#running-req: \d|\bDecode batch\b")
# An engine's stats line with requests in flight is generation, though it is a record of numbers too.
# A request's access line (`"POST /v1/chat/completions HTTP/1.1" 200 OK`): a streamed answer began, or a whole one was
# sent. Generation's word, but no sign that any request is still in flight.
ANSWERED_RE = re.compile(r'\bPOST /v1/(?:chat/)?completions\b[^\n]{0,40}" 200\b')
_SERVING_RE = re.compile(r"\bRunning: [1-9]\d* reqs\b|#running-req: [1-9]")
# Python logging's default `INFO:trl.generation.vllm_client:`: a logger is named after its module, whatever it says.
_LOGGER_RE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:")
# A dotted module or logger name in any format (`- INFO - trl.generation.vllm_client -`, `[llamafactory.model.x]`,
# `transformers/generation` as `transformers.generation.utils`): named after its module, whatever it says.
_DOTTED_RE = re.compile(r"\b[a-z_]\w*(?:\.[a-z_]\w*)+\b")
_SOURCE_PATH_RE = re.compile(r"\S*/[\w.-]+\.py\b")  # `…/transformers/generation/configuration_utils.py`
# A capture stamp a collector put before every line (`[2026-03-12 11:50:36] (TaskRunner pid=7) …`).
CAPTURE_STAMP_RE = re.compile(r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\] ")
_CAPTURE_RE = re.compile(f"^{CAPTURE_STAMP_RE.pattern}(?=\\()")  # (the words peel it before Ray's prefix)
# A launcher's outermost frames: its traceback says where the launcher was, not a worker.
_LAUNCHER_RE = re.compile(r"/torch/distributed/run\.py|/bin/(?:torchrun|accelerate|deepspeed)\b|/elastic/agent/"
                          r"|/accelerate/commands/launch\.py|/deepspeed/launcher/")
_OUTER_RE = re.compile(f"^(?:{HOST_PREFIX})?" + r"(?:\[rank\d{1,6}\]: ?)?")
_BAR_RE = re.compile(r"(?P<pct>\d{1,3})%\|[^|]{0,200}\|\s*(?P<n>\d{1,9})/(?P<total>\d{1,9})\b")
# A loop's own step print, the loss after the step's number (`step 18: loss 2.2 | forward 1080 ms | …`,
# `Step 100/1000: loss=2.3`, DeBERTa's `Steps=100, loss=3.75, examples=6400`): a step's record, whatever follows
# (phases.py reads it as a step).
STEP_PRINT_PATTERN = (r"(?:^|[\s\[|])[Ss]teps?[ :=]{1,3}(\d{1,18})(?:/\d{1,18})?\]?:?[ \t,|]{1,4}(?:train[_ ])?loss\b"
                      r" ?[:=]? ?(?:-?\d|[Nn]a[Nn]\b|-?inf\b)")  # (a NaN loss is the step it went wrong at)
# Not an evaluation's, a save's or a best model's step (`Validation step 5: loss`, `Saving checkpoint at step 500,
# loss`): Hyperscan has no lookbehind, so the pattern it scans for is checked again here.
_STEP_PRINT_RE = re.compile(r"(?<!(?i:val))(?<!(?i:eval))(?<!(?i:test))(?<!(?i:best))(?<! at)(?<!(?i:validation))"
                            + STEP_PRINT_PATTERN)


def step_print(text: str) -> re.Match[str] | None:
    """A loop's own step print in `text` (STEP_PRINT_PATTERN, an evaluation's and a save's left out)."""
    return _STEP_PRINT_RE.search(text)


# A metric record (`step:116 - actor/pg_loss:-0.001 - timing_s/update_actor:40.1`, `{'loss': 0.4, …}`) is a step's
# numbers, which the step rules read; the names of its timings are no phase the run is in.
# A `name: value` pair, its unit too (not `x.py:12`, nor a share done: `checkpoint shards: 100% Completed` is progress)
_METRIC_RE = re.compile(r"(?<![\w./-])[A-Za-z_][\w/'-]*'?\s?[:=]\s?-?[\d.]+(?:e-?\d+)?(?![\d.%])[A-Za-z]*")
TAIL_LINES = 400  # the log's last lines the verdict reads (replay and the store hand this many at most)
MESSAGE_CHARS = 2000  # of each (a store's line may be 64 KB: its words are at its start)


@dataclass(frozen=True)
class Worded:
    phase: str  # a phase rule's name (phases.yaml)
    text: str  # the line that names it, as written
    back: int  # how many lines before the end of the stretch it is (0: the last)
    frame: bool = False  # a traceback's frame (the function the error was raised under), not a line of the run
    over: bool = False  # the line says that part finished (`finished initializing model`): the run got that far
    via: str = ""  # what the text is, where not a frame or a line of the run (a Ray task the failure names)
    line: str = ""  # the line of the tail it stands on, as the tail holds it: evidence cites its number


def _message(text: str) -> str:
    """A line past its Ray prefix, a rank's (`[rank3]:`) and a launcher's host (`node-7: `): a traceback's code keeps
    its indentation, which tells it from the run's own lines."""
    text = strip_ansi(text[:MESSAGE_CHARS])
    message = split_prefix(_CAPTURE_RE.sub("", text, count=1) if text[:1] == "[" else text)[1].rstrip()
    return _LOGGER_RE.sub("", _OUTER_RE.sub("", message, count=1), count=1)


_BRACKETED_RE = re.compile(r"\[([^\[\]]{1,200})\][\s:]*$")
_CLOCK_RE = re.compile(r"\d:\d\d|<|\bit/s\b|\bs/it\b")


def _last_bar(message: str) -> tuple[str, bool] | None:
    """A progress bar's description and whether it reached its total (of the last redraw where several are glued)."""
    bars = list(_BAR_RE.finditer(message))
    if not bars:
        return None
    found = bars[-1]
    before = message[: found.start()]
    desc = before[before.rfind("]") + 1:] if "]" in before else before  # past a glued redraw's `[00:03<00:09]`
    if not desc.strip(" :\r") and (own := _BRACKETED_RE.search(before)) and not _CLOCK_RE.search(own[1]):
        desc = own[1]  # a description in brackets (trlx's `[rollout 80 / 128]:`), not a redraw's clock
    return desc.strip(" :\r"), int(found["n"]) >= int(found["total"]) > 0


def _any_stem(message: str) -> bool:
    low = message.lower()
    return any(stem in low for stem in _STEMS)


def _words(message: str) -> str | None:
    if not _any_stem(message):
        return None
    for phase, pattern in _WORDS:
        if pattern.search(message):
            return LOOP if phase == DATASET and _LOOP_WORDS.search(message) else phase  # a new epoch's loader
    return None


def phase_of_words(text: str) -> tuple[str, bool] | None:
    """The phase one line's words name and whether the line says it is over (`validation generation end`, a bar at
    its total), or None (no phase word, a traceback's or an error's line, a setting, a metric record). A progress
    bar is read by its description (`Compute log probs:  76%|…| 243/320`), not by the numbers after it."""
    message = _message(text)
    if not message.strip() or not (_any_stem(message) or _SERVING_RE.search(message)):
        return None  # no phase's word: most lines
    if _NOT_RUN_RE.search(message) or _STEP_PRINT_RE.search(message, 0, 400):
        return None  # (a loop's own step print: the parts it times, `backward 2200 ms`, are no place it is in)
    if "." in message:  # a source file's path or a dotted module name: where code lives, not what runs
        message = _DOTTED_RE.sub(" ", _SOURCE_PATH_RE.sub(" ", message))
    bar = _last_bar(message) if "%|" in message else None
    if bar is not None:
        phase = _words(bar[0]) if bar[0] else None
        return (phase, bar[1]) if phase is not None else None
    if _SETTING_RE.search(message) or _IDLE_RE.search(message):
        return None
    if _SERVING_RE.search(message):
        return "generation", False
    pairs = _METRIC_RE.findall(message, 0, 400)
    if len(pairs) >= 3:
        return None  # a metric record
    if len(pairs) == 1 and _LOOP_WORDS.fullmatch(message.strip()):
        return LOOP, False  # a counter alone (`Step = 120`): the loop's own line, not a metric beside words
    if pairs:  # `finished initializing model - num_params = 71953, num_elems = 81.24B`: the words, not the names
        message = _METRIC_RE.sub(" ", message)
    phase = _words(message)
    if phase is not None and _SENTENCE_END_RE.search(message):
        # Over or not, by the sentence naming the phase last: `Training Completed!!! Saving pre-trained model to …`
        # is a save under way (audit 15: a run hung in its final save read as finished).
        sentences = _SENTENCE_END_RE.split(message)
        for i in range(len(sentences) - 1, -1, -1):
            if (named := _words(sentences[i])) is not None:  # (`… qlora-out. Done.`: over, in a later sentence)
                return named, any(_OVER_RE.search(later) for later in sentences[i:])
    return (phase, _OVER_RE.search(message) is not None) if phase is not None else None


def _same(line: str, cited: str) -> bool:
    """Whether a tail line is the line an evidence cites (cut at its length)."""
    return bool(cited) and line.startswith(cited.rstrip()[:200])


def _failure_at(tail: list[str], failed_by: str) -> int | None:
    if not failed_by:
        return None
    for i in range(len(tail) - 1, -1, -1):
        if _same(tail[i], failed_by) or failed_by.strip()[:200] in tail[i]:
            return i
    return None


_HEADER = "Traceback (most recent call last)"


def stretch(tail: list[str], started_by: str = "", failed_by: str = "", held: bool = False) -> list[str]:
    """The tail's lines after the one that started the rules' phase (`started_by`, where the tail holds it; with
    `held`, none unless it does) and before the failure's own lines (`failed_by`: its exception line; the traceback
    above it is left out). A bar the failure's traceback was glued to (`Compute log probs 2:   0%|…|Traceback (most
    recent call last):`) is the stretch's last line: it is what ran when the error came."""
    end = len(tail)
    glued: list[str] = []
    if (at := _failure_at(tail, failed_by)) is not None:
        end = at
        while end > 0 and _NOT_RUN_RE.search(_message(tail[end - 1]) or " "):
            end -= 1  # the traceback and error lines above the exception
        header = tail[end].find(_HEADER) if end < len(tail) else -1
        if header > 0 and _message(tail[end][:header]).strip():
            glued = [tail[end][:header]]
    start = end if held else 0
    if started_by:
        for i in range(end - 1, -1, -1):
            if _same(tail[i], started_by):
                start = i + 1
                break
        else:
            glued = [] if held else glued  # a part's stretch needs its line: none, none glued either
    return tail[start:end] + glued


# A Python warning and the source line printed under it (`…/save_and_load.py:154: UserWarning: …`, `  warnings.warn(`).
_WARNING_RE = re.compile(r"\b[A-Z]\w*Warning: |^\s+(?:warnings\.)?warn\(")


def only_warnings(lines: list[str]) -> bool:
    """Whether `lines` are Python warnings alone: printed while the line before them runs, not after it."""
    return all(_WARNING_RE.search(line) for line in lines)


def after(lines: list[str], line: str) -> list[str]:
    """The lines after the last one equal to `line` (all of them where none is): a phase rule's start or done line
    knows better than the words before it."""
    if line:
        for i in range(len(lines) - 1, -1, -1):
            if _same(lines[i], line):
                return lines[i + 1:]
    return lines


_FRAME_RE = re.compile(r'^\s*File "(?P<path>[^"]{1,400})", line \d+, in (?P<func>[\w<>.]{1,120})')
# A traceback's own lines, besides its frames: its header, code, chained-exception separators, exception lines.
_TRACEBACK_RE = re.compile(
    r"^\s|^$|^Traceback \(most recent call last\)|above exception|^\w[\w.]*(?:Error|Exception)\b")


_VERBS = re.compile(r"(?:^|_)(?:log|save|evaluate|eval|validate|generate|update|load|train|step)(?=_|$)")


def failure_frames(tail: list[str], failed_by: str) -> list[tuple[str, str]]:
    """The frames of the failure's traceback, outermost first, each with the code line under it (the call it made,
    or ""): the traceback that ends at the failure's line, else the first after it (a collective's timeout, then the
    traceback of the call it aborted)."""
    at = _failure_at(tail, failed_by)
    if at is None:
        return []
    start = at
    while start > 0 and _TRACEBACK_RE.search(_message(tail[start - 1])):
        start -= 1
    block = tail[start:at]
    if "ray::" in tail[at] and at + 1 < len(tail) and _FRAME_RE.match(_message(tail[at + 1])):
        block += _traceback_after(tail, at)  # Ray's `RayTaskError(…): ray::main_task()` header: the task's own frames
    if not any(_FRAME_RE.match(_message(line)) for line in block):
        # Its frames right after it (Ray's `Unhandled error …: ray::Worker.method()` header), else the first
        # traceback after it.
        after = at if at + 1 < len(tail) and _FRAME_RE.match(_message(tail[at + 1])) else next(
            (k for k in range(at + 1, min(len(tail), at + 200)) if _HEADER in tail[k]), None)
        block = _traceback_after(tail, after) if after is not None else []
    frames = []
    for k, line in enumerate(block):
        if _FRAME_RE.match(_message(line)):
            code = _message(block[k + 1]) if k + 1 < len(block) else ""
            frames.append((line, "" if _FRAME_RE.match(code) else code.strip()))
    return frames


CHILD_LINES = 60  # lines above a launcher's traceback searched for its child's


def child_frames(tail: list[str], failed_by: str) -> list[tuple[str, str]]:
    """Where the failure is a launcher's (`accelerate launch` or torchrun re-raising that its child exited): the frames
    of the child's own traceback just above the launcher's, which name where the child failed; [] where none is."""
    at = _failure_at(tail, failed_by)
    if at is None:
        return []
    top = at
    while top > 0 and _TRACEBACK_RE.search(_message(tail[top - 1])):
        top -= 1  # the launcher's traceback (its header may be glued to the line before it)
    last = next((k for k in range(top - 1, max(-1, top - 1 - CHILD_LINES), -1)
                 if _FRAME_RE.match(_message(tail[k]))), None)
    if last is None:
        return []
    first = last
    while first > 0 and (_FRAME_RE.match(m := _message(tail[first - 1])) or m[:1].isspace()):
        first -= 1
    block = tail[first:last + 2]
    return [(line, "" if k + 1 >= len(block) or _FRAME_RE.match(_message(block[k + 1]))
             else _message(block[k + 1]).strip()) for k, line in enumerate(block) if _FRAME_RE.match(_message(line))]


CUT_FRAMES = 2  # frames a log must end in to read as a cut traceback (one frame alone may be anything's)


def cut_frames(tail: list[str]) -> list[tuple[str, str]]:
    """The frames a log ends in where it ends inside a traceback with neither its header above them nor an exception
    line after (the user pasted only the frames): [] where the last line is not a frame or the code under one, where
    a header heads them (the rules read that traceback), or where a stack dump does (`Stack (most recent call …`:
    printed by a process that went on)."""
    end = len(tail)
    while end > 0 and not tail[end - 1].strip():
        end -= 1
    if end == 0:
        return []
    last = [_message(line) for line in tail[max(0, end - 2):end]]
    if not (_FRAME_RE.match(last[-1]) or (len(last) == 2 and _FRAME_RE.match(last[0]) and last[1][:1].isspace())):
        return []
    start = end
    while start > 0 and ((m := _message(tail[start - 1])) and (_FRAME_RE.match(m) or m[:1].isspace())):
        start -= 1
    if start > 0 and "most recent call" in tail[start - 1]:
        return []
    block = tail[start:end]
    frames = [(line, "" if k + 1 >= len(block) or _FRAME_RE.match(_message(block[k + 1]))
               else _message(block[k + 1]).strip()) for k, line in enumerate(block) if _FRAME_RE.match(_message(line))]
    if frames and _STACK_PRINT_RE.search(frames[-1][1] or frames[-1][0]):
        return []  # a stack the process printed of itself (traceback.print_stack() in a signal handler): it went on
    return frames if len(frames) >= CUT_FRAMES else []


# The call that prints a running process's own stack, as the code line under its innermost frame.
_STACK_PRINT_RE = re.compile(r"\b(?:print_stack|format_stack|extract_stack|dump_traceback(?:_later)?|print_stacks?)\(")


def _traceback_after(tail: list[str], at: int) -> list[str]:
    """The traceback's lines (frames, code) right after line `at`, up to the first that is not one."""
    end = at + 1
    while end < len(tail) and _TRACEBACK_RE.search(_message(tail[end])):
        end += 1
    return tail[at + 1:end]


# Ray names a task by its actor's class and method (`ray::WorkerDict.actor_rollout_generate_sequences`): in the memory
# monitor's table of the processes it weighed, in a task error's header.
_TASK_RE = re.compile(r"\bray::(?P<cls>[A-Za-z_]\w{0,80})\.(?P<method>[A-Za-z_]\w{0,120})")
# An actor death's tab-indented fields name the dead actor's class; the model it held says which part it ran.
_CLASS_RE = re.compile(r"^\s+class_name: (?P<cls>\w+)")
# Only an RL trainer's role classes (`CriticModelRayActor`, `CriticWorker`, `ReferenceModelRayActor`): a plain Ray
# job's `CriticBatchLoader` holds no critic model.
_ROLES = ((re.compile(r"^Critic\w*(?:Actor|Worker)(?:Base)?$"), "critic update", "critic init"),
          (re.compile(r"^Ref(?:erence)?\w*(?:Actor|Worker)(?:Base)?$"), "reference log-prob", "reference init"))
# `init_model`, `init_model_from_pretrained`, verl's `_initialize_llm_servers`
_INIT_METHOD_RE = re.compile(r"(?:^|_)init(?:iali[sz]e)?(?:_|$)|^__init__$")
# A part of the step's words under an initializer's frame: what is being built for that part, not that part running
# (None: no part of the start-up).
_AT_INIT = {"generation": "rollout init", "weight sync": "rollout init", "actor update": "actor init",
            "old log-prob": "actor init", "reference log-prob": "reference init", "critic update": "critic init",
            "advantage": None, "validation": None, "training loop": None, "checkpoint save": None}
TASK_LINES = 40  # of the failure's block after its line
# HF Trainer's functions that run a whole step of TRL's GRPO (generate, score, update): `training_step`, and in the
# older trainers and the forks built on them (R1-V, Video-R1) `compute_loss` too. Neither names a part there.
WHOLE_STEP = ("training_step",)
WHOLE_STEP_LOSS = ("training_step", "compute_loss")
DEAD_ACTOR = "the class of the actor that died"  # Worded.via of a dead actor's class: which model, not which part


def failure_tasks(tail: list[str], failed_by: str, stepping: bool,
                  task_phase: Callable[[str], str | None] = lambda func: None) -> Worded | None:
    """The model the actor that died held (`class_name: CriticModelRayActor`): its part of the step where the run was
    `stepping`, its start-up before; else the phase of a Ray task the failure names (the memory monitor killed a task
    while `actor_rollout_generate_sequences` held the memory), by `task_phase` (the task table's rules,
    `Class.method`) or by its method's words."""
    at = _failure_at(tail, failed_by)
    if at is None:
        return None
    block = [tail[at][:MESSAGE_CHARS]]
    for line in tail[at + 1:at + TASK_LINES]:
        if _HEADER in line:
            break  # another failure's
        block.append(line[:MESSAGE_CHARS])
    start = at  # its own traceback above it, for a role's start-up only (below)
    while start > 0 and at - start < TASK_LINES and (
            "ray::" in tail[start - 1] or _TRACEBACK_RE.search(_message(tail[start - 1]))):
        start -= 1
    for line in block:
        if (held := _CLASS_RE.match(line)) is not None:
            for role, in_step, at_start in _ROLES:
                if role.match(held["cls"]):
                    return Worded(in_step if stepping else at_start, line.strip()[:300], 0, frame=True,
                                  via=DEAD_ACTOR, line=line)
    # A role's class starting its model, in the header of the failure's traceback (SkyRL's
    # `ray::RefRayActorBase.init_model()`); not the task Ray's memory monitor chose to kill, which names no culprit.
    victim = "OutOfMemoryError" in tail[at]
    for line in tail[start:at] if not victim else ():
        for m in _TASK_RE.finditer(line[:MESSAGE_CHARS]):
            if _INIT_METHOD_RE.search(m["method"]) and (
                    role := next((at_start for cls, _, at_start in _ROLES if cls.match(m["cls"])), None)):
                return Worded(role, line.strip()[:300], 0, frame=True, via="a Ray task the failure names", line=line)
    for line in block:
        for m in _TASK_RE.finditer(line):
            phase = task_phase(f"{m['cls']}.{m['method']}") or _words(m["method"].replace("_", " "))
            if phase is not None and phase != DATASET:
                return Worded(phase, line.strip()[:300], 0, frame=True, via="a Ray task the failure names",
                              line=line)
    return None


# A py-spy dump pasted in the log (`Thread 2290417 (active): "MainThread"`, then
# `    generate (vllm/entrypoints/llm.py:467)`).
_DUMP_THREAD_RE = re.compile(r'^Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active)(?:\+gil)?\)')
_DUMP_LINE_RE = re.compile(r"^(?:Thread |Process \d+: |Python v\d| {4}\S|\s*$|\$ py-spy )")
_FAULT_LINE_RE = re.compile(r'^(?:(?:Current thread|Thread) 0x|\s+File "|\s*$)')


def dump_words(tail: list[str]) -> Worded | None:
    """The phase the last stack dump in the tail names, by the stack rules (data/stack_phases.yaml: the main thread's
    innermost frame a rule knows; `generate (vllm/entrypoints/llm.py)` is generation): where a process was when a
    user looked (a py-spy dump pasted in the log), or when it died or a watchdog gave up (Python's faulthandler)."""
    from gkdtop.analysis.stackphase import builtin_stack_rules, match_thread, parse_py_spy_text

    last = next((i for i in range(len(tail) - 1, -1, -1) if _DUMP_THREAD_RE.match(tail[i])), None)
    if last is not None:
        start = last
        while start > 0 and _DUMP_LINE_RE.match(tail[start - 1]):
            start -= 1
        end = last + 1
        while end < len(tail) and _DUMP_LINE_RE.match(tail[end]) and not tail[end].startswith("$ "):
            end += 1
        threads, via = parse_py_spy_text("\n".join(tail[start:end])), "a py-spy dump in the log"
    else:
        # A faulthandler dump, behind a rank's or a pod's prefix: its threads and frames, up to the first other line.
        messages = [_message(line) for line in tail]
        last = next((i for i in range(len(tail) - 1, -1, -1)
                     if FH_THREAD_RE.match(head := messages[i].rstrip()) or FH_STACK_RE.match(head)), None)
        if last is None:
            return None
        start = last
        while start > 0 and _FAULT_LINE_RE.match(messages[start - 1]):
            start -= 1
        end = last + 1
        while end < len(tail) and _FAULT_LINE_RE.match(messages[end]):
            end += 1
        threads, via = parse_faulthandler_lines(messages[start:end]), "a stack dump in the log (faulthandler)"
    rules = builtin_stack_rules()
    # The main thread first (match_process's order), keeping the thread that matched: a paste of several processes
    # has several MainThreads.
    found = thread = None
    for candidate in sorted(threads, key=lambda t: t.name != "MainThread"):
        if (found := match_thread(candidate, rules)) is not None:
            thread = candidate
            break
    if found is None or thread is None:
        return None
    # Where it waits (the innermost frame: `wait (torch/utils/file_baton.py:42)`), then the frame the rule knew.
    inner = next((f for f in thread.frames if not f.native), None)
    waits = f"{inner.function} ({inner.file}:{inner.line}) … in " if inner is not None and (
        inner.function, inner.line) != (found.function, found.line) else ""
    text = f"{found.thread}: {waits}{found.frame}" + (f" → {found.via}" if found.via else "")
    return Worded(found.phase, text[:300], len(tail) - end, frame=True, via=via, line=tail[start])


# `ray summary tasks` pasted in the log: its table's rows (`3   WorkerDict.actor_rollout_update_actor   FINISHED: 140
# ACTOR_TASK`) and the further states of a row on lines of their own (`      RUNNING: 8`).
SUMMARY_HEADER = "Table (group by func_name):"
_SUMMARY_ROW_RE = re.compile(r"^\s*\d{1,6}\s+(?P<func>[\w.]{1,200})\s+(?P<states>(?:[A-Z_]{3,40}: \d{1,9}\s*)*)")
_SUMMARY_STATE_RE = re.compile(r"\b(?P<state>[A-Z_]{3,40}): (?P<n>\d{1,9})\b")
_SUMMARY_MORE_RE = re.compile(r"^\s{8,}(?:[A-Z_]{3,40}: \d{1,9}\s*)+$")
SUMMARY_ROWS = 200  # rows of one table read at most


def summary_words(tail: list[str], task_phase: Callable[[str], str | None]) -> Worded | None:
    """The part of the step a `ray summary tasks` table pasted in the log says was running: the tasks with RUNNING
    calls, by the task table (`WorkerDict.actor_rollout_update_actor` is the update), the driver's own task aside
    (it names no phase). A user pastes it when a job hangs and the log says nothing."""
    at = next((i for i in range(len(tail) - 1, -1, -1) if SUMMARY_HEADER in tail[i]), None)
    if at is None:
        return None
    func = row_line = ""
    for back, line in enumerate(tail[at + 1:at + 1 + SUMMARY_ROWS]):
        message = _message(line)
        if (row := _SUMMARY_ROW_RE.match(message)) is not None:
            func, states, row_line = row["func"], row["states"], message.strip()
        elif func and _SUMMARY_MORE_RE.match(message):
            states = message
        else:
            continue
        running = any(m["state"] == "RUNNING" and int(m["n"]) > 0 for m in _SUMMARY_STATE_RE.finditer(states))
        phase = task_phase(func) if running else None
        if phase is not None:
            text = row_line if row is not None else f"{row_line} … {states.strip()}"
            return Worded(phase, " ".join(text.split())[:300], len(tail) - (at + 2 + back), frame=True,
                          via="a Ray task summary in the log (`ray summary tasks`)", line=line)
    return None


def launcher_frames(frames: list[tuple[str, str]]) -> bool:
    """A launcher's own traceback (torchrun's agent re-rendezvousing after the workers ran): where the launcher was,
    which names the run's phase only where its own lines say nothing (a start-up that never reached the workers)."""
    return any(_LAUNCHER_RE.search(line) for line, _ in frames[:3])


# The call a frame's code line makes (`gen_batch_output = self.actor_rollout_wg.generate_sequences_loop(gen_batch)`):
# a fork's renamed worker call, a remote call whose own frames are in another process.
_CALL_RE = re.compile(r"([A-Za-z_][\w.]{0,120})\s*\(")


def _call_words(code: str, whole_step: Collection[str] = ()) -> str | None:
    """The words of the call a code line makes, its receiver's too (`self.optimizer.step()`: an optimizer's step);
    none for a call of `whole_step`."""
    call = _CALL_RE.search(code)
    if call is None or call.group(1).rsplit(".", 1)[-1] in whole_step:
        return None
    return _words(call.group(1).replace("_", " ").replace(".", " "))


def frame_words(frames: Sequence[tuple[str, str]], below: str = "", whole_step: Collection[str] = ()
                ) -> Worded | None:
    """The phase the innermost frame (deeper than `below`, where that frame is among them) names by its function's
    and its module's words (`_generate_and_score_completions`, `rendezvous/c10d_rendezvous_backend.py`), else by the
    call its code line makes (`self.actor_rollout_wg.generate_sequences_loop(batch)`): where the error was raised, in
    words. `frames`: (frame line, its code line or "") pairs, as failure_frames gives them. `whole_step`: functions
    that run a whole RL step (WHOLE_STEP): neither their frames nor calls of them name a part."""
    # (`below` may be a frame's code line: `llm_model.load_weights(…)` started weight sync under `compute_loss`)
    code_below = _message(below).strip()[:200] if below else ""
    cut = next((i for i, (line, code) in enumerate(frames)
                if _same(line, below) or (code and code[:200] == code_below)), None) if below else None
    deeper = frames[cut + 1:] if cut is not None else frames
    matched = [_FRAME_RE.match(_message(line)) for line, _ in deeper]
    # Frames under an initializer (`init_workers`, `init_model`, a constructor) build what a phase will use: verl's
    # `AgentLoopManager.__init__` in agent_loop.py starts the rollout servers, it generates nothing (audit 22). Not a
    # decorator's wrapper (Ray's `auto_init_wrapper` around every ray.get): it builds nothing.
    init_from = next((i for i, m in enumerate(matched) if m is not None and _INIT_METHOD_RE.search(
        func := m["func"].rsplit(".", 1)[-1]) and "wrap" not in func), len(deeper))
    found: Worded | None = None
    for back, (line, code) in enumerate(reversed(deeper)):
        index = len(deeper) - 1 - back
        m = matched[index]
        if m is None:
            continue
        stem = m["path"].rsplit("/", 1)[-1].removesuffix(".py")
        if len(_VERBS.findall(m["func"])) >= 2:
            continue  # a dispatcher (`_maybe_log_save_evaluate`): several parts' words, none of them its own
        init = index >= init_from
        own_init = init and _INIT_METHOD_RE.search(m["func"].rsplit(".", 1)[-1]) is not None
        # (an initializer's own words, not its module's: the module names what runs later)
        said = m["func"] if own_init else f"{m['func']} {stem}"
        phase = None if m["func"] in whole_step else _words(said.replace("_", " "))
        cited = line.strip()[:300]
        # (a `with` line whose next frame is the context's `__exit__` raised leaving it: verl's sharding manager put the
        # engine away after its generation, which the function's own words name)
        leaving = index + 1 < len(deeper) and (after := matched[index + 1]) is not None and after["func"].endswith(
            "__exit__")
        entered = _words(code[5:].replace("_", " ")) if code.startswith("with ") and not leaving else None
        if entered is not None and entered != DATASET:
            # `with self.rollout_sharding_manager:` under `generate_sequences`: raised entering (or leaving) that
            # context, which is more particular than the function around it
            phase, cited = entered, f"{line.strip()[:200]}: {code[:100]}"
        elif code and (called := _call_words(code, whole_step)) is not None and called != DATASET:
            # the call it made when the error came (`unwrapped_model.generate(…)` under a GRPO trainer's
            # `compute_loss`): raised inside that call, more particular than the function around it
            phase, cited = called, f"{line.strip()[:200]}: {code[:100]}"
        if init:
            phase = _AT_INIT.get(phase, phase) if phase is not None else None
        elif phase == LOOP and init_from < len(deeper) and _fit_frame(said, code):
            continue  # fit building what it needs before its loop (wandb's `Tracking.__init__`): its set-up, no step
        if phase is None or phase == DATASET:  # a data loader's frames run in every step, not only at the start
            continue
        if found is None or found.phase in WITHIN_PART.get(phase, ()):  # the reference pass's compute_log_prob
            found = Worded(phase, cited, back, frame=True, line=line)
    return found


def _fit_frame(said: str, code: str) -> bool:
    """A trainer's `fit`, as its frame (`fit ray_trainer`) or the call under a frame (`trainer.fit()`) names it."""
    call = _CALL_RE.search(code) if code else None
    words = f"{said} {call.group(1) if call is not None else ''}"
    return _FIT_RE.search(words.replace("_", " ").replace(".", " ")) is not None


def _progressed(text: str) -> bool:
    """A step's record (`{'loss': 0.41, 'grad_norm': 1.2, …}`): the run went on to its next step after any older line's
    words. (Not a bar with no words: an evaluation's own bar moves under its `Running Evaluation` line.)"""
    message = _message(text)
    if (_SERVING_RE.search(message) or "%|" in message or _NOT_RUN_RE.search(message)
            or _ENGINE_STATS_RE.search(message)):
        return False  # (Ray's `A worker died …` holds `Worker port: 10016 Worker PID: 1942`; an engine's idle stats
        # line, `Running: 0 reqs`, is no step of a run either)
    return _is_record(message)


def _is_record(message: str) -> bool:
    """Three or more `name: number` pairs: a step's record (`{'loss': 0.41, …}`, `step:116 - k:v - …`); or a loop's own
    step print."""
    return len(_METRIC_RE.findall(message, 0, 400)) >= 3 or _STEP_PRINT_RE.search(message, 0, 400) is not None


# A model's own text, as reward functions and samplers print it (`Solution string: <|im_start|>assistant`,
# `<think> I need to generate 71 …`, `Model Output: …`): what the model wrote, not what the run does.
_CONTENT_RE = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|begin_of_text|start_header_id|assistant|user)\|>"
                         r"|</?(?:think|answer|reasoning|tool_call)>|\[/?INST\]"
                         r"|^(?:Solution string|Model [Oo]utput|Generated text|Completion|Response|Prompt)\s*:")
_CONTENT_HINTS = ("<|", "think>", "answer>", "reasoning>", "tool_call>", "INST]", "Solution string", "odel Output",
                  "odel output", "Generated text", "Completion", "Response", "Prompt")  # _CONTENT_RE's literals
_SEPARATOR_RE = re.compile(r"^\s*(?:-{8,}|={8,}|\*{8,}|#{8,})\s*$")
# A line in the run's own shape (a level, a clock time, a bar): the model's text printed before it has ended.
_RUN_SHAPE_RE = re.compile(r"\b(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|\b\d{1,2}:\d\d:\d\d\b|%\|")


def _content(lines: list[str]) -> set[int]:
    """Which of `lines` are a model's text: those that hold its markers, and the lines around them of a block printed
    after a separator line (`--------`: a reward function's print of a sample, `Format validation: PASS`), up to the
    next separator or a line in the run's own shape (a level, a clock time, a bar, a step's record)."""
    marked: set[int] = set()
    whole = "\n".join(lines)
    if not any(hint in whole for hint in _CONTENT_HINTS):
        return marked  # most tails: no marker anywhere, and no line need be looked at
    block: list[int] = []
    in_content = False
    for i, line in enumerate(lines):
        message = _message(line)
        if _SEPARATOR_RE.match(message):
            block, in_content = [], False
            continue
        if _RUN_SHAPE_RE.search(message) or _is_record(message):
            block, in_content = [], False  # the run speaks again
            continue
        block.append(i)
        if _CONTENT_RE.search(message):
            if not in_content:
                marked.update(block)
            in_content = True
        if in_content:
            marked.add(i)
    return marked


_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
ACTOR_WORDS = "the Ray actor that printed a line no phase rule knows"  # Worded.via of actor_words' guess


def actor_words(text: str) -> str | None:
    """The phase a line's Ray actor names by its class's words, where only one part of a step runs it: verl's
    `AgentLoopWorker` runs only in a step's rollout, so what it prints (`Failed to decode tool call`) is said in
    generation. Not a traceback's frame or code line, nor a step's record."""
    if text[:1] != "(":
        return None
    prefix, message = split_prefix(text[:MESSAGE_CHARS])
    if prefix is None or not message.strip() or message[:1].isspace() or _is_record(message):
        return None
    return _words(_CAMEL_RE.sub(" ", prefix[0]))


def read_words(lines: list[str]) -> Worded | None:
    """The phase the last line of `lines` that names one speaks of (`over` where it says that part finished: what
    runs after it, its words do not say, but the run got that far). None where a step's record comes after every such
    line: an evaluation 300 loss records back is over. A model's own text (_content) names nothing."""
    content = _content(lines)
    for back, line in enumerate(reversed(lines)):
        if len(lines) - 1 - back in content:
            continue
        found = phase_of_words(line)
        if found is not None:
            return Worded(found[0], line.strip()[:300], back, over=found[1], line=line)
        if (actor := actor_words(line)) is not None:
            return Worded(actor, line.strip()[:300], back, via=ACTOR_WORDS, line=line)
        if _progressed(line):
            return None
    return None
