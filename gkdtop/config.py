"""Defaults plus the user's YAML config: phase rules, log filters, thresholds, paths.

A malformed file is a `ConfigError` whose message is one line naming the file, the line and the
key, so the CLI can print it and exit non-zero without a traceback.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gkdtop.collectors.registry import default_refresh

if TYPE_CHECKING:
    from gkdtop.analysis.anomalies import AnomalyLimits
    from gkdtop.analysis.rules import PhaseRule, RuleSet, Signature, TaskPhaseRule

# Re-exported from analysis/rules.py when first asked for: the dashboard's first frame needs a Config
# with its defaults, not the rule parser, the matcher and YAML (about 50 ms of imports).
RULES_EXPORTS = {"ConfigError", "PhaseRule", "Signature", "builtin_phases", "builtin_signatures"}


def __getattr__(name: str) -> Any:
    if name in RULES_EXPORTS:
        from gkdtop.analysis import rules

        return getattr(rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# What matters in a real job's log (docs/real-logs.md): the demo's markers, errors and warnings,
# the lines that mark a phase (config checked, dataset, worker groups, Ray's scheduling warnings,
# NCCL's interface choice and init, model and engine start-up, checkpoints, validation), the step
# metrics line and the end. Bars and the config dump stay out.
DEFAULT_FILTER = (
    r"\[ACTOR\]|\[ROLLOUT\]|\[SYNC\]|\[TEACHER\]|ERROR|Error|NCCL|WARN|Traceback|✓|✗|step:\d+ -"
    r"|Fatal Python error|SIG[A-Z]+ received|Signal \d+ \(SIG|exitcode|Watchdog|Killed|killed"
    r"|\[validate_config\]|dataset len:|Size of train dataloader|colocated worker base class"
    r"|cannot be scheduled|No available node types|have not registered"
    r"|contains [\d.]+[KMBT]? parameters|Model config after override|Loading checkpoint shards: 100%"
    r"|Initializing a V[01] LLM engine|init engine \(profile|Graph capturing finished"
    r"|Available KV cache memory|GPU KV cache size"
    r"|Checkpoint tracker|Load from checkpoint|Resuming from|local_global_step_folder|Saving"
    r"|validation metrics|Global step \d+|Training completed|train_runtime|Total time for train steps"
    r"|Could not override|HYDRA_FULL_ERROR|Job '[^']*' failed|marked dead"
    r"|Raylet is terminated|Failed to connect to GCS"
    # (the pane matches the whole line, Ray prefix included: no `^` for a worker's message)
    # where the job is: Ray up, the TaskRunner's start, its plan, the engines starting, validation,
    # the steps of verl's GKD recipe and EasyR1, the weight sync (the GKD/EasyR1/OpenRLHF forms too)
    r"|Started a local Ray instance|Connected to Ray cluster|TaskRunner hostname:|resource_pool_spec:"
    r"|Total training steps:|vLLMHttpServer, replica_rank|creating LLM with bundle_indices|DeepSpeed info: version"
    r"|test_gen_batch meta info|validation generation end|Start validation\.\.\.|Finish validation\."
    r"|INFO: (?:generate text|update actor) done\.|(?:^|\) )Step \d+$|update_weights done|Server is up!"
)
FAIL_PATTERN = (
    r"Traceback \(most recent call last\)|\bActorDiedError\b|\bRayTaskError\b|\bRaySystemError\b"
    # a `✗` status mark (the probe's `✗ phase 'X' FAILED`), not the dirty-tree mark of a shell prompt pasted
    # with the log (oh-my-zsh's `➜  dir git:(main) ✗ cmd`): that one follows a `)`
    r"|[^)\s] *✗"
    # (one `^` for both: each costs Hyperscan's compile the Ray prefix's alternatives again)
    r"|^(?: *✗|Exception raised in creation task: )"  # Ray: an actor's __init__ raised (its traceback follows)
    r"|OutOfMemoryError|CUDA out of memory|Watchdog caught collective"
    r"|\bDist(?:Backend|Store)Error\b|\bEngineDeadError\b|Engine core initialization failed|EngineCore failed to start"
    r"|Error executing job with overrides|Could not override '|Key '[^']*' is not in struct"
    r"|Fatal Python error: |\*\*\* SIG[A-Z]+ received|Signal \d+ \(SIG[A-Z]+\) received"
    # the last part of a fatal error's dump (faulthandler lists the extension modules only then), where its first line
    # was cut from what was pasted
    r"|\bExtension modules: [\w.]{1,100}, [\w.]{1,100},"
    r"|exitcode\s*: -?[1-9]|terminate called after throwing|ChildFailedError"
    r"|Job '[^']*' failed|Unhandled error \(suppress with|Scheduler hit an exception"
    r"|Received sigquit from a child"
    r"|\bReceived Signals\.SIG(?:INT|TERM) death signal\b"  # torchrun's agent stopped (Ctrl+C, a scheduler)
    r"|killed due to memory pressure|has been marked dead because the detector"
    r"|A worker died or was killed while executing (?:a|the) task by an unexpected system error"  # the raylet's
    # a node's Ray died under the job: its raylet (Ray's log monitor says so, with the raylet's last lines), or a
    # process that lost the GCS past Ray's reconnect timeout (Ray exits it)
    r"|Raylet is terminated\. Termination is unexpected|Failed to connect to GCS (?:at address \S+ )?within \d+ seconds"
    r"|Process group watchdog thread terminated with exception|ProcessGroupNCCL's watchdog got stuck for \d+ seconds"
    r"|Heartbeat monitor timed out! Process will be terminated"
    # DeepSpeed's launcher reporting a rank's exit; SGLang's scheduler watchdog (a hang it ended: not its
    # `self.soft=True` one, which only reports the hang and kills nothing); gloo's barrier
    r"|\bexits with return code = -?[1-9]\d*|Scheduler watchdog timeout(?:$|[^ ]| [^(])"
    r"|\b(?:Scheduler w|W)atchdog timeout \((?:self\.)?watchdog_timeout=\d+(?:\)|, (?:self\.)?soft=False\b)"
    r"|successfully reached monitoredBarrier, but received errors"
    r"|NET/IB ?: Got completion from peer \S+ with (?:status=[1-9]|error \d)|mlx5: \S+: got completion with error"
    r"|NET/IB ?: (?:\S+:\d+ )?Got async event ?: [\w ]*(?:catastrophic|fatal|error)|Worker proc \S+ died unexpectedly"
    # vLLM V0's server front end giving up on its engine process
    r"|No heartbeat received from MQLLMEngine|MQLLMEngine is already dead"
)
# Lines a hung job keeps printing; they are not progress.
IDLE_PATTERNS = [
    r"resource request cannot be scheduled|No available node types can fulfill|pending placement groups"
    r"|Waiting for creating a placement group",
    r"Waiting for .* to be ready|still waiting|Server is not up yet|[Ss]erver not ready after \d+ ?s\b",
    r"\bheartbeat\b|still alive",
    r"have not registered within the timeout",
    r"Avg generation throughput: 0\.0 tokens/s",  # vLLM's stats while nothing is generated
    r'"(?:GET|HEAD) /(?:health|metrics|ping|version|v1/models)\b',  # a load balancer's or Prometheus's probes
    r"Waiting in store based barrier",  # c10d's every minute until every rank joins the process group
    r"[Ww]atchdog timeout \((?:self\.)?watchdog_timeout=\d+, (?:self\.)?soft=True\b",  # SGLang's report of a hang
]
DRIVER_PATTERNS = [r"main_ppo", r"main_gkd", r"torchrun", r"-m verl\b", r"verl\.trainer", r"gkdtop\.demo\.job"]


@dataclass(slots=True)
class Config:
    stall_after: float = 120.0
    stall_fixed: bool = False  # set by --stall-after: one limit for every phase, the stepping ones too
    stall_stacks: bool = True  # dump the job's stacks once when a stall is declared
    stack_phase: bool = True  # read the driver's stack for the phase while the log cannot say (docs/stack-phases.md)
    phases: list[PhaseRule] = field(default_factory=list)
    filters: dict[str, str] = field(default_factory=lambda: {"default": DEFAULT_FILTER})
    fail_pattern: str = FAIL_PATTERN
    idle_patterns: list[str] = field(default_factory=lambda: list(IDLE_PATTERNS))
    driver_patterns: list[str] = field(default_factory=lambda: list(DRIVER_PATTERNS))
    logs: list[str] = field(default_factory=list)
    backlog: int = 200
    max_line: int = 16384
    refresh: dict[str, float] = field(default_factory=default_refresh)  # one key per source, and "ui"
    findings: list[Signature] = field(default_factory=list)
    source: str = ""  # the file it was read from, if any
    framework: str = ""  # a profile name from data/frameworks.yaml that overrides detection; "": detect
    task_phases: list[TaskPhaseRule] = field(default_factory=list)  # the user's, tried before the built-ins
    # Telling others (docs/alerts.md): apprise URLs ($VAR read from the environment), the least
    # seconds between two messages of one kind, and a "still running" message every so many seconds.
    notify: list[str] = field(default_factory=list)
    notify_every: float = 600.0
    heartbeat: float = 0.0
    metrics: list[str] = field(default_factory=list)  # the Metrics pane's charts; []: the framework's defaults
    anomalies: AnomalyLimits = field(default_factory=lambda: _limits())  # thresholds (analysis/anomalies.py)

    def rules(self) -> RuleSet:
        """What the analysis takes from the config: the parsed rules and the stall threshold."""
        from gkdtop.analysis.rules import RuleSet

        return RuleSet(list(self.phases), list(self.findings), self.fail_pattern, list(self.idle_patterns),
                       self.stall_after, self.stall_fixed, self.max_line, list(self.task_phases))

    @property
    def default_filter(self) -> str:
        return self.filters.get("default", DEFAULT_FILTER)


def _limits() -> AnomalyLimits:
    """The anomaly thresholds' defaults, imported when a Config is made (not with this module)."""
    from gkdtop.analysis.anomalies import AnomalyLimits

    return AnomalyLimits()


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gkdtop" / "config.yaml"


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Built-ins, then the user's file (`path`, else the XDG one if it exists)."""
    from gkdtop.analysis.rules import builtin_phases, builtin_signatures, compose

    cfg = Config(phases=builtin_phases(), findings=builtin_signatures())
    if path is None:
        candidate = default_config_path()
        if not candidate.is_file():
            return cfg
        path = candidate
    path = Path(path)
    _apply(cfg, compose(_read(path), str(path)), str(path))
    cfg.source = str(path)
    return cfg


