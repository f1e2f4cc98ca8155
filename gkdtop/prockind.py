"""What kind of process this is: one classifier for the Processes pane and for cleanup.

The pane asks "what role does this job process play" (classify: driver, actor, rollout, engine, a
Ray worker or daemon); cleanup asks "is this Ray's or an engine's, and would it be debris" (ray_program,
engine_title, is_gcs, is_raylet, helper, gcs_port, raylet_pid). Both read the same rules below.

Ray's own programs are told by what they run, never by words in their arguments:
`less .../ray/dashboard/agent.py`, `pytest .../test_log_monitor.py` or a script called
`notes_about_default_worker.py` mention Ray's files, but they are an editor, a test run and a
user's script. A Ray process is one of:
- a `ray::...` or `ray-dashboard-...` process title (Ray's workers, agents and dashboard modules set it);
- the raylet or gcs_server binary shipped inside the ray package (`.../ray/core/src/ray/raylet/raylet`);
- a Python interpreter running one of Ray's own scripts (`python -u .../ray/dashboard/agent.py`) or
  modules (`python -m ray.util.client.server`): the script is the interpreter's first argument that
  is not an option, so a path given to `-c` code, or to another script, does not count;
- Ray's Java worker (`java ... io.ray.runtime.runner.worker.DefaultWorker`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Ray's own binaries, as paths inside the installed package.
RAY_BINARIES = ("/ray/core/src/ray/raylet/raylet", "/ray/core/src/ray/gcs/gcs_server")
# Ray's own scripts, as paths inside the package -> role (worker or daemon).
RAY_SCRIPTS = {
    "_private/workers/default_worker.py": "worker",
    "_private/workers/setup_worker.py": "worker",
    "_private/log_monitor.py": "daemon",
    "_private/ray_process_reaper.py": "daemon",
    "_private/runtime_env/agent/main.py": "daemon",
    "autoscaler/_private/monitor.py": "daemon",
    "dashboard/dashboard.py": "daemon",
    "dashboard/agent.py": "daemon",
}
RAY_MODULE_RE = re.compile(r"ray\.util\.client\.server|ray\.(?:_private|dashboard|autoscaler)\.[\w.]+")
JAVA_WORKER = "io.ray.runtime.runner.worker.DefaultWorker"
# A job process of an inference engine, anywhere in its command line (the pane's `engine` role).
ENGINE_RE = re.compile(r"VLLM::|sglang::|vllm\.entrypoints|sglang\.launch_server|EngineCore")
# An engine's own process title (cleanup): what `ray stop` does not match and what keeps GPU memory.
ENGINE_TITLE_RE = re.compile(r"^(?:VLLM::|sglang::)")
# Order matters: the first keyword found in the actor class / title names the role.
ROLE_KEYWORDS = [
    ("teacher", re.compile(r"teacher", re.I)),
    ("rollout", re.compile(r"rollout|vllm|sglang|generat", re.I)),
    ("ref", re.compile(r"\bref|reference", re.I)),
    ("critic", re.compile(r"critic", re.I)),
    ("reward", re.compile(r"reward|\brm\b", re.I)),
    ("driver", re.compile(r"TaskRunner", re.I)),
    ("actor", re.compile(r"actor|WorkerDict|policy|student", re.I)),
]
SESSION_RE = re.compile(r"(session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+)")
GCS_PORT_RE = re.compile(r"--gcs_server_port=(\d+)")
GCS_ADDRESS_RE = re.compile(r"--(?:gcs[-_]address|address)[= ]\S*?:(\d+)(?:\s|$)")
# Helper processes that only live for a parent (multiprocessing spawn/forkserver children, torch
# compile workers): holding GPU memory with that parent gone, they are leftovers.
HELPER_RE = re.compile(r"multiprocessing\.(?:spawn|forkserver|resource_tracker)|spawn_main|_inductor/compile_worker")
# Parents that adopt orphans: a process whose parent is one of these has lost its real parent.
REAPERS = frozenset({"systemd", "init", "tini", "dumb-init", "catatonit"})
PYTHON_RE = re.compile(r"python[\d.]*")
# Interpreter options whose value is the next word (or the rest of the same word).
_VALUE_OPTIONS = "XWcm"


def python_target(argv: Sequence[str]) -> tuple[str, str] | None:
    """("script", path) | ("module", name) | ("code", "") that a Python command line runs; None if not Python."""
    if not argv or not PYTHON_RE.fullmatch(argv[0].rsplit("/", 1)[-1]):
        return None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ("script", argv[i + 1]) if i + 1 < len(argv) else None
        if arg == "-" or not arg.startswith("-"):
            return ("script", arg) if arg != "-" else ("code", "")
        if arg.startswith("--"):  # --check-hash-based-pycs takes a value; others do not
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        letters = arg[1:]
        for n, letter in enumerate(letters):
            if letter not in _VALUE_OPTIONS:
                continue
            value = letters[n + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
            if letter == "c":
                return "code", ""
            if letter == "m":
                return "module", value
            if not letters[n + 1 :]:
                i += 1  # -X / -W: skip their value
            break
        i += 1
    return None


def ray_program(argv: Sequence[str]) -> tuple[str, str] | None:
    """(role, name) of a Ray program - role `worker`, `daemon` or `title` - or None when it is not Ray's."""
    if not argv:
        return None
    first = argv[0]
    if first.startswith("ray::"):
        return "title", first.split(" ", 1)[0]
    if first.startswith("ray-dashboard-"):
        return "daemon", first.split(" ", 1)[0]
    if first.endswith(RAY_BINARIES):
        return "daemon", first.rsplit("/", 1)[-1]
    target = python_target(argv)
    if target is not None:
        kind, what = target
        if kind == "script":
            path = what.replace("\\", "/")
            for rel, role in RAY_SCRIPTS.items():
                if path.endswith("/ray/" + rel) or path == "ray/" + rel:
                    return role, rel.rsplit("/", 1)[-1]
        elif kind == "module" and RAY_MODULE_RE.fullmatch(what):
            return "daemon", what
        return None
    if first.rsplit("/", 1)[-1] == "java" and JAVA_WORKER in argv:
        return "worker", "DefaultWorker"
    return None


