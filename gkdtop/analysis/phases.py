"""The phase engine: matched lines in, a timeline, step statistics and a verdict (running / stalled /
done / failed) out.

It never runs a pattern to decide what a line is: the matcher (analysis/matcher.py) has already
said which of the engine's patterns the line matches. Silence is measured from the lines' own time
(analysis/engine.py corrects it for a clock offset), so a job that went quiet ten minutes before
gkdtop opened is STALLED at once.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gkdtop.analysis.curves import Curves
from gkdtop.analysis.lines import ENGINE_PREFIX, HOST_PREFIX, LOGGER_PREFIX, RANK_PREFIX, split_prefix
from gkdtop.analysis.matcher import Pattern
from gkdtop.analysis.rules import PhaseRule
from gkdtop.analysis.steps import StepStats, ran_steps, timed_steps
from gkdtop.analysis.wordphase import (
    ANSWERED_RE,
    CAPTURE_STAMP_RE,
    DATASET,
    DEAD_ACTOR,
    STEP_PRINT_PATTERN,
    SUMMARY_HEADER,
    WHOLE_STEP,
    WHOLE_STEP_LOSS,
    WITHIN_PART,
    Worded,
    after,
    child_frames,
    cut_frames,
    dump_words,
    failure_frames,
    failure_tasks,
    frame_words,
    launcher_frames,
    only_warnings,
    phase_of_words,
    read_words,
    step_print,
    stretch,
    summary_words,
)
from gkdtop.model import EVIDENCE_CHARS, EarlierRun, Evidence, Hint, LogLine, PhaseSpan, PhaseStatus, StepInfo

if TYPE_CHECKING:
    from gkdtop.analysis.rules import RuleSet
    from gkdtop.analysis.taskphases import TaskPhaser

# Bounded digits: int() raises past 4,300 digits, which a junk line must not make the feed do.
STEP_PATTERN = r"\bstep:(\d{1,18})\s+-\s"
STEP_RE = re.compile(STEP_PATTERN)
# verl's record of the validation before training, `step:0 - val-core/…:0.49 - val-aux/…`, and its SFT trainer's
# `step:29 - val/loss:0.34` after that step's own record: numbers for the curves, no step of their own.
VALIDATION_KEYS = ("val-", "val/")
VALIDATION_ONLY_RE = re.compile(r"(?:val[-/][^\s:]{1,200}:\S{1,40}(?:\s+-\s+|\s*$))+")
# Step lines of other stacks, read on the careful path (history's fast path knows only verl's):
# ms-swift's metric dict with `'global_step/max_steps': '56/2290'`, Megatron's
# `iteration      142/  250000 | … | elapsed time per iteration (ms): 1234.5 |`, the
# `Step 2 | 9.5s | …` summaries of loguru-style trainers, `iter 831400 | loss 2.1 | … | 0.412 s/iter`,
# the dict HF Trainer (TRL, LLaMA-Factory) prints every `logging_steps`:
# `{'loss': 1.23, 'grad_norm': …, 'epoch': 0.05}` (its end-of-run
# `{'train_runtime': …}` and eval's `{'eval_loss': …}` begin otherwise: no step), and a step's header
# between rules, `========== Step 3/100 ==========`, that a block of results follows.
RECORD_STEP_PATTERN = (
    r"'global_step/max_steps': '(\d{1,18})/\d{1,18}'"
    r"|\biter(?:ation)?:?\s{1,16}(\d{1,18})(?:/\s{0,16}\d{1,18})?(?:\s{1,4}\d{1,3}%)?\s{0,4}\|"
    r"|\bStep (\d{1,18}) \| (\d{1,9}(?:\.\d{1,9})?)s\b"
    r"|(\{)'loss': (?:-?(?:\d|inf)|nan)"
    r"|^[=*#-]{3,80} ?Step (\d{1,18})/\d{1,18} ?[=*#-]{3,80}\s*$"
    r"|\bstep:\s{1,8}(\d{1,18})\s{1,8}loss:\s"  # torchtitan's `step:  10  loss:  9.8121  memory: …`
    # DeepSpeed's engine: `[Rank 0] step=20410, skipped=3, lr=…` (before 0.3: `rank:0 step=40, skipped=0, …`)
    r"|(?:\[Rank \d{1,6}\]|\brank:\d{1,6}) step=(\d{1,18}), skipped=\d"
    r"| - Step (\d{1,18}): ?$"  # SkyRL's console tracker (loguru): `… - Step 3: `, its metrics' dict below
    "|" + STEP_PRINT_PATTERN  # a loop's own print, the loss after the number: `step 18: loss 2.2 | forward 1080 ms`
    # the MetricLogger of DeiT, MAE and LLaMA2-Accessory: `Epoch: [0]  [4880/5328]  lr: … loss: … time: 1.2789  data: …`
    + r"|\bEpoch: \[(\d{1,9})\]\s{0,8}\[\s{0,8}(\d{1,18})/(\d{1,18})\]"  # (PyTorch's ImageNet example: `][`)
    # fairseq's (0.10 on) `| train_inner | epoch 001:    123 / 9333 loss=4.1, …, num_updates=120, …` (or its json):
    # the updates are its steps
    r"|\| train_inner \| [^|]{0,600}\bnum_updates\"?[=:] ?\"?(\d{1,18})"
)
RECORD_STEP_RE = re.compile(RECORD_STEP_PATTERN)
GLOBAL_STEP_RE = re.compile(r"'global_step/max_steps': '(\d{1,18})/\d{1,18}'")
# A native stack's frame (`frame #7: c10d::ProcessGroupNCCL::broadcastUniqueNCCLID(…) + 0xaf (0x7f… in libtorch…)`):
# c10's exception and a hung process's dump print where the process already was.
NATIVE_FRAME_RE = re.compile(r"(?:^|[\s:)\]])frame #\d{1,3}: \S")
# A trainer's `fit` (`in _fit_impl`, `trainer.fit()`), as a frame or the call under one names it (_worded).
FIT_RE = re.compile(r"(?:, in _?|\.)fit(?![A-Za-z])")  # (the function or the call, not a path's `fit.py`)
# A tqdm bar a dict was glued to (`311/500 [12:03<07:19, 2.32s/it]{'loss': …`): HF's bar counts global steps.
GLUED_BAR_RE = re.compile(r"(\d{1,18})/\d{1,18} \[[^\]\n]{0,100}\]\s*$")
# `iter N | … | 0.412 s/iter`, ArcticTraining's `iter:  120/3000   4% | loss: … | iter time: 1.009s | …`
ITER_SECONDS_RE = re.compile(r"\| {0,4}(?:iter time: )?(\d{1,9}(?:\.\d{1,9})?)(?: ?s/iter\b|s \|)")
# A part a loop's own step print times, between bars: `| forward 1080 ms |`, `| engine.step() 12.3 s`.
PART_TIME_RE = re.compile(r"\|\s{0,4}([A-Za-z_][\w.()]{0,40}?)[:=]?\s{1,4}(\d{1,9}(?:\.\d{1,9})?)\s?(ms|s)\b")
# A step print's part named as the whole step: its time; and names that are often a running total or a countdown
# (`| elapsed: 600.0s |`), no part of the step at all.
WHOLE_STEP_NAMES = frozenset({"time", "step", "step_time", "iter_time"})
RUNNING_NAMES = frozenset({"elapsed", "total", "total_time", "duration", "eta", "remaining", "left", "wall", "uptime"})
METRIC_LOGGER_TIME_RE = re.compile(r"\s\stime: (\d{1,9}(?:\.\d{1,9})?)\b")  # (its `(avg)` after: the median's first)
MEGATRON_STEP_MS_RE = re.compile(r"elapsed time per iteration \(ms\): (\d{1,12}(?:\.\d{1,9})?)")
# A value ends where the number does: `61.22GiB(77.31%)` and `6,231` (torchtitan's) give no value, not 61 and 6.
METRIC_RE = re.compile(r"([\w./@-]+)['\"]?:\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)(?![\w.]|,\d)")
TIMING_VALUE = r"(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"  # a number as verl prints it
TIMING_RE = re.compile(r"timing_s/([\w./@-]+):\s*" + TIMING_VALUE + r"\b")
# The same two on the bytes of a plain ASCII line (history's step lines, read without decoding them);
# RE2's `\s` is [\t\n\f\r ] and such a line holds no control but tab, so the answers are the same.
STEP_BYTES_RE = re.compile(rb"\bstep:(\d{1,18})[\t ]+-[\t ]")
TIMING_BYTES_RE = re.compile(TIMING_RE.pattern.replace(r"\s", r"[\t ]").encode())
# A tqdm bar's elapsed/rate part changes every redraw even when nothing moves; drop it to compare.
TQDM_CLOCK_RE = re.compile(r"\[[^\]]*\]|\d+(?:\.\d+)?\s*(?:s/it|it/s|examples/s)")
# The same for a line that names no rate (has_rate): the rate's `\d+` was tried at each digit of the line (its stamp,
# its numbers), 5 us of every bar line in a flood; without the rate's words there it can't match.
TQDM_BRACKETS_RE = re.compile(r"\[[^\]]*\]")
# An exception line, also behind the `[rank3]: ` torch's elastic launcher puts on every child line, or behind a
# logger's prefix (LOGGER_PREFIX) and an engine process's (ENGINE_PREFIX). The name ends at its `:`, a wrapper's `(`
# or the line's end: Ray Tune's `Error file: …/error.txt` is no exception.
# (pdsh's host before it too: `compute-dy-p4d24xl-41: RuntimeError: NCCL error in: …`; a host name has a digit)
EXCEPTION_PATTERN = (f"^(?:{HOST_PREFIX})?" + r"(?:\[rank\d{1,6}\]: ?)?" + ENGINE_PREFIX + "?"
                     + LOGGER_PREFIX
                     + r"?[\w.]*(?:Error|Exception|Exit|Interrupt|\wInvalid)(?::|\(|\s*$)")  # (pyarrow's ArrowInvalid)
EXCEPTION_RE = re.compile(EXCEPTION_PATTERN)
# A traceback's header, whatever prefix a logger or a launcher put before it: the failure is its exception line.
HEADER_RE = re.compile(r"(?:^|\s|\])Traceback \(most recent call last\):?\s*$")
# An error that says it is a consequence: its root cause is an error above it (vLLM's `Worker failed with error
# '…', please check the stack trace above for the root cause`, `EngineDeadError: … See stack trace (above) …`).
ABORTED_RE = re.compile(
    r"communicator (?:was|has been) aborted|\bProcessGroupNCCL is aborted\b|NCCL communicator .{0,40}abort")
POINTS_BACK_RE = re.compile(r"\babove\b.{0,60}\broot cause|\broot cause\b.{0,60}\babove\b|\berrored already\b"
                            # a wrapper that names nothing (HF datasets', vLLM's subprocess): the error it was raised
                            # from says what went wrong
                            r"|(?:Error|Exception): An error occurred while \w+ing (?:the )?\w+\s*$"
                            r"|Error: Error raised in subprocess:?\s*$"
                            r"|inspect the previous error messages for a cause")  # Ray Train's TrainingFailedError
RANK_PREFIX_RE = re.compile(r"^\[rank\d{1,6}\]: ?")
# gkdtop.probe's `with phase("NAME"):` lines, for any NAME (a rule of that name, if any, wins).
PROBE_PATTERN = r"phase '([^'\n]{1,80})' (START|DONE|FAILED)"
PROBE_RE = re.compile(PROBE_PATTERN)
# A launch's first lines, printed once a run (`python … >> train.log` twice: the next run appended to the file):
# verl's config print and `set -x` echo, torchrun's OMP banner, a local Ray's start, Megatron's parallel sizes, HF
# Trainer's banner (once per `train()`).
NEW_RUN_PATTERN = (
    r"^\{'actor_rollout_ref': \{|^\+{1,3} (?:python3?|torchrun|deepspeed|accelerate launch|ray job submit)\b"
    r"|torch/distributed/run\.py:\d+\] \*{5}|Started a local Ray instance|^using world size: \d+, data-parallel size: "
    r"|\*{5} Running training \*{5}"
)
NEW_RUN_SLACK = 60.0  # seconds a next run's first stamp may lie before the last one (a writer's clock a little off)


def _zone_left(gap: float, passed: float) -> float:
    """Of a jump of `gap` seconds between two writers' stamps, `passed` of which time that went by fills (steps that
    time themselves): the rest when it is still a clock zone's (an hour or more, whole half-hours within 5 minutes),
    else 0."""
    left = gap - max(0.0, passed)
    zones = round(left / 1800)
    return left if 2 <= abs(zones) <= 29 and abs(left - zones * 1800) <= 300 else 0.0


# A bar's description before its percentage: `Rollout generation:  62%|██▌  | 40/64 [...]`.
BAR_DESC_RE = re.compile(r"\s{0,8}([A-Za-z][\w .()/-]{0,60}?):\s{1,4}\d{1,3}%\|")
# ... or after the stamp and tags a wrapper put before it, each closed by `] ` (a GUI's `[08:21:19] [STDERR] steps:
# 95%|`, a logger's `INFO 10-10 17:06:36 [x.py:1] Processed prompts: 10%|`)
TAGGED_BAR_DESC_RE = re.compile(r"\] ([A-Za-z][\w .()/-]{0,60}?):\s{1,4}\d{1,3}%\|")
BAR_WORDS = ("it/s", "s/it", "examples/s")  # a tqdm bar's rate: a redraw that moved nothing is no progress
BAR_PATTERN = "|".join(BAR_WORDS)
BAR_RE = re.compile(BAR_PATTERN)


def has_rate(text: str) -> bool:
    """A line holds one of BAR_WORDS: the patterns that read a rate (slow to fail) may match it."""
    return any(word in text for word in BAR_WORDS)


SLOW_BAR_RE = re.compile(r"(\d+(?:\.\d+)?)s/it\b")  # a bar slower than one item a second says its pace
# A start line that says how long it already went on (`timed out after 900s while trying to connect`, `Loading
# weights took 241.9 seconds`, `Graph capturing finished in 16 secs`): the phase began that long before the line's
# stamp, or earlier (a bound: what it states is only the part that line reports).
ELAPSED_RE = re.compile(
    r"\b(?:timed out after|took(?: [\d.]+ [KMGT]i?B and)?|ran for|finished in) "
    r"(\d{1,9}(?:\.\d+)?) ?(ms|milliseconds|s|secs?|seconds)\b"
)
# A tqdm bar's elapsed time, `| 168/4096 [1:52:10<43:39:18, 40.01s/it]`: the bar was made that long before the line.
BAR_ELAPSED_RE = re.compile(r"\[(?:(\d{1,4}):)?(\d\d):(\d\d)<")
EARLY_LINES = 64  # the first named lines whose stated elapsed time says how long before them the run began
BAR_COUNT_RE = re.compile(r"\|\s*(\d{1,9})/(\d{1,9}) \[")  # a bar's `| 3702/6080 [`: where the loop is
BAR_PCT_RE = re.compile(r"\d{1,3}%\|")
# A bar's numbers, whatever their sign or form: a description of the loop's losses (trlx's `[losses/total_loss: -0.11 |
# …]:`) is one bar whatever values it shows.
BAR_KEY_DIGITS_RE = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# A bar with no description (`  0%|          | 0/80000 [00:00<?, ?it/s]`), and a pace no training step has.
PLAIN_BAR_RE = re.compile(r"\s{0,4}\d{1,3}%\|")
# An undescribed bar counted in datasets' units (`14.71ba/s`, `ex/s`, `880.5 examples/s`): its map or filter preparing
# the data, at whatever pace, not the loop's steps (audit 23: a map bar 49 s before HF's `Running training`).
DATA_BAR_RE = re.compile(r"\s{0,4}\d{1,3}%\|[^|]*\| {0,2}\d+/\d+ \[[^\]]*[\d?] ?(?:ba|ex|examples)/s\]")
DATA_RATE_RE = re.compile(r"\| {0,2}\d+/\d+ \[[^\]]*[\d?] ?(?:ba|ex|examples)/s\]")  # any bar in those units
FAST_BAR_S = 0.01  # seconds an item: 100 items a second or more is data being prepared, not steps
BAR_RATE_RE = re.compile(r"(\d{1,9}(?:\.\d{1,9})?) ?(s/it|it/s)\b")  # a bar's pace, after its count
BAR_DONE_PATTERN = r"(?:^|[\s:])100%\|"  # a tqdm bar at its total: the work it counts is done
# The same bar as the whole line (nothing glued after it, whose phase the line may start instead), n = total.
BAR_DONE_RE = re.compile(r"(?:^|[\s:])100%\|[^|]{0,200}\|\s*(\d{1,9})/\1 \[[^\]]{0,200}\]\s*$")
FIRST_STEP_STALL = 600.0  # seconds of silence a stepping phase may take before its first step line
STEP_STALL_FACTOR = 2.0  # a step may take this many times the run's slowest pace before it is a stall
# A line that states it launched a batch of long jobs whose ends print nothing until they are done (`Starting 64
# OpenHands trajectories for batch 0`): before any step measured their pace, the first step's silence is allowed
# STEP_STALL_FACTOR times FIRST_STEP_STALL (audit 22: STALLED at 10 minutes into a first rollout that took 11).
LAUNCHED_RE = re.compile(r"\b(?:Start|Launch|Dispatch|Submitt|Spawn)(?:ing|ed) (\d{1,7}) (?:[\w-]{1,40} ){0,3}?"
                         r"(?:trajector(?:y|ies)|episodes?|rollouts?|tasks?|jobs?|env(?:ironment)?s?|agents?)\b", re.I)
# A status line that counts (`52/64 trajectories finished`), said again with the same words and counts (its stamp
# aside), is no progress (audit 22: the same count every few minutes through a 25-minute stall kept it "running").
COUNT_RE = re.compile(r"\b\d{1,12}/\d{1,12}\b")
STAMP_WORDS_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]?|\d{1,2}/\d{1,2}/\d{2,4}\b|\d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?")
MAX_SPANS = 500
# The span a failure opens when no phase has started: unknown, not "before any" (a pasted log starts mid-run).
BEFORE_ANY = "(phase unknown)"
# A collective the update of a step runs timed out: a gradient all-reduce, reduce-scatter or ZeRO-3's parameter
# gather, after the first collective. In a run with no rollout (SFT, pretraining: HF Trainer, DeepSpeed,
# Megatron, LLaMA-Factory) every step is forward, backward and optimizer, so a step underway is the update.
STEP_COLLECTIVE_PATTERN = (
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?:[2-9]|\d\d)\d*, "
    r"OpType=(?:ALLREDUCE|_?ALLGATHER(?:_BASE|_COALESCED)?|_?REDUCE_SCATTER(?:_BASE)?|ALLTOALL(?:_BASE)?)\b"
)  # ALLTOALL: sequence parallelism (Ulysses) exchanges activations in every forward and backward
# The same, seen before any step line: only a gradient-sized all-reduce (a million elements or more)
# says a step was underway; start-up's collectives are barriers and broadcasts.
GRADIENT_ALLREDUCE_RE = re.compile(r"OpType=ALLREDUCE, NumelIn=\d{7,}")
# A collective of under a thousand elements is no update's either: a barrier (NCCL's is a one-element all-reduce: a
# save's, an evaluation's), a scalar metric or a norm, gather_object's sizes (audit 17: a save's barrier read as the
# update). After steps, the step underway stays the loop.
SCALAR_COLLECTIVE_RE = re.compile(r"\bNumelIn=\d{1,3}\b")
# The same, a hundred or more collectives into its group: start-up's barriers and broadcasts are a few dozen, so a
# watchdog line that deep with only the communicator's making known (NCCL INFO lines) is the training loop.
DEEP_SEQ_RE = re.compile(r"SeqNum=(\d{3,18})\b")
DEEP_COLLECTIVES = 100
ROLLOUT_PHASES = frozenset({"rollout init", "generation", "weight sync", "teacher"})
ENGINE_UP = frozenset({"rollout init", "serving", "generation", "validation", "training loop"})
# HF Trainer's step records that count completions and rewards: TRL's GRPO (and the forks built on it: R1-V,
# Video-R1, VLM-R1, open-r1), whose one HF training step generates, scores and updates. `completion_length` is the
# older trainers' key, whose `compute_loss` may itself generate; TRL 0.17 on say `completions/mean_length`.
STEP_ROLLOUT_RE = re.compile(r"'(?:completion_length|completions/mean_length|reward_std)':")
LOSS_ROLLOUT_RE = re.compile(r"'completion_length':")
# HF Trainer's step as a traceback names it: its frame, and the loop's call into it.
# An SGLang engine's own process group (`[2025-01-04 10:02:11 TP3] Init torch distributed begin.`, its scheduler's
# prefix): where the trainer's model is already up, the engine is being built (verl's _build_rollout)
ENGINE_DIST_RE = re.compile(r"\b(?:DP\d{1,4} )?TP\d{1,4}\] Init torch distributed begin")
ROLLOUT_INIT = "rollout init"
NO_DETAIL_RE = re.compile(r"RayTaskError\(\w[\w.]*\): <no detail available>\s*$")  # the wrapped type, no message
HF_STEP_RE = re.compile(r"line \d+, in training_step\b|tr_loss_step = self\.training_step\(")
# torch's cpp_extension building or loading a JIT op (DeepSpeed's): a model's start-up before the loop, part of the step
# once the loop ran (DeepSpeed-Chat builds transformer_inference at its first generation; review 26)
# vLLM's model runner dumping the input of an execute_model that raised: a generation once the loop began, but at
# start-up its profile run executes the model too (an out-of-memory there is the engine's start-up).
FAILED_EXECUTION_RE = re.compile(r"\bWriting input of failed execution to ")
# verl's fit() resuming (its _load_checkpoint, the first thing fit does; `Training from scratch` where there is
# nothing to resume): every worker is up, the loop began, and the load is its first part.
FIT_RESUME_RE = re.compile(r"\bLoad from checkpoint folder: ")
CHECKPOINT_LOAD = "checkpoint load"
# A wait that counts itself against its own limit (verl's `Waiting for register center actor … to be ready. Elapsed
# time: 120 seconds out of 300 seconds.`): it began N seconds before the line, and is no stall within its limit.
OWN_WAIT_RE = re.compile(r"\bElapsed time: (\d{1,9}) seconds out of (\d{1,9}) seconds")
OP_BUILD_RE = re.compile(r"\bas PyTorch extensions root\b|\bEmitting ninja build file |\bLoading extension module \w|"
                         r"\bBuilding extension module \w|\bTime to load \w+ op\b")
UPDATE = "actor update"
SAVE = "checkpoint save"
REF_LOG_PROB = "reference log-prob"
REFERENCE_ACTOR = "ReferenceModel"  # the Ray actor class that holds the reference model (OpenRLHF)
WEIGHT_SYNC = "weight sync"
GENERATION = "generation"
LOOP = "training loop"
VALIDATION = "validation"
ACTOR_INIT = "actor init"
ACTOR_WORD_RE = re.compile(r"(?<![a-z])actor", re.IGNORECASE)  # a line that names the actor (`Initializing Actor …`)
SERVING = "serving"  # an inference server that is up, waiting for requests
RESOURCE_POOL = "resource pool"
NCCL_INIT = "nccl init"
# torchrun's agent could not re-rendezvous its restarted workers (another node's agent had closed it, the job ending):
# a consequence of the failure that made it restart, not a failure of its own
RDZV_CLOSED_RE = re.compile(r"\bRendezvousClosedError\b")
CONFIG = "config"
# An engine's stats line with nothing left to do (generation's `done`), and which engine printed it.
EMPTY_ENGINE_RE = re.compile(
    r"Running: 0 reqs, (?:Waiting: 0 reqs|Swapped: 0 reqs, Pending: 0 reqs)|#running-req: 0, #token: 0\b")
ENGINE_ID_RE = re.compile(r"\bEngine (\d+):|\bDP(\d+)\b")
# A collective that timed out is a hang the watchdog ended, not an error a step raised: the hang's
# causes, not "fix what the error names".
TIMEOUT_RE = re.compile(r"Watchdog caught collective operation timeout|\bTimeout at NCCL work: \d")
# The watchdog thread itself stopped (a CUDA call hung): the heartbeat monitor kills the process after it.
STUCK_RE = re.compile(r"watchdog got stuck for \d+ seconds|Heartbeat monitor timed out! Process will be terminated")
STUCK_HINT = Hint(
    causes=["A hang: NCCL's watchdog itself stopped making progress (a CUDA call or a GPU hung), and the heartbeat "
            "monitor took the process down after it; the abort that follows is its consequence, not a crash."],
    actions=["On a live job press s (py-spy with native frames shows the CUDA call it waits in); check the GPUs pane "
             "and the kernel log (dmesg) for Xid errors on that node."],
)
# wandb's block as its run ends (phases.yaml `finished`): printed from wandb.finish() at exit, after a crash as well.
MODEL_SAVED_RE = re.compile(r"(?:^|\s|\] )model saved\.")  # phases.yaml `finished`: sd-scripts' `model saved.`
WANDB_END_RE = re.compile(r"\bwandb: (?:Synced \d+ W&B file|Synced \S+: https?://|Find logs at: |\S+ View run .+ at: )")


def ended_short(status: PhaseStatus) -> str:
    """`N/M` of the loop's bar where a run is done only by its process's end (wandb's end-of-run block) short of the
    bar's total: the process ended, the training did not finish (a preemption, a time limit, an early exit); ''
    otherwise. Replay's verdict and the "finished" alert say it alike (the review of session 27)."""
    bar = status.steps.get("bar") if status.steps else None
    end = status.timeline[-1].evidence if status.timeline else None
    if (status.state != "done" or not bar or not bar.get("total") or bar["n"] >= bar["total"] or end is None
            or not WANDB_END_RE.search(end.text)):
        return ""
    return f"{bar['n']}/{bar['total']}"
# An exception that is itself a wait giving up (`TimeoutError: …`, `… timed out after 600s`, gloo's `Timed out
# waiting …ms for recv`): not "not a hang".
WAIT_TIMEOUT_RE = re.compile(
    r"^(?:\[rank\d{1,6}\]: ?)?[\w.]*Timeout(?:Error|Exception)?\b|\b[Tt]imed out\b|\b(?:[Ww]ait|[Ww]atchdog) timeout\b"
    r"|\bSocket Timeout\b|\bmonitoredBarrier, but received errors while waiting\b"
)
# A failure whose chain began with a wait giving up (vLLM's engine loop: `asyncio.exceptions.TimeoutError`, then
# `AsyncEngineDeadError` in every request, audit 26): the last exception is the failure, the timeout what it was.
GAVE_UP_RE = re.compile(f"{TIMEOUT_RE.pattern}|{WAIT_TIMEOUT_RE.pattern}|\\b[\\w.]*Timeout(?:Error|Exception)\\b")
WAIT_TIMEOUT_HINT = Hint(
    causes=["A wait gave up: what it waited for (a peer rank, a server, a store, a remote call) never answered in "
            "time; the error names what."],
    actions=["Check the thing it waited for: is it running, reachable from this node, or stuck itself (press s for "
             "its stack)? Raise the timeout only once it is known to be slow, not stuck."],
)
TIMEOUT_HINT = Hint(
    causes=["A collective timed out: one rank never reached it (stuck elsewhere, slower, or dead) or the network "
            "between the ranks stopped; the rank that reports the timeout waited for it."],
    actions=["Compare SeqNum and 'last completed NCCL work' across the watchdog lines of one process group: a rank "
             "behind the others is the culprit; ranks all at one SeqNum waited on a rank that printed nothing, or on "
             "the network. On a live job press s for the ranks' stacks; keep /tmp/nccl_trace_rank_* "
             "(Flight Recorder dumps)."],
)
# The run stopped from outside (Ctrl+C, SIGINT, SIGTERM): users stop a hung job and paste its log. Not an error of its
# own: the phase's hang advice applies, with this cause first.
INTERRUPT_RE = re.compile(
    r"^(?:\^C)?(?:\[rank\d{1,6}\]: ?)?KeyboardInterrupt\b|\*\*\* SIG(?:INT|TERM) received at time="
    r"|\bSignal (?:2|15) \(SIG(?:INT|TERM)\) received\b|\b[Rr]eceived (?:signal )?SIG(?:INT|TERM)\b"
    r"|\bSignalException: Process \d+ got signal: (?:2|15)\b"  # torchrun's agent, stopped by a scheduler
    r"|\bReceived Signals\.SIG(?:INT|TERM) death signal\b"  # the same agent, as it begins to shut its workers down
    # Ray's handler turns a SIGTERM into `sys.exit(signal.SIGTERM)` (audit 26: a job stopped after step 1 of 15)
    r"|^(?:\[rank\d{1,6}\]: ?)?SystemExit: (?:Signals\.)?SIG(?:INT|TERM)\b|, in sigterm_handler$"
)
INTERRUPT_HINT = Hint(
    causes=["Stopped from outside (Ctrl+C, SIGINT or SIGTERM: a person, a scheduler's time limit, a supervisor), not "
            "by an error of its own: most likely the run had hung or slowed here. The traceback at the interrupt says "
            "where the stopped process waited, not why."],
    actions=["Next time, before stopping it, press s (every rank's stack, py-spy) or b (the bundle): a stopped run's "
             "stacks are gone with it."],
)
# A handler that turns SIGTERM into SystemExit (Ray's sigterm_handler in every worker): Ray sends it as the driver or
# the job ends, so the worker's stop says nothing of a hang there (audit 26: STALLED, and "a step raised").
SIGTERM_EXIT_RE = re.compile(r"\bSystemExit: (?:Signals\.)?SIGTERM\b")
SIGTERM_EXIT_HINT = Hint(
    causes=["Stopped from outside: a SIGTERM, which its handler turned into SystemExit (Ray's workers do this when "
            "their driver or job ends, on `ray stop`, or on a scheduler's kill). Not an error of its own; what sent "
            "it is not in these lines."],
    actions=["Look for why the driver or the job ended: the driver's last lines, `ray job status`/`ray job logs`, the "
             "scheduler's record of the job (a time limit, a preemption)."],
)
# ... while its steps still came at their pace (audit 20: 14 steady steps, then a SIGTERM 30 s after the last): no hang
# to look for; the hang's advice would send the user after one.
INTERRUPT_STEPPING_HINT = Hint(
    causes=["Stopped from outside (Ctrl+C, SIGINT or SIGTERM: a person, a scheduler's time limit, a supervisor) while "
            "its steps still came at their pace: not a hang, and not an error of its own."],
    actions=["Check who stopped it: the scheduler's record of the job (a time limit, a preemption) or the shell that "
             "ran it."],
)
# A traceback's frame line, also behind vLLM's logger, which prints an engine's traceback one line at a time
# (`ERROR 11-22 16:41:27 [core.py:459]   File "…", line 236, in wake_up`).
FRAME_RE = re.compile(f'(?:{RANK_PREFIX}|{ENGINE_PREFIX}?{LOGGER_PREFIX})?\\s*File "[^"]*", line \\d+, in ')
# A phase that failed, where its rule has no fail_hint of its own: the error is the evidence.
# Hydra's line before a traceback (`Error executing job with overrides: [...]`): the job failed, but it names
# no error; a traceback read to its end replaces it with the exception.
HYDRA_WRAPPER_RE = re.compile(r"(?:\[rank\d{1,6}\]: ?)?Error executing job with overrides")
CUT_HINT = Hint(
    causes=["It failed, but the exception is not in the log: the traceback is cut before its last line."],
    actions=["Find the whole traceback: the process's full output (its stderr), or, where it ran under Ray, the "
             "failing worker's own log (worker-*.err in the Ray session's logs)."],
)
# The same where Hydra's line is the failure: Hydra printed it instead of the traceback.
HYDRA_CUT_HINT = Hint(
    causes=["It failed, but the exception is not in the log: Hydra's 'Error executing job' line only announces it "
            "(the traceback is cut before its last line)."],
    actions=["Find the whole traceback: the driver's full output (HYDRA_FULL_ERROR=1), or the failing worker's own "
             "log (worker-*.err in the Ray session's logs)."],
)
FAILED_HINT = Hint(
    causes=["It failed with an error, not a hang: the run's first error is usually the cause, later ones "
            "its consequences."],
    actions=["Fix what the first error names (findings explain the known ones; a traceback's last frames say where "
             "it was raised)."],
)
# A GPU out of memory in a checkpoint save: what fills the GPU is the state the save gathers, not a step's batch, so
# the step's memory advice (micro batch, gradient checkpointing) does not apply (audit 20: dist_checkpointing's save).
# (Not Ray's own `OutOfMemoryError: Task was killed due to the node running low on memory`: host memory.)
GPU_OOM_RE = re.compile(r"CUDA out of memory|CUDA error: out of memory|\btorch\.(?:cuda\.)?OutOfMemoryError\b")
_SAVE_OOM_VERL = ("verl: save fewer contents (checkpoint.save_contents, e.g. without the optimizer) or asynchronously "
                  "(checkpoint.async_save), as the save's options allow.")
SAVE_OOM_HINT = Hint(
    causes=["The checkpoint save ran out of GPU memory: it gathers the sharded weights or optimizer state (a state "
            "dict, an all_gather) on top of what the run already holds; a step's batch is not what fills it."],
    actions=["Gather less at once (a save strategy that is not fully parallel, a sharded rather than a full state "
             "dict), free the CUDA cache before the save, or save fewer contents; the traceback's last frames say "
             "which gather it was.", _SAVE_OOM_VERL],
    only={_SAVE_OOM_VERL: ("verl",)},
)
# The same without a traceback to read (an NCCL WARN, an abort, a dead worker): no frames to point at.
FAILED_PLAIN_HINT = Hint(causes=FAILED_HINT.causes, actions=["Fix what the first error names (findings explain the "
                                                             "known ones)."])
# The kind of error picks the advice where a phase's own would mislead. An asynchronous CUDA error is reported at a
# later call than the kernel that failed (the log says its stack trace might be incorrect).
CUDA_ASYNC_RE = re.compile(
    r"CUDA error: (?:unspecified launch failure|an illegal (?:memory access|instruction)|misaligned address"
    r"|device-side assert)|CUDA kernel errors might be asynchronously reported"
)
CUDA_ASYNC_HINT = Hint(
    causes=["An asynchronous CUDA error: a kernel failed before the call that reported it, so the traceback's frames "
            "may not be where it happened (CUDA reports it at a later call). A kernel bug, indices out of range, or a "
            "GPU or driver fault."],
    actions=["Rerun with CUDA_LAUNCH_BLOCKING=1 so the kernel that failed raises it; check dmesg on that node for Xid "
             "errors (a GPU or driver fault); where a library's kernels are in the frames, try the versions the "
             "framework pins."],
)
# An error in the handler of another (`During handling of the above exception, another exception occurred`), or one
# raised from it (`The above exception was the direct cause of the following exception`: vLLM's AsyncEngineDeadError
# over an OOM): where the first was the GPU's memory, a CUDA or NCCL fault or a collective's timeout, the later one
# (an emergency save that could not write, an engine that reports its loop died) is its consequence, not the cause;
# so is a trainer's summary of an actor's death.
HANDLING_PATTERN = (r"During handling of the above exception, another exception occurred"
                    r"|The above exception was the direct cause of the following exception")
FAULT_RE = re.compile(r"\bOutOfMemoryError\b|\bout of memory\b|\bCUDA error\b|illegal memory access|\bNCCL error\b"
                      r"|\bDistBackendError\b|Watchdog caught collective operation timeout"
                      r"|\b(?:RayActorError|ActorDiedError)\b")  # under Ray Train's `Training has failed after …`
# Another process's error when its peer went away: a consequence of whatever ended that peer.
PEER_LOST_RE = re.compile(r"\bConnection (?:closed|reset) by peer\b|\bBroken pipe\b")
# A Ray actor's death as its caller reports it: the caller's traceback says only what it asked of the actor.
RAYLET_DEATH_RE = re.compile(r"A worker died or was killed while executing")  # the raylet's report of a death
ACTOR_DIED_RE = re.compile(r"\b(?:ActorDiedError|RayActorError)\b|" + RAYLET_DEATH_RE.pattern)
# An actor death's field naming the dead process (`\tpid: 41311` under `ActorDiedError`), and that process's own end
# (its fatal signal, faulthandler's header) when Ray flushes its last lines after the caller's report.
DEAD_PID_PATTERN = r"^\s+pid: \d{1,9}\s*$"
# A process's own report of what failed it in C or CUDA, outside any traceback (vLLM's cumem allocator).
OWN_ERROR_PATTERN = r"\bCUDA [Ee]rror: |\bout of memory\b"
OWN_ERROR_S = 300.0  # a dead actor's own error this long before its caller's report still tells what ended it
MAX_PID_ERRORS = 4096  # processes whose last error line is kept (a flood of them starts the count again)
FATAL_SIGNAL_PATTERN = r"\*\*\* SIG[A-Z]+ received at time=|^Fatal Python error: "
FATAL_SIGNAL_RE = re.compile(FATAL_SIGNAL_PATTERN)
ACTOR_DIED_HINT = Hint(
    causes=["A Ray actor's or worker's process died (killed or crashed) and Ray reports it (its caller's traceback, or "
            "the raylet's line): the report says only what the process was asked to do. What ended it (the OOM killer "
            "or Ray's memory monitor, a signal, a crash in native code) is in that process's own output, not here."],
    actions=["Read the dead actor's own log (worker-*.err and python-core-worker-*.log in the Ray session's logs, by "
             "its pid); check dmesg on its node for an OOM kill, the raylet's log for its memory monitor, and the "
             "job's memory against the node's or container's limit."],
)
# A launcher's report that a child exited (torchelastic's `failed (exitcode: 1) local_rank: 7`, `ChildFailedError`,
# its summary's `exitcode : 1`): the launcher's own traceback after it says only that it noticed.
LAUNCHER_RE = re.compile(r"ChildFailedError|\bexitcode\s*: ?-?\d+|\bexits with return code = -?\d+")  # DeepSpeed's
# DeepSpeed's: `['/usr/bin/python', '-u', 'train.py', '--local_rank=1', …] exits with return code = -9`
DS_LAUNCHER_DETAIL_RE = re.compile(
    r"--local_rank=(?P<rank>\d{1,6})\b.{0,2000}?exits with return code = (?P<code>-?\d{1,4})")
# subprocess's error for a launched rank: `CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py',
# '--local_rank=1', …]' returned non-zero exit status 1.`
CHILD_EXIT_RE = re.compile(r"CalledProcessError: Command '\[.*'--local_rank=\d+'.*\]' returned non-zero exit status")
LAUNCHER_DETAIL_RE = re.compile(r"\(exitcode: ?(-?\d{1,4})\) local_rank: (\d{1,6})")
# A client whose server closed the connection mid-request (requests', http.client's, aiohttp's wordings).
CLOSED_RE = re.compile(r"RemoteDisconnected|Connection aborted|Connection reset by peer|ConnectionResetError"
                       r"|ServerDisconnectedError|Server disconnected|RemoteProtocolError|IncompleteRead")
CLOSED_HINT = Hint(
    causes=["The server this process called (an inference server, a reward or teacher service) closed the connection "
            "in the middle of a request: it exited, was restarted, or a proxy or server timeout cut the request. "
            "This process's traceback cannot show why."],
    actions=["Read the server's own log at that time (its traceback, a kill, a restart); check that it is still up; "
             "a request longer than the server's or a proxy's timeout is cut the same way."],
)


def launcher_hint(failure: str) -> Hint:
    """A launcher's exit report: which rank exited with which code, where that rank's own error is."""
    detail = LAUNCHER_DETAIL_RE.search(failure)
    deepspeed = DS_LAUNCHER_DETAIL_RE.search(failure)
    who = "A rank exited with an error code (a negative one: the signal that ended it)"
    if detail is not None or deepspeed is not None:
        code, rank = detail.groups() if detail is not None else (deepspeed["code"], deepspeed["rank"])
        who = f"Rank {rank} was ended by signal {code[1:]}" if code.startswith("-") else \
            f"Rank {rank} exited with code {code}"
    return Hint(
        causes=[f"{who}: the launcher (torchrun, accelerate launch, deepspeed) only reports it; that rank's own error "
                "(or what ended it) is earlier in this log or only in that rank's own output."],
        actions=["Find that rank's own traceback above the report (its lines may carry a [rankN]: or stderr: prefix) "
                 "or in its own log file; the launcher's traceback after the report says only that it noticed."],
    )


# `(autoscaler +19m35s)`: Ray's autoscaler stamps its lines with the time since it started, not the clock.
AUTOSCALER_RE = re.compile(r"\((?:autoscaler|scheduler) \+(?:(\d{1,4})h)?(?:(\d{1,4})m)?(?:(\d{1,6})s)?\)")
MAX_RECENT_STEPS = 64
MAX_DONE_BY = 8  # the actors a span names as having said it is done
MAX_MADE_PHASES = 100  # phases no rule defines (probe markers, bar descriptions, "after X"): a junk log's bound
FRAMES_AFTER = 60.0  # seconds after a crash line in which a traceback's frames still place that failure
# Parts a run may not have at all (GRPO has no critic; a run starts from scratch): never the guess of what comes next.
OPTIONAL = frozenset({"critic init", "reference init", "reward init", "checkpoint load", "teacher"})
# A launcher's host before every line (pdsh's `node07: `, an MPI operator's `mpi-x7k2q9bd-launcher: `), not a bar's
# description: one token with a digit and a dash or a dot.
HOST_DESC_RE = re.compile(r"(?=[\w.-]*\d)(?=[\w.-]*[.-])[\w.-]{3,127}:?")
UNRAISABLE_S = 5.0  # seconds after `Exception ignored in:` in which its traceback is printed


def count_said(line: LogLine) -> tuple[str, str, int | None, str] | None:
    """A line that counts (COUNT_RE; not a bar, whose redraws are compared by their own key): its writer and its
    words with any stamp taken out, else None."""
    text = line.text
    if "/" not in text or "|" in text or COUNT_RE.search(text) is None:
        return None  # (first the cheap test: most Ray lines hold a path's `/` and no count)
    if COUNT_RE.search(words := STAMP_WORDS_RE.sub("", text)) is None:
        return None  # (its only count was a date's `11/29/26`)
    return line.source, line.worker, line.pid, words.strip()


def parse_record_step(text: str) -> tuple[int | None, int, dict[str, float]] | None:
    """A step line of another stack (RECORD_STEP_PATTERN): its number, where its metrics begin, and
    the step's own seconds where the line says them (Megatron's ms per iteration, `Step N | 9.5s`).
    A metric dict's number is ms-swift's `global_step`, else the n of a bar glued before it, else
    None: the engine counts it (PhaseEngine._record_number)."""
    m = RECORD_STEP_RE.search(text)
    if m is None:
        return None
    timings: dict[str, float] = {}
    if m.group(1) is not None or m.group(5) is not None:  # a metric dict: its metrics are the whole dict
        at = text.find("{")
        if "'train_runtime'" in text:
            return None  # the end-of-run summary
        if (own := GLOBAL_STEP_RE.search(text, at)) is not None:
            return int(own.group(1)), at + 1, timings
        bar = GLUED_BAR_RE.search(text, 0, at)
        return (int(bar.group(1)) if bar is not None else None), at + 1, timings
    if m.group(2) is not None:  # Megatron's iteration line, or a plain loop's `iter 831400 | … | 0.412 s/iter`
        if (ms := MEGATRON_STEP_MS_RE.search(text, m.end())) is not None:
            timings["step"] = float(ms.group(1)) / 1000
        elif (own := ITER_SECONDS_RE.search(text, m.end())) is not None:
            timings["step"] = float(own.group(1))
        return int(m.group(2)), m.end(), timings
    if m.group(6) is not None:  # a step's header (`===== Step 3/100 =====`): its metrics follow in a block
        return int(m.group(6)), m.end(), timings
    if m.group(7) is not None:  # torchtitan's: the loss follows the number
        return int(m.group(7)), m.end(7), timings
    if m.group(8) is not None:
        return int(m.group(8)), m.end(8), timings
    if m.group(9) is not None:
        return int(m.group(9)), m.end(), timings
    if m.group(10) is not None:  # a loop's own print: the parts it times, as it names them (`engine.step() 12328 ms`)
        if step_print(text) is None:
            return None  # an evaluation's or a save's step (`Validation step 5: loss 2.3`)
        for name, value, unit in PART_TIME_RE.findall(text, m.end(10)):
            # (`| time 3.4 s |`, `| iter_time 3.4 s |`: the whole step's time, not a part named "time")
            if (low := name.lower()) not in RUNNING_NAMES:
                timings["step" if low in WHOLE_STEP_NAMES else name] = float(value) / (1000 if unit == "ms" else 1)
        return int(m.group(10)), m.end(10), timings
    if m.group(11) is not None:  # MetricLogger's: the iteration within its epoch, its seconds after `time:`
        if (own := METRIC_LOGGER_TIME_RE.search(text, m.end())) is not None:
            timings["step"] = float(own.group(1))
        return int(m.group(11)) * int(m.group(13)) + int(m.group(12)), m.end(), timings  # counted across epochs
    if m.group(14) is not None:
        return int(m.group(14)), text.find("| train_inner |") + 15, timings
    timings["step"] = float(m.group(4))
    return int(m.group(3)), m.end(), timings


def stamp_bound(line: LogLine | None) -> str:
    """How a line's time bounds when it was written: "" its own stamp (or, live, its arrival), "before" the first
    stamp after it (history: a line before any stamp), "after" the nearest stamp before it (history's date for an
    unstamped line)."""
    if line is None or line.ts is not None or not line.backlog:
        return ""
    return "before" if line.undated else "after"


def stated_elapsed(text: str, bar: bool) -> float | None:
    """Seconds a line says something had already run: a bar's elapsed time (`bar`: the line is one; the largest of
    its glued redraws), or `timed out after 900s`, `ran for 1800417 milliseconds`, `took 241.9 seconds`."""
    seconds = None
    if bar:
        for m in BAR_ELAPSED_RE.finditer(text):
            value = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
            seconds = value if seconds is None else max(seconds, value)
    if ("took" in text or "ran for" in text or "timed out after" in text or "finished in" in text) and (
            m := ELAPSED_RE.search(text)) is not None:  # (the words first: the pattern is slow to fail, 2 us a line)
        value = float(m.group(1)) / (1000.0 if m.group(2).startswith("m") else 1.0)
        seconds = value if seconds is None else max(seconds, value)
    return seconds


def time_is_bound(line: LogLine) -> bool:
    """Whether the time a line is fed at is no earlier than when it was written (its own stamp, the first stamp
    after it, or its arrival live): then that time minus what the line states ran is a bound on a start. A history
    line dated by the stamp before it is not."""
    return line.ts is not None or line.undated or not line.backlog


def _root_cause(text: str, failure: str = "") -> bool:
    """An exception line that says what went wrong, not a wrapper around it (Ray's, torchrun's,
    NCCL's result-code name) nor Hydra's banner; nor an actor's death after an error was already
    named (the engine that raised it took its actor down: SGLang's scheduler, then WorkerDict); nor the header of
    a C++ backtrace."""
    if failure and RAYLET_DEATH_RE.search(failure):
        return True  # the raylet's report of a death names less than the caller's traceback after it (its frames)
    if ACTOR_DIED_RE.search(text) and failure and not (HEADER_RE.search(failure) or HYDRA_WRAPPER_RE.match(failure)):
        return False  # any error named first (a timeout, an abort), not only an exception line; Hydra's names none
    if failure and not HEADER_RE.search(failure) and POINTS_BACK_RE.search(text):
        return False  # a consequence that points back at the error already named
    if ABORTED_RE.search(text) and TIMEOUT_RE.search(failure):
        return False  # the call a collective's timeout aborted (`NCCL communicator was aborted`): the timeout is it
    if PEER_LOST_RE.search(text) and FAULT_RE.search(failure):
        return False  # a rank that lost its peer after a fault (gloo's `Connection closed by peer`): the fault is it
    if failure and not HEADER_RE.search(failure) and CHILD_EXIT_RE.search(text):
        return False  # a launcher's report that the rank it ran exited (DeepSpeed's, torch.distributed.launch's)
    text = RANK_PREFIX_RE.sub("", text, count=1)
    # (Ray's wrapper is the root cause where it is all Ray kept: `RayTaskError(SyntaxError): <no detail available>`
    # names the exception, and no line after it will)
    return not (text.startswith("nccl") or ("RayTaskError(" in text and not NO_DETAIL_RE.search(text))
                or "ChildFailedError" in text)


def _framed(text: str) -> bool:
    """A traceback's frame, or the code line under one (`    old_log_prob = self.actor_rollout_wg.…`), also behind the
    stamp a log collector put before it or torch's `[rank0]: `."""
    if text.startswith("[") and (m := CAPTURE_STAMP_RE.match(text) or RANK_PREFIX_RE.match(text)):
        text = text[m.end():]
    return FRAME_RE.match(text) is not None or text.startswith("    ")


def _number_of(found: Worded, tail: list[str], numbers: Sequence[int | None]) -> int | None:
    """The line number of the tail's line a guess stands on (its last occurrence), where the numbers are known."""
    if not found.line or len(numbers) != len(tail):
        return None
    return next((numbers[k] for k in range(len(tail) - 1, -1, -1)
                 if tail[k] == found.line or tail[k].startswith(found.line)), None)


def _cut_evidence(cut: str, tail: list[str], numbers: Sequence[int | None], line: LogLine | None) -> Evidence:
    """The last frame of a traceback the log ends in, cut before its exception line: what `failed` stands on."""
    return Evidence("failed (the log ends inside a traceback's frames, its exception line cut)",
                    line.source if line else "", _number_of(Worded("", cut, 0, line=cut), tail, numbers),
                    cut[:EVIDENCE_CHARS])


class PhaseEngine:
    def __init__(self, rules: RuleSet, register: Callable[[str | Pattern], int]) -> None:
        self.rules = list(rules.phases)
        self.stall_after = rules.stall_after
        self.stall_fixed = rules.stall_fixed
        # The matcher's ids of every pattern this engine reads.
        self.step_id = register(STEP_PATTERN)
        self.record_step_id = register(RECORD_STEP_PATTERN)
        self.fail_id = register(rules.fail_pattern)
        self.exception_id = register(EXCEPTION_PATTERN)
        self.handling_id = register(HANDLING_PATTERN)
        self.dead_pid_id = register(DEAD_PID_PATTERN)
        self.own_error_id = register(OWN_ERROR_PATTERN)
        self.what_id = register(r"^\s*what\(\): ")  # C++'s message for the exception `terminate called` names
        # Python's unraisable hook (an error in a `__del__`, at exit): the traceback after it ended nothing
        self.unraisable_id = register(r"Exception ignored in(?::| sys\.unraisablehook)")
        # torchrun's agent restarting its workers after one failed (`--max-restarts`): the run goes on from its start
        self.restart_id = register(r"\bWorker group FAILED\. \d+/\d+ attempts left; will restart worker group")
        # A launch's own first lines: after a run that trained or ended, the job was started again into the same file
        self.new_run_id = register(NEW_RUN_PATTERN)
        self.probe_id = register(PROBE_PATTERN)
        self.step_collective_id = register(STEP_COLLECTIVE_PATTERN)
        self.bar_id = register(BAR_PATTERN)  # a tqdm bar's rate: its redraws are compared (_is_progress)
        self.bar_done_id = register(BAR_DONE_PATTERN)
        self.own_wait_id = register(OWN_WAIT_RE.pattern)
        self.idle_ids = frozenset(register(p) for p in rules.idle_patterns)
        # Hint lines shown only with their evidence (Hint.seen): each pattern's id, and those a line matched.
        self.seen_ids: dict[int, str] = {}
        self.seen_registered: Counter[int] = Counter()  # how often each was registered as evidence (Analysis.once)
        for rule in rules.phases:
            for hint in (rule.hint, rule.fail_hint, rule.timeout_hint):
                for text in ((*hint.seen.values(), *hint.unseen.values()) if hint is not None else ()):
                    self.seen_ids[evidence := register(text)] = text
                    self.seen_registered[evidence] += 1
        self.start_ids: dict[int, list[PhaseRule]] = {}
        self.done_ids: dict[int, list[PhaseRule]] = {}
        self.start_of: dict[str, int] = {}  # rule name -> the id of its start / done / fail pattern
        self.done_of: dict[str, int] = {}
        self.fail_of: dict[str, int] = {}
        for rule in self.rules:
            self.start_of[rule.name] = sid = register(rule.start)
            self.start_ids.setdefault(sid, []).append(rule)
            if rule.done is not None:
                self.done_of[rule.name] = did = register(rule.done)
                self.done_ids.setdefault(did, []).append(rule)
            if rule.fail is not None:
                self.fail_of[rule.name] = register(rule.fail)
        self.rule_ids = frozenset([*self.start_ids, *self.done_ids, *self.fail_of.values(), self.fail_id,
                                   self.probe_id, self.step_id, self.record_step_id, self.step_collective_id])
        # History's fast lines (history.HistoryReader._fast_run): ids whose only effect is a step, a bar or a start.
        self.quick_ids = frozenset([self.step_id, self.bar_id, self.bar_done_id, *self.start_ids]) - frozenset(
            [*self.done_ids, *self.fail_of.values(), self.fail_id, self.probe_id, self.exception_id, *self.idle_ids,
             *self.seen_ids])
        self._quick_rules: dict[tuple[int, ...], list[PhaseRule]] = {}
        self._fresh_run()
        # Runs the file held before this one (a job started again into the same log): _new_run.
        self.earlier_runs: list[EarlierRun] = []
        self.order = {rule.name: i for i, rule in enumerate(self.rules)}
        self.by_name = {rule.name: rule for rule in self.rules}
        self.step_phases = {name for rule in self.rules for name in rule.inner}
        self.probe_rules: dict[str, PhaseRule] = {}  # phases the probe named that no rule knows
        self.rollout_seen = False  # a rollout engine or teacher has run: the step has more parts than its update
        # A step's own part was generation: an RL trainer's loop, whichever trainer wrote it (SkyRL's timers), so its
        # parts keep their RL names (`actor update`, not `model update`) where no known trainer was named.
        self.rollout_in_step = False
        # HF Trainer's step records count completions and rewards (STEP_ROLLOUT_RE): its training_step is the whole
        # RL step, no one part of it; `loss_rollout`: its compute_loss too (LOSS_ROLLOUT_RE).
        self.step_rollout = False
        self.loss_rollout = False
        self._writer_last: dict[tuple[str, int | None], float] = {}  # each writer's last stamp (_writer_stamp)
        self.latest_stamp = 0.0  # the latest stamp fed (a next run's first line comes after it: _new_run)
        # (time, writer, steps counted by then) of the last stamp fed
        self._last_stamp: tuple[float, tuple[str, int | None], int] | None = None
        self.last_progress: float | None = None
        self.last_activity: float | None = None
        # The latest time the run was surely under way by, from a line's own elapsed time (a bar's, `ran for N ms`):
        # at or before the first stamp where the log starts mid-run. Its line is `began_evidence`.
        self.began_by: float | None = None
        self.began_evidence: Evidence | None = None
        self._early = 0  # named lines read for it so far (EARLY_LINES)
        # The lines claims stand on (Evidence): the one being fed, the failure's, the last progress's.
        self._line: LogLine | None = None
        self._progress_line: LogLine | None = None
        self._progress_bounded = False  # last_progress moved to the first stamp after that line (it had none)
        self.curves = Curves()  # every metric of every step, down-sampled (analysis/curves.py)
        self._bar_keys: dict[str, str] = {}
        self._autoscaler_anchor: tuple[float, float] | None = None  # (its offset, our time) at its first line
        # The longest a failure line states something ran (a collective's `ran for 607342 milliseconds`, its bar's
        # elapsed): the run went on at least that long, whatever its stamps span (unstamped lines after the last).
        self.ran_for: float | None = None
        self.ran_evidence: Evidence | None = None
        self._user_task_phases = rules.task_phases
        self._task_phaser: TaskPhaser | None = None

    def _fresh_run(self) -> None:
        """The state of one run: all of it starts again where the file holds the next run (_new_run, which starts the
        curves again too, as replay set them up); the rest (the clock, the job's kind, the last progress) is the
        file's."""
        self.seen_matched: set[str] = set()  # the hint lines' evidence this run's lines matched (Hint.seen)
        self.timeline: deque[PhaseSpan] = deque(maxlen=MAX_SPANS)
        self.first_spans: list[PhaseSpan] = []  # the start-up sequence survives the bound above
        # A finish only a process's end (wandb's end-of-run block) or a save's `model saved.` made: what to put back
        # if the job goes on (a phase begins after it) or, after wandb's, a failure follows (a Ray actor's wandb
        # finishes as the actor dies, before its caller's traceback): (that span, the span before, its end and
        # status, the phase and part under way then)
        self._soft_finish: tuple[PhaseSpan, PhaseSpan | None, float | None, str, PhaseRule | None,
                                 PhaseRule | None] | None = None
        self._saved_end = False  # that finish was a `model saved.` (a script may save after each epoch), not wandb
        self.current: PhaseRule | None = None
        self.inner: PhaseRule | None = None  # a per-step sub-phase of `current` (its rule's `inner`)
        self.inner_since: float | None = None
        self.inner_bound = ""  # stamp_bound of the line inner_since came from
        self._inner_evidence: Evidence | None = None  # the line that named the sub-phase, where one did
        self._ran: set[str] = set()  # the phases a span was opened for
        self._epoch_steps = False  # OpenRLHF's `Train step of epoch` bar seen: its `Train epoch: 100%|` ends training
        self._busy_engines: set[tuple[str, int | None, str]] = set()  # engines whose stats said requests ran (_engine)
        self._finished: set[str] = set()  # the phases a span was closed for by their own done line
        self._failed_at: float | None = None  # when the current failure was first seen
        self._own_wait: tuple[float, float] | None = None  # a wait since no progress: when it began, its own limit
        self._fail_step = -1  # the last step seen then: a later one says the run went on (_survived)
        self._header_of: tuple[str, bool] = ("", False)  # the failure, and whether it is a traceback's header only
        self.failure = ""
        self._gave_up = False  # the failure's first line was a wait giving up (vLLM's `Engine iteration timed out`)
        self._want_exception_line = False
        self._handled = False  # the failure is a fault whose handler raised in turn: its exception line is not it
        self._terminated: LogLine | None = None  # a failure that is C++'s `terminate called`: its `what():` names it
        self._dead_pid: int | None = None  # the process an actor death the failure reports names (its `pid:`)
        # A Ray process's error (its line, time, steps counted then) while it is its last named line.
        self._pid_errors: dict[int, tuple[LogLine, float, int]] = {}
        self.actor_named = False  # a line that started actor init named the actor (engine.py: _roleless_load)
        self._unraisable: tuple[str, int | None, float] | None = None  # `Exception ignored in:`: its source, pid, time
        self._failure_line: LogLine | None = None
        self._bar_line: LogLine | None = None  # the loop's bar, as last drawn
        # torchrun's restart after a failure (_restarted): what to undo if the restart never ran (_restart_refused)
        self._restart: tuple[Any, ...] | None = None
        self.restart_evidence: list[Evidence] = []
        # The last bar that moved outside a loop (lm-evaluation-harness's `Running loglikelihood requests: 100%|…
        # [06:08<00:00`, after the last stamp): its elapsed time bounds the run's length too (stated_run).
        self._other_bar_line: LogLine | None = None
        self.stats = StepStats()
        self.recent_steps: deque[tuple[int, float]] = deque(maxlen=MAX_RECENT_STEPS)
        self._last_step_text = ""
        self._own_seconds: tuple[int, float] | None = None  # (step, seconds) a step line said it took
        # Each writer's last line that counts, stamp aside (two writers printing the same count in turn still repeat).
        self._count_said: dict[tuple[str, str, int | None], str] = {}
        self._last_step: StepInfo | None = None
        self.bar_count: tuple[int, int] | None = None  # the last bar of a stepping phase: (n, total)
        self._loop_bar: str | None = None  # the loop's bar, by its text before the percentage (_loop_bar_at)
        self.bar_rate: float | None = None  # seconds per item the loop's bar said last (its `s/it`, or 1 / `it/s`)
        self.bar_pace: float | None = None  # seconds per item of the last slow bar (`218.61s/it`) in a stepping phase
        # The last metric dict (_record_number): its step, its text, whether its step was its own
        # (not counted), and the steps between the last two that had their own.
        self._record: tuple[int, str, bool] = (0, "", False)
        self._record_gap: int | None = None  # steps between two records, once two numbered ones said it
        # (the tail it read, what its frames and its lines say)
        self._words_read: tuple[tuple[str, str, int, str, str, str], list[Worded | None]] | None = None
        # The last line a phase rule acted on (a start, a done): a line's words before it say nothing the rules do
        # not know better (`Starting weight synchronization`, then the rules' `✓ Rollout weights updated`).
        self._ruled_line = ""

    # --- input ----------------------------------------------------------------------------------

    def feed(self, line: LogLine, t: float, ids: Collection[int], step: Any = None) -> None:
        """One line at time `t`; `ids`: the engine's patterns it matches (from the matcher); `step`:
        its `parse_step`, when that was done already (history is parsed where it is read)."""
        before, latest = self._line, self.latest_stamp  # (the line fed last, the latest stamp by then: _new_run)
        t = self._arrived(line, t)
        text = line.text
        if self._header_of[0] is not self.failure:  # once per failure, not per line of a flood after it
            self._header_of = (self.failure, HEADER_RE.search(self.failure) is not None)
        header_only = self._header_of[1]  # a failure no exception line has named yet
        if self.unraisable_id in ids:
            self._unraisable = (line.source, line.pid, t)
            return
        if self.restart_id in ids and self._failed():
            self._restarted(t)
            return
        if self.new_run_id in ids and self._run_over() and self.fail_id not in ids and (
                before is None or before.source == line.source) and (
                line.ts is None or t >= latest - NEW_RUN_SLACK):
            # (not another node's log read after this one's, `cat node*.log` or two files: its stamps go back)
            self._new_run(t, line)
        if self._unraisable is not None and self._ignored(line, t, ids):
            return
        raised = False  # this line is the exception a traceback ends in
        if self._terminated is not None and self.what_id in ids:
            if (line.source, line.pid) == (self._terminated.source, self._terminated.pid) and self._failure_line is (
                    self._terminated):
                self.failure, self._failure_line = text.strip(), line  # what the uncaught C++ exception said
            self._terminated = None
        if self.handling_id in ids and self.failure and FAULT_RE.search(self.failure):
            self._handled = True
        if self._handled and self.exception_id in ids and not header_only:
            self._handled = False  # the handler's own error: the fault above stays the failure
        elif self.exception_id in ids and self._restart is not None and RDZV_CLOSED_RE.search(text):
            self._restart_refused(line)
            return
        elif self.exception_id in ids and (self._want_exception_line or self._failed()) and (
                _root_cause(text, self.failure) or header_only):
            self._gave_up = self._gave_up or bool(self.failure and GAVE_UP_RE.search(self.failure))
            self.failure = text.strip()  # the last exception of the chain is the root cause
            self._failure_line = line
            self._want_exception_line = False
            raised = True
        if self._is_progress(line, ids):
            self._progress(t, line)
        if not ids:
            return
        if self.own_wait_id in ids and (wait := OWN_WAIT_RE.search(text)) is not None:
            self._own_wait = (t - float(wait.group(1)), float(wait.group(2)))
        if self.dead_pid_id in ids and ACTOR_DIED_RE.search(self.failure):
            self._dead_pid = int(text.split(":", 1)[1])
            own, said, steps = self._pid_errors.get(self._dead_pid, (None, t, 0))
            if own is not None and t - said <= OWN_ERROR_S and steps == self.stats.count:
                # The dead actor's own last error, printed just before its caller's report (Ray interleaves them:
                # audit 25, cumem's `CUDA Error: out of memory` above ActorDiedError): what ended it is here. Not
                # one the run went on after (steps since: an OOM it retried at half the batch, the review of session
                # 27); history sees only named lines, so an actor's plain lines after it cannot say so.
                self.failure, self._failure_line = own.text.strip(), own
        elif (self.fail_id in ids and line.pid is not None and line.pid == self._dead_pid
              and ACTOR_DIED_RE.search(self.failure) and FATAL_SIGNAL_RE.search(text)):
            # The dead actor's own end, flushed after its caller's report (audit 22: `Cannot load symbol
            # cublasLtGetVersion`, then its SIGABRT): what ended it is here, not only in its own log.
            self.failure, self._failure_line = text.strip(), line
        if line.pid is not None and line.worker:  # each Ray process's last line, if an error (an actor's own end)
            if (self.fail_id in ids or self.exception_id in ids or self.own_error_id in ids) and not (
                    ACTOR_DIED_RE.search(text)):
                if len(self._pid_errors) >= MAX_PID_ERRORS:
                    self._pid_errors.clear()
                self._pid_errors[line.pid] = (line, t, self.stats.count)
            elif line.pid in self._pid_errors:
                del self._pid_errors[line.pid]
        if self._early < EARLY_LINES and time_is_bound(line):
            self._early += 1  # `t` is no earlier than when the line was written: t minus its elapsed is a bound
            self._note_began(line, t, self.bar_id in ids)
        if self.fail_id in ids and (ran := stated_elapsed(text, self.bar_id in ids)) and ran > (self.ran_for or 0.0):
            self.ran_for, self.ran_evidence = ran, Evidence.of("the run went on at least this long (it states)", line)
        if self.seen_ids and not self.seen_ids.keys().isdisjoint(ids):
            self.seen_matched.update(self.seen_ids[i] for i in ids if i in self.seen_ids)
        if self.current is None and self.bar_id in ids and self.start_ids.keys().isdisjoint(ids):
            self._bar_phase(text, t)  # a rule's own bar (verl's `Training Progress`) names its phase instead
        if self.rule_ids.isdisjoint(ids):
            return
        if self.step_id in ids and (step is not None or (step := self.parse_step(text)) is not None):
            self._step(step, t, text)
        elif self.step_id in ids and (m := STEP_RE.search(text)) is not None:
            self.curves.add_text(int(m.group(1)), text[m.end():])  # a validation's record (VALIDATION_ONLY_RE)
        elif self.record_step_id in ids and (record := parse_record_step(text)) is not None:
            # A dict with no number of its own, while no two numbered ones said how many steps one logging interval
            # holds (HF's logging_steps): its stamp times an interval, not a step.
            timed = record[0] is not None or self._record_gap is not None
            self.stats.named.update(k for k in record[2] if k != "step")  # (the log's own names, not timing_s/)
            self._step(self._record_number(record, text), t, text, timed=timed)
        collective = self.step_collective_id in ids  # placed after a start this line makes (a bar glued before it)
        if self.fail_id in ids and line.worker.startswith(REFERENCE_ACTOR) and self._reference_pass(text, t):
            return
        for rule in self._rules_of(ids):
            started = self.start_of[rule.name] in ids
            if started and rule.inner and DATA_BAR_RE.match(text) and DATASET in self.by_name and (
                    self._loop_began() is None and not self.stats.count):
                # a bar no words name, counting datasets' map/filter batches: before the loop began (once it
                # did, HF's `***** Running training *****`, a bar in examples/s is the loop's own)
                rule = self.by_name[DATASET]
            if started and rule.name == NCCL_INIT and "/elastic/" in text and self.current is not None and (
                    self.current.name == RESOURCE_POOL):
                continue  # a frame of torchrun's agent in the rendezvous its own line opened as the resource pool
            if self.done_of.get(rule.name) in ids:
                if not self._late(line, rule, t):
                    state = self._state()
                    self._done(rule, t)
                    if self._state() != state:
                        self._ruled_line = line.raw or text
                return
            if started and self._waited_on(rule, text):
                continue  # the others' wait timed out on this phase: it failed here (_fail below)
            if started and (self.fail_id in ids or self.exception_id in ids) and rule.name == self.loop_name() and (
                    self.current is not None and self.current.name == CHECKPOINT_LOAD and not self.stats.count
                    and not self.recent_steps):
                continue  # a task error of the loop's method right after a resume's load, no step run: the loop did
                # not run; the resume failed (OpenRLHF's fit restores the data position first, audit 26)
            if started and not rule.terminal and self._soft_finished() and not self._exit_flush(rule, text):
                self._unfinish()  # a phase begins after wandb's end block or a save's: the job went on
            if started:
                before = self.timeline[-1] if self.timeline else None
                failure, failure_line = self.failure, self._failure_line
                self._not_a_loop(rule, t)
                if not self._late(line, rule, t) and not self._behind(rule):
                    state = self._state()
                    if rule.nested and ENGINE_DIST_RE.search(text) and ACTOR_INIT in self._ran and (
                            ROLLOUT_INIT in self.by_name and ROLLOUT_INIT not in self._ran):
                        self._start(self.by_name[ROLLOUT_INIT], t)  # the engine's group is made in its start-up
                    self._start(rule, t)
                    if self._state() != state:  # not a repeat of the phase's own start (an evaluation's bar)
                        self._ruled_line = line.raw or text
                        if ((header_only or failure) and _framed(text)) or NATIVE_FRAME_RE.search(text):
                            self._began_before(rule)  # a stack printed names where a process already was
                    if self.bar_done_id in ids and self.inner is rule and BAR_DONE_RE.search(text):
                        self.inner = None  # a part of the step whose own bar reached its total is over
                    elif self.bar_done_id in ids and rule.name == GENERATION and self.current is rule and (
                            BAR_DONE_RE.search(text)):
                        self._done(rule, t)  # an offline generate's bar at its total (vLLM's `Processed prompts`)
                if collective:
                    self._step_collective(text, t)
                if header_only and before is not self.timeline[-1] and _framed(text):
                    self._carry_traceback(before, failure, failure_line)
                elif (before is not None and before is not self.timeline[-1] and before.status == "failed"
                      and self._failed_at is not None and 0 <= t - self._failed_at <= FRAMES_AFTER
                      and _framed(text)):
                    # The driver's traceback right after a worker's crash (an abort, a signal) names where the
                    # driver was: the failure belongs there, not to the phase the crash line came in.
                    self._not_failed(before)
                    self.timeline[-1].status = "failed"
                    if not self.failure:  # the crash line stays the failure until an exception line names it
                        self.failure, self._failure_line = failure, failure_line
                # A RayTaskError naming the worker method that failed, or an exception that names
                # its phase (SGLang's `Not enough memory … --mem-fraction-static`): it failed there,
                # not in the phase its traceback's first line happened to come in.
                if self.fail_id in ids or raised:
                    if before is not None and before is not self.timeline[-1] and before.status == "failed" and (
                            raised or header_only):
                        self._not_failed(before)
                    self._fail(text, t)
                return
        if collective:
            self._step_collective(text, t)
        if self.probe_id in ids and self._probe(text, t):
            return
        if self.fail_id in ids or (self.current is not None and self.fail_of.get(self.current.name) in ids):
            self._fail(text, t)

    def feed_unmatched(self, line: LogLine, t: float) -> bool:
        """A line no pattern matched (a flood's tail is mostly such lines): what feed() does with it, done directly,
        which is to date it and count it as activity and progress. False, doing nothing, where feed() reads such a
        line further: an autoscaler's `+19m35s`, a bar's redraw (`|`: a repeat is no progress), the lines after
        `Exception ignored in`."""
        if self._unraisable is not None or "|" in line.text or line.worker in ("autoscaler", "scheduler"):
            return False
        t = self._arrived(line, t)
        if not self._said_again(line):
            self._progress(t, line)
        return True

    def _said_again(self, line: LogLine) -> bool:
        """A line that counts saying what the last one said, its stamp aside: a status printed again while nothing
        moved (`52/64 trajectories finished`), no progress."""
        said = count_said(line)
        return said is not None and self.note_count(said)

    def note_count(self, said: tuple[str, str, int | None, str]) -> bool:
        """Record a line that counts (count_said) as its writer's last (history's last one, for the live lines after
        it): True where that writer said the same last time."""
        writer, words = said[:3], said[3]
        if len(self._count_said) > 1000 and writer not in self._count_said:
            self._count_said.clear()  # (a junk log's bound)
        again = self._count_said.get(writer) == words
        self._count_said[writer] = words
        return again

    def _arrived(self, line: LogLine, t: float) -> float:
        """The line now fed, at `t`, as activity (an autoscaler's at the time its `+19m35s` says, which is returned;
        a stamp of another writer checked for a zone's jump): what every line does, matched or not."""
        if line.worker in ("autoscaler", "scheduler"):
            t = self._autoscaler_time(line, t)
        elif line.ts is not None:
            self._writer_stamp(line, t)
            said = self._progress_line
            if said is not None and not self._progress_bounded and stamp_bound(said) == "after":
                # History dated the last progress line, unstamped, at the stamp before it; it came no later than
                # this first stamp after it, and a silence is told from there, not longer (audit 24: "no progress
                # for 20m15s" where verl's own wait said 2 minutes).
                self._progress_bounded = True
                self.last_progress = max(self.last_progress or t, t)
        self.last_activity = t if self.last_activity is None else max(self.last_activity, t)
        self._line = line
        return t

    def stated_run(self) -> tuple[float | None, Evidence | None]:
        """The longest a line states the run went on (a failure's `ran for 1800417 milliseconds`, the loop's bar at
        `33/1000 [10:42<5:13:00, …]`: it ran 10:42 by then), with the line: a bound on the run's length where its
        stamps span less (a log stamped only at start-up). Steps that time themselves (verl's `timing_s/step`) ran
        one after another: their seconds add up to another such bound."""
        ran, evidence = self.ran_for, self.ran_evidence
        for line in (self._bar_line, self._other_bar_line):
            if line is not None and (bar := stated_elapsed(line.text, True)) is not None and bar > (ran or 0.0):
                ran, evidence = bar, Evidence.of("the run went on at least this long (the bar states it)", line)
        own = (self.stats.summary().get("timing") or {}).get("step") if self.stats.count else None
        # Records printed every N steps (DeiT's MetricLogger: every 10th iteration, each its own time) stand for the
        # steps their numbers span, not one each (review of session 23: a 12-minute run read ≥1m15s).
        stats = self.stats
        spanned = stats.last - stats.first + 1 if stats.first is not None and stats.last is not None else 0
        steps = max(own.get("count") or 0, spanned) if own else 0
        if own and own.get("count") and own.get("mean_s") and steps * own["mean_s"] > (ran or 0.0):
            ran = steps * own["mean_s"]
            evidence = Evidence(f"the run went on at least this long (its {steps} steps' own times, "
                                f"timing_s/step, add up to it); the last step's metrics", "", None,
                                (self._last_step_text or "")[:EVIDENCE_CHARS])
        return ran, evidence

    def _note_began(self, line: LogLine, t: float, bar: bool) -> None:
        """A line that says how long something already ran (a bar's elapsed, `ran for 1800417 milliseconds`):
        the run was under way at least that long before `t`, however late its first stamp comes."""
        seconds = stated_elapsed(line.text, bar)
        if seconds and (self.began_by is None or t - seconds < self.began_by):
            self.began_by = t - seconds
            self.began_evidence = Evidence.of("under way by then (the time it states it ran)", line)

    def _reference_pass(self, text: str, t: float) -> bool:
        """A collective of the reference model's actor (OpenRLHF's `ReferenceModelRayActor`) timed out while a step
        is underway: in a step that model only computes the reference log-probs, so that is where it hung, even on
        its group's first collective (SeqNum=1), which at start-up would be the communicator's set-up."""
        ref = self.by_name.get(REF_LOG_PROB)
        underway = self.current
        if ref is not None and underway is ref and self._failed():
            return True  # the same timeout again (the watchdog thread's exception line): it stays there
        if (ref is None or underway is None or not TIMEOUT_RE.search(text)
                or (self._failed() and not self._death_report())
                or not (underway.inner or underway.name in self.step_phases)
                or not self.timeline or self.timeline[-1].end is not None):
            return False
        self._start(ref, t)
        self._fail(text, t)
        return True

    def _writer_stamp(self, line: LogLine, t: float) -> None:
        """A stamped line from another writer than the last stamped one, its stamp a whole number of half-hours
        (one hour or more, within 5 minutes) away: likely two clocks in two zones, not that much time. The
        span it falls in says so instead of a duration (a lone jump cannot tell a zone from a real wait)."""
        writer = (line.worker, line.pid)
        last = self._last_stamp
        self._last_stamp = (t, writer, self.stats.count)
        if t > self.latest_stamp:
            self.latest_stamp = t
        own = self._writer_last.get(writer)
        if len(self._writer_last) < 256 or own is not None:
            self._writer_last[writer] = t
        if last is None or last[1] == writer or not self.timeline:
            return
        if own is not None and abs(own - last[0]) < 1800:
            return  # its own clock agreed with the other writer's before: the gap is time that passed (audit 16)
        gap = t - last[0]
        if not _zone_left(gap, 0.0):
            return
        passed = 0.0  # what the steps logged between the two stamps took: time that went by (audit 20)
        if self.stats.count > last[2]:
            timing = (self.stats.summary().get("timing") or {}).get("step")
            pace = (timing or {}).get("mean_s") or (self._step_time() if timing is None else 0.0)
            passed = (self.stats.count - last[2]) * (pace or 0.0)
        if zone := _zone_left(gap, passed):
            self.timeline[-1].clock_jump = round(zone / 1800) * 1800.0

    def note_zone_jump(self, before: float, after: float) -> None:
        """History's two consecutive stamps of two writers a whole number of half-hours apart (HistoryClock): the
        span that runs across them says so, as _writer_stamp marks one live (its stamps date lines no rule names)."""
        ran = self.stated_run()[0]
        first = self.spans()[0].start if self.timeline else before
        last = max(after, self._last_stamp[0]) if self._last_stamp is not None else after  # (stamps, not mtime)
        # What the steps' own times need of the gap (all they ran, less the stamps' span outside it) is time passed;
        # a zone is what is left, still whole half-hours (audit 20: 24 steps of 216 s filled a 1h26m gap).
        needed = max(0.0, (ran or 0.0) - max(0.0, last - first - (after - before)))
        zone = _zone_left(after - before, needed)
        if not zone:
            return
        zones = round(zone / 1800)
        for span in self.timeline:
            if span.start <= before and (span.end is None or span.end >= after):
                span.clock_jump = zones * 1800.0

    def quick_start(self, ids: list[int]) -> bool | None:
        """What feed() does to the phases with a line whose ids are all in `quick_ids` and that has no
        stamp of its own: None if it would change the phase (feed it), True if it made a sub-phase
        current (the caller sets `inner_since`), False if nothing changed but a sub-phase ending."""
        rules = self._quick_rules.get(tuple(ids))
        if rules is None:
            rules = self._quick_rules[tuple(ids)] = [r for r in self._rules_of(ids) if self.start_of[r.name] in ids]
        if not rules:
            return None if self.current is None and self.bar_id in ids else False  # a bar may name the phase
        rule = rules[0]  # feed() acts on the first rule only
        if self.step_rollout and rule.name == UPDATE:
            return None  # HF's training_step may start no part (_behind reads the line)
        if self.bar_done_id in ids and len(rules) > 1:
            return None  # a bar at 100% and another rule's line glued to it (feed() tells whose bar it is)
        if self._is_inner(rule):
            if self._behind(rule):
                return False
            if self.bar_done_id in ids:  # the part's own bar at its total (feed(): BAR_DONE_RE)
                self.inner = None
                return False
            if self.inner is rule:
                return False
            self.inner = rule
            self.rollout_seen |= rule.name in ROLLOUT_PHASES
            self.rollout_in_step |= rule.name == GENERATION
            return True
        if rule is self.current and self.timeline and self.timeline[-1].end is None:
            if self.inner is not None and self.inner.name == VALIDATION and self.bar_id in ids:
                return None  # an evaluation's bar or the loop's again (feed(): _evaluation_bar)
            if self.bar_done_id in ids and rule.name == GENERATION:
                return None  # an offline generate's bar at its total may end it (feed())
            if not (self._failed() and self.bar_id in ids):
                self.inner = None  # a repeated start of the current phase ends its sub-phase (_start)
            return False
        return None

    def only_evidence(self, ids: list[int]) -> bool:
        """A line whose only matches are hints' evidence (Hint.seen): one of each kind is enough to read, so a
        flood of them (NCCL's INFO lines) is sieved, and history reads one per chunk."""
        evidence = self.seen_ids
        return ids[0] in evidence and all(i in evidence for i in ids)

    def bar_moved(self, line: LogLine) -> bool:
        """A bar line's redraw changed something other than its clock (see _is_progress)."""
        return self._is_progress(line, (self.bar_id,))

    def _autoscaler_time(self, line: LogLine, t: float) -> float:
        """When an autoscaler line was printed: its `+19m35s` counted from the first one seen (dated by
        the stamped lines around it). After the fact its warnings, every 30 s while a job waits for
        resources, are all that tells how long the log went on without progress."""
        m = AUTOSCALER_RE.match(line.raw)
        if m is None or line.ts is not None:
            return t
        offset = int(m.group(1) or 0) * 3600 + int(m.group(2) or 0) * 60 + int(m.group(3) or 0)
        anchor = self._autoscaler_anchor
        if anchor is None or offset < anchor[0]:  # the first line, or a restarted autoscaler
            self._autoscaler_anchor = anchor = (offset, t)
        return max(t, anchor[1] + offset - anchor[0])

    def _rules_of(self, ids: Collection[int]) -> list[PhaseRule]:
        """The rules a line's ids start or finish, in the rules' order (the first one wins), a terminal
        rule first: verl's `Training Progress: 100%|` bar starts the training loop's pattern too."""
        found: list[PhaseRule] = []
        for i in ids:
            found += self.start_ids.get(i, ())
            found += self.done_ids.get(i, ())
        if len(found) > 1:
            found = sorted({id(r): r for r in found}.values(),
                           key=lambda r: (not r.terminal, self.order.get(r.name, 0)))
        return found

    def _phase_named(self, name: str, order: int, start: str = "") -> PhaseRule | None:
        """A phase no rule defines (a probe's, a bar's, the unnamed one after a finished phase), made once; at
        most MAX_MADE_PHASES of them (None past that). `order`: where it sorts among the rules."""
        rule = self.by_name.get(name) or self.probe_rules.get(name)
        if rule is None:
            if len(self.probe_rules) >= MAX_MADE_PHASES:
                return None
            rule = self.probe_rules[name] = PhaseRule(name=name, start=Pattern(re.escape(start or name)))
            self.order[name] = order
        return rule

    def _probe(self, text: str, t: float) -> bool:
        """`phase 'NAME' START|DONE|FAILED` for a NAME no rule knows: a phase of that name."""
        m = PROBE_RE.search(text)
        if m is None:
            return False
        name, what = m.group(1), m.group(2)
        # Where it ran: after the phase it began in, so no built-in phase counts as later than it.
        rule = self._phase_named(name, self.order.get(self.current.name, 0) if self.current else 0,
                                 f"phase '{name}' START")
        if rule is None:
            return False
        if name not in self.by_name:
            self.start_of[name] = self.probe_id
        if what == "START":
            self._start(rule, t)
        elif what == "DONE":
            self._done(rule, t)
        else:
            if self.current is not rule:
                self._start(rule, t)
            self._fail(text, t)
        return True

    def _bar_phase(self, text: str, t: float) -> None:
        """With no phase known, a progress bar's own description names where the job is (`Rollout generation:
        62%|… 40/64`): the structure alone gives a phase, until a rule names one."""
        text = RANK_PREFIX_RE.sub("", text, count=1)
        m = BAR_DESC_RE.match(text) or TAGGED_BAR_DESC_RE.search(text, 0, 200)
        if m is None or HOST_DESC_RE.fullmatch(desc := m.group(1).strip()) or DATA_RATE_RE.search(text):
            return  # a bar in datasets' units (`Map:`, `Filter:`) prepares data: no phase of that name
        # A loop's bar (OpenRLHF's `Train epoch`, `Epoch`) is the training loop, whose rule knows the step's parts;
        # any other is named as it says (`Rollout generation`).
        worded = phase_of_words(desc)
        loop = self.by_name.get(LOOP) if worded is not None and worded[0] == LOOP else None
        rule = loop or self._phase_named(desc, 0)
        if rule is not None:
            self._start(rule, t)

    def note_skipped(self, t: float, line: LogLine | None = None) -> None:
        """Lines a flood sieve ruled out (no rule, idle pattern or bar in them) up to time `t`: all
        that feed() would have done with them is count them as activity and progress. `line`: the
        last of them, where the reader kept it (the evidence of that progress)."""
        self.last_activity = t if self.last_activity is None else max(self.last_activity, t)
        self._progress(t, line)

    def written_by(self, t: float) -> None:
        """History read from files last written at `t`: no progress in them came later. Stamps on a
        container's clock (vLLM in UTC+8 under a driver in UTC) can lie hours past the file's mtime,
        and a stall measured from them would never start (ClockSkew corrects live lines only)."""
        if self.last_progress is not None and self.last_progress > t:
            self.last_progress = t
        if self.last_activity is not None and self.last_activity > t:
            self.last_activity = t

    def feed_progress(self, line: LogLine, t: float, ids: Collection[int]) -> None:
        """An unfinished tqdm line changed: progress only if its counter moved, not its clock."""
        self.last_activity = t if self.last_activity is None else max(self.last_activity, t)
        self._line = line
        if self._is_progress(line, ids):
            self._progress(t, line)
            if self.current is None or self.start_of.get(self.current.name) not in ids:
                for rule in self._rules_of(ids):
                    if self.start_of[rule.name] in ids:
                        self._start(rule, t)
                        break

    def _is_progress(self, line: LogLine, ids: Collection[int]) -> bool:
        if ids and not self.idle_ids.isdisjoint(ids):
            return False
        text = line.text
        if self._said_again(line):
            return False
        # A bar's redraw that changed nothing is no progress. (`|`-only lines a flood sieve dropped
        # count as progress: a flood is activity.)
        if self.bar_id in ids or "|" in text:
            key = (TQDM_CLOCK_RE if has_rate(text) else TQDM_BRACKETS_RE).sub("", text)
            bar = line.source + line.worker + text.split(":", 1)[0]
            if self._bar_keys.get(bar) == key:
                return False
            self._bar_keys[bar] = key
            if len(self._bar_keys) > 1000:
                self._bar_keys.clear()
            stepping = self.current is not None and (self.current.inner or self.inner is not None)
            if not stepping:
                self._other_bar_line = line
            if stepping and "s/it" in text and (pace := SLOW_BAR_RE.search(text)) is not None:
                self.bar_pace = float(pace.group(1))
            # The loop's own bar: in a stepping phase, or the bar that starts one (a log that begins with it).
            ended = self.current is not None and self.current.terminal  # (the final evaluation's bar, once trained)
            # (Not a bar another phase's line is glued to: SGLang's `0/23 [00:00<?, ?it/s][… TP0] Capture cuda graph
            # begin` starts the engine's capture, the rule feed() acts on.)
            first = next(iter(self._rules_of(ids)), None)
            # (Nor a bar that starts a phase outside the loop: a train function's `Loading checkpoint shards` after Ray
            # Train's loop began is the model's load, not the loop's bar.)
            outside = first is not None and not (first.inner or first.terminal) and first.name not in self.step_phases
            if ((stepping and not outside) or (first is not None and first.inner)) and (
                    count := BAR_COUNT_RE.search(text)) is not None and not DATA_BAR_RE.match(text) and (
                    not self._evaluation_bar(text)):
                self._loop_bar_at(line, count, last_redraw=ended)
        return True

    def _evaluation_bar(self, text: str) -> bool:
        """An undescribed bar inside a validation (HF's after `***** Running Evaluation *****`) that is not the loop's
        (another total): the evaluation's batches, not the loop's steps going on."""
        if self.inner is None or self.inner.name != VALIDATION or not PLAIN_BAR_RE.match(text):
            return False
        count = BAR_COUNT_RE.search(text)
        return count is not None and (self.bar_count is None or int(count.group(2)) != self.bar_count[1])

    def _loop_bar_at(self, line: LogLine, count: re.Match[str], last_redraw: bool = False) -> None:
        """A bar in a stepping phase: the loop's unless another, first seen and unfinished, is (nested tqdm bars:
        OpenRLHF's `Episode [1/1]` over each step's `make_experience` and `Train epoch` bars). Bars are told
        apart by their text before the percentage, digits aside (`Epoch 1/2` and `Epoch 2/2` are one bar).
        `last_redraw`: the run has finished; only the loop's own bar (its text and total), moving on, still counts
        (OpenRLHF prints its step bar's `250/250` after the epoch bar's 100% ended the run, audit 17), not a final
        evaluation's."""
        text = line.text
        begin = 0
        while (later := BAR_COUNT_RE.search(text, count.end())) is not None:  # redraws glued on one line:
            begin, count = text.find("]", count.end()) + 1, later  # the last one is the bar's state
        pct = BAR_PCT_RE.search(text, begin, count.start())
        key = BAR_KEY_DIGITS_RE.sub("#", text[begin: pct.start() if pct else begin]).strip()
        total = int(count.group(2))
        if last_redraw and (key != self._loop_bar or self.bar_count is None or self.bar_count[1] != total
                            or int(count.group(1)) < self.bar_count[0]):
            return
        if self._loop_bar not in (None, key) and self.bar_count is not None and self.bar_count[0] < self.bar_count[1] \
                and (self.bar_count != (0, total) or not int(count.group(1))):
            return  # an inner bar while the loop's is open (not the loop's own first draw renamed once it counts:
            # torchtune's `0/161`, then `1|161|Loss: 0.5973: 100%| 161/161`, audit 17; Lightning 1.x's `Training: 0/4`,
            # then `Epoch 0:  50%| 2/4`, audit 26)
        self._loop_bar, self.bar_count, self._bar_line = key, (int(count.group(1)), total), line
        rate = BAR_RATE_RE.search(text, count.end()) if has_rate(text) else None
        self.bar_rate = None if rate is None or not float(rate.group(1)) else (
            float(rate.group(1)) if rate.group(2) == "s/it" else 1 / float(rate.group(1)))
        if self.bar_rate is not None:
            # (told apart by its total too: HF's evaluation bar has no words either)
            self.stats.add_bar(self.bar_count[0], self.bar_rate, f"{key} /{self.bar_count[1]}")

    def _progress(self, t: float, line: LogLine | None = None) -> None:
        """Progress at `t`; `line`: the line that made it, None for lines read in bulk (no evidence)."""
        if line is not None and not line.text.strip():
            line = None  # a blank line is no evidence to cite
        if self.last_progress is None or t > self.last_progress:
            self.last_progress, self._progress_line, self._progress_bounded = t, line, False
            self._own_wait = None  # (a wait that states its limit is over once anything moves)
        elif t == self.last_progress and line is not None:
            self._progress_line = line

    def _open(self, name: str, t: float, claim: str = "started") -> PhaseSpan:
        """A new span at `t`; its evidence is the line fed now, cited for what it shows (`claim`)."""
        span = PhaseSpan(name=name, start=t, start_before=self._line is not None and self._line.undated,
                         start_after=stamp_bound(self._line) == "after")
        self._ran.add(name)
        if self._line is not None:
            span.evidence = Evidence.of(f"{name} {claim}", self._line)
        self.timeline.append(span)
        if len(self.first_spans) < 20:
            self.first_spans.append(span)
        return span

    def _drop(self, span: PhaseSpan) -> None:
        """A span that was only the failure's placeholder goes, from the timeline and the first spans kept (this
        span, not one equal to it)."""
        for spans in (self.timeline, self.first_spans):
            at = next((i for i, kept in enumerate(spans) if kept is span), None)
            if at is not None:
                del spans[at]

    def _not_failed(self, span: PhaseSpan) -> None:
        """A span the failure was first put in, which a later line moved elsewhere: done, and its line cited for
        what it started (`--why` said `after rollout init failed` beside a timeline that said done). A placeholder
        (`after dataset generation`) opened only for the failure goes."""
        if span.name.startswith("after ") and span in self.timeline and span is not self.timeline[-1] and (
                self.timeline[-1].start <= span.start + FRAMES_AFTER):
            self._drop(span)
            return
        span.status = "done"
        if span.evidence is not None and span.evidence.claim == f"{span.name} failed":
            span.evidence = replace(span.evidence, claim=f"{span.name} started")

    def _close_current(self, t: float) -> None:
        if self.timeline and self.timeline[-1].end is None:
            span = self.timeline[-1]
            span.end = max(t, span.start)
            span.end_after = stamp_bound(self._line) == "after"
            if span.status == "running":
                span.status = "done"

    def _engine(self) -> tuple[str, int | None, str]:
        """Which engine the line being fed is from: its process, and vLLM's `Engine 001:` or SGLang's `DP1`."""
        line = self._line
        if line is None:
            return "", None, ""
        text = line.text
        # (Most lines name neither: a substring test spares them the regex, a flood's thousands a second.)
        m = ENGINE_ID_RE.search(text, 0, 200) if "Engine " in text or "DP" in text else None
        return line.worker, line.pid, (m.group(1) or m.group(2)) if m is not None else ""

    def _start(self, rule: PhaseRule, t: float) -> None:
        text = self._line.text if self._line is not None else ""
        if rule is self.current and self._evaluation_bar(text):
            return  # the evaluation's own bar, which matches the loop's start too: the validation goes on
        if rule.name == ACTOR_INIT and self._line is not None and ACTOR_WORD_RE.search(self._line.raw or text):
            self.actor_named = True
        if rule.name == GENERATION and text and not EMPTY_ENGINE_RE.search(text):
            if len(self._busy_engines) > 256:
                self._busy_engines.clear()
            self._busy_engines.add(self._engine())
        wandb = rule.terminal and self.current is not rule and WANDB_END_RE.search(text) is not None
        if wandb and self._failed():
            return  # wandb.finish() runs as any process exits, a crashed one too: its block after an error ends nothing
        last = self.timeline[-1] if self.timeline else None
        if self._soft_finished() and self._exit_flush(rule, text):
            return  # the phase wandb ended, not a new one; a stop after it puts that phase back (_fail), audit 26
        undo = (last, last.end if last else None, last.status if last else "", self.current, self.inner)
        if "Train step of epoch" in text:
            self._epoch_steps = True
        elif rule.terminal and "Train epoch:" in text and not self._epoch_steps:
            return  # a loop's per-epoch bar at its total, not OpenRLHF's bar over the epochs (review of session 22)
        if rule.name in ROLLOUT_PHASES:
            self.rollout_seen = True
        if rule.name == CHECKPOINT_LOAD and FIT_RESUME_RE.search(text) and self._loop_began() is None and (
                (loop := next((r for r in self.rules if rule.name in r.inner), None)) is not None):
            self._start(loop, t)  # verl's fit resumes first: the load is the loop's, and a step follows it
        if self._after_validation(rule):
            # The rollout after a validation that ran before any step (val_before_train) is the first step's: the loop
            # began (EasyR1's `Start generating batch...` after `Finish validation.`, audit 20).
            self._start(next(r for r in self.rules if rule.name in r.inner), t)
        if self.current is None and rule.name in self.step_phases and rule.name not in ROLLOUT_PHASES \
                and rule.name not in (VALIDATION, CHECKPOINT_LOAD):
            # A part of a step only a trainer runs (an update, a log-prob pass) with no phase known (a log that begins
            # mid-run): the step is in its loop. An engine's work (generation, wake-up) may be an inference server's,
            # and an evaluation may run alone (lm-evaluation-harness, audit 18); a load may be a start-up's.
            self._start(next(r for r in self.rules if rule.name in r.inner), t)
        if self._is_inner(rule):
            self.rollout_in_step |= rule.name == GENERATION
            if self.inner is not rule:
                self.inner, self.inner_since, self.inner_bound = rule, t, stamp_bound(self._line)
                self._inner_evidence = Evidence.of(f"{rule.name} started", self._line) if self._line else None
            ran = self._stated_start(t)  # a timeout line says its collective ran 600 s: under way by then, or before
            if ran is not None and (self.inner_since is None or ran < self.inner_since):
                self.inner_since, self.inner_bound = ran, "before"
            return
        if not (self.current is rule and self._failed() and self._line is not None and BAR_RE.search(self._line.text)):
            self.inner = None  # (a failed step's bar, redrawn as the process ends, leaves the failed part named)
        if self.current is rule and self.timeline and (
                self.timeline[-1].end is None or (rule.terminal and self.timeline[-1].status == "done")):
            if len(self.timeline) == 1 and self._line is not None and self._early < EARLY_LINES:
                self._back_date_first(self.timeline[0], t, self._line)  # the run's first phase: its bar's elapsed
            return  # a repeated start line inside the same phase (a failure in it stands), or of the end
        last = self.timeline[-1] if self.timeline else None
        if self.current is rule and last is not None and last.name == rule.name and last.status == "done":
            last.end, last.status = None, "running"  # the next rank's start of the phase it just did: one span
            return
        self.failure = ""
        self._want_exception_line = False
        self._close_current(t)
        self.current = rule
        span = self._open(rule.name, t)
        if rule.terminal:
            span.end, span.status = t, "done"
            saved = MODEL_SAVED_RE.search(text) is not None  # (sd-scripts' last words; a script's after each epoch)
            self._soft_finish = (span, *undo) if wandb or saved else None
            self._saved_end = saved and not wandb
        elif self._line is not None and self._line.ts is not None:
            self._back_date(span, self._line.text)
        if len(self.timeline) == 1 and self._line is not None and not rule.terminal:
            self._back_date_first(span, t, self._line)  # the log's first phase opened by its bar at `[3:05:14<`

    def _back_date(self, span: PhaseSpan, text: str) -> None:
        """A start line that says how long its phase already ran moves the span's start back by that much, never
        before the span before it began; that span then ends where this one began (its wait was this phase's)."""
        seconds = stated_elapsed(text, bar=False)
        if seconds is None:
            return
        before = self.timeline[-2] if len(self.timeline) >= 2 else None
        if (before is not None and before.status == "done" and before.end is not None and before.end <= before.start
                and before.name not in ROLLOUT_PHASES):
            # A phase known only by its done line (`Total training steps: 58`) bounds nothing; an engine's start-up
            # still does: the wait it states is its communicator's (_interrupted).
            before = None
        start = span.start - seconds if before is None else max(span.start - seconds, before.start)
        if before is not None and before.end is not None and before.end > start:
            before.end = start
        span.start = start
        span.start_before = True  # the line states only what it reports ran: the phase began then or earlier

    def _stated_start(self, t: float) -> float | None:
        """When the line being fed says what it reports had begun (`ran for 600078 milliseconds`): `t` minus that,
        a bound (at or before), where `t` is no earlier than the line (its own stamp, or the first one after it)."""
        line = self._line
        if line is None or not time_is_bound(line):
            return None
        seconds = stated_elapsed(line.text, bar=False)
        return None if seconds is None else t - seconds

    def _waited_from(self, since: float) -> float | None:
        """When the wait the failure line states (`ran for 600047 milliseconds`) began, for a part of the step named
        at or after that line (by the driver's traceback): that part was under way by then. None where the line
        states no wait or that time falls before the step's phase began (where its start is a stamp, not a bound)."""
        line = self._failure_line
        seconds = stated_elapsed(line.text, bar=False) if line is not None and line.ts is not None else None
        if not seconds or self._failed_at is None or since < self._failed_at:
            return None
        began = self._failed_at - seconds
        loop = self.timeline[-1] if self.timeline else None
        return began if loop is not None and (began > loop.start or loop.start_before) else None

    def _back_date_first(self, span: PhaseSpan, t: float, line: LogLine) -> None:
        """A start line (or a repeated one) of the log's first phase that says how long it ran (its bar at
        `[1:52:10<`): the phase began at or before that long before the line, a bound (`start_before`), never a
        stamp. Only where `t` is no earlier than the line (its own stamp, or the first after it), as
        `_note_began` reads it."""
        if not time_is_bound(line):
            return
        seconds = stated_elapsed(line.text, bar=True)
        if seconds and t - seconds < span.start:
            span.start, span.start_before = t - seconds, True

    def _step_collective(self, text: str, t: float) -> None:
        """A watchdog line for a collective a step's update runs, in a run with no rollout: the step underway
        is in its update (SOURCES.md of the posted corpus: SFT's step is forward, backward and optimizer). One deep
        into its group with no phase past the communicator known is the training loop."""
        self._past_start_up(t)
        loop = next((r for r in self.rules if r.inner and UPDATE in r.inner), None)
        update = self.by_name.get(UPDATE)
        if (loop is not None and (self.current is None or (self.current.nested and not self.rollout_seen))
                and (deep := DEEP_SEQ_RE.search(text)) is not None and int(deep.group(1)) >= DEEP_COLLECTIVES):
            self._start(loop, t)  # not "after nccl init": the job was well past making its communicator
        if self.rollout_seen or loop is None or update is None:
            return
        open_loop = self.current is loop and bool(self.timeline) and self.timeline[-1].end is None
        if open_loop and self.inner is None and (
                (self.stats.count and not SCALAR_COLLECTIVE_RE.search(text)) or GRADIENT_ALLREDUCE_RE.search(text)):
            self._start(update, t)
        elif self.current is None and GRADIENT_ALLREDUCE_RE.search(text):
            self._start(loop, t)
            self._start(update, t)

    def _past_start_up(self, t: float) -> None:
        """A collective past its group's first (SeqNum 2 or more) ran on a communicator already made: the job is past
        reading its config, so config is over, and a failure is after it, not in it (audit 21: torchrun's banner,
        then a watchdog line with 2 collectives completed, read 'FAILED in config').
        It ended by the time the timed-out collective began (`ran for 600071 milliseconds`), where the line says."""
        span = self.timeline[-1] if self.timeline else None
        if self.current is None or self.current.name != CONFIG or span is None or span.end is not None \
                or span.status != "running":
            return  # (not the data set's making: its barrier is a collective, a rank tokenising while others wait)
        began = self._stated_start(t)
        self._close_current(t if began is None else min(t, began))

    def _began_before(self, rule: PhaseRule) -> None:
        """A part named by a traceback's frame: it began before the traceback was printed, not at its stamp (audit 11:
        a generation row at the crash's time, ten minutes after the step it began in). Not where the frame has no
        stamp of its own and took the one before it: steps logged after that stamp ran between (audit 25: `≤14:05:41
        weight sync` after a 63 s step), so it stays "at or after" that stamp."""
        if stamp_bound(self._line) == "after":
            return
        if self.inner is rule:
            self.inner_bound = "before"
        elif self.timeline:
            self.timeline[-1].start_before = True

    def _ignored(self, line: LogLine, t: float, ids: Collection[int]) -> bool:
        """A line of the traceback Python's unraisable hook printed (`Exception ignored in: <function …__del__>`): the
        run went on (a data loader's workers shut down late, a Tk image freed by the wrong thread at exit), so neither
        its header nor its exception is a failure. Up to its exception line, from the same process, within seconds."""
        assert self._unraisable is not None
        source, pid, since = self._unraisable
        if (line.source, line.pid) != (source, pid) or not 0 <= t - since <= UNRAISABLE_S:
            self._unraisable = None
            return False
        if self.exception_id in ids:
            self._unraisable = None
            if INTERRUPT_RE.search(line.text.strip()):
                self._fail(line.text, t)  # a SIGTERM raised as SystemExit in the hook (Ray's sigterm_handler): the
                # process was stopped from outside, not a late error of a run that went on (audit 26)
            return True
        return self.fail_id in ids

    def _carry_traceback(self, before: PhaseSpan | None, failure: str, failure_line: LogLine | None) -> None:
        """A frame of the traceback being read names the phase it came from (`in wake_up`): the failure
        moves there, still waiting for its exception line; a placeholder span it had opened goes."""
        if before is not None and before.status == "failed":
            if before.name == BEFORE_ANY and before.start == self.timeline[-1].start:
                self._drop(before)
            else:
                self._not_failed(before)
        self.timeline[-1].status = "failed"
        self.failure, self._failure_line, self._want_exception_line = failure, failure_line, True

    def _late(self, line: LogLine, rule: PhaseRule, t: float) -> bool:
        """A line of an earlier phase stamped before the current phase began: Ray's log monitor delivers
        workers' lines after the driver's, so the file's order is not the order things happened in."""
        span = self.timeline[-1] if self.timeline else None
        return (line.ts is not None and span is not None and rule is not self.current
                and self._earlier_than_current(rule) and t < span.start)

    def _is_inner(self, rule: PhaseRule) -> bool:
        outer = self.current
        return (outer is not None and rule is not outer and rule.name in outer.inner
                and bool(self.timeline) and self.timeline[-1].end is None)

    def _after_validation(self, rule: PhaseRule) -> bool:
        """A step's rollout (generation, weight sync) starting once a validation before the loop is done."""
        last = self.timeline[-1] if self.timeline else None
        return (rule.name in (GENERATION, WEIGHT_SYNC) and self.current is not None and self.current.name == VALIDATION
                and last is not None and last.name == VALIDATION and last.status == "done" and self.inner is None
                and rule.name in self.step_phases and self._loop_began() is None)

    def _behind(self, rule: PhaseRule) -> bool:
        """A start line of a phase the job has moved past: a second model's load bar, an NCCL
        communicator made for weight sync, the weight sync a validation runs. Jobs don't go back; but the weights an
        update made are pushed to the rollout engines next (OpenRLHF after each train epoch), not before it."""
        underway = self.inner or self.current
        if rule.name == ACTOR_INIT and self._line is not None and OP_BUILD_RE.search(self._line.text) and (
                self._loop_began() is not None):
            return True  # an op JIT-built during the loop: part of the step, no model load
        if rule.name == DATASET and self._line is not None and BAR_RE.search(self._line.text) and (
                self._loop_began() is not None or self.stats.count):
            return True  # a data bar once the loop began (a DPO run's `Map:` over an eval set): part of the loop
        if (rule.name == GENERATION and not self.stats.count and self._line is not None
                and self._loop_began() is None and FAILED_EXECUTION_RE.search(self._line.text)):
            return True  # the engine's profile run at its start-up, not a rollout (the search last: it runs per bar)
        if rule.name == UPDATE and self.step_rollout and self._line is not None and HF_STEP_RE.search(self._line.text):
            return True  # TRL's GRPO step: HF's training_step generates, scores and updates, not only the update
        if rule.name == WEIGHT_SYNC and underway is not None and underway.name == UPDATE:
            return False
        if self._is_inner(rule):
            if self._failed() and self._line is not None and FRAME_RE.match(self._line.text):
                return False  # a deeper frame of the traceback being read: it names where the step failed
            return self.inner is not None and self.order.get(rule.name, 0) < self.order.get(self.inner.name, 0)
        if rule.name == GENERATION and self.current is not None and self.current.name == SERVING:
            return False  # a server's next requests after it went idle (_done): generation again
        if self._after_validation(rule):
            return False  # the first step's rollout, after val_before_train's validation
        if rule is not self.current and not rule.inner and not rule.terminal and rule.name in self._ran:
            return True  # nor do they repeat a start-up phase that ran (a second worker-group line)
        if self._ran and rule is self.rules[0] and self.rules[0].name not in self._ran:
            return True  # the first phase (config) starts a run: past that, its lines (Ray connect) are part of another
        if not self._earlier_than_current(rule):
            return False
        return rule.name in self.step_phases or any(s.name == rule.name for s in self.timeline)

    def _not_a_loop(self, rule: PhaseRule, t: float) -> None:
        """A loop an undescribed bar opened, with no step since, whose bar ran to its total at 100 items a second or
        more, was data being prepared (`0%| 0/80000`, then 9,500 it/s: a dataset's map), not training: where an
        earlier phase starts next (the actor's DeepSpeed engine), that span was the dataset's, done."""
        span = self.timeline[-1] if self.timeline else None
        dataset = self.by_name.get(DATASET)
        if (span is None or dataset is None or self.current is None or not self.current.inner or rule.inner
                or span.name != self.current.name or span.evidence is None or self.stats.count
                or not self._earlier_than_current(rule) or self.bar_count is None
                or self.bar_count[0] < self.bar_count[1] or self.bar_rate is None or self.bar_rate > FAST_BAR_S
                or not PLAIN_BAR_RE.match(split_prefix(span.evidence.text)[1])):
            return
        span.name, span.status, self.current = dataset.name, "done", dataset
        span.end = t if span.end is None else span.end
        span.evidence = replace(span.evidence, claim=f"{dataset.name} started")
        self._loop_bar, self.bar_count, self.bar_rate, self.inner = None, None, None, None

    def _waited_on(self, rule: PhaseRule, text: str) -> bool:
        """A timeout line that would start `rule` (the first collective's watchdog starts nccl init) while the phase
        under way is one the others wait on (it has a timeout_hint: one rank tokenizes the dataset while the rest sit
        in a barrier) and its own bar stopped short of its total: the run died in that phase, which was not done
        (audit 22: `FAILED in nccl init` and `dataset generation done` beside a tokenizer bar at 79%)."""
        current, span = self.current, self.timeline[-1] if self.timeline else None
        if rule.name in self.step_phases or rule.inner:
            return False  # a step's collective (an update's reduce-scatter) is no start-up wait
        if current is None or current is rule or current.timeout_hint is None or span is None or span.end is not None \
                or span.name != current.name or not (TIMEOUT_RE.search(text) or WAIT_TIMEOUT_RE.search(text)):
            return False
        bar = self._other_bar_line
        count = BAR_COUNT_RE.search(bar.text) if bar is not None else None
        return count is not None and int(count.group(1)) < int(count.group(2))

    def _failed(self) -> bool:
        return bool(self.timeline) and self.timeline[-1].status == "failed"

    def _restarted(self, t: float) -> None:
        """The launcher restarts the workers after the failure (torchrun's `will restart worker group`): that failure
        is the run's past, its span stays failed, and the restarted run goes through its phases again (review of
        session 23: a run restarted and training again read 'FAILED in training loop')."""
        span = self.timeline[-1]
        self._restart = (span, span.end, self.current, self.inner, set(self._ran), self.failure, self._failure_line,
                         self.stats.count, self._line)
        if span.end is None:
            span.end = t
        self.current = self.inner = None
        self._ran = set()

    def _restart_refused(self, line: LogLine) -> None:
        """The restart's rendezvous was closed (RendezvousClosedError) before its workers logged a step: the restart
        never ran, so the failure that made the launcher restart is the run's, where it was (audit 23: 'FAILED in
        nccl init · RendezvousClosedError' for a worker that lost its peer in the loop). The restart is told."""
        span, end, current, inner, ran, failure, failure_line, steps, restart_line = self._restart
        self._restart = None
        if steps != self.stats.count or span not in self.timeline:
            return
        while self.timeline[-1] is not span:  # the restart's own start (its rendezvous)
            self._drop(self.timeline[-1])
        span.status, span.end = "failed", end
        self.current, self.inner, self._ran = current, inner, ran
        self.failure, self._failure_line, self._want_exception_line = failure, failure_line, False
        if restart_line is not None:
            self.restart_evidence = [Evidence.of("the launcher restarted the workers after it", restart_line),
                                     Evidence.of("the restart's rendezvous was closed", line)]

    def _run_over(self) -> bool:
        """The run so far logged a step, or ended (failed, finished) past its config: a launch's first line now is the
        next run's (_new_run), not a late line of this one's start (an evaluation's bar before `train()` is no run)."""
        if not self.timeline:
            return False
        ended = self._failed() or (self.current is not None and self.current.terminal)
        return bool(self.stats.count) or (ended and any(name != self.rules[0].name for name in self._ran))

    def _new_run(self, t: float, line: LogLine) -> None:
        """The job started again into the same file: the run so far is kept as an earlier run (how it ended, where,
        its steps), and the phases, failure and steps start again, so the verdict is the last run's (audit 18: a
        Megatron run resumed below the first read as one run, its steps merged and its durations spanning both)."""
        spans = self.spans()
        last = spans[-1] if spans else None
        outcome = "failed" if self._failed() else "finished" if self.current is not None and self.current.terminal \
            else "ended"
        began = spans[0].start if spans else None
        ended = self.last_progress if self.last_progress is not None and began is not None and (
            self.last_progress >= began) else None
        self.earlier_runs.append(EarlierRun(
            began=began, ended=ended, outcome=outcome, phase=last.name if last is not None else None,
            failure=self.failure, steps=self.stats.count, evidence=Evidence.of("the next run began here", line),
            began_after=bool(spans) and spans[0].start_after,
            interrupted=outcome == "failed" and INTERRUPT_RE.search(self.failure) is not None))
        self._fresh_run()
        # The metrics too are the last run's (its anomalies: the review of session 25 found a NaN of the run before
        # told under a healthy resumed run), kept as replay asked for them (which ones, the CSV they also go to).
        curves = Curves(self.curves.only)
        curves.sink, self.curves = self.curves.sink, curves

    def _death_report(self) -> bool:
        """The failure so far is only the raylet's report of a worker's death: any failure line after it says more
        (_fail, _reference_pass; an exception line: _root_cause)."""
        return bool(self.failure) and RAYLET_DEATH_RE.search(self.failure) is not None

    def _earlier_than_current(self, rule: PhaseRule) -> bool:
        return self.current is not None and self.order.get(rule.name, 0) < self.order.get(self.current.name, 0)

    def _done(self, rule: PhaseRule, t: float) -> None:
        if rule.name == GENERATION and self._line is not None and EMPTY_ENGINE_RE.search(self._line.text):
            self._busy_engines.discard(self._engine())
            if self._busy_engines:
                return  # one engine of several went idle: the others still generate (review of session 22)
        if self._is_inner(rule) or self.inner is rule:
            self.inner = None  # a sub-phase ended; its phase goes on
            self.failure = ""
            return
        if rule.name in self.step_phases and self.current is not rule:
            return  # a part of the step's end outside any step (verl's engine put to sleep once it started up)
        if self._earlier_than_current(rule) and any(s.name == rule.name for s in self.timeline):
            self._done_by(rule.name)
            return  # a slower rank's "done" for a phase the job has already moved past
        if self._earlier_than_current(rule) and rule.name not in self._ran and not rule.nested and (
                self._failed() or self._next_rule(self.current) is not rule):
            return  # the end of a part the job never began, once past it (a server's uvicorn `Application startup
            # complete.`, which ends a trainer's engine start-up, comes after `Starting vLLM API server`); not the
            # part that comes next (OpenRLHF builds its actors' DeepSpeed engines after the vLLM engines)
        if rule.nested and self.current is not rule and rule.name in self._finished:
            self._done_by(rule.name)
            return  # another rank's "done" of a nested phase, after the phase it interrupted went on
        last = self.timeline[-1] if self.timeline else None
        if self.current is rule and last is not None and last.end is not None and last.name == rule.name:
            if t > last.end:  # a second "done" line for the same phase (per rank, then driver)
                last.end, last.end_after = t, stamp_bound(self._line) == "after"
            self._done_by(rule.name)
            return
        if self.current is not rule or last is None or last.end is not None:
            # The start line was missed (or came before the backlog): record the phase at this point.
            self._close_current(t)
            self.current = rule
            span = self._open(rule.name, t, "done (its start not seen)")
            if self._line is not None and self._line.ts is not None:
                self._back_date(span, self._line.text)  # `init engine … took 19.41 seconds`: not a span of 0 s
            if stamp_bound(self._line) != "after":  # (one that took the stamp before it stays "at or after" that)
                span.start_before = True  # its start went unseen: it began at or before the line, not `0s` there
        self._close_current(t)
        self._done_by(rule.name)
        self._finished.add(rule.name)
        self.failure = ""
        if rule.nested:
            self._resume(t)
        elif rule.name == GENERATION and SERVING in self._ran and not self._ran & {ACTOR_INIT, self.loop_name()}:
            self._start(self.by_name[SERVING], t)  # a server's requests all answered: it waits for the next (audit 15)

    def _done_by(self, name: str) -> None:
        """The Ray actor whose line said phase `name` is done joins its span's `done_by`: after a stop, who
        finished (two engines of four) points at who did not."""
        line = self._line
        if line is None or not line.worker:
            return
        span = next((s for s in reversed(self.timeline) if s.name == name), None)
        who = f"{line.worker} pid {line.pid}" + (f" ({line.ip})" if line.ip else "")
        if span is not None and who not in span.done_by and len(span.done_by) < MAX_DONE_BY:
            span.done_by.append(who)

    def _resume(self, t: float) -> None:
        """A nested phase is done: the phase it interrupted (not ended by its own done line) goes on."""
        before = self.timeline[-2] if len(self.timeline) >= 2 else None
        rule = self._resumable(before)
        if rule is None:
            return
        self.current = rule
        self._open(rule.name, t, "goes on")

    def _resumable(self, before: PhaseSpan | None) -> PhaseRule | None:
        """The rule of the span a nested phase interrupted, where it goes on once that is done: not the first phase
        (config is what a run starts from, not one it goes back to), nor one its own done line ended."""
        rule = self.by_name.get(before.name) if before is not None else None
        if (rule is None or rule.terminal or rule.nested or rule is self.rules[0] or before is None
                or before.status != "done" or rule.name in self._finished):
            return None
        return rule

    def _interrupted(self, span: PhaseSpan | None) -> str | None:
        """The engine start-up or weight sync that a nested phase still underway (a communicator: NCCL's, a
        TCPStore's) interrupted: the job is in that phase, in its communicator. A vLLM/SGLang engine's or a
        weight-sync group's communicator is part of what made it; the trainer's own is the nccl init phase."""
        rule = self.current
        if rule is None or not rule.nested or span is None or span.end is not None or len(self.timeline) < 2:
            return None
        before = self.timeline[-2]
        if before.name in ROLLOUT_PHASES and before.end == span.start and before.name not in self._finished:
            return before.name
        return None

    def _fail(self, text: str, t: float) -> None:
        if self._soft_finished() and not self._saved_end:  # (an error after the last `model saved.`: training was done)
            self._unfinish()
        if self.current is not None and self.current.terminal and self._line is not None and self._line.worker and (
                INTERRUPT_RE.search(text) or RAYLET_DEATH_RE.search(text)):
            return  # a Ray worker's signal or death after the run finished: its workers going as the driver exits
            # (audit 20); the launcher's own SIGTERM during a final save still stops the run (review of session 25)
        if not self.timeline or self.timeline[-1].end is not None:
            last = self.timeline[-1] if self.timeline else None
            if self.current is not None and last is not None and last.status == "done":
                # It finished; what failed came after it and no line says what that was: not "FAILED in" it. After the
                # run's end (`Training completed.`): loading the best model, the final save or evaluation failed.
                name, loop = self.current.name, self.loop_name()
                after = "after training finished" if self.current.terminal else f"after {name}"
                if not self.current.terminal and loop is not None and name in self.step_phases and len(
                        self._ran & self.step_phases) >= 2:
                    after = loop  # two parts of a step ran (weight sync, then generation) with no loop line: the
                    # loop ran them, and what failed after the last came in that loop, not after it
                self.current = self._phase_named(after, self.order.get(name, 0)) or self.current
            span = self._open(self.current.name if self.current else BEFORE_ANY, t, "failed")
            ended = last.end if last is not None else None
            stamped = self._line is not None and self._line.ts is not None
            began = self._stated_start(t) if stamped and ended is not None else None
            if began is not None and ended is not None and began < t:
                # A timeout that states its wait (`ran for 1800027 milliseconds`): what hung was under way by then,
                # not from the failure's stamp (audit 14: "10:34:21 after engine init", a wait begun at 10:04)
                span.start, span.start_before = max(began, ended), True
        self.timeline[-1].status = "failed"
        if self._death_report() and not RAYLET_DEATH_RE.search(text):
            self.failure = ""  # the raylet's report of a death gives way to what the job says of it after
        if not self.failure:
            self._failed_at = t
            self._fail_step = self.recent_steps[-1][0] if self.recent_steps else -1
            self.failure = text.strip()
            self._gave_up = bool(GAVE_UP_RE.search(text))
            self._failure_line = self._line
            self._want_exception_line = HEADER_RE.search(text) is not None
            self._terminated = self._line if "terminate called after throwing" in text else None

    @staticmethod
    def parse_step(text: str) -> tuple[int, int, dict[str, float]] | None:
        """A metrics line `step:N - key:value - ...`: N, where its metrics begin, its `timing_s/*` values."""
        m = STEP_RE.search(text)
        if m is None or (text.startswith(VALIDATION_KEYS, m.end()) and VALIDATION_ONLY_RE.fullmatch(text, m.end())):
            return None
        timings: dict[str, float] = {}
        at = text.find("timing_s/", m.end())
        if at >= 0:  # verl prints the timing keys together: read from the first to the last
            for key, value in TIMING_RE.findall(text, at, text.rfind("timing_s/") + 200):
                timings[key] = float(value)
        return int(m.group(1)), m.end(), timings

    def _record_number(self, parsed: tuple[int | None, int, dict[str, float]], text: str
                       ) -> tuple[int, int, dict[str, float]]:
        """A step line of another stack, numbered: a metric dict with no number of its own is the step
        after the last dict's, as far after it as the last two numbered ones were (HF prints one every
        `logging_steps`); the same dict again (each node's local rank 0 prints it) is the same step, unless it is
        cut at its line's end (pretty-printed over lines, `{'loss': 0.0,`: its first line is all a step shows)."""
        step, at, timings = parsed
        last, last_text, last_own = self._record
        body = text[at:]
        if step is None:
            whole = body.rstrip().endswith("}")
            step = last if body == last_text and whole else last + (self._record_gap or 1)
        elif last_own and step > last:
            self._record_gap = step - last
        self._record = (step, body, parsed[0] is not None)
        return step, at, timings

    def _step(self, parsed: tuple[int, int, dict[str, float]], t: float, text: str, timed: bool = True) -> None:
        """A step line: its number, where its metrics begin, its timings (`step`: its own seconds). `timed`: its
        stamp may time the steps since the last one (not a guessed step number)."""
        step, metrics_at, timings = parsed
        if "step" in timings:
            self._own_seconds = (step, timings["step"])
        self.curves.add_text(step, text[metrics_at:])
        own = timed and self._line is not None and self._line.ts is not None
        self.add_step(step, t, timings, text[metrics_at:], own=own)

    def add_step(self, step: int, t: float | None, timings: dict[str, float], metrics: str | None,
                 own: bool = False) -> None:
        """A step line the history reader parsed itself. `t` may be None where nothing needs it (a
        step with its own `timing_s/step`, not among the last ones); `metrics`: its text after `step:N -`,
        given for the last step line of a chunk (the one shown); `own`: `t` is the line's own stamp."""
        if "gen" in timings:
            self.rollout_seen = True  # the step timed its generation (verl's timing_s/gen): a rollout runs in it
        elif metrics and not self.rollout_seen and STEP_ROLLOUT_RE.search(metrics):
            self.rollout_seen = self.rollout_in_step = self.step_rollout = True
            self.loss_rollout = LOSS_ROLLOUT_RE.search(metrics) is not None
        self.stepped_to(step)
        self.stats.add(step, t, timings, own)
        self.note_step(step, t, metrics)

    def stepped_to(self, step: int) -> None:
        """A step logged (history's bulk steps too): one after the failure's says the run went on (_survived)."""
        if self.failure and self._failed() and step > self._fail_step:
            self._survived()

    def _survived(self) -> None:
        """A step after the failure's (a traceback the job logged and went on from: a reward call that failed and
        scored 0): the error did not end the run, which runs on in its phase. The error stays among the errors."""
        span = self.timeline[-1]
        if span.name.startswith("after ") and len(self.timeline) > 1 and span.start == self._failed_at:
            self._drop(span)  # the placeholder the failure opened
            span = self.timeline[-1]
        span.status = "running" if span.end is None else "done"
        self.failure, self._failure_line, self._failed_at, self._want_exception_line = "", None, None, False

    def note_step(self, step: int, t: float | None, metrics: str | None) -> None:
        """A step among the recent ones (with its time) and, given its metrics text, the one shown."""
        if t is not None:
            if self.recent_steps and self.recent_steps[-1][0] == step:
                self.recent_steps[-1] = (step, t)
            else:
                self.recent_steps.append((step, t))
        if metrics is not None:
            self._last_step_text, self._last_step = metrics, None  # its metrics are read when asked for

    # --- output ---------------------------------------------------------------------------------

    @property
    def last_step(self) -> StepInfo | None:
        if self._last_step is None and self.recent_steps:
            step, t = self.recent_steps[-1]
            metrics: dict[str, float] = {}
            for key, value in METRIC_RE.findall(self._last_step_text):
                metrics[key] = float(value)
            self._last_step = StepInfo(step=step, time=t, metrics=metrics)
        return self._last_step

    def status(self, now: float, rl: bool = True, tail: list[str] | None = None,
               numbers: Sequence[int | None] = ()) -> PhaseStatus:
        """`rl`: the log may be an RL trainer's (engines, a critic); False where its framework is known to be no such
        trainer (frameworks.yaml `rl`), which only changes the phase expected after a finished one. `tail`: the log's
        last lines as written, whose words may carry the verdict past where the rules placed it (wordphase.py);
        `numbers`: their line numbers in the file, where the reader counted them (the guess's evidence cites one)."""
        span = self.timeline[-1] if self.timeline else None
        rule = self.current
        expected = rule
        within = None
        since = span.start if span else None
        since_bound = "" if span is None else "before" if span.start_before else ""
        if rule is not None and span is not None and span.end is not None and not rule.terminal:
            expected = self._next_rule(rule, rl) or rule  # finished a phase; the next one is what waits
        elif self.inner is not None and rule is not None:
            within, since, since_bound = rule.name, self.inner_since, self.inner_bound
            rule = expected = self.inner
            if span is not None and span.status == "failed" and since is not None and (
                    began := self._waited_from(since)) is not None:
                since, since_bound = began, "before"  # a part a traceback named after a timeout that states its wait
        failing = expected  # a failure's advice is the rules' phase's: it speaks of the failure, not of the words
        # How long a silence may last is the rules' phase's too: a guess from words never makes a stall come sooner.
        stall_after = (expected.stall_after if expected and expected.stall_after else None) or self.stall_after
        stepping = within is not None or (rule is not None and (span is None or span.end is None) and (
            rule.inner or (rule.name == GENERATION and rl and SERVING not in self._ran)))
        # (a trainer's engines generating with the loop's own line unseen: 32K-token answers print nothing for
        # minutes, so the step's allowance, not 120 s (audit 17); a server's engine prints its stats every few seconds,
        # so a vLLM or SGLang log, `rl` False, keeps 120 s (review of session 23: a hung server's tail read running))
        own = rule is not None and rule.inner and rule.stall_after  # the user's limit for the stepping phase
        if stepping and not self.stall_fixed and not own:
            stall_after = max(stall_after, self._step_limit())
        worded = self._worded(tail, span, numbers, rl) if tail else None
        final_save = None
        if worded is not None and rule is not None and rule.terminal:
            final_save, worded = worded[1], None  # it finished training: the save is a note, not the verdict
        if worded is not None:
            rule = expected = worded[0]
            loop = self.loop_name()  # a part of the step is within the loop where one ran (a server has none)
            within = loop if rule.name in self.step_phases and loop in self._ran else None
            since, since_bound = None, ""  # a line's words date no start
            if failing is not None and failing.name == SERVING and worded[0].name in self.step_phases and not (
                    ANSWERED_RE.search(worded[1].text)):
                # A server's day of waiting is for one with no requests: its stats say requests were in flight (an
                # answered request's access line does not: audit 15, an idle server read as stalled in generation).
                stall_after = (worded[0].stall_after if worded[0].stall_after else None) or self.stall_after
            elif rule.stall_after and not self.stall_fixed:
                stall_after = max(stall_after, rule.stall_after)  # nor later than the worded phase's own allowance
        if self._own_wait is not None and self.last_progress is not None and not self.stall_fixed:
            # no stall before the wait's own limit is up (verl's register center: 300 s from the wait's start)
            stall_after = max(stall_after, sum(self._own_wait) - self.last_progress)
        hint = expected.hint if expected is not None else None

        if rule is not None and rule.terminal:
            state = "done"
        elif span is not None and span.status == "failed":
            state = "failed"
        elif self.last_progress is None:
            state = "waiting"
        elif now - self.last_progress > stall_after:
            state = "stalled"
        else:
            state = "running"
        failure, cut = self.failure, None
        if state in ("waiting", "stalled", "running") and tail and (frames := cut_frames(tail)):
            # The log ends inside a traceback's frames with nothing after them (the user pasted the frames alone): it
            # failed, where its frames say (_worded reads them), and the exception line is not in the log.
            state, hint, cut = "failed", CUT_HINT, frames[-1][0]
            failure = f"a traceback's frames, cut before its exception line; the last: {cut.strip()[:300]}"
        steps = self._steps_summary()
        if hint is not None:
            hint = hint.for_steps(timed_steps(steps), ran_steps(steps)).for_seen(self.seen_matched)
        interrupted = state == "failed" and INTERRUPT_RE.search(self.failure) is not None
        if interrupted and SIGTERM_EXIT_RE.search(self.failure):
            hint = SIGTERM_EXIT_HINT
        elif interrupted and self._stepping_until(self._failed_at):
            hint = INTERRUPT_STEPPING_HINT
        elif interrupted:  # stopped by hand, most likely while it hung: the phase's hang advice, the interrupt first
            hang = hint or Hint()
            hint = replace(hang, causes=INTERRUPT_HINT.causes + hang.causes,
                           actions=hang.actions + INTERRUPT_HINT.actions)  # its lines keep their frameworks
        elif state == "failed" and cut is not None:
            pass  # CUT_HINT: the frames are all the log holds of the failure
        elif state == "failed":  # a crash, not a hang: the hang's guesses would send the user elsewhere
            hint = failing.fail_hint if failing is not None and failing.fail_hint is not None else FAILED_HINT
            own = failing.timeout_hint if failing is not None else None
            gave_up = self._gave_up or WAIT_TIMEOUT_RE.search(self.failure) is not None
            if own is not None and (TIMEOUT_RE.search(self.failure) or gave_up):
                hint = own  # what waits on what in this phase
            elif STUCK_RE.search(self.failure):
                hint = STUCK_HINT
            elif TIMEOUT_RE.search(self.failure):
                hint = TIMEOUT_HINT
            elif gave_up:
                hint = WAIT_TIMEOUT_HINT  # a wait gave up in whatever phase: a hang a timer ended, not an error raised
            elif HYDRA_WRAPPER_RE.match(self.failure):
                hint = HYDRA_CUT_HINT
            elif self._want_exception_line:
                hint = CUT_HINT
            elif ACTOR_DIED_RE.search(self.failure):
                hint = ACTOR_DIED_HINT
            elif CUDA_ASYNC_RE.search(self.failure):
                hint = CUDA_ASYNC_HINT
            elif LAUNCHER_RE.search(self.failure):
                hint = launcher_hint(self.failure)
            elif CLOSED_RE.search(self.failure):
                hint = CLOSED_HINT
            elif failing is not None and failing.name == SAVE and GPU_OOM_RE.search(self.failure):
                hint = SAVE_OOM_HINT
            elif hint is FAILED_HINT and not EXCEPTION_RE.match(RANK_PREFIX_RE.sub("", self.failure, count=1)):
                hint = FAILED_PLAIN_HINT
            hint = hint.for_seen(self.seen_matched)
        stalled_for = now - self.last_progress if state == "stalled" and self.last_progress else None
        timeline = self._one_loop(self.spans())
        if worded is not None and within is None:
            timeline = self._worded_timeline(timeline, worded, state)
        elif cut is not None and timeline and timeline[-1].end is None:
            timeline[-1] = replace(timeline[-1], status="failed")  # the phase the frames were cut in
        return PhaseStatus(
            current=(worded and rule.name) or self._interrupted(span) or (rule.name if rule else None),
            state=state,
            since=since,
            last_progress=self.last_progress,
            stalled_for=stalled_for,
            stall_after=stall_after,
            hint=hint if state in ("stalled", "failed") and hint and (hint.causes or hint.actions) else None,
            failure=failure if state == "failed" else "",
            steps_done=self.stats.count,
            last_step=self.last_step,
            step_time=self._step_time(),
            timeline=timeline,
            expected=expected.name if expected is not rule and expected else None,
            within=within,
            since_bound=since_bound,
            steps=steps,
            evidence=self._evidence(state, span) + (
                [_cut_evidence(cut, tail or [], numbers, self._line)] if cut else []) + (
                [worded[1]] if worded else []) + (
                [final_save] if final_save else []) + ([self.earlier_runs[-1].evidence] if self.earlier_runs else []),
            worded=worded[1] if worded else None,
            final_save=final_save,
            interrupted=interrupted,
            earlier_runs=list(self.earlier_runs),
        )

    def _soft_finished(self) -> bool:
        """The last span is a finish only a process's end or a save's line made (`_soft_finish`)."""
        return self._soft_finish is not None and bool(self.timeline) and self.timeline[-1] is self._soft_finish[0]

    def _exit_flush(self, rule: PhaseRule, text: str) -> bool:
        """After wandb's end block (`_soft_finished`), the loop's own bar flushed as its process exits (stderr after
        stdout): no new phase. Not after a `model saved.`: the next epoch's bar is the job going on."""
        return not self._saved_end and self._soft_finish is not None and self._soft_finish[4] is rule and "%|" in text

    def _unfinish(self) -> None:
        """A failure after wandb's end-of-run block, or a phase begun after it or a `model saved.`: that line was a
        process ending (with the error) or a save, not the run finishing; the phase it ended is under way again
        (review of audit 25's fix)."""
        assert self._soft_finish is not None
        span, last, end, status, current, inner = self._soft_finish
        self._soft_finish = None
        self._drop(span)
        self._ran.discard(span.name)
        if last is not None:
            last.end, last.status = end, status
        self.current, self.inner = current, inner

    def _stepping_until(self, t: float | None) -> bool:
        """Steps came at their pace up to `t`: its last step was within the loop's allowance for one (twice its
        slowest pace), so nothing hung before `t`."""
        if t is None or self.stats.count < 2 or len(self.recent_steps) < 2 or (
                self.recent_steps[-1][1] <= self.recent_steps[-2][1]):
            return False  # (steps under one stamp measured no pace: nothing says it was still stepping)
        return 0.0 <= t - self.recent_steps[-1][1] <= self._step_limit()

    def _one_loop(self, spans: list[PhaseSpan]) -> list[PhaseSpan]:
        """The loop a communicator interrupted (its first collective: NCCL's lazy init) is never `done` beside it:
        while the communicator is the last span, the loop's row is unfinished above it with its state; once the loop
        went on after it, one row, the communicator's before it (the loop's row stays the last, where its part of the
        step is shown). The timeline said `training loop done` beside a bar at 0/1128, and `training loop done`,
        `nccl init done`, `training loop failed` at 0/58. An engine's start-up that made a communicator the same
        way (vLLM's data-parallel workers' init_process_group) likewise: it said `engine init done` beside
        `FAILED in engine init`."""
        out: list[PhaseSpan] = []
        i = 0
        while i < len(spans):
            loop = spans[i]
            nested = spans[i + 1] if i + 1 < len(spans) else None
            resumed = spans[i + 2] if i + 2 < len(spans) else None
            rule = self._resumable(loop)
            inner = self.by_name.get(nested.name) if nested is not None else None
            if (nested is not None and rule is not None and (rule.inner or rule.name in ROLLOUT_PHASES)
                    and inner is not None and inner.nested and loop.end == nested.start):
                if resumed is None and nested.end is None:
                    out += [replace(loop, end=None, status=nested.status), nested]
                    i += 2
                    continue
                if (resumed is not None and resumed.name == loop.name and resumed.evidence is not None
                        and resumed.evidence.claim.endswith(" goes on")):
                    out += [nested, replace(loop, end=resumed.end, status=resumed.status, end_after=resumed.end_after)]
                    i += 3
                    continue
            out.append(loop)
            i += 1
        return out

    @staticmethod
    def _worded_timeline(spans: list[PhaseSpan], worded: tuple[PhaseRule, Evidence, bool],
                         state: str) -> list[PhaseSpan]:
        """The timeline as the verdict tells it where words moved it: the rules' unfinished span was passed (the run
        went on; when, no line says), and the words' phase follows it, a guess, with the verdict's state. Without this
        the timeline said `engine init failed` under `FAILED, likely in generation`. Words read from the frames the
        error was raised under name a part of the rules' phase (verl's workers' init_process_group under
        init_workers): that span keeps its state and the guess follows it."""
        if not spans:
            return spans  # no line dated anything: the verdict says the guess, the timeline has no row to give it
        last = spans[-1]
        if last.name.startswith("after ") or last.name == BEFORE_ANY:
            # A placeholder the failure opened at its own time (`after rollout init`): the words name it, and it
            # began at or before that time.
            spans, guess = spans[:-1], PhaseSpan(worded[0].name, last.start, start_before=True)
        elif last.end is None and f"{last.name}:" in worded[1].text[:300] and "%|" in worded[1].text:
            # The words read the bar that named the rules' row (`Creating dataset split:  48%|…`): one activity, the
            # row named as the words name it (not a row `passed` beside it, its bar at 96%).
            spans, guess = spans[:-1], replace(last, name=worded[0].name)
        else:
            if last.end is None and not worded[2]:
                spans = [*spans[:-1], replace(last, status="passed")]
            guess = PhaseSpan(worded[0].name, last.start if last.end is None else last.end, start_after=True)
        guess.status, guess.evidence, guess.guess = state, worded[1], True
        return [*spans, guess]

    def _state(self) -> tuple[int, int, int, float | None]:
        """Where the rules have the run: a line that changes it is one the rules acted on."""
        last = self.timeline[-1] if self.timeline else None
        return id(self.current), id(self.inner), id(last), last.end if last is not None else None

    def _task_phase(self, func: str) -> str | None:
        """The phase the task table (the user's `task_phases:`, then frameworks.yaml's) gives a Ray task's
        `Class.method`; the table is read the first time a failure names a task."""
        if self._task_phaser is None:
            from gkdtop.analysis.taskphases import task_phaser

            self._task_phaser = task_phaser(self._user_task_phases)
        return self._task_phaser.phase_of(func)

    def loop_name(self) -> str | None:
        return next((rule.name for rule in self.rules if rule.inner), None)

    def _engine_up(self) -> bool:
        """Whether a rollout engine was started or used (its start-up, a generation, validation, the loop): weight
        sync has somewhere to send the weights."""
        return any(span.name in ENGINE_UP for span in self.timeline) or self._loop_began() is not None

    def _loop_began(self) -> float | None:
        """When the latest span of the training loop began, where one did."""
        name = self.loop_name()
        return next((span.start for span in reversed(self.timeline) if span.name == name), None)

    def _worded(self, tail: list[str], span: PhaseSpan | None, numbers: Sequence[int | None] = (), rl: bool = True
                ) -> tuple[PhaseRule, Evidence, bool] | None:
        """The phase the log's last lines name by their words (wordphase.py), with the line it stands on: one later
        than the rules placed the run in, or, where the rules know the loop or a part of the step, another part
        named after that part's line. None where the words add nothing or the run finished."""
        rule = self.current
        # After the run's end (`Training completed`, the last episode's bar at its total) the final save may still
        # run: a later line's words may name only that, and only while none says it ended (`Model weights saved`).
        ended = rule is not None and rule.terminal
        part = self.inner or (rule if rule is not None and rule.name in self.step_phases else None)
        started = span.evidence.text if span is not None and span.evidence is not None else ""
        if span is not None and (span.name == BEFORE_ANY or span.name.startswith("after ")):
            started = ""  # a placeholder the failure opened at its own line: the words before it say where it was
        if self.inner is not None:
            started = self._inner_evidence.text if self._inner_evidence is not None else ""
        if part is not None and not started:
            return None  # a part of the step whose line is not known: nothing is known to come after it
        failed = span is not None and span.status == "failed"
        failed_by = self._failure_line.raw or self._failure_line.text if failed and self._failure_line else ""
        key = (started, failed_by, len(tail), tail[0], tail[-1], self._ruled_line)  # an idle log's verdict: read once
        if self._words_read is None or self._words_read[0] != key:
            # The failure's innermost frame that names a phase, deeper than the frame the rules named; else the lines
            # before the failure or the end.
            # (a log that ends inside a traceback's frames, header and exception line cut: those frames)
            frames = failure_frames(tail, failed_by) if failed_by else cut_frames(tail)
            if launcher_frames(frames) and (child := child_frames(tail, failed_by)):
                frames = child  # a launcher's error says only that its child failed: the child's traceback says where
            framed = frame_words(frames, started, whole_step=WHOLE_STEP_LOSS if self.loss_rollout else WHOLE_STEP
                                 if self.step_rollout else ())
            # After a part of the step, only lines the tail holds after its line: the parts of a step come round.
            # And only those after the last line a rule acted on.
            since = stretch(tail, started, failed_by, held=part is not None or ended)
            lines = read_words(after(since, self._ruled_line))
            # Where no frame names a phase: a Ray task the failure names (the memory monitor's table of what it
            # killed), or the model an actor that died held.
            stepping = part is not None or (rule is not None and bool(rule.inner))
            tasks = failure_tasks(tail, failed_by, stepping, self._task_phase) if failed_by else None
            # A py-spy dump a user pasted (a hung job's stack): where a process was, by the stack rules.
            dumped = dump_words(tail) if any("Thread " in line or "thread 0x" in line or "Stack (most recent" in line
                                             for line in tail) else None
            # A `ray summary tasks` table pasted there: the tasks still running.
            summed = summary_words(tail, self._task_phase) if any(SUMMARY_HEADER in line for line in tail) else None
            self._words_read = (key, [lines, framed, tasks, dumped, summed] if launcher_frames(frames)
                                else [framed, tasks, dumped, summed, lines])
        for found in self._words_read[1]:
            named = self.by_name.get(found.phase) if found is not None else None
            if found is None or named is None:
                continue
            if not found.frame and not found.via and (
                    (found.back and self._named_after(found, tail)) or self._repeats_start(found)):
                continue  # a later line a rule knows says the run is still in the rules' phase (vLLM's KV cache
                # size after a line with a checkpoint's words)
            if named.name == LOOP and found.frame and not rl and FIT_RE.search(found.text):
                continue  # a trainer's `fit` is the loop in an RL trainer (verl's, OpenRLHF's); Lightning's sets up DDP
                # and checks the ranks' parameters first
            if named.name == WEIGHT_SYNC and not found.frame and not self._engine_up():
                continue  # weights go to a rollout engine: before one started (or the loop ran) a line's `broadcast
                # weights` is a model's own start-up (Megatron's rank 0 sending the weights it loaded to its TP ranks)
            if found.via == DEAD_ACTOR and part is not None:
                continue  # which model died, not which part ran: the part the rules named stands (OpenRLHF's critic
                # computes values while the actor makes experience)
            if ended and (found.frame or (found.back and not only_warnings(tail[-found.back:])) or named.name != SAVE):
                continue  # after the end, only the final save's words on the log's last line: any line after them
                # (a plot, a model card) is what ran once the save was over
            if found.over and (part is not None or named.name in self.step_phases or named.inner or (
                    span is not None and span.status == "failed")):
                continue  # a part that ended: the next part, its words do not say; a failure stays where it was
            if part is not None and (named.name not in self.step_phases or named is part
                                     or named.name in WITHIN_PART.get(part.name, ())):
                continue  # after a part of the step, only another part of it, and not one that part runs itself
            stepping = rule is not None and (rule.inner or rule.name.removeprefix("after ") in self.step_phases)
            if part is None and rule is not None and not ended and not (
                    named.name in self.step_phases and stepping) and self.order[named.name] <= self.order[rule.name]:
                continue  # the words name a phase the run already passed: the rules' place stands (not so for a
                # part of the step after another one: EasyR1's validation, then its first step's log-prob pass)
            ago = f", {found.back} line{'s' if found.back > 1 else ''} before the end" if (
                found.back and not found.frame) else ""
            what = found.via or (
                "the frame the error was raised under" if found.frame else "a line no phase rule knows")
            got = "; that line says a part of it finished, so the run got at least that far" if found.over else ""
            claim = f"the phase, read from the words of {what} (a guess{ago}{got})"
            if ended:
                claim = ("training finished, and the log ends in its final save (its last line, warnings aside): if "
                         "the job has not exited, it is still saving (a guess from that line's words)")
            # A frame the error was raised under runs inside the rules' phase (its own frame is further out).
            inside = found.frame and not found.via
            return named, Evidence(claim, self._line.source if self._line else "", _number_of(found, tail, numbers),
                                   found.text[:EVIDENCE_CHARS]), inside
        return None

    def _named_after(self, found: Worded, tail: list[str]) -> bool:
        """Whether a tail line after the one the words were read from starts (or repeats) the phase the rules
        placed the run in, or its part: the run was still there after those words. Not a progress bar: an
        undescribed one (`7%|▋ | 12/170 [00:01<…`) matches the loop's start, but may count an evaluation's batches."""
        at = next((k for k in range(len(tail) - 1, -1, -1) if tail[k] == found.line), None)
        rules = [r for r in (self.current, self.inner) if r is not None]
        return at is not None and any(r.start.search(line) for line in tail[at + 1:] if "%|" not in line
                                      for r in rules)

    def _repeats_start(self, found: Worded) -> bool:
        """Whether the line the words were read from is itself a start of the rules' phase, repeated (a second
        node's `attempts to join the next round of the rendezvous`): a rule knows it, so its words add nothing
        (audit 17: its `rendezvous` read as nccl init). Not a bar: an undescribed one may count an evaluation."""
        return "%|" not in found.line and any(r.start.search(found.line) for r in (self.current, self.inner)
                                              if r is not None)

    def _evidence(self, state: str, span: PhaseSpan | None) -> list[Evidence]:
        """The lines the verdict stands on: what failed it, what started its phase, its last progress."""
        out = []
        if state == "failed" and self._failure_line is not None:
            out.append(Evidence.of("failed", self._failure_line))
        if span is not None and span.evidence is not None:
            out.append(span.evidence)
        if self.inner is not None and self._inner_evidence is not None and self._inner_evidence.claim.startswith(
                self.inner.name):
            out.append(self._inner_evidence)
        if state in ("stalled", "running") and self._progress_line is not None:
            out.append(Evidence.of("last progress", self._progress_line))
        if state == "failed":
            out += self.restart_evidence
        return out

    def spans(self) -> list[PhaseSpan]:
        """The start-up sequence plus the most recent spans, without repeats."""
        recent = list(self.timeline)
        seen = {id(s) for s in recent}
        return [s for s in self.first_spans if id(s) not in seen] + recent

    def _steps_summary(self) -> dict[str, Any]:
        """The run's step statistics, and where its loop's bar is (`bar`: n, total): a log that printed one metric
        record with the bar at 3702/6080 has not run one step."""
        summary = self.stats.summary()
        if self.bar_count is None:
            return summary
        return {**summary, "bar": {"n": self.bar_count[0], "total": self.bar_count[1], "s_per_it": self.bar_rate}}

    def _next_rule(self, rule: PhaseRule, rl: bool = True) -> PhaseRule | None:
        """The phase after a finished one: the next rule, except that every job loads its policy, so one that
        started its rollout engines first (OpenRLHF: vLLM engines, then the actor models) waits for that; and a
        job of no RL trainer that started no engine trains after loading its model (no engine, critic or reference)."""
        actor = self.by_name.get(ACTOR_INIT)
        if rule.name == GENERATION and "rollout init" in self._ran and not (
                self._ran & {ACTOR_INIT, SERVING, self.loop_name()}):
            # An engine started for an offline generate (`Processed prompts: 100%`), no trainer or server around it:
            # the script's work is done; nothing of a step comes next (audit 23: max_tokens advice after 512/512)
            return next((r for r in self.rules if r.terminal), None)
        if not rl and rule is actor and not self.rollout_seen:
            return next((r for r in self.rules if r.inner), None)
        if (rule.name == "rollout init" and actor is not None and self.order[ACTOR_INIT] < self.order[rule.name]
                and not any(s.name == ACTOR_INIT for s in self.spans())):
            return actor
        rollout = self.by_name.get("rollout init")
        if rule is actor and rollout is not None and rollout.name in self._ran and (
                self.order[ACTOR_INIT] < self.order[rollout.name]):
            # The engines came first, then the actor (OpenRLHF, open-instruct): what follows both follows the actor
            # (not the loop for sure: reference and critic models may come next, and the loop's advice is a step's)
            return self._next_rule(rollout, rl)
        try:
            i = self.rules.index(rule)
        except ValueError:
            return None
        if i + 2 < len(self.rules) and self.rules[i + 1].name == SERVING and ACTOR_INIT in self._ran:
            i += 1  # a trainer's engines (it loaded a policy) serve no clients: its next phase is a trainer's
        after = self.rules[i + 1] if i + 1 < len(self.rules) else None
        if rule.name == "rollout init" and ACTOR_INIT in self._ran and after is not None and after.name in OPTIONAL:
            return None  # verl builds its critic, reference and reward models before its actor and engines; whether
            # a run has them, loads a checkpoint or asks a teacher, the log has not said: no next part is known
        return after

    def _step_limit(self) -> float:
        """In a phase that steps: silence of twice the slowest pace the run has shown is still a step (verl
        prints nothing inside one; a 218 s step is not a stall at 120 s). The last step's time, the run's
        p95, the last slow bar's s/it and the spacing of the last step lines; before the first step,
        FIRST_STEP_STALL (Megatron's first line comes after --log-interval steps)."""
        if not self.stats.count:  # the first step compiles, warms the engines and generates a whole batch
            said = self._progress_line
            if said is not None and (m := LAUNCHED_RE.search(said.text)) is not None and int(m.group(1)) > 1:
                return STEP_STALL_FACTOR * FIRST_STEP_STALL
            return FIRST_STEP_STALL
        paces = [self._step_time() or 0.0, self.bar_pace or 0.0]
        steps = self.recent_steps  # a job that logs every N steps (Megatron's --log-interval) is silent N steps
        paces += [steps[i][1] - steps[i - 1][1] for i in range(max(1, len(steps) - 3), len(steps))]
        if len(steps) == 1 and (began := self._loop_began()) is not None:
            paces.append(steps[0][1] - began)  # its first line came that long into the loop: a log interval (audit 19)
        if self.stats.count >= 2:
            paces.append(self.stats.summary().get("p95_s") or 0.0)
        return STEP_STALL_FACTOR * max(paces)

    def _step_time(self) -> float | None:
        last = self.last_step
        if last is None:
            return None
        if "timing_s/step" in last.metrics:
            return last.metrics["timing_s/step"]
        if self._own_seconds is not None and self._own_seconds[0] == last.step:
            return self._own_seconds[1]  # the line said how long its step took
        if len(self.recent_steps) >= 2:
            (prev_step, prev_t), (step, t) = self.recent_steps[-2], self.recent_steps[-1]
            if step > prev_step:
                return (t - prev_t) / (step - prev_step)
        return None
