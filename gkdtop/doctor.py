"""`gkdtop doctor`: the playbook's component test and GPU-allocation diagnostic, done right.

Each check says ok / warn / fail, one line of detail, and a fix. Nothing here changes anything.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from typing import Any

SCHEMA = 1
DEAD_KNOBS = {
    "NCCL_TIMEOUT": "read by neither NCCL nor PyTorch. Use init_process_group(timeout=...) (verl: nccl_timeout, "
                    "default 600 s), TORCH_NCCL_BLOCKING_WAIT=1, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
}


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python() -> Check:
    return Check("python", "ok", f"Python {platform.python_version()} ({sys.executable})")


def check_torch() -> tuple[Check, int | None]:
    if importlib.util.find_spec("torch") is None:
        return Check("torch", "warn", "torch is not installed in this environment",
                     "Run doctor with the job's Python environment"), None
    import warnings

    with warnings.catch_warnings():  # torch warns about optional numpy at import; not our business here
        warnings.simplefilter("ignore")
        import torch

    cuda = torch.version.cuda or "none (CPU build)"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = ""
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            nccl = "unavailable"
    detail = f"torch {torch.__version__}, CUDA {cuda}, {count} GPU(s) visible to torch"
    detail += f", NCCL {nccl}" if nccl else ""
    status = "ok" if count or torch.version.cuda is None else "warn"
    fix = "" if status == "ok" else "torch is a CUDA build but sees no GPU: check the driver and CUDA_VISIBLE_DEVICES"
    return Check("torch", status, detail, fix), count


def check_gpus(torch_count: int | None) -> tuple[Check, int]:
    from gkdtop.collectors.gpu import GpuCollector, NvmlBackend

    collector = GpuCollector(NvmlBackend())
    try:
        state = collector.collect()
    finally:
        collector.close()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if state.status != "ok":
        return Check("gpus", "warn", f"NVML: {state.status}: {state.reason}",
                     "On a GPU node: install/load the NVIDIA driver; elsewhere this is expected"), 0
    names = ", ".join(f"{d.index}:{d.name}" for d in state.devices)
    detail = f"NVML sees {len(state.devices)} GPU(s) ({names}); CUDA_VISIBLE_DEVICES={visible!r}"
    if torch_count is not None:
        detail += f"; torch sees {torch_count}"
    expected = len(state.devices) if visible is None else len([v for v in visible.split(",") if v.strip()])
    if torch_count is not None and torch_count != expected:
        return Check("gpus", "fail", detail, "torch and NVML disagree: check CUDA_VISIBLE_DEVICES and the driver"), \
            len(state.devices)
    busy = [f"GPU {d.index}: {len(d.processes)} process(es)" for d in state.devices if d.processes]
    if busy:
        return Check("gpus", "warn", detail + "; already in use: " + ", ".join(busy),
                     "Something holds GPU memory: see `gkdtop` (GPUs pane) or `gkdtop cleanup --dry-run`"), \
            len(state.devices)
    return Check("gpus", "ok", detail), len(state.devices)


def check_ray(address: str | None) -> tuple[Check, dict[str, float]]:
    from gkdtop.collectors.ray import RayCollector

    state = RayCollector(address=address, details_every=10**9).collect()
    if state.status != "connected":
        status = "fail" if address or os.environ.get("RAY_ADDRESS") else "warn"
        return Check("ray", status, f"not connected: {state.reason}",
                     "Start the cluster (ray start --head) or pass --ray-address"), {}
    res = ", ".join(f"{k} {v:g}" for k, v in sorted(state.resources_total.items()) if k in ("CPU", "GPU"))
    detail = f"{state.nodes_alive} node(s), {res or 'no resources reported yet'} at {state.address}"
    return Check("ray", "ok", detail), state.resources_total


def check_engines() -> Check:
    found = [f"{pkg} {v}" for pkg in ("vllm", "sglang") if (v := _version(pkg))]
    if not found:
        return Check("inference engines", "warn", "neither vLLM nor SGLang is installed here",
                     "Install the rollout engine your recipe uses in this environment")
    return Check("inference engines", "ok", ", ".join(found))


def check_py_spy() -> Check:
    path = shutil.which("py-spy", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if path is None:
        return Check("py-spy", "fail", "py-spy not found", "pip install py-spy (gkdtop's stack dumps need it)")
    scope = "?"
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as fh:
            scope = fh.read().strip()
    except OSError:
        scope = "absent"
    if os.geteuid() == 0 or scope in ("0", "absent"):
        return Check("py-spy", "ok", f"{path}; ptrace allowed (uid {os.geteuid()}, ptrace_scope {scope})")
    return Check("py-spy", "warn", f"{path}; ptrace_scope={scope}: py-spy can only attach to its own children",
                 "sysctl kernel.yama.ptrace_scope=0, or run as root / with CAP_SYS_PTRACE")


def check_shm(shm_dir: str = "/dev/shm") -> Check:
    try:
        usage = shutil.disk_usage(shm_dir)
    except OSError as exc:
        return Check("shared memory", "warn", f"{shm_dir}: {exc.strerror}")
    free_gib = usage.free / 2**30
    from pathlib import Path

    from gkdtop.actions.cleanup import segment_users

    segments = [Path(p) for p in glob.glob(os.path.join(shm_dir, "nccl-*"))]
    users = segment_users(segments)
    leaked = [s for s in segments if not users.get(s)]
    detail = (f"{shm_dir}: {free_gib:.1f} GiB free; {len(segments)} nccl-* segment(s), "
              f"{len(leaked)} not used by any process")
    if leaked:
        return Check("shared memory", "warn", detail, "gkdtop cleanup removes unused nccl-* segments (with a preview)")
    if free_gib < 1:
        return Check("shared memory", "warn", detail, "NCCL needs /dev/shm: give the container --shm-size >= 1g")
    return Check("shared memory", "ok", detail)


def check_env(environ: dict[str, str]) -> list[Check]:
    out = []
    for name, why in DEAD_KNOBS.items():
        if name in environ:
            out.append(Check(f"env {name}", "warn", f"{name}={environ[name]} is {why.split('.')[0]}",
                             why.split(". ", 1)[1] if ". " in why else why))
    debug = environ.get("NCCL_DEBUG")
    out.append(Check("env NCCL_DEBUG", "ok", f"NCCL_DEBUG={debug}" if debug else "NCCL_DEBUG unset (quiet)",
                     "" if debug else "NCCL_DEBUG=WARN shows NCCL's own errors; INFO for one run when debugging init"))
    trace = environ.get("TORCH_FR_BUFFER_SIZE") or environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    out.append(Check("env flight recorder", "ok",
                     f"Flight Recorder buffer {trace} entries" if trace else "PyTorch Flight Recorder off",
                     "" if trace else "TORCH_FR_BUFFER_SIZE=2000, TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and "
                                      "TORCH_NCCL_DUMP_ON_TIMEOUT=1 record the "
                                      "last collectives per rank (dumps in /tmp/nccl_trace_rank_*; keep them)"))
    return out


# Processes that run the job's model code: where torch reads the Flight Recorder variables.
RANK_ROLES = frozenset({"actor", "rollout", "ref", "teacher", "critic", "reward", "ray-worker", "worker", "engine"})


def check_job_env(processes: list[Any]) -> list[Check]:
    """Did the Flight Recorder variables reach every worker? verl forwards only a fixed list of variables
    to its Ray workers, so what `gkdtop run` set in the driver may stop there. And which NCCL each loaded."""
    from gkdtop.capture.nccl_ras import loaded_nccl
    from gkdtop.capture.proc import process_environ
    from gkdtop.jobrun import FR_ENV_NAMES

    workers = [p for p in processes if p.role in RANK_ROLES]
    if not workers:
        return [Check("job flight recorder", "ok", "no job worker running: nothing to check")]
    lacking: list[str] = []
    unreadable = 0
    for proc in workers:
        env = process_environ(proc.pid)
        if not env:
            unreadable += 1
            continue
        missing = [name for name in FR_ENV_NAMES if not env.get(name)]
        if missing:
            lacking.append(f"{proc.pid} ({proc.actor or proc.role}) lacks {', '.join(missing)}")
    read = len(workers) - unreadable
    out = []
    if lacking:
        out.append(Check("job flight recorder", "warn", f"{len(lacking)} of {read} job workers: " + "; ".join(
            lacking[:4]) + (f"; {len(lacking) - 4} more" if len(lacking) > 4 else ""),
            "pass them to the workers: ray.init(runtime_env={'env_vars': {...}}) (verl: add them to the "
            "runtime_env of ray_init); without them `s` cannot say which rank is in which collective"))
    else:
        out.append(Check("job flight recorder", "ok" if read else "warn",
                         f"{', '.join(FR_ENV_NAMES)} set in all {read} job workers" if read else
                         "no job worker's environment is readable (another user's processes?)"))
    libs: dict[str, int] = {}
    for proc in workers:
        if lib := loaded_nccl(proc.pid):
            libs[lib] = libs.get(lib, 0) + 1
    out.append(Check("job nccl", "warn" if len(libs) > 1 else "ok",
                     ", ".join(f"{lib} in {n} process(es)" for lib, n in sorted(libs.items())) if libs else
                     "no job worker has loaded NCCL (CPU/gloo, or no NCCL group yet)",
                     "different NCCL builds in one job: ranks that load another NCCL may not talk to each other"
                     if len(libs) > 1 else ""))
    if libs:
        out.append(check_ras(next(p for p in workers if loaded_nccl(p.pid)).pid))
    return out


def check_ras(pid: int) -> Check:
    """Does NCCL's RAS service answer where this NCCL process's environment says it listens?"""
    from gkdtop.capture import nccl_ras
    from gkdtop.capture.proc import process_environ

    address = nccl_ras.address_from_env(process_environ(pid))
    if address is None:
        return Check("nccl ras", "warn", f"NCCL_RAS_ENABLE=0 in process {pid}",
                     "leave RAS on (the default): `s` then tells a stuck communicator from a slow one")
    try:
        report = nccl_ras.query(address, timeout=5.0)
    except nccl_ras.RasError as exc:
        return Check("nccl ras", "warn", str(exc), "NCCL >= 2.24 runs RAS by default; check NCCL_RAS_ADDR")
    what = f"{len(report.comms)} communicator(s)" if report.format == "json" else "text reports (NCCL < 2.28.7)"
    return Check("nccl ras", "ok", f"RAS answers at {report.address}: " + (
        f"NCCL {report.nccl_version}, " if report.nccl_version else "") + what)


def check_plan(actor: int, rollout: int, teacher: int, nodes: int, gpus_per_node: int,
               ray_gpus: float | None) -> Check:
    need = actor + rollout + teacher
    have = int(ray_gpus) if ray_gpus is not None else gpus_per_node * nodes
    source = "Ray reports" if ray_gpus is not None else f"{nodes} node(s) x {gpus_per_node} GPU(s) seen here"
    detail = f"plan needs {need} GPU(s) (actor {actor} + rollout {rollout} + teacher {teacher}); {source}: {have}"
    if need > have:
        return Check("plan", "fail", detail + f": {need - have} short, placement will wait forever",
                     "Lower the GPU counts (trainer.n_gpus_per_node, rollout tensor parallel size) or add nodes")
    if nodes > 1 and actor % nodes and actor > gpus_per_node:
        return Check("plan", "warn", detail + f"; {actor} actor GPUs do not split evenly over {nodes} nodes",
                     "Use a multiple of the node count for the actor pool")
    return Check("plan", "ok", detail)


def run_checks(address: str | None = None, plan: dict[str, int] | None = None) -> list[Check]:
    checks = [check_python()]
    torch_check, torch_count = check_torch()
    checks.append(torch_check)
    gpu_check, nvml_count = check_gpus(torch_count)
    checks.append(gpu_check)
    ray_check, ray_res = check_ray(address)
    checks += [ray_check, check_engines(), check_py_spy(), check_shm(), *check_env(dict(os.environ))]
    try:
        from gkdtop.actions.stacks import job_targets

        checks += check_job_env(job_targets())
    except Exception as exc:  # a process scan that fails is one line, never the end of doctor
        checks.append(Check("job flight recorder", "warn", f"could not scan the job's processes: {exc}"[:200]))
    if plan:
        checks.append(check_plan(plan["actor"], plan["rollout"], plan["teacher"], plan["nodes"], nvml_count,
                                 ray_res.get("GPU") if ray_res else None))
    return checks
