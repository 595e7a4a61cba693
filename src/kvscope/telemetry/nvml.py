"""NVML access: the one module of kvscope that talks to the NVIDIA driver.

Every NVML call goes through :meth:`Nvml.call`, which forwards to one *raw call* function
(``raw(name, *args, **kwargs)``; the default imports ``pynvml`` from ``nvidia-ml-py`` lazily).
Tests and fixture replays swap that function. An NVML error never escapes a read: the value
becomes ``None`` (missing) and a fault is counted per ``(function, error)`` -- the pattern of
nvitop's ``libnvml`` wrapper. A GPU that falls off the bus (``NVMLError_GpuIsLost``) is
reported as ``lost`` in its reading, not fatal. Functions a device does not support are
remembered and not called again (one fault, not one per tick).

Constants are the values of ``nvml.h`` as mirrored by ``pynvml.py`` (nvidia-ml-py 13.615.71).
Units returned by NVML (converted later to base units by :mod:`kvscope.telemetry.gpu`):
memory bytes, power mW, energy mJ, clocks MHz, PCIe throughput KB/s over a 20 ms window
(NVML docs, ``nvmlDeviceGetPcieThroughput``), utilisation percent.
"""

from __future__ import annotations

import importlib.util
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvscope.errors import KvscopeError

# nvml.h constants (values as in pynvml.py of nvidia-ml-py 13.615.71).
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_MEMORY_V2 = 0x02000028  # nvmlMemory_v2: struct version 2, size 40 bytes
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_EVENT_TYPE_XID_CRITICAL = 0x8
#: nvmlValueType_t -> attribute of the c_nvmlValue_t union.
_VALUE_FIELD = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

RawCall = Callable[..., Any]

#: Errors that mean "this device cannot do that": stop calling, count once.
_UNSUPPORTED = frozenset({"NVMLError_NotSupported", "NVMLError_FunctionNotFound"})
_LOST = "NVMLError_GpuIsLost"
_TIMEOUT = "NVMLError_Timeout"


class NvmlUnavailable(KvscopeError):
    """NVML cannot be used on this machine (no package, no driver, no GPU).

    ``why`` is the reason alone ("no NVIDIA driver (libnvidia-ml.so.1 not found)"); the
    message is ``NVML not available: <why>``.
    """

    def __init__(self, why: str, hint: str | None = None) -> None:
        super().__init__(f"NVML not available: {why}", hint)
        self.why = why


def pynvml_call(name: str, *args: Any, **kwargs: Any) -> Any:
    """The real raw call: ``pynvml.<name>(*args, **kwargs)``."""
    import pynvml  # type: ignore[import-untyped]

    return getattr(pynvml, name)(*args, **kwargs)


