"""Grouping the dumps: identical stacks together, summarised in one line, and the odd ones out.

In a hang, most ranks wait in the same collective and one rank is somewhere else: that rank is
usually the culprit. Pure functions over model/stacks.py's data: no processes are touched here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gkdtop.capture.faulthandler import STDLIB_RE
from gkdtop.model.stacks import StackDump, StackFrame, StackGroup, ThreadStack

# Functions that are a collective (or a point-to-point op) in the libraries a GKD/PPO job talks NCCL through.
COLLECTIVES = frozenset({
    "all_reduce", "allreduce", "broadcast", "all_gather", "allgather", "all_gather_into_tensor", "_all_gather_base",
    "reduce_scatter", "reducescatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "reduce", "gather", "scatter", "send", "recv", "isend",
    "irecv", "batch_isend_irecv", "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "send_object_list", "recv_object_list", "new_group", "init_process_group",
})
COLLECTIVE_PATHS = ("torch/distributed/", "vllm/distributed/", "sglang/srt/distributed/", "ray/util/collective/",
                    "deepspeed/comm/", "megatron/core/parallel_state", "cupy/cuda/nccl", "pynccl")
# Frames that only pass the call through: left out of the one-line summary (never out of the dump).
PASS_THROUGH_RE = re.compile(
    r"(?:^|\.)(?:wrapper|_wrapper|wrapped|inner|decorate_context|_call_impl|_wrapped_call_impl|span_wrapper"
    r"|_resume_span|actor_method_executor|_exception_logger|_fn)$|^<lambda>$"
)
PLUMBING_PATHS = ("ray/_private/", "ray/util/tracing/", "ray/actor.py", "ray/remote_function.py")
SUMMARY_DEPTH = 3
FR_THREAD = "gkdtop-probe-fr"  # gkdtop.probe.FR_THREAD (not imported: the probe module stays standalone)
PROBE_FILE = "gkdtop/probe.py"


def is_collective(frame: StackFrame) -> bool:
    name = frame.function.rsplit(".", 1)[-1]
    return name in COLLECTIVES and any(p in frame.path or p in frame.file for p in COLLECTIVE_PATHS)


def _library(frame: StackFrame) -> bool:
    return bool(STDLIB_RE.search(frame.path)) or "/ray/" in frame.path or frame.file.startswith("ray/")


def is_background(thread: ThreadStack) -> bool:
    """A helper thread of the runtime (stdlib pools, Ray's GC / event loops) or Ray's idle `main_loop` thread.

    Such threads look alike in every process and never say where the job is; a thread that has a
    single frame of the job's own code (or a collective) is never background.
    """
    frames = [f for f in thread.frames if not f.native]
    if not frames:
        return True
    if any(is_collective(f) for f in frames):
        return False
    if thread.name == FR_THREAD or any(f.function == "_fr_loop" and f.path.endswith(PROBE_FILE) for f in frames):
        return True  # gkdtop.probe's own thread, waiting for a Flight Recorder request
    if frames[0].function.endswith("main_loop") and _library(frames[0]):
        return True  # a Ray worker's main thread between tasks: the work, if any, is on another thread
    return thread.name != "MainThread" and all(_library(f) for f in frames)


def significant_threads(dump: StackDump) -> list[ThreadStack]:
    """The threads that say where the process is: every thread when all of them are background."""
    threads = [t for t in dump.threads if not is_background(t)]
    return threads or [t for t in dump.threads if any(not f.native for f in t.frames)] or dump.threads


def stack_key(dump: StackDump) -> tuple[tuple[tuple[str, str, int], ...], ...]:
    """Identity of a process's stack: Python frames (function, short file, line) of its significant threads.

    Native frames are left out (addresses differ per process), and so are thread names and ids.
    """
    stacks = {tuple(f.key for f in t.frames if not f.native) for t in significant_threads(dump)}
    return tuple(sorted(stacks))


def _representative(dump: StackDump) -> ThreadStack | None:
    threads = significant_threads(dump)
    if not threads:
        return None
    for thread in threads:
        if any(is_collective(f) for f in thread.frames if not f.native):
            return thread
    main = [t for t in threads if t.name == "MainThread"]
    return main[0] if main else max(threads, key=lambda t: len(t.frames))


def summarize(thread: ThreadStack | None) -> str:
    """`broadcast <- sync_rollout_weights <- fit`: from the collective (or innermost frame) outwards."""
    if thread is None:
        return ""
    frames = [f for f in thread.frames if not f.native]
    start = next((i for i, f in enumerate(frames) if is_collective(f)), 0)
    names = []
    for frame in frames[start:]:
        name = frame.function.rsplit(".<locals>.", 1)[-1]
        if names and (PASS_THROUGH_RE.search(frame.function) or any(p in frame.file for p in PLUMBING_PATHS)):
            continue
        if not names or names[-1] != name:
            names.append(name)
        if len(names) == SUMMARY_DEPTH:
            break
    return " <- ".join(names)


def group_stacks(dumps: Sequence[StackDump]) -> list[StackGroup]:
    """Group the dumped processes by stack_key; largest group first."""
    by_key: dict[tuple, list[StackDump]] = {}
    for dump in dumps:
        if dump.ok:
            by_key.setdefault(stack_key(dump), []).append(dump)
    groups = []
    for members in by_key.values():
        thread = _representative(members[0])
        frames = [f for f in thread.frames if not f.native] if thread else []
        groups.append(StackGroup(
            frames=frames, pids=sorted(d.pid for d in members), summary=summarize(thread) or "(no Python frames)",
            thread=thread.name if thread else "", collective=any(is_collective(f) for f in frames),
        ))
    groups.sort(key=lambda g: (-len(g.pids), g.pids[0]))
    return groups


def outliers(dumps: Sequence[StackDump], groups: Sequence[StackGroup]) -> list[int]:
    """Processes that are not where their peers are: in a hang, usually the culprit.

    Peers are processes of the same role (every target, when none has a role). Among peers, when some
    wait in a collective, the ones outside any collective are the outliers; when all are in collectives
    but not the same one, those outside the largest such group; when some are inside the job's code and
    others idle between calls (a Ray worker in `main_loop`: the rank that never made the call), the idle
    ones; otherwise those outside a strict majority group of at least two.
    """
    group_of = {pid: i for i, g in enumerate(groups) for pid in g.pids}
    idle = {d.pid for d in dumps if d.ok and not any(not is_background(t) for t in d.threads)}
    peers: dict[str, list[int]] = {}
    for dump in dumps:
        if dump.ok and dump.pid in group_of:
            peers.setdefault(dump.role, []).append(dump.pid)
    odd: list[int] = []
    for pids in peers.values():
        if len(pids) < 2:
            continue
        sizes: dict[int, int] = {}
        for pid in pids:
            sizes[group_of[pid]] = sizes.get(group_of[pid], 0) + 1
        if len(sizes) < 2:
            continue
        in_collective = [gi for gi in sizes if groups[gi].collective]
        if in_collective and len(in_collective) < len(sizes):
            odd += [pid for pid in pids if not groups[group_of[pid]].collective]
            continue
        idle_peers = [pid for pid in pids if pid in idle]
        if idle_peers and len(idle_peers) < len(pids):
            odd += idle_peers
            continue
        ranked = sorted(sizes.items(), key=lambda kv: -kv[1])
        top, count = ranked[0]
        # Every peer in a collective: the biggest collective wins; none in one: a strict majority of 2+ wins.
        majority = count > ranked[1][1] if in_collective else count >= 2 and count * 2 > len(pids)
        if majority:
            odd += [pid for pid in pids if group_of[pid] != top]
    return sorted(odd)
