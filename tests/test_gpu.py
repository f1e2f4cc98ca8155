"""GPU collector: the real pynvml against a fake libnvidia-ml.so.1 (in subprocesses), recordings, real GPUs.

The fake (tests/fake_nvml/fake_nvml.c) is compiled once per session; each NVML test runs a fresh
Python with LD_LIBRARY_PATH pointing at it, because the dynamic loader reads that variable only
at process start.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gkdtop.collectors.gpu import (
    GpuCollector,
    GpuUnavailable,
    NvmlBackend,
    RecordedBackend,
    backend_from_env,
)
from gkdtop.model import GpuProcess, GpuSample
from tests import fakenvml
from tests.fakenvml import (
    DRIVER_NOT_LOADED,
    GIB,
    GPU_IS_LOST,
    LIB_RM_VERSION_MISMATCH,
    NO_PERMISSION,
    NOT_SUPPORTED,
    FakeGpu,
    write_data,
)

MIB = 1024**2
Nvml = Callable[..., list[Any]]  # the `nvml` fixture: run(code, gpus=..., init=..., lib=...)


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libnvidia-ml.so.1, built once."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    return fakenvml.build(tmp_path_factory.mktemp("fake_nvml"))


@pytest.fixture(scope="session")
def old_fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake as an older driver: no MemoryInfo_v2, TemperatureV or *RunningProcesses_v3."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    return fakenvml.build(tmp_path_factory.mktemp("fake_nvml_old"), old_driver=True)


@pytest.fixture
def nvml(fake_lib: Path, tmp_path: Path) -> Callable[..., list[Any]]:
    """Run code in a subprocess on the fake library, with the data file and call log in tmp_path."""
    data, log = tmp_path / "nvml.txt", tmp_path / "calls.log"

    def run(
        code: str, gpus: list[FakeGpu] | None = None, init: int = 0, lib: Path | None = None
    ) -> list[Any]:
        write_data(data, gpus if gpus is not None else two_gpus(), init=init)
        return fakenvml.run(code, lib or fake_lib, data, log)

    return run


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", util=57, mem_util=12, mem_total=80 * GIB,
                mem_used=61 * GIB, mem_reserved=512 * MIB, temp=61, power=420_500, power_limit=700_000,
                enforced_limit=650_000, procs=[(1234, 30 * GIB), (5678, None)],
                gprocs=[(5678, 2 * GIB), (42, 1 * GIB)]),
        FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid="GPU-bbbb", util=3, mem_total=40 * GIB, mem_used=1 * GIB,
                temp=35, power=61_000, power_limit=400_000),
    ]


# ---- through pynvml and the fake library ----


def test_two_devices_values_units_and_processes(nvml: Nvml) -> None:
    [state] = nvml("""
        c = GpuCollector(NvmlBackend())
        emit(c.collect())
        c.close()
    """)
    assert state["status"] == "ok" and state["reason"] == "" and state["driver"] == "550.54.15"
    first, second = state["devices"]
    assert first == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa", "utilization": 57.0,
        "memory_used": 61 * GIB,  # _v2: without the reserved 512 MiB
        "memory_total": 80 * GIB, "temperature": 61.0, "power": 420.5,
        "power_limit": 650.0,  # the enforced limit, not the management one
        "processes": [  # compute and graphics merged by pid; the graphics list fills a missing size
            {"pid": 1234, "used_memory": 30 * GIB}, {"pid": 5678, "used_memory": 2 * GIB},
            {"pid": 42, "used_memory": 1 * GIB},
        ],
        "error": None,
    }
    assert second["name"] == "NVIDIA A100-SXM4-40GB" and second["power_limit"] == 400.0
    assert second["memory_total"] == 40 * GIB and second["processes"] == [] and second["error"] is None


def test_process_memory_not_available_is_none(nvml: Nvml) -> None:
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())",
                   gpus=[FakeGpu(procs=[(7, None), (8, 5 * GIB)])])
    procs = state["devices"][0]["processes"]
    assert procs == [{"pid": 7, "used_memory": None}, {"pid": 8, "used_memory": 5 * GIB}]


def test_many_processes_through_the_two_call_protocol(nvml: Nvml) -> None:
    procs = [(1000 + i, i * MIB) for i in range(40)]
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())", gpus=[FakeGpu(procs=procs)])
    assert [(p["pid"], p["used_memory"]) for p in state["devices"][0]["processes"]] == procs


def test_static_fields_are_read_once(nvml: Nvml) -> None:
    [counts] = nvml("""
        c = GpuCollector(NvmlBackend())
        for _ in range(3):
            assert c.collect().status == "ok"
        c.close()
        c.close()
        emit({name: calls(name) for name in ("nvmlInitWithFlags", "nvmlShutdown", "nvmlDeviceGetName",
              "nvmlDeviceGetUUID", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetMemoryInfo_v2",
              "nvmlDeviceGetHandleByIndex_v2", "nvmlSystemGetDriverVersion")})
    """)
    assert counts == {
        "nvmlInitWithFlags": 1, "nvmlShutdown": 1,  # close() twice shuts NVML down once
        "nvmlDeviceGetName": 2, "nvmlDeviceGetUUID": 2, "nvmlDeviceGetEnforcedPowerLimit": 2,
        "nvmlDeviceGetHandleByIndex_v2": 2, "nvmlSystemGetDriverVersion": 1,
        "nvmlDeviceGetMemoryInfo_v2": 6,  # two devices, three samples
    }


def test_not_supported_fields_are_none_not_errors(nvml: Nvml) -> None:
    groups = ("temp", "power", "util", "procs", "gprocs", "power_limit")
    gpu = FakeGpu(errors=dict.fromkeys(groups, NOT_SUPPORTED))
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())", gpus=[gpu])
    dev = state["devices"][0]
    assert state["status"] == "ok" and dev["error"] is None
    assert dev["temperature"] is None and dev["power"] is None and dev["utilization"] is None
    assert dev["power_limit"] is None and dev["processes"] == []
    assert dev["memory_total"] == 80 * GIB


def test_older_driver_falls_back_to_older_entry_points(nvml: Nvml, old_fake_lib: Path) -> None:
    [state, counts] = nvml("""
        c = GpuCollector(NvmlBackend())
        c.collect()
        emit(c.collect())
        emit({n: calls(n) for n in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperature",
                                     "nvmlDeviceGetComputeRunningProcesses_v2")})
    """, lib=old_fake_lib)
    first = state["devices"][0]
    assert state["status"] == "ok" and first["error"] is None
    assert first["memory_used"] == 61 * GIB + 512 * MIB  # v1 counts the reserve as used
    assert first["temperature"] == 61.0
    assert [p["pid"] for p in first["processes"]] == [1234, 5678, 42]
    assert counts == {"nvmlDeviceGetMemoryInfo": 4, "nvmlDeviceGetTemperature": 4,
                      "nvmlDeviceGetComputeRunningProcesses_v2": 6}  # 2 + 2 calls on GPU 0, 1 + 1 on GPU 1


def test_gpu_lost_mid_run_and_back(nvml: Nvml) -> None:
    before, lost, back, all_lost = nvml(f"""
        gpus = [FakeGpu(name="A", uuid="GPU-a", mem_used=GIB),
                FakeGpu(name="B", uuid="GPU-b", mem_used=2 * GIB)]
        write_data(DATA, gpus)
        c = GpuCollector(NvmlBackend())
        emit(c.collect())
        gpus[1].error = {GPU_IS_LOST}
        write_data(DATA, gpus)
        emit(c.collect())
        gpus[1].error = 0
        write_data(DATA, gpus)
        emit(c.collect())
        gpus[0].error = gpus[1].error = {GPU_IS_LOST}
        write_data(DATA, gpus)
        emit(c.collect())
    """)
    assert before["status"] == "ok" and [d["error"] for d in before["devices"]] == [None, None]
    assert lost["status"] == "ok"
    ok, gone = lost["devices"]
    assert ok["error"] is None and ok["memory_used"] == GIB
    assert gone["error"] == "GPU is lost" and gone["name"] == "B" and gone["uuid"] == "GPU-b"
    assert gone["memory_used"] is None and gone["utilization"] is None
    assert back["status"] == "ok"
    assert back["devices"][1]["error"] is None and back["devices"][1]["memory_used"] == 2 * GIB
    assert all_lost["status"] == "error" and all_lost["reason"] == "GPU is lost"
    assert len(all_lost["devices"]) == 2


def test_gpu_lost_from_the_start_has_no_name_but_others_go_on(nvml: Nvml) -> None:
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())",
                   gpus=[FakeGpu(error=GPU_IS_LOST), FakeGpu(name="B")])
    lost, ok = state["devices"]
    assert state["status"] == "ok"
    assert lost["error"] == "GPU is lost" and lost["name"] == ""
    assert ok["error"] is None and ok["name"] == "B"


def test_other_device_error_names_the_field(nvml: Nvml) -> None:
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())",
                   gpus=[FakeGpu(errors={"memory": 10}), FakeGpu()])  # NVML_ERROR_TIMEOUT
    assert state["devices"][0]["error"] == "Timeout (reading memory)"
    assert state["devices"][1]["error"] is None


@pytest.mark.parametrize(("code", "reason"), [
    (DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    (NO_PERMISSION, "no permission to use the NVIDIA driver"),
    (LIB_RM_VERSION_MISMATCH, "NVML library and loaded driver differ"),
])
def test_init_failing_is_unavailable_with_a_reason(nvml: Nvml, code: int, reason: str) -> None:
    [state, inits] = nvml("""
        c = GpuCollector(NvmlBackend())
        for _ in range(3):
            state = c.collect()
        emit(state)
        emit(calls("nvmlInitWithFlags"))
    """, init=code)
    assert state["status"] == "unavailable" and state["devices"] == []
    assert state["reason"].startswith(reason)
    assert inits == 1  # not retried on every collect


def test_recovers_when_the_driver_comes_back(nvml: Nvml) -> None:
    waiting, still, recovered, inits = nvml("""
        now = [0.0]
        c = GpuCollector(NvmlBackend(), clock=lambda: now[0])
        emit(c.collect())
        write_data(DATA, [FakeGpu(name="back")])
        now[0] = 10.0
        emit(c.collect())  # within the retry interval: NVML is not asked again
        now[0] = 31.0
        emit(c.collect())
        emit(calls("nvmlInitWithFlags"))
    """, init=DRIVER_NOT_LOADED)
    assert waiting["status"] == "unavailable" and still == waiting
    assert recovered["status"] == "ok" and recovered["devices"][0]["name"] == "back"
    assert inits == 2


def test_unexpected_error_propagates_then_nvml_restarts(nvml: Nvml) -> None:
    first, raised, again, inits = nvml("""
        import pynvml
        c = GpuCollector(NvmlBackend())
        emit(c.collect().status)
        pynvml.nvmlShutdown()  # NVML pulled out from under the collector
        try:
            c.collect()
            emit("no error")
        except pynvml.NVMLError as exc:
            emit(type(exc).__name__)
        emit(c.collect().status)
        emit(calls("nvmlInitWithFlags"))
    """)
    assert (first, raised, again, inits) == ("ok", "NVMLError_Uninitialized", "ok", 2)


def test_no_gpus_is_unavailable(nvml: Nvml) -> None:
    [state] = nvml("emit(GpuCollector(NvmlBackend()).collect())", gpus=[])
    assert state["status"] == "unavailable" and state["reason"] == "NVML reports no GPUs"


def test_library_absent_is_unavailable(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    [loadable] = fakenvml.run("""
        import ctypes
        try:
            ctypes.CDLL("libnvidia-ml.so.1")
            emit(True)
        except OSError:
            emit(False)
    """, empty)
    if loadable:
        pytest.skip("a real libnvidia-ml.so.1 is installed here: cannot test its absence")
    [state, imported] = fakenvml.run("""
        c = GpuCollector(NvmlBackend())
        emit(c.collect())
        c.close()
        emit("pynvml" in sys.modules)
    """, empty)
    assert state["status"] == "unavailable"
    assert state["reason"] == "NVML library not found (no NVIDIA driver?)"
    assert imported


def test_pynvml_is_not_imported_until_the_first_collect() -> None:
    [imported] = fakenvml.run("""
        c = GpuCollector()
        emit("pynvml" in sys.modules)
    """, None)
    assert imported is False


# ---- the collector with a stand-in backend ----


class StubBackend:
    """Scripted backend: `starts` says what each start() does (None: works; str: unavailable)."""

    def __init__(self, starts: list[str | None], samples: list[list[GpuSample] | Exception]) -> None:
        self.starts, self.samples = starts, samples
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")
        outcome = self.starts.pop(0) if self.starts else None
        if outcome is not None:
            raise GpuUnavailable(outcome)

    def driver_version(self) -> str:
        return "1.0"

    def sample(self) -> list[GpuSample]:
        self.calls.append("sample")
        item = self.samples.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def sample(index: int, error: str | None = None) -> GpuSample:
    return GpuSample(index=index, name=f"G{index}", uuid="", utilization=1.0, memory_used=1, memory_total=2,
                     temperature=None, power=None, power_limit=None, error=error)


def test_collector_retries_start_only_after_the_interval() -> None:
    now = [100.0]
    backend = StubBackend(["no driver", "no driver"], [[sample(0)]])
    c = GpuCollector(backend, retry_after=30.0, clock=lambda: now[0])
    assert not c.idle()  # never asked yet
    assert c.collect().reason == "no driver"
    now[0] = 129.0
    assert c.idle() == 1.0  # the loop dozes until the retry: no thread hop, no redraw
    assert c.collect().status == "unavailable"
    assert backend.calls == ["start"]
    now[0] = 130.0
    assert not c.idle()
    assert c.collect().status == "unavailable"
    now[0] = 160.0
    state = c.collect()
    assert not c.idle()
    assert state.status == "ok" and state.driver == "1.0" and state.devices == [sample(0)]
    assert backend.calls == ["start", "start", "start", "sample"]


def test_collector_error_status_when_every_device_fails() -> None:
    c = GpuCollector(StubBackend([], [[sample(0, "GPU is lost"), sample(1, "Timeout (reading memory)")]]))
    state = c.collect()
    assert state.status == "error"
    assert state.reason == "all GPUs failed: GPU is lost; Timeout (reading memory)"


def test_collector_unexpected_error_shuts_down_and_restarts() -> None:
    backend = StubBackend([], [RuntimeError("boom"), [sample(0)]])
    c = GpuCollector(backend)
    with pytest.raises(RuntimeError, match="boom"):
        c.collect()
    assert c.collect().status == "ok"
    c.close()
    c.close()
    assert backend.calls == ["start", "sample", "shutdown", "start", "sample", "shutdown"]


# ---- recordings ----


def recording(tmp_path: Path) -> Path:
    frames = [
        [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "utilization": 10, "memory_used": GIB,
          "memory_total": 80 * GIB, "temperature": 50, "power": 300.5, "power_limit": 700,
          "processes": [{"pid": 11, "used_memory": GIB}, {"pid": 12}]},
         {"name": "second", "error": "GPU is lost"}],
        [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization": 20}],
    ]
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(frames))
    return path


def test_recorded_backend_replays_frames_and_loops(tmp_path: Path) -> None:
    c = GpuCollector(RecordedBackend(recording(tmp_path)))
    first = c.collect()
    assert first.status == "ok" and first.driver == "recorded"
    dev, lost = first.devices
    assert dev == GpuSample(index=0, name="NVIDIA H100 80GB HBM3", uuid="GPU-0", utilization=10.0,
                            memory_used=GIB, memory_total=80 * GIB, temperature=50.0, power=300.5,
                            power_limit=700.0, processes=[GpuProcess(pid=11, used_memory=GIB),
                                                          GpuProcess(pid=12, used_memory=None)])
    assert lost.index == 1 and lost.error == "GPU is lost" and lost.utilization is None
    second = c.collect()
    assert [d.utilization for d in second.devices] == [20.0] and second.devices[0].memory_total is None
    assert c.collect().devices == first.devices


@pytest.mark.parametrize(("content", "reason"), [
    (None, "cannot read recorded GPU data"),
    ("{not json", "cannot read recorded GPU data"),
    ("[]", "has no frames"),
    ('[{"name": "x"}]', "a frame must be a list"),
])
def test_recorded_backend_bad_file_is_unavailable(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "gpus.json"
    if content is not None:
        path.write_text(content)
    state = GpuCollector(RecordedBackend(path)).collect()
    assert state.status == "unavailable" and reason in state.reason


def test_backend_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GKDTOP_GPU_REPLAY", raising=False)
    assert isinstance(backend_from_env(), NvmlBackend)
    path = recording(tmp_path)
    monkeypatch.setenv("GKDTOP_GPU_REPLAY", str(path))
    backend = backend_from_env()
    assert isinstance(backend, RecordedBackend) and backend.path == str(path)
    assert isinstance(GpuCollector().backend, RecordedBackend)
    assert isinstance(backend_from_env({}), NvmlBackend)


# ---- real hardware ----


@pytest.mark.gpu
def test_real_gpus_match_nvidia_smi() -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: no real NVIDIA GPU here")
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60,
    )
    if smi.returncode != 0 or not smi.stdout.strip():
        pytest.skip(f"nvidia-smi sees no GPU: {smi.stderr.strip() or smi.stdout.strip()}")
    rows = [[field.strip() for field in line.split(",")] for line in smi.stdout.strip().splitlines()]
    collector = GpuCollector(NvmlBackend())
    try:
        state = collector.collect()
        again = collector.collect()
    finally:
        collector.close()
    assert state.status == "ok", state.reason
    assert state.driver
    assert len(state.devices) == len(rows)
    for dev, (index, name, uuid, total_mib) in zip(state.devices, rows, strict=True):
        assert dev.error is None
        assert (dev.index, dev.name, dev.uuid) == (int(index), name, uuid)
        assert dev.memory_total is not None and dev.memory_total // MIB == int(total_mib)
        assert dev.memory_used is not None and 0 <= dev.memory_used <= dev.memory_total
        assert dev.utilization is None or 0 <= dev.utilization <= 100
    assert [d.name for d in again.devices] == [d.name for d in state.devices]
