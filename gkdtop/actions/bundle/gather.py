"""What goes into a bundle: one step per source, each read, redacted and handed to the writer.

The store gives what the TUI and `snapshot` show; the rest is what only a report needs and the store
does not keep: the tails of the log files (followed ones and the newest Ray session's), `nvidia-smi -q`,
the job processes' allow-listed environment, stack dumps and the Flight Recorder dumps they kept,
Flight Recorder dumps on disk, package versions, the config. Every text member goes through
actions/redact.py on its way out; the limits here keep a bundle small enough to attach to a bug report.
A step that fails is noted by build.py and the others go on, so no step may depend on another.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from gkdtop.actions.bundle.write import ArchiveWriter, json_bytes, safe_name
from gkdtop.actions.redact import Redactor
from gkdtop.analysis.matcher import compile_pattern
from gkdtop.format import shown

TAIL_LINES = 2000
TAIL_BYTES = 4 * 1024 * 1024  # read at most this much of a log's end
FILTERED_LINES = 5000
SESSION_LOGS = 48  # newest Ray session files taken
STACK_FILES = 6  # the newest three dumps: each is a .json and a .txt
STACK_FR_FILES = 64  # Flight Recorder dumps kept per stack dump (one per rank)
STACK_FILE_MAX = 16 * 1024 * 1024
TRACE_FILE_MAX = 64 * 1024 * 1024
TRACE_TOTAL_MAX = 256 * 1024 * 1024
TRACE_FILES_MAX = 1024  # files looked at per prefix (one per rank)
NVIDIA_SMI_TIMEOUT = 15.0
RAY_TIMEOUT = 10.0

# Environment names worth a report: what configures CUDA, NCCL, torch.distributed, Ray, the engines.
# Everything else is left out (not redacted: absent). Allow-listed names that still look like
# secrets (HF_TOKEN) keep their name with the value redacted.
ENV_PREFIXES = (
    "CUDA_", "NCCL_", "TORCH_", "TORCHELASTIC_", "TORCHINDUCTOR_", "PYTORCH_", "RAY_", "VLLM_", "SGLANG_", "HF_",
    "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "MASTER_", "GLOO_", "NVIDIA_", "CUBLAS_",
    "CUDNN_", "UCX_", "FI_", "NVTE_", "VERL_", "GKDTOP_",
)
ENV_NAMES = {
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_RANK", "PATH",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
}
PACKAGES = (
    "gkdtop", "ray", "torch", "vllm", "sglang", "verl", "transformers", "accelerate", "deepspeed", "flash-attn",
    "megatron-core", "tensordict", "peft", "datasets", "triton", "xformers", "numpy", "nvidia-nccl-cu12",
    "nvidia-nccl-cu11", "nvidia-ml-py", "pynvml", "psutil", "textual", "py-spy", "hydra-core", "omegaconf",
)
RAY_SESSION_PATTERNS = ("job-driver-*.log", "worker-*.out", "worker-*.err", "raylet.out", "raylet.err",
                        "gcs_server.out", "gcs_server.err", "monitor.log")


def env_allowed(name: str) -> bool:
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def default_stacks_dir() -> Path:
    """Where the s key, `gkdtop stacks` and the stall-time dump save theirs."""
    from gkdtop.actions.stacks import default_directory

    return default_directory()


def tail_lines(path: Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last `lines` lines of a file, reading at most `max_bytes` from its end."""
    from gkdtop.safeopen import open_regular

    with open_regular(str(path)) as fh:  # a FIFO given as a log is an OSError (noted), never a hang
        size = fh.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        fh.seek(start)
        data = fh.read(max_bytes)
    if start > 0:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""  # drop the cut first line
    rows = data.decode("utf-8", errors="replace").split("\n")  # not splitlines(): it splits at `\r` too
    if rows and rows[-1] == "":
        rows.pop()
    # A tqdm bar's `\r` rewrites: keep each line's last state.
    return [row.rstrip("\r").rsplit("\r", 1)[-1] for row in rows[-lines:]] if lines > 0 else []


