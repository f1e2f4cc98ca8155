"""Build the fake libnvidia-ml.so.1 (tests/fake_nvml/fake_nvml.c), write its data file, run code against it.

glibc reads LD_LIBRARY_PATH once, at process start, so code that must load the fake library runs in
a fresh Python subprocess whose environment points at it; results come back as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).resolve().parent / "fake_nvml" / "fake_nvml.c"
LIBNAME = "libnvidia-ml.so.1"
GIB = 1024**3

# NVML return codes the tests use (values from nvml.h, as pynvml mirrors them).
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18


def build(directory: Path, old_driver: bool = False) -> Path:
    """Compile the fake into `directory`/libnvidia-ml.so.1 and return `directory`.

    old_driver leaves out the newer entry points (MemoryInfo_v2, TemperatureV, *Processes_v3) to
    check the fallbacks a pre-R565 driver needs.
    """
    directory.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-o", str(directory / LIBNAME), str(SOURCE)]
    if old_driver:
        cmd.insert(1, "-DFAKE_NVML_OLD")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return directory


@dataclass
class FakeGpu:
    """One device as the fake reports it; units as NVML's C API has them (bytes, mW, percent)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    util: int = 0
    mem_util: int = 0
    mem_total: int = 80 * GIB
    mem_used: int = 0
    mem_reserved: int = 0
    temp: int = 40
    power: int | None = 100_000  # mW; None: not supported
    power_limit: int | None = 700_000  # mW
    enforced_limit: int | None = None  # mW; None: same as power_limit
    procs: list[tuple[int, int | None]] = field(default_factory=list)  # compute: (pid, bytes or None)
    gprocs: list[tuple[int, int | None]] = field(default_factory=list)  # graphics
    error: int = 0  # every call on this device returns this NVML code
    errors: dict[str, int] = field(default_factory=dict)  # per call group (see fake_nvml.c) -> code


def render(gpus: list[FakeGpu], init: int = 0, driver: str = "550.54.15") -> str:
    """The key=value text fake_nvml.c reads."""
    lines = [f"init={init}", f"driver={driver}", f"count={len(gpus)}"]
    for i, gpu in enumerate(gpus):
        values: dict[str, object] = {
            "name": gpu.name, "uuid": gpu.uuid, "util": gpu.util, "mem_util": gpu.mem_util,
            "mem_total": gpu.mem_total, "mem_used": gpu.mem_used, "mem_reserved": gpu.mem_reserved,
            "temp": gpu.temp, "power": gpu.power, "power_limit": gpu.power_limit,
            "enforced_limit": gpu.enforced_limit, "error": gpu.error,
            "procs": _procs(gpu.procs), "gprocs": _procs(gpu.gprocs),
        }
        lines += [f"{i}.{k}={v}" for k, v in values.items() if v is not None]
        lines += [f"{i}.{group}.error={code}" for group, code in gpu.errors.items()]
    return "\n".join(lines) + "\n"


def _procs(procs: list[tuple[int, int | None]]) -> str:
    return ",".join(f"{pid}:{'-' if used is None else used}" for pid, used in procs)


def write_data(
    path: str | os.PathLike[str], gpus: list[FakeGpu], init: int = 0, driver: str = "550.54.15"
) -> None:
    """Replace the data file atomically: the library re-reads it on every call, maybe mid-write."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(gpus, init, driver))
    os.replace(tmp, path)


PRELUDE = """\
import dataclasses, json, os, sys
from gkdtop.collectors.gpu import GpuCollector, NvmlBackend
from tests.fakenvml import GIB, FakeGpu, write_data
DATA = os.environ.get("FAKE_NVML_DATA", "")
_out = []
def emit(value):
    _out.append(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value)
def calls(name):
    try:
        with open(os.environ["FAKE_NVML_LOG"]) as fh:
            return sum(1 for line in fh if line.split()[0] == name)
    except FileNotFoundError:
        return 0
"""


def run(code: str, lib_dir: Path | None, data: Path | None = None, log: Path | None = None,
        timeout: float = 30.0) -> list[Any]:
    """Run `code` (after PRELUDE) in a fresh Python whose dynamic loader looks in lib_dir first.

    The code reports with emit(value) (dataclasses become dicts); the list of emitted values is
    returned. lib_dir None leaves LD_LIBRARY_PATH unset.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("FAKE_NVML_DATA", None)
    env.pop("FAKE_NVML_LOG", None)
    env.pop("GKDTOP_GPU_REPLAY", None)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if data is not None:
        env["FAKE_NVML_DATA"] = str(data)
    if log is not None:
        env["FAKE_NVML_LOG"] = str(log)
    script = PRELUDE + textwrap.dedent(code) + "\nprint('@@RESULT@@' + json.dumps(_out))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    marker = proc.stdout.rfind("@@RESULT@@")
    return json.loads(proc.stdout[marker + len("@@RESULT@@"):])
