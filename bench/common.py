"""Shared bench helpers: the result line bench/run.py collects, process-tree CPU, a Ray cluster, fake NVML.

Every bench script prints its own human line and, through `report`, one `@@BENCH {json}` line that
`bench/run.py` turns into a row of the table. Scripts stay runnable on their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARK = "@@BENCH "
RAY_ENV = "GKDTOP_BENCH_RAY"  # "gcs_address|dashboard_url|temp_root" of a cluster bench/run.py started


def report(what: str, gkdtop: str, baseline: str = "-", ratio: float | None = None, command: str = "") -> None:
    """One row for bench/run.py's table (also readable when a script runs alone)."""
    row = {"what": what, "gkdtop": gkdtop, "baseline": baseline,
           "ratio": f"{ratio:.2f}" if ratio is not None else "-", "command": command}
    print(MARK + json.dumps(row), flush=True)


def tree(root: psutil.Process) -> list[psutil.Process]:
    """A process and its live descendants."""
    procs = [root]
    with contextlib.suppress(psutil.NoSuchProcess):
        procs += root.children(recursive=True)
    return procs


def tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of a process and its live descendants, reaped children included (watch's runs)."""
    total = 0.0
    for proc in tree(root):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss(root: psutil.Process) -> int:
    total = 0
    for proc in tree(root):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += proc.memory_info().rss
    return total


def read_position(pid: int, path: str) -> int | None:
    """Where process `pid` has read `path` up to (its open handle's offset, from /proc), None if not open."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target == path:
            try:
                for line in Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().splitlines():
                    if line.startswith("pos:"):
                        return int(line.split()[1])
            except OSError:
                return None
    return None


def machine() -> str:
    """One line naming the machine, so a table is never read without it."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = psutil.virtual_memory().total / 2**30
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} CPUs ({model or 'unknown CPU'}), {mem:.0f} GiB, Python "
            f"{sys.version.split()[0]}, load average {load}")


class RayInfo:
    """Addresses of a local Ray cluster used by the benches."""

    def __init__(self, gcs: str, dashboard: str, temp_root: str) -> None:
        self.gcs, self.dashboard, self.temp_root = gcs, dashboard, temp_root

    def env(self) -> dict[str, str]:
        return {"RAY_TMPDIR": self.temp_root, "RAY_USAGE_STATS_ENABLED": "0"}


def ray_available() -> bool:
    return Path(sys.executable).with_name("ray").exists() and os.environ.get("GKDTOP_BENCH_NO_RAY") != "1"


@contextlib.contextmanager
def ray_cluster() -> Iterator[RayInfo | None]:
    """The cluster bench/run.py shares through the environment, else a small one of our own, else None."""
    shared = os.environ.get(RAY_ENV)
    if shared:
        gcs, dash, root = shared.split("|")
        yield RayInfo(gcs, dash, root)
        return
    if not ray_available():
        yield None
        return
    from tests.raycluster import new_cluster

    cluster = new_cluster()
    try:
        cluster.start(num_cpus=1)
        yield RayInfo(cluster.address, cluster.dashboard, str(cluster.temp_root))
    finally:
        cluster.remove()


FAKE_SMI = """\
import pynvml
pynvml.nvmlInit()
print("driver", pynvml.nvmlSystemGetDriverVersion())
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    print(i, pynvml.nvmlDeviceGetName(h), u.gpu, m.used, m.total,
          pynvml.nvmlDeviceGetTemperature(h, 0), pynvml.nvmlDeviceGetPowerUsage(h), len(procs))
pynvml.nvmlShutdown()
"""


def fake_nvml(directory: Path, gpus: int = 8) -> dict[str, str]:
    """Build the tests' fake libnvidia-ml.so.1 with `gpus` busy devices; the env that makes NVML load it.

    There is no GPU on the bench machine: gkdtop and the `nvidia-smi` stand-in both talk to this fake.
    """
    from tests import fakenvml

    fakenvml.build(directory)
    data = directory / "gpus.txt"
    fakenvml.write_data(data, [
        fakenvml.FakeGpu(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", util=90, mem_used=60 * fakenvml.GIB,
                         procs=[(os.getpid(), 50 * fakenvml.GIB)]) for i in range(gpus)
    ])
    (directory / "fake_smi.py").write_text(FAKE_SMI)
    return {"LD_LIBRARY_PATH": str(directory), "FAKE_NVML_DATA": str(data)}


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