class Gatherer:
    """The steps (STEPS names them in order), each adding its members to the writer; what was left out
    goes to `notes`, a step that failed to `errors` (build.py), both for the manifest."""

    def __init__(self, source: Any, now: float, stacks_dir: Path | None, trace_prefix: str | None,
                 ray_tmp: Path | None) -> None:
        self.monitor = source if hasattr(source, "store") else None
        self.store = source.store if self.monitor is not None else source
        self.config = self.store.config
        self.now = now
        self.stacks_dir = stacks_dir if stacks_dir is not None else default_stacks_dir()
        from gkdtop.actions.cleanup import FLIGHT_RECORDER_DEFAULT, FLIGHT_RECORDER_ENV

        self.trace_prefix = trace_prefix or os.environ.get(FLIGHT_RECORDER_ENV) or FLIGHT_RECORDER_DEFAULT
        self.ray_tmp = ray_tmp
        self.redactor = Redactor()
        self.errors: list[dict[str, str]] = []
        self.notes: list[str] = []

    # Each step adds its members; none may stop the others.

    def snapshot(self, w: ArchiveWriter) -> None:
        from gkdtop import snapshot

        doc = snapshot.build(self.store, self.config.default_filter, now=self.now, lines=200)
        lines = doc["logs"]["lines"]  # in order, so a key cut by the tail is still seen whole
        for line, clean in zip(lines, self.redactor.lines([ln["text"] for ln in lines], "snapshot.json"), strict=True):
            line["text"] = clean
        w.add("snapshot.json", json_bytes(self.redactor.obj(doc, "snapshot.json")),
              "the store as `gkdtop snapshot --json` prints it (docs/snapshot.md)")

    def phases(self, w: ArchiveWriter) -> None:
        status = self.store.phase_status(self.now)
        verdict = status.as_json()
        doc = {
            **{key: verdict[key] for key in ("current", "state", "since", "expected", "stalled_for", "failure",
                                             "hint", "unrecognised")},
            "steps_done": status.steps_done, "step_time": status.step_time,
            "last_step": status.last_step.as_json() if status.last_step else None,
            "steps": status.steps, "clock_offset": status.clock_offset, "clock_source": status.clock_source,
            "timeline": verdict["timeline"],
            "evidence": verdict["evidence"],  # the lines the verdict stands on (redacted below, as all of it)
            "phase_from": verdict["phase_from"],  # "words": `current` is a guess from a line no rule knows
            "framework": self.store.framework().as_json(),  # its evidence may quote a command line: redacted below
        }
        w.add("phases.json", json_bytes(self.redactor.obj(json.loads(json_bytes(doc)), "phases.json")),
              "the phase timeline and the current verdict")
        lines = [f"{'start':<19}  {'duration':>9}  {'status':<8} phase"]
        for span in status.timeline:
            start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(span.start))
            dur = f"{span.duration:.1f}s" if span.duration is not None else "running"
            if span.status == "passed":
                dur = "?"  # the words put the run past it; no line says when it ended
            guess = " (a guess)" if span.guess else ""
            lines.append(f"{start:<19}  {dur:>9}  {span.status:<8} {span.name}{guess}")
        lines.append(f"now: {status.current or '(phase unknown)'} {status.state}" + (
            f"; failure: {status.failure}" if status.failure else ""))
        if status.worded_note:
            lines.append(status.worded_note)
        if status.last_line:  # as the Phases pane and snapshot quote it
            lines.append(f"last line: {status.last_line}")  # no quotes: a redacted value would take the closing one
        lines += [f"why: {e.claim}: {e.where()}  {e.text}" for e in status.evidence]
        w.add("phases.txt", self.redactor.text("\n".join(lines) + "\n", "phases.txt").encode(),
              "the phase timeline, for reading")

    def logs(self, w: ArchiveWriter) -> None:
        text_filter = self.config.default_filter
        pattern = compile_pattern(text_filter, every_engine=False) if text_filter else None
        matched = self.store.matching(pattern, limit=FILTERED_LINES)
        clean = self.redactor.lines([ln.raw or ln.text for ln in matched], "logs/filtered.log")
        text = [f"{time.strftime('%H:%M:%S', time.localtime(ln.time))} {ln.source}: {c}"
                for ln, c in zip(matched, clean, strict=True)]
        w.add("logs/filtered.log", "".join(f"{ln}\n" for ln in self.redactor.lines(text, "logs/filtered.log")).encode(),
              f"the log lines the default filter keeps (newest {FILTERED_LINES})",
              filter=self.config.default_filter)
        seen: set[str] = set()
        for state in self.store.log_files:
            self._tail(w, Path(state.path), "logs/followed", "a followed log", seen)
        session = self._session_logs()
        for path in session:
            self._tail(w, path, "logs/ray-session", "the newest Ray session's log", seen)

    def _session_logs(self) -> list[Path]:
        from gkdtop.collectors.ray import latest_session

        session = latest_session(self.ray_tmp)
        if session is None:
            self.notes.append("no Ray session on this node: no Ray logs")
            return []
        found: dict[str, Path] = {}
        for pattern in RAY_SESSION_PATTERNS:
            with contextlib.suppress(OSError):
                for path in (session / "logs").glob(pattern):
                    found[str(path)] = path

        def mtime(path: Path) -> float:
            try:
                st = path.stat()
            except OSError:
                return -1.0
            return st.st_mtime if st.st_size else -1.0  # empty files last (and dropped)

        ranked = sorted(found.values(), key=mtime, reverse=True)
        chosen = [p for p in ranked if mtime(p) >= 0][:SESSION_LOGS]
        if len(ranked) > len(chosen):
            self.notes.append(f"Ray session {session.name}: {len(chosen)} of {len(ranked)} log files taken "
                              "(newest non-empty ones)")
        return chosen

    def _tail(self, w: ArchiveWriter, path: Path, folder: str, what: str, seen: set[str]) -> None:
        try:
            real = str(path.resolve())
        except OSError:
            real = str(path)
        if real in seen:
            return
        seen.add(real)
        try:
            lines = tail_lines(path)
        except OSError as exc:
            self.notes.append(f"{path}: not read ({exc.strerror or exc})")
            return
        name = f"{folder}/{safe_name(path.name)}"  # the full path is in the manifest
        clean = self.redactor.lines(lines, name)
        w.add(name, ("\n".join(clean) + "\n").encode(), f"{what}: its last {len(lines)} lines", path=str(path))

    def gpus(self, w: ArchiveWriter) -> None:
        gpus = self.store.gpus
        doc: dict[str, Any] = {"status": gpus.status, "reason": gpus.reason, "driver": gpus.driver,
                               "devices": [asdict(d) for d in gpus.devices]}
        doc["history"] = {"utilization": {str(k): list(v) for k, v in self.store.gpu_util.items()},
                          "memory_percent": {str(k): list(v) for k, v in self.store.gpu_mem.items()}}
        w.add("gpus.json", json_bytes(self.redactor.obj(doc, "gpus.json")),
              "GPU state from the store (NVML), with the recent history")
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.notes.append("nvidia-smi not found: no nvidia-smi -q")
            return
        try:
            proc = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT)
            out = proc.stdout + (f"\n[stderr]\n{proc.stderr}" if proc.stderr else "")
        except subprocess.TimeoutExpired:
            out = f"nvidia-smi -q gave no answer in {NVIDIA_SMI_TIMEOUT:g} s (a hung driver is a finding itself)\n"
        w.add("nvidia-smi-q.txt", self.redactor.text(out, "nvidia-smi-q.txt").encode(), "`nvidia-smi -q`")

    def ray(self, w: ArchiveWriter) -> None:
        from gkdtop.snapshot import ray_section

        doc = ray_section(self.store)
        ray = self.store.ray
        if ray.status == "connected" and not ray.actors and ray.address.startswith("http"):
            # The state API's REST side (what `ray.util.state.list_actors` calls), bounded in time;
            # never `ray.init()`, which would start a cluster.
            from gkdtop.collectors.ray import parse_actor, state_list

            try:
                rows, total = state_list(ray.address, "actors", RAY_TIMEOUT, detail=True)
                doc["actors"] = [asdict(parse_actor(r)) for r in rows]
                doc["actors_total"] = total
            except Exception as exc:
                doc["details_error"] = f"actors: {exc}"[:300]
        w.add("ray.json", json_bytes(self.redactor.obj(doc, "ray.json")),
              "what the Ray cluster said: resources, pending demands, nodes, actors, placement groups, jobs; "
              "its running tasks, stragglers and failed tasks")

    def processes(self, w: ArchiveWriter) -> None:
        rows = [asdict(p) for p in self.store.processes]
        w.add("processes.json", json_bytes(self.redactor.obj(rows, "processes.json")),
              "the job's processes: role, user, state, memory, GPU memory, flags, command line")
        by_pid = {p.pid: p for p in self.store.processes}
        children: dict[int, list[int]] = {}
        for p in self.store.processes:
            parent = p.ppid if p.ppid in by_pid else 0
            children.setdefault(parent, []).append(p.pid)
        lines: list[str] = []

        def walk(pid: int, depth: int) -> None:
            p = by_pid[pid]
            gpu = f" gpu={p.gpu_memory // (1 << 20)}MiB" if p.gpu_memory else ""
            flags = f" [{','.join(p.flags)}]" if p.flags else ""
            lines.append(f"{'  ' * depth}{p.pid} ({p.role}{', ' + p.actor if p.actor else ''}) {p.status} "
                         f"rss={p.rss // (1 << 20)}MiB{gpu}{flags}: {p.cmdline}")
            for child in sorted(children.get(pid, [])):
                if depth < 32:
                    walk(child, depth + 1)

        for root in sorted(children.get(0, [])):
            walk(root, 0)
        w.add("processes.txt", ("\n".join(self.redactor.lines(lines, "processes.txt")) + "\n").encode(),
              "the job's process tree with command lines")

    def environment(self, w: ArchiveWriter) -> None:
        import psutil

        groups: dict[str, dict[str, Any]] = {}
        left_out: set[str] = set()
        unreadable: list[int] = []
        for p in self.store.processes:
            try:
                env = psutil.Process(p.pid).environ()
            except (psutil.Error, OSError):
                unreadable.append(p.pid)
                continue
            kept = {k: v for k, v in sorted(env.items()) if env_allowed(k)}
            left_out.update(k for k in env if not env_allowed(k))
            clean = self.redactor.env(kept, "environ.json")
            key = json.dumps(clean, sort_keys=True)
            groups.setdefault(key, {"pids": [], "env": clean})["pids"].append(p.pid)
        doc = {
            "allowed": {"prefixes": list(ENV_PREFIXES), "names": sorted(ENV_NAMES)},
            "left_out_count": len(left_out),
            "unreadable_pids": unreadable,
            "groups": list(groups.values()),
        }
        w.add("environ.json", json_bytes(doc), "the job processes' environment, allow-listed names only, grouped "
              "by identical environments; secret-looking values redacted")

    def stacks(self, w: ArchiveWriter) -> None:
        try:
            files = [p for p in self.stacks_dir.rglob("*") if p.is_file() and not p.parent.name.endswith("-fr")]
        except OSError:
            files = []
        if not files:
            self.notes.append(f"no stack dumps in {self.stacks_dir}")
            return
        def mtime(path: Path) -> float:
            try:
                return path.stat().st_mtime
            except OSError:
                return 0.0

        files.sort(key=mtime, reverse=True)
        from gkdtop.safeopen import read_owned

        for path in files[:STACK_FILES]:
            try:  # ours only: a link or another user's file planted there is not a stack dump of ours
                text = read_owned(path, os.geteuid(), STACK_FILE_MAX).decode("utf-8", errors="replace")
            except OSError as exc:
                self.notes.append(f"stack dump left out, {shown(getattr(exc, 'why', '') or exc.strerror or str(exc))}: "
                                  f"{shown(str(path))}")
                continue
            name = f"stacks/{safe_name(path.name)}"
            w.add(name, "".join(f"{ln}\n" for ln in self.redactor.lines(text.split("\n"), name)).rstrip("\n")
                  .encode() + b"\n", "a stack dump (`gkdtop stacks` / the s key: py-spy)", path=str(path))
            kept = path.with_name(path.stem + "-fr")  # the Flight Recorder dumps that report analysed
            if path.suffix == ".json" and kept.is_dir():
                for dump in sorted(kept.iterdir())[:STACK_FR_FILES]:
                    self.saved_fr_dump(w, dump, f"flight-recorder/{safe_name(kept.name)}/{safe_name(dump.name)}")

    def saved_fr_dump(self, w: ArchiveWriter, path: Path, name: str) -> None:
        """A dump our stack action kept (so ours): taken only as this user's regular file, parsed and redacted."""
        self._fr_member(w, path, {os.geteuid()}, name, "a Flight Recorder dump kept by a stack dump (its analysis "
                        "is the report's `collectives`), as JSON, redacted")

    def _fr_member(self, w: ArchiveWriter, path: Path, uids: set[int], name: str, what: str) -> int:
        """Add one dump if it is a regular file of one of `uids`, under the size cap, and parses as plain data;
        otherwise one note naming it and why. Returns the bytes read."""
        from gkdtop.capture.flight_recorder import parse_trace
        from gkdtop.safeopen import Untrusted, read_owned

        try:
            raw = read_owned(path, uids, TRACE_FILE_MAX)
            doc = parse_trace(raw)
        except (OSError, ValueError) as exc:  # the path last: `credentials: why` would read as a secret
            why = exc.why if isinstance(exc, Untrusted) else str(exc) if isinstance(exc, ValueError) \
                else exc.strerror or str(exc)
            self.notes.append(f"Flight Recorder dump left out, {shown(why)}: {shown(str(path))}")
            return 0
        name = name if name.endswith(".json") else name + ".json"
        w.add(name, json_bytes(self.redactor.obj(doc, name)), what, path=str(path))
        return len(raw)

    def trace_prefixes(self) -> dict[str, set[int]]:
        """Each Flight Recorder dump prefix and whose files it names: the prefix we were given (or ours, or
        torch's default) for this user; each job process's own (`gkdtop run` puts it in the run directory)
        or, unset, torch's default, for that process's user. Only the user whose process named a prefix
        wrote its dumps: a file there of anyone else is not the rank's."""
        from gkdtop.capture.flight_recorder import TRACE_FILE_DEFAULT, TRACE_FILE_ENVS
        from gkdtop.capture.proc import owner, process_environ

        prefixes: dict[str, set[int]] = {self.trace_prefix: {os.geteuid()}}
        for p in self.store.processes:
            uid = owner(p.pid)
            if uid < 0:
                continue
            env = process_environ(p.pid)
            for prefix in [env[k] for k in TRACE_FILE_ENVS if env.get(k)] or [TRACE_FILE_DEFAULT]:
                prefixes.setdefault(prefix, set()).add(uid)
        return prefixes

    def flight_recorder(self, w: ArchiveWriter) -> None:
        """The dumps torch left at each prefix: `<prefix><rank>` only, owned by the user whose process named the
        prefix, regular, capped, parsed as plain data and redacted; anything else there is named in a note."""
        from gkdtop.capture.flight_recorder import dump_paths

        total = 0
        found: dict[Path, set[int]] = {}
        for prefix, uids in self.trace_prefixes().items():
            dumps, _pipes, others = dump_paths(prefix, TRACE_FILES_MAX)  # pipes: nothing to read
            for path in others:
                self.notes.append(f"Flight Recorder dump left out, not named {shown(prefix)}<rank>: "
                                  f"{shown(str(path))}")
            for path in dumps:
                found.setdefault(path, set()).update(uids)
        for path, uids in sorted(found.items()):
            if total >= TRACE_TOTAL_MAX:
                self.notes.append(f"{shown(str(path))}: Flight Recorder dump left out (the bundle's "
                                  f"{TRACE_TOTAL_MAX >> 20} MB for dumps is full)")
                continue
            total += self._fr_member(w, path, uids, f"flight-recorder/{safe_name(path.name)}",
                                     "a PyTorch Flight Recorder dump, as JSON, redacted (collectives and stack "
                                     "frames; its user's own file, checked)")

    def packages(self, w: ArchiveWriter) -> None:
        from importlib import metadata

        from gkdtop import __version__

        versions: dict[str, str | None] = {}
        for name in PACKAGES:
            try:
                versions[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                versions[name] = None
        versions["gkdtop"] = versions.get("gkdtop") or __version__
        doc = {"python": sys.version, "executable": sys.executable, "platform": platform.platform(),
               "packages": versions,
               "note": "versions of gkdtop's own environment; a job run from another venv may differ"}
        w.add("packages.json", json_bytes(self.redactor.obj(doc, "packages.json")), "Python and package versions")

    def config_files(self, w: ArchiveWriter) -> None:
        doc = asdict(self.config) if is_dataclass(self.config) else {"config": str(self.config)}
        doc = json.loads(json_bytes(doc))
        if self.monitor is not None:
            doc["log_sources"] = list(getattr(self.monitor, "log_sources", []))
        w.add("config.json", json_bytes(self.redactor.obj(doc, "config.json")), "the config in use (defaults + file)")
        source = getattr(self.config, "source", "")
        if source:
            try:
                text = Path(source).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                self.notes.append(f"{source}: not read ({exc.strerror or exc})")
                return
            w.add("config.yaml", "\n".join(self.redactor.lines(text.splitlines(), "config.yaml")).encode() + b"\n",
                  "the config file as written", path=source)


STEPS: list[tuple[str, str]] = [
    ("snapshot", "snapshot"), ("phase timeline", "phases"), ("logs", "logs"), ("GPU state", "gpus"),
    ("Ray status", "ray"), ("process tree", "processes"), ("environment", "environment"),
    ("stack dumps", "stacks"), ("Flight Recorder dumps", "flight_recorder"), ("package versions", "packages"),
    ("config", "config_files"),
]