MAX_BYTES = 1 << 20  # a config is a few KB; more is a wrong path (a log, /dev/zero) or a bomb
MAX_BACKLOG = 100_000  # lines of each file's existing content shown at start-up
MAX_LINE = 1 << 20  # characters kept of one line
REFRESH_RANGE = (0.01, 3600.0)  # seconds between two polls: faster spins a core, slower shows nothing


def _read(path: Path) -> str:
    """The config's text: a regular file of at most MAX_BYTES, else a one-line ConfigError.

    Opened non-blocking and checked on the descriptor, so `--config` naming a FIFO can't hang us.
    """
    from gkdtop.analysis.rules import ConfigError
    from gkdtop.safeopen import open_regular

    try:
        with open_regular(str(path)) as fh:
            data = fh.read(MAX_BYTES + 1) or b""
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise ConfigError(f"{path!r}: cannot read config: {exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: cannot read config: larger than {MAX_BYTES >> 20} MiB (is it a config file?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: cannot read config: not UTF-8 (byte {data[exc.start]:#04x})") from None


TOP_KEYS = {
    "stall_after", "phases", "phases_mode", "filters", "idle_patterns", "fail_pattern",
    "driver_patterns", "logs", "backlog", "max_line", "refresh", "findings", "stall_stacks", "stack_phase",
    "framework", "task_phases",
    "notify", "notify_every", "heartbeat",
}
TOP_KEYS |= {"metrics", "anomalies"}  # the Metrics pane and the anomaly thresholds (docs/configuration.md)
MAX_METRICS_SHOWN = 12


