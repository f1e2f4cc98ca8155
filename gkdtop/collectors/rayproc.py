"""Which processes are Ray's own programs: by what they run, never by words in their arguments.

`less .../ray/dashboard/agent.py`, `pytest .../test_log_monitor.py` or a script called
`notes_about_default_worker.py` mention Ray's files, but they are an editor, a test run and a
user's script. A Ray process is one of:
- a `ray::...` or `ray-dashboard-...` process title (Ray's workers, agents and dashboard modules set it);
- the raylet or gcs_server binary shipped inside the ray package (`.../ray/core/src/ray/raylet/raylet`);
- a Python interpreter running one of Ray's own scripts (`python -u .../ray/dashboard/agent.py`) or
  modules (`python -m ray.util.client.server`): the script is the interpreter's first argument that
  is not an option, so a path given to `-c` code, or to another script, does not count;
- Ray's Java worker (`java ... io.ray.runtime.runner.worker.DefaultWorker`).
Used by the Processes pane (roles) and by cleanup (what may be terminated).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