# ---------------------------------------------------------------- the Processes pane's question: which role


def classify(title: str, cmdline: str, driver_re: Any, argv: list[str] | None = None) -> tuple[str | None, str]:
    """(role, actor class) for a process, from its title and command line (argv when known).

    Ray's workers and daemons are told by what they run (ray_program), never by a Ray file named
    somewhere in the arguments: `less .../ray/dashboard/agent.py` is no Ray daemon.
    """
    if title.startswith("ray::"):
        actor = title[5:].split(".", 1)[0].split(" ", 1)[0]
        if actor in ("DashboardAgent", "RuntimeEnvAgent"):
            return "ray-daemon", ""
        if actor == "IDLE":
            return "ray-worker", ""
        return role_of(actor, default="ray-worker"), actor
    if ENGINE_RE.search(cmdline):
        return "engine", ""
    program = ray_program(argv if argv is not None else cmdline.split())
    if program is not None:
        return ("ray-worker" if program[0] == "worker" else "ray-daemon"), ""
    if driver_re is not None and driver_re.search(cmdline):
        return "driver", ""
    return None, ""


def role_of(name: str, default: str) -> str:
    """The role an actor class (or title) names: `OnPolicyTeacher` -> teacher."""
    for role, pattern in ROLE_KEYWORDS:
        if pattern.search(name):
            return role
    return default


def display_name(cmdline: str) -> str:
    """What a person calls the process: `log_monitor.py`, `python -m verl.trainer.main_ppo`, `raylet`."""
    argv = cmdline.split()
    first = argv[0].rsplit("/", 1)[-1] if argv else "?"
    if PYTHON_RE.fullmatch(first):
        for i, arg in enumerate(argv[1:], 1):
            if arg == "-m" and i + 1 < len(argv):
                return f"python -m {argv[i + 1]}"[:60]
            if arg.endswith(".py"):
                return arg.rsplit("/", 1)[-1][:60]
    return first[:60]


def label(title: str, cmdline: str) -> str:
    """A Ray or engine process by its title (`ray::Actor.method`, `VLLM::EngineCore`), any other by display_name."""
    return title[:60] if title.startswith(("ray::", "VLLM::", "sglang::")) else display_name(cmdline)


def session(cmdline: str) -> str:
    """The Ray session (`session_2026-...`) a command line names, or ""."""
    match = SESSION_RE.search(cmdline)
    return match.group(1) if match else ""


# ---------------------------------------------------------------- cleanup's questions: whose is it, is it debris


def engine_title(title: str, name: str) -> bool:
    """An inference engine's own process (`VLLM::EngineCore`, `sglang::scheduler`), by title or name."""
    return bool(ENGINE_TITLE_RE.match(title) or ENGINE_TITLE_RE.match(name))


def is_gcs(title: str, name: str) -> bool:
    """A gcs_server, by name too: a live-looking anchor only ever keeps things out of cleanup's plan."""
    return name == "gcs_server" or title.rsplit("/", 1)[-1] == "gcs_server"


def is_raylet(title: str, name: str) -> bool:
    return name == "raylet" or title.rsplit("/", 1)[-1] == "raylet"


def helper(cmdline: str) -> bool:
    """A process that only lives for its parent (multiprocessing child, torch compile worker)."""
    return bool(HELPER_RE.search(cmdline))


def gcs_port(cmdline: str) -> str:
    """The GCS port a Ray process names (`--gcs_server_port=`, `--gcs-address=host:port`), or ""."""
    match = GCS_PORT_RE.search(cmdline) or GCS_ADDRESS_RE.search(cmdline)
    return match.group(1) if match else ""


def raylet_pid(env: Mapping[str, str]) -> int | None:
    """RAY_RAYLET_PID from a process's environment: Ray sets it for every worker and agent the raylet starts."""
    value = env.get("RAY_RAYLET_PID", "")
    return int(value) if value.isascii() and value.isdigit() else None