def nvml_error_name(exc: BaseException) -> str | None:
    """``'NVMLError_GpuIsLost'``-style name if ``exc`` is an NVML error, else None."""
    for cls in type(exc).__mro__:
        if cls.__name__.startswith("NVMLError_"):
            return cls.__name__
    if type(exc).__name__ == "NVMLError":
        return f"NVMLError_{getattr(exc, 'value', 'Unknown')}"
    return None


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """A process using the GPU; ``used_bytes`` is None when NVML says N/A (MIG, WDDM)."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """Raw NVML values for one device at one instant (NVML units; None = missing)."""

    index: int
    name: str
    uuid: str
    lost: bool
    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None
    memory_info_version: int | None = None
    util_gpu_pct: float | None = None
    util_memory_pct: float | None = None
    power_mw: float | None = None
    power_limit_mw: float | None = None
    energy_mj: float | None = None
    temp_gpu_c: float | None = None
    temp_memory_c: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    clock_event_mask: int | None = None
    pcie_tx_kbps: float | None = None
    pcie_rx_kbps: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    processes: tuple[ProcessMemory, ...] | None = None
    #: True when the slow quantities were read too (see :meth:`Nvml.read`).
    full: bool = False


@dataclass
class Nvml:
    """A handle on NVML through one swappable raw call. Use :meth:`open`."""

    raw: RawCall = pynvml_call
    #: Seconds between reads of the slow quantities (see :meth:`read`).
    slow_period_s: float = 1.0
    faults: Counter[str] = field(default_factory=Counter)
    _handles: list[Any] = field(default_factory=list)
    _ident: list[tuple[str, str]] = field(default_factory=list)
    _skip: set[tuple[int, str]] = field(default_factory=set)
    _proc_fn: dict[int, str] = field(default_factory=dict)
    _mem_v1: set[int] = field(default_factory=set)
    _slow_at: dict[int, float] = field(default_factory=dict)
    _events: Any = None
    _last_error: str | None = None

    def call(self, name: str, *args: Any, device: int = -1, **kwargs: Any) -> Any:
        """Run one NVML function; on an NVML error count a fault and return None."""
        # The C entry point differs by struct version (nvmlDeviceGetMemoryInfo_v2).
        entry = f"{name}_v{kwargs['version'] >> 24}" if "version" in kwargs else name
        if (device, entry) in self._skip:
            self._last_error = "NVMLError_NotSupported"  # remembered from an earlier call
            return None
        self._last_error = None
        try:
            return self.raw(name, *args, **kwargs)
        except Exception as exc:
            err = nvml_error_name(exc)
            if err is None:
                raise
            self._last_error = err
            if err != _TIMEOUT:
                self.faults[f"{entry}:{err}"] += 1
            if err in _UNSUPPORTED and device >= 0:
                self._skip.add((device, entry))
            return None

    @classmethod
    def open(cls, raw: RawCall | None = None, slow_period_s: float = 1.0) -> Nvml:
        """Initialise NVML and enumerate devices; NvmlUnavailable (one clear line) if it can't."""
        if raw is None and importlib.util.find_spec("pynvml") is None:
            raise NvmlUnavailable(
                "nvidia-ml-py is not installed", "Install it with: pip install 'kvscope[nvml]'"
            )
        nv = cls(raw=raw or pynvml_call, slow_period_s=slow_period_s)
        nv.call("nvmlInit")
        if nv._last_error is not None:
            why = {
                "NVMLError_LibraryNotFound": "no NVIDIA driver (libnvidia-ml.so.1 not found)",
                "NVMLError_DriverNotLoaded": "the NVIDIA driver is not loaded",
                "NVMLError_NoPermission": "no permission to open the NVIDIA device",
            }.get(nv._last_error, nv._last_error)
            raise NvmlUnavailable(why)
        count = nv.call("nvmlDeviceGetCount")
        for i in range(int(count or 0)):
            handle = nv.call("nvmlDeviceGetHandleByIndex", i)
            name = nv.call("nvmlDeviceGetName", handle, device=i)
            uuid = nv.call("nvmlDeviceGetUUID", handle, device=i)
            nv._handles.append(handle)
            nv._ident.append((_text(name) or "unknown", _text(uuid) or f"GPU-{i}"))
        events = nv.call("nvmlEventSetCreate")
        if events is not None:
            for i, h in enumerate(nv._handles):
                nv.call(
                    "nvmlDeviceRegisterEvents", h, NVML_EVENT_TYPE_XID_CRITICAL, events, device=i
                )
            nv._events = events
        return nv

    @property
    def device_count(self) -> int:
        return len(self._handles)

    def identity(self, index: int) -> tuple[str, str]:
        """(name, uuid) of device ``index``."""
        return self._ident[index]

    def read(self, index: int, now_s: float | None = None) -> DeviceReading:
        """Read one device; errors become None and faults.

        The fast quantities -- memory (the KV waveform), clock-event reasons and SM clock,
        instantaneous readings -- are read on every call. The others at most every
        ``slow_period_s`` of ``now_s`` (monotonic time when None), None in between: NVML
        itself averages utilisation over a sample period of 1/6 s to 1 s
        (``nvmlDeviceGetUtilizationRates``) and, on Ampere and newer, power over 1 s
        (``nvmlDeviceGetPowerUsage``), so reading them at 10 Hz repeats the same average;
        temperatures, limits, energy, ECC, PCIe and processes change over seconds, and each
        NVML call costs CPU at 10 Hz (PCIe reads also block for NVML's 20 ms window).
        """
        h = self._handles[index]
        name, uuid = self._ident[index]
        lost = False

        def c(fn: str, *args: Any, **kw: Any) -> Any:
            nonlocal lost
            out = self.call(fn, h, *args, device=index, **kw)
            if self._last_error == _LOST:
                lost = True
            return out

        total = used = free = reserved = version = None
        mem = None
        if index not in self._mem_v1:
            mem = c("nvmlDeviceGetMemoryInfo", version=NVML_MEMORY_V2)
            if mem is None and self._last_error in _UNSUPPORTED:
                self._mem_v1.add(index)
            elif mem is not None:
                version, reserved = 2, int(mem.reserved)
        if mem is None and not lost:
            mem = c("nvmlDeviceGetMemoryInfo")
            version = 1 if mem is not None else None
        if mem is not None:
            total, used, free = int(mem.total), int(mem.used), int(mem.free)
        if lost:
            return DeviceReading(index, name, uuid, lost=True)
        reasons = c("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None and self._last_error in _UNSUPPORTED:
            reasons = c("nvmlDeviceGetCurrentClocksThrottleReasons")
        fast = DeviceReading(
            index=index,
            name=name,
            uuid=uuid,
            lost=lost,
            memory_total=total,
            memory_used=used,
            memory_free=free,
            memory_reserved=reserved,
            memory_info_version=version,
            clock_sm_mhz=_num(c("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)),
            clock_event_mask=None if reasons is None else int(reasons),
        )
        now = time.monotonic() if now_s is None else now_s
        last = self._slow_at.get(index)
        if lost or (last is not None and now - last < self.slow_period_s):
            return fast
        self._slow_at[index] = now
        fields = c("nvmlDeviceGetFieldValues", [NVML_FI_DEV_MEMORY_TEMP])
        util = c("nvmlDeviceGetUtilizationRates")
        return replace(
            fast,
            lost=lost,
            full=True,
            util_gpu_pct=_num(getattr(util, "gpu", None)),
            util_memory_pct=_num(getattr(util, "memory", None)),
            power_mw=_num(c("nvmlDeviceGetPowerUsage")),
            power_limit_mw=_num(c("nvmlDeviceGetEnforcedPowerLimit")),
            energy_mj=_num(c("nvmlDeviceGetTotalEnergyConsumption")),
            temp_gpu_c=_num(c("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)),
            temp_memory_c=_field_value(fields),
            clock_mem_mhz=_num(c("nvmlDeviceGetClockInfo", NVML_CLOCK_MEM)),
            pcie_tx_kbps=_num(c("nvmlDeviceGetPcieThroughput", NVML_PCIE_UTIL_TX_BYTES)),
            pcie_rx_kbps=_num(c("nvmlDeviceGetPcieThroughput", NVML_PCIE_UTIL_RX_BYTES)),
            ecc_corrected=_int(
                c(
                    "nvmlDeviceGetTotalEccErrors",
                    NVML_MEMORY_ERROR_TYPE_CORRECTED,
                    NVML_VOLATILE_ECC,
                )
            ),
            ecc_uncorrected=_int(
                c(
                    "nvmlDeviceGetTotalEccErrors",
                    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    NVML_VOLATILE_ECC,
                )
            ),
            processes=self._processes(index, c),
        )

    def _processes(self, index: int, c: Callable[..., Any]) -> tuple[ProcessMemory, ...] | None:
        # Struct layouts changed across drivers: try _v3, then _v2, then the plain name
        # (nvitop and gpustat do the same); remember the first that answers.
        names = (
            [self._proc_fn[index]]
            if index in self._proc_fn
            else [
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses",
            ]
        )
        for fn in names:
            procs = c(fn)
            if procs is not None:
                self._proc_fn[index] = fn
                out = []
                for p in procs:
                    mem = getattr(p, "usedGpuMemory", None)
                    out.append(ProcessMemory(int(p.pid), None if mem is None else int(mem)))
                return tuple(out)
            if self._last_error not in _UNSUPPORTED:
                return None
        return None

    def poll_xid(self) -> list[tuple[int, int]]:
        """Drain pending XID events: ``(device index, xid code)`` pairs; [] when none."""
        if self._events is None:
            return []
        out: list[tuple[int, int]] = []
        for _ in range(64):  # bounded: a storm is reported over several ticks, never a hang
            data = self.call("nvmlEventSetWait_v2", self._events, 0)
            if data is None:
                break
            idx = next((i for i, h in enumerate(self._handles) if h == data.device), -1)
            out.append((idx, int(data.eventData)))
        return out

    def close(self) -> None:
        if self._events is not None:
            self.call("nvmlEventSetFree", self._events)
            self._events = None
        self.call("nvmlShutdown")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _field_value(fields: Any) -> float | None:
    if not fields:
        return None
    f = fields[0]
    if int(getattr(f, "nvmlReturn", 1)) != 0:
        return None
    attr = _VALUE_FIELD.get(int(f.valueType))
    return None if attr is None else float(getattr(f.value, attr))
