"""GPUs through NVML (the official `pynvml`), behind a small backend interface.

`pynvml` is imported on first use, never at start-up, so the first frame does not wait on it.
Static fields (name, UUID, power limit) are read once per device and cached, as nvitop does:
each NVML call costs a driver round trip, and a dashboard makes many. A missing library or
driver makes the pane say why; a field the GPU does not support is None; a GPU lost mid-run
marks that device and the others go on.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model import GpuProcess, GpuSample, GpuState

if TYPE_CHECKING:
    from gkdtop.collectors.base import GpuBackend

RETRY_UNAVAILABLE = 30.0  # seconds between two attempts to start NVML when it was not there
REPLAY_ENV = "GKDTOP_GPU_REPLAY"

# NVML return codes (nvml.h). Kept here so this module needs no pynvml at import time.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# Errors that concern NVML as a whole, not one device: the collector starts NVML afresh.
GLOBAL_ERRORS = {NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIB_RM_VERSION_MISMATCH}
# A newer entry point this driver lacks: use the older one (and remember that).
OLDER_DRIVER = {NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}


class GpuUnavailable(Exception):
    """No GPU can be read here at all; the message says why in words a user can act on."""


@dataclass(slots=True)
class _Static:
    """Per-device fields that do not change while NVML is up: read once."""

    name: str
    uuid: str
    power_limit: float | None  # watts


class _DeviceError(Exception):
    """One device failed in a way that is not 'not supported': the sample carries the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def explain_init_error(code: int | None, exc: BaseException) -> str:
    """Why NVML could not start, for someone who must fix it."""
    reasons = {
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML library not found (no NVIDIA driver?)",
        NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (is the nvidia kernel module in?)",
        NVML_ERROR_NO_PERMISSION: "no permission to use the NVIDIA driver (check access to /dev/nvidia*)",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and loaded driver differ (updated without reboot?)",
        NVML_ERROR_FUNCTION_NOT_FOUND: "NVML library too old for this nvidia-ml-py",
    }
    return reasons.get(code if code is not None else -1, f"NVML init failed: {exc}")


def explain_device_error(code: int | None, exc: BaseException, what: str) -> str:
    """A short reason for one failed device; the field is named only where it helps."""
    if code == NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost"
    if code == NVML_ERROR_RESET_REQUIRED:
        return "GPU needs a reset"
    return f"{exc} (reading {what})"