def _count(node: Any, where: str, key: str, low: int, high: int) -> int:
    """A whole number in [low, high]: `backlog: 1e12` would read a whole log, `max_line: 0` none of it."""
    from gkdtop.analysis.rules import node_error, scalar

    raw = scalar(node, where, key)
    try:
        value = float(raw)
    except ValueError:
        raise node_error(where, node, key, f"expected a whole number, got {raw!r}") from None
    if not math.isfinite(value) or value != int(value) or not low <= value <= high:
        raise node_error(where, node, key, f"expected a whole number from {low} to {high:,}, got {raw}")
    return int(value)


def _apply(cfg: Config, doc: Any, where: str) -> None:
    from gkdtop.analysis.rules import (
        boolean,
        check_keys,
        get,
        node_error,
        number,
        parse_findings,
        parse_phases,
        pattern,
        scalar,
        strings,
    )

    if doc is None:
        return
    check_keys(doc, where, "", TOP_KEYS)
    if (n := get(doc, "stall_after")) is not None:
        cfg.stall_after = number(n, where, "stall_after")
    if (n := get(doc, "stall_stacks")) is not None:
        cfg.stall_stacks = boolean(n, where, "stall_stacks")
    if (n := get(doc, "stack_phase")) is not None:
        cfg.stack_phase = boolean(n, where, "stack_phase")
    mode = "extend"
    if (n := get(doc, "phases_mode")) is not None:
        mode = scalar(n, where, "phases_mode")
        if mode not in ("extend", "replace"):
            raise node_error(where, n, "phases_mode", f"expected 'extend' or 'replace', got {mode!r}")
    if (n := get(doc, "phases")) is not None:
        user = parse_phases(n, where, "phases")
        if mode == "replace":
            cfg.phases = user
        else:
            # extend: a user rule with a built-in's name replaces it in place; new ones go first,
            # so they are tried before the built-ins.
            by_name = {r.name: r for r in user}
            kept = [by_name.pop(r.name, r) for r in cfg.phases]
            cfg.phases = [r for r in user if r.name in by_name] + kept
    if (n := get(doc, "filters")) is not None:
        check_keys(n, where, "filters", {str(k.value) for k, _ in n.value} if n.tag.endswith(":map") else set())
        for k, v in n.value:
            cfg.filters[k.value] = pattern(v, where, f"filters.{k.value}").text
    if (n := get(doc, "fail_pattern")) is not None:
        cfg.fail_pattern = pattern(n, where, "fail_pattern").text
    for key in ("idle_patterns", "driver_patterns"):
        if (n := get(doc, key)) is not None:
            items = n.value if n.tag.endswith(":seq") else [n]
            setattr(cfg, key, [pattern(item, where, f"{key}[{i}]").text for i, item in enumerate(items)])
    if (n := get(doc, "logs")) is not None:
        cfg.logs = [os.path.expanduser(p) for p in strings(n, where, "logs")]
        for i, (item, p) in enumerate(zip(n.value if n.tag.endswith(":seq") else [n], cfg.logs, strict=True)):
            if not p or "\0" in p:
                raise node_error(where, item, f"logs[{i}]", f"not a usable path: {p!r}")
    if (n := get(doc, "backlog")) is not None:
        cfg.backlog = _count(n, where, "backlog", 0, MAX_BACKLOG)
    if (n := get(doc, "max_line")) is not None:
        cfg.max_line = _count(n, where, "max_line", 80, MAX_LINE)
    if (n := get(doc, "findings")) is not None:
        user = parse_findings(n, where)
        names = {sig.name for sig in user}
        cfg.findings = user + [sig for sig in cfg.findings if sig.name not in names]
    if (n := get(doc, "framework")) is not None:
        from gkdtop.analysis.profiles import builtin_profiles

        name = scalar(n, where, "framework").strip()
        names = builtin_profiles().names
        if name not in ("auto", *names):
            raise node_error(where, n, "framework",
                             f"unknown framework {name!r} (expected auto or one of: {', '.join(names)})")
        cfg.framework = "" if name == "auto" else name
    if (n := get(doc, "task_phases")) is not None:
        from gkdtop.analysis.taskphases import parse_task_phases

        cfg.task_phases = parse_task_phases(n, where)
    if (n := get(doc, "notify")) is not None:
        cfg.notify = strings(n, where, "notify")
        for i, (item, url) in enumerate(zip(n.value if n.tag.endswith(":seq") else [n], cfg.notify, strict=True)):
            if "://" not in url and not url.startswith("$"):
                raise node_error(where, item, f"notify[{i}]", "expected an apprise URL (scheme://...) or $VARIABLE")
    for key in ("notify_every", "heartbeat"):
        if (n := get(doc, key)) is not None:
            value = number(n, where, key)
            if not 0 <= value <= 1e6:
                raise node_error(where, n, key, f"expected 0 to 1000000 seconds, got {n.value}")
            setattr(cfg, key, value)
    if (n := get(doc, "metrics")) is not None:
        cfg.metrics = [m.strip() for m in strings(n, where, "metrics") if m.strip()][:MAX_METRICS_SHOWN]
    if (n := get(doc, "anomalies")) is not None:
        from gkdtop.analysis.anomalies import parse_limits

        cfg.anomalies = parse_limits(n, where)
    if (n := get(doc, "refresh")) is not None:
        check_keys(n, where, "refresh", set(cfg.refresh))
        for k, v in n.value:
            value = number(v, where, f"refresh.{k.value}")
            if not REFRESH_RANGE[0] <= value <= REFRESH_RANGE[1]:
                low, high = REFRESH_RANGE
                raise node_error(where, v, f"refresh.{k.value}", f"expected {low:g} to {high:g} seconds, got {v.value}")
            cfg.refresh[k.value] = value
