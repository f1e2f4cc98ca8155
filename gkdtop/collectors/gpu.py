"""GPUs through NVML (the official `pynvml`), behind a small backend interface.

`pynvml` is imported on first use, never at start-up. Static fields (name, UUID, total memory,
power limit) are read once per device and cached: NVML calls are slow enough to matter. A
missing library or driver makes the pane say so; a GPU lost mid-run marks that device and the
others go on.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Protocol

from gkdtop.model import GpuProcess, GpuSample, GpuState

RETRY_UNAVAILABLE = 30.0  # seconds between attempts to find NVML when it was not there


class GpuUnavailable(Exception):
    """No GPUs can be read here at all; the message says why in words a user acts on."""


class GpuBackend(Protocol):
    def start(self) -> None: ...

    def driver_version(self) -> str: ...

    def sample(self) -> list[GpuSample]: ...

    def shutdown(self) -> None: ...


class NvmlBackend:
    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        self.static: dict[int, dict[str, Any]] = {}

    def start(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise GpuUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuUnavailable(explain_init_error(pynvml, exc)) from None
        self.nvml = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.static.clear()

    def driver_version(self) -> str:
        try:
            return _text(self.nvml.nvmlSystemGetDriverVersion())
        except self.nvml.NVMLError:
            return ""

    def sample(self) -> list[GpuSample]:
        return [self._device(i, h) for i, h in enumerate(self.handles)]

    def _device(self, index: int, handle: Any) -> GpuSample:
        nv = self.nvml
        try:
            static = self.static.get(index)
            if static is None:
                static = {
                    "name": _text(nv.nvmlDeviceGetName(handle)),
                    "uuid": _text(nv.nvmlDeviceGetUUID(handle)),
                    "power_limit": _optional(nv, lambda: nv.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0),
                }
                self.static[index] = static
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            util = _optional(nv, lambda: float(nv.nvmlDeviceGetUtilizationRates(handle).gpu))
            temp = _optional(nv, lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
            power = _optional(nv, lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            procs: dict[int, GpuProcess] = {}
            for getter in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                for p in _optional(nv, lambda g=getter: g(handle)) or []:
                    used = p.usedGpuMemory
                    procs.setdefault(p.pid, GpuProcess(pid=p.pid, used_memory=None if used is None else int(used)))
        except nv.NVMLError as exc:
            static = self.static.get(index, {})
            return GpuSample(index=index, name=static.get("name", "?"), uuid=static.get("uuid", ""),
                             utilization=None, memory_used=None, memory_total=None, temperature=None, power=None,
                             power_limit=None, error=explain_device_error(nv, exc))
        return GpuSample(
            index=index, name=static["name"], uuid=static["uuid"], utilization=util,
            memory_used=int(memory.used), memory_total=int(memory.total), temperature=temp, power=power,
            power_limit=static["power_limit"], processes=list(procs.values()),
        )

    def shutdown(self) -> None:
        if self.nvml is not None:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()
        self.nvml = None
        self.handles = []


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _optional(nv: Any, read: Any) -> Any:
    """A field the device may not support is None, not an error."""
    try:
        return read()
    except nv.NVMLError_NotSupported:
        return None


def explain_init_error(nv: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    reasons = {
        nv.NVML_ERROR_LIBRARY_NOT_FOUND: "NVML library not found (no NVIDIA driver installed?)",
        nv.NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
        nv.NVML_ERROR_NO_PERMISSION: "no permission to talk to the NVIDIA driver",
        nv.NVML_ERROR_FUNCTION_NOT_FOUND: "NVML library too old for this nvidia-ml-py",
    }
    return reasons.get(code, f"NVML init failed: {exc}")


def explain_device_error(nv: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == nv.NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost (fell off the bus; needs a reset or reboot)"
    return str(exc)


class RecordedBackend:
    """Replays recorded device data (JSON: a list of frames, each a list of devices), one frame a sample.

    For screenshots and demos on machines without a GPU; the real path is NvmlBackend.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.frames: list[list[dict[str, Any]]] = []
        self.next = 0

    def start(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                frames = json.load(fh)
        except (OSError, ValueError) as exc:
            raise GpuUnavailable(f"cannot read recorded GPU data {self.path}: {exc}") from None
        if not isinstance(frames, list) or not frames:
            raise GpuUnavailable(f"recorded GPU data {self.path} has no frames")
        self.frames = frames

    def driver_version(self) -> str:
        return "recorded"

    def sample(self) -> list[GpuSample]:
        frame = self.frames[self.next % len(self.frames)]
        self.next += 1
        out = []
        for i, dev in enumerate(frame):
            procs = [GpuProcess(pid=int(p["pid"]), used_memory=p.get("used_memory")) for p in dev.get("processes", [])]
            out.append(GpuSample(
                index=dev.get("index", i), name=dev.get("name", "GPU"), uuid=dev.get("uuid", ""),
                utilization=dev.get("utilization"), memory_used=dev.get("memory_used"),
                memory_total=dev.get("memory_total"), temperature=dev.get("temperature"), power=dev.get("power"),
                power_limit=dev.get("power_limit"), processes=procs, error=dev.get("error"),
            ))
        return out

    def shutdown(self) -> None:
        pass


def backend_from_env() -> GpuBackend:
    replay = os.environ.get("GKDTOP_GPU_REPLAY")
    return RecordedBackend(replay) if replay else NvmlBackend()


class GpuCollector:
    name = "gpus"

    def __init__(self, backend: GpuBackend | None = None, interval: float = 1.0) -> None:
        self.backend = backend or backend_from_env()
        self.interval = interval
        self.started = False
        self.unavailable: GpuState | None = None
        self.retry_at = 0.0

    def collect(self) -> GpuState:
        if not self.started:
            if self.unavailable is not None and time.monotonic() < self.retry_at:
                return self.unavailable
            try:
                self.backend.start()
            except GpuUnavailable as exc:
                self.unavailable = GpuState(status="unavailable", reason=str(exc))
                self.retry_at = time.monotonic() + RETRY_UNAVAILABLE
                return self.unavailable
            self.started, self.unavailable = True, None
        try:
            devices = self.backend.sample()
        except Exception:
            # Unexpected: start afresh next time (NVML may have been shut down under us).
            self.close()
            raise
        state = GpuState(status="ok", driver=self.backend.driver_version(), devices=devices)
        if devices and all(d.error for d in devices):
            state.status, state.reason = "error", devices[0].error or "all GPUs failed"
        elif not devices:
            state.status, state.reason = "unavailable", "NVML reports no GPUs"
        return state

    def close(self) -> None:
        if self.started:
            self.backend.shutdown()
        self.started = False