class NvmlBackend:
    """Real GPUs via pynvml. Not thread-safe: one collector thread drives it."""

    def __init__(self) -> None:
        self._nv: Any = None  # the pynvml module while NVML is up
        self._handles: list[Any] = []  # None where the handle could not be had yet
        self._static: dict[int, _Static] = {}
        self._driver = ""
        self._variant: dict[tuple[int, str], int] = {}  # (device, field) -> which entry point works

    def start(self) -> None:
        if self._nv is not None:
            self.shutdown()
        try:
            import pynvml
        except ImportError as exc:
            raise GpuUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuUnavailable(explain_init_error(getattr(exc, "value", None), exc)) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            raise GpuUnavailable(f"NVML cannot count the GPUs: {exc}") from None
        self._nv = pynvml
        self._handles = [None] * count
        self._static.clear()
        self._variant.clear()
        try:
            self._driver = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver = ""

    def driver_version(self) -> str:
        return self._driver

    def sample(self) -> list[GpuSample]:
        if self._nv is None:
            raise RuntimeError("NvmlBackend.sample() before start()")
        return [self._device(i) for i in range(len(self._handles))]

    def shutdown(self) -> None:
        if self._nv is not None:
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()
        self._nv = None
        self._handles = []

    def _device(self, index: int) -> GpuSample:
        static = self._static.get(index)
        try:
            handle = self._handles[index]
            if handle is None:  # asked for on each sample until it works: a device lost at start comes back
                handle = self._read(index, "handle", False, self._bind("nvmlDeviceGetHandleByIndex", index))
                self._handles[index] = handle
            if static is None:
                static = self._static[index] = self._read_static(index, handle)
            v2 = getattr(self._nv, "nvmlMemory_v2", None)
            memory = self._read(
                index, "memory", True,
                # _v2 reports used memory without the driver's reserve, as nvidia-smi does.
                self._bind("nvmlDeviceGetMemoryInfo", handle, version=v2) if v2 is not None else None,
                self._bind("nvmlDeviceGetMemoryInfo", handle),
            )
            util = self._read(index, "utilization", True, self._bind("nvmlDeviceGetUtilizationRates", handle))
            sensor = self._nv.NVML_TEMPERATURE_GPU
            temp = self._read(
                index, "temperature", True,
                self._bind("nvmlDeviceGetTemperatureV", handle, sensor),  # the legacy call goes in CUDA 14
                self._bind("nvmlDeviceGetTemperature", handle, sensor),
            )
            power = self._read(index, "power", True, self._bind("nvmlDeviceGetPowerUsage", handle))
            procs: dict[int, GpuProcess] = {}
            for kind in ("Compute", "Graphics"):
                # The versioned names: on a driver without _v3, pynvml's unversioned ones raise
                # NVMLLibraryMismatchError, which is not an NVMLError.
                entries = self._read(
                    index, f"{kind.lower()} processes", True,
                    self._bind(f"nvmlDeviceGet{kind}RunningProcesses_v3", handle),
                    self._bind(f"nvmlDeviceGet{kind}RunningProcesses_v2", handle),
                )
                for entry in entries or []:
                    pid = int(entry.pid)
                    used = None if entry.usedGpuMemory is None else int(entry.usedGpuMemory)
                    known = procs.get(pid)
                    if known is None:
                        procs[pid] = GpuProcess(pid=pid, used_memory=used)
                    elif known.used_memory is None:
                        known.used_memory = used
        except _DeviceError as err:
            return GpuSample(
                index=index, name=static.name if static else "", uuid=static.uuid if static else "",
                utilization=None, memory_used=None, memory_total=None, temperature=None, power=None,
                power_limit=static.power_limit if static else None, error=err.reason,
            )
        return GpuSample(
            index=index, name=static.name, uuid=static.uuid,
            utilization=None if util is None else float(util.gpu),
            memory_used=None if memory is None else int(memory.used),
            memory_total=None if memory is None else int(memory.total),
            temperature=None if temp is None else float(temp),
            power=_watts(power), power_limit=static.power_limit, processes=list(procs.values()),
        )

    def _read_static(self, index: int, handle: Any) -> _Static:
        name = self._read(index, "name", True, self._bind("nvmlDeviceGetName", handle))
        uuid = self._read(index, "uuid", True, self._bind("nvmlDeviceGetUUID", handle))
        limit = self._read(
            index, "power limit", True,
            self._bind("nvmlDeviceGetEnforcedPowerLimit", handle),
            self._bind("nvmlDeviceGetPowerManagementLimit", handle),
        )
        return _Static(name=_text(name or ""), uuid=_text(uuid or ""), power_limit=_watts(limit))

    def _bind(self, function: str, *args: Any, **kwargs: Any) -> Callable[[], Any] | None:
        """pynvml's `function` applied to args, or None where this nvidia-ml-py lacks it."""
        fn = getattr(self._nv, function, None)
        return None if fn is None else functools.partial(fn, *args, **kwargs)

    def _read(self, index: int, what: str, optional: bool, *calls: Callable[[], Any] | None) -> Any:
        """Call the first entry point this driver has (newest first; the choice is remembered).

        'Not supported' from the last choice gives None when `optional`; an error about NVML as
        a whole propagates (the collector restarts NVML); any other is this device's error.
        """
        nv = self._nv
        options = [c for c in calls if c is not None]
        if not options:
            if optional:
                return None
            raise _DeviceError(f"nvidia-ml-py cannot read {what}")
        key = (index, what)
        choice = min(self._variant.get(key, 0), len(options) - 1)
        while True:
            try:
                return options[choice]()
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                has_older = choice + 1 < len(options)
                if has_older and code in (*OLDER_DRIVER, NVML_ERROR_NOT_SUPPORTED):
                    choice += 1
                    self._variant[key] = choice
                    continue
                if optional and code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                    return None
                if code in GLOBAL_ERRORS:
                    raise
                raise _DeviceError(explain_device_error(code, exc, what)) from exc


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


class RecordedBackend:
    """Replays recorded device data, one frame a sample, looping: demos and screenshots without a GPU.

    The file is JSON: a list of frames, each a list of devices with GpuSample's field names
    (`processes` as a list of {"pid", "used_memory"}); missing fields are None.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
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
        if not all(isinstance(f, list) and all(isinstance(d, dict) for d in f) for f in frames):
            raise GpuUnavailable(f"recorded GPU data {self.path}: a frame must be a list of device objects")
        self.frames = frames
        self.next = 0

    def driver_version(self) -> str:
        return "recorded"

    def sample(self) -> list[GpuSample]:
        frame = self.frames[self.next % len(self.frames)]
        self.next += 1
        return [_recorded_device(i, dev) for i, dev in enumerate(frame)]

    def shutdown(self) -> None:
        pass


def _recorded_device(position: int, dev: dict[str, Any]) -> GpuSample:
    def number(key: str) -> float | None:
        value = dev.get(key)
        return None if value is None else float(value)

    def integer(key: str) -> int | None:
        value = dev.get(key)
        return None if value is None else int(value)

    procs = []
    for p in dev.get("processes") or []:
        used = p.get("used_memory")
        procs.append(GpuProcess(pid=int(p["pid"]), used_memory=None if used is None else int(used)))
    return GpuSample(
        index=int(dev.get("index", position)), name=str(dev.get("name", "GPU")),
        uuid=str(dev.get("uuid", "")), utilization=number("utilization"),
        memory_used=integer("memory_used"), memory_total=integer("memory_total"),
        temperature=number("temperature"), power=number("power"), power_limit=number("power_limit"),
        processes=procs, error=dev.get("error"),
    )


def backend_from_env(env: Mapping[str, str] | None = None) -> GpuBackend:
    """RecordedBackend when GKDTOP_GPU_REPLAY names a recording, else NVML."""
    replay = (os.environ if env is None else env).get(REPLAY_ENV)
    return RecordedBackend(replay) if replay else NvmlBackend()


class GpuCollector:
    """Collector 'gpus': a GpuState per collect(); never blocks on NVML more than the calls take.

    Without NVML the state says why, and NVML is looked for again only every `retry_after`
    seconds. An unexpected error propagates (the runner shows it and backs off) after the backend
    is shut down, so the next collect() starts it afresh.
    """

    name = "gpus"

    def __init__(
        self,
        backend: GpuBackend | None = None,
        interval: float = 1.0,
        retry_after: float = RETRY_UNAVAILABLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend: GpuBackend = backend if backend is not None else backend_from_env()
        self.interval = interval
        self.retry_after = retry_after
        self._clock = clock
        self._started = False
        self._unavailable: GpuState | None = None
        self._retry_at = 0.0

    def collect(self) -> GpuState:
        if not self._started:
            if self._unavailable is not None and self._clock() < self._retry_at:
                return self._unavailable
            try:
                self.backend.start()
            except GpuUnavailable as exc:
                self._unavailable = GpuState(status="unavailable", reason=str(exc))
                self._retry_at = self._clock() + self.retry_after
                return self._unavailable
            self._started, self._unavailable = True, None
        try:
            devices = self.backend.sample()
        except Exception:
            self.close()
            raise
        state = GpuState(status="ok", driver=self.backend.driver_version(), devices=devices)
        if not devices:
            state.status, state.reason = "unavailable", "NVML reports no GPUs"
        elif all(d.error for d in devices):
            reasons = sorted({d.error or "" for d in devices})
            state.status = "error"
            state.reason = reasons[0] if len(reasons) == 1 else "all GPUs failed: " + "; ".join(reasons)
        return state

    def idle(self) -> float:
        """No NVML, and not yet time to look for it again: a poll would say the same until then."""
        if self._started or self._unavailable is None:
            return 0.0
        return max(0.0, self._retry_at - self._clock())

    def close(self) -> None:
        """Shut the backend down once; a later collect() would start it again."""
        if self._started:
            self._started = False
            self.backend.shutdown()


def _gpu_json(store: Any) -> dict[str, Any]:
    gpus = store.gpus
    return {"status": gpus.status, "reason": gpus.reason, "driver": gpus.driver,
            "devices": [asdict(d) for d in gpus.devices]}


SPEC: CollectorSpec[GpuState] = CollectorSpec(
    result=GpuState,
    write=lambda store, state: store.write_gpus(state),
    build=lambda wiring, interval: GpuCollector(backend=wiring.gpu_backend, interval=interval),
    snapshot=("gpus", _gpu_json),
)
