"""GPU sampler: NVML readings turned into samples in base units.

Conversions (NVML units per the NVML API reference): power mW -> W, energy mJ -> J,
clocks MHz -> Hz, utilisation % -> ratio, PCIe KB/s -> bytes/s with KB = 1024 bytes (the
binary reading nvitop uses when it exports the same counter as MiB/s).

Clock-event ("throttle") reasons are decoded from the bitmask documented in NVML's
``group__nvmlClocksEventReasons`` (values as in nvml.h). The ``ALERTING`` set follows the
practice in canonical/hardware-observer-operator PR #331: hardware slowdown, hardware thermal
and power brake matter; idle, application clocks and display clocks do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.telemetry.nvml import DeviceReading, Nvml
from kvscope.telemetry.series import Sample

#: nvml.h ``nvmlClocksEventReason*`` bits.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
ALERTING_REASONS = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

_KIB = 1024.0


def decode_clock_events(mask: int) -> tuple[str, ...]:
    """Names of the reasons set in an NVML clock-event bitmask; unknown bits as ``bit_0x...``."""
    mask &= 2**64 - 1  # an unsigned long long in NVML: a negative mask must not loop forever
    names = [name for name, bit in CLOCK_EVENT_REASONS.items() if mask & bit]
    known = 0
    for bit in CLOCK_EVENT_REASONS.values():
        known |= bit
    rest = mask & ~known
    b = 1
    while rest:
        if rest & b:
            names.append(f"bit_{b:#x}")
            rest &= ~b
        b <<= 1
    return tuple(names)


def reading_samples(t_s: float, r: DeviceReading, previous_mask: int | None = None) -> list[Sample]:
    """Samples of one reading in base units; missing values are left out (never zero-filled).

    ``previous_mask`` is the clock-event mask of the last reading of this GPU, if any.
    """
    src = f"gpu:{r.index}"
    out = [Sample(t_s, src, "gpu_lost", 1.0 if r.lost else 0.0)]

    def put(metric: str, value: float | None, scale: float = 1.0, labels: str = "") -> None:
        if value is not None:
            v = value / 100.0 if scale == 0.01 else value * scale  # exact percent -> ratio
            out.append(Sample(t_s, src, metric, v, labels))

    if r.full:  # constant while the GPU is there: with the slow quantities
        put("gpu_memory_total_bytes", r.memory_total)
    put("gpu_memory_used_bytes", r.memory_used)
    put("gpu_memory_free_bytes", r.memory_free)
    put("gpu_memory_reserved_bytes", r.memory_reserved)
    put("gpu_utilization_ratio", r.util_gpu_pct, 0.01)
    put("gpu_memory_busy_ratio", r.util_memory_pct, 0.01)
    put("gpu_power_watts", r.power_mw, 1e-3)
    put("gpu_power_limit_watts", r.power_limit_mw, 1e-3)
    put("gpu_energy_joules_total", r.energy_mj, 1e-3)
    put("gpu_temperature_celsius", r.temp_gpu_c)
    put("gpu_memory_temperature_celsius", r.temp_memory_c)
    put("gpu_sm_clock_hertz", r.clock_sm_mhz, 1e6)
    put("gpu_memory_clock_hertz", r.clock_mem_mhz, 1e6)
    put("gpu_pcie_tx_bytes_per_second", r.pcie_tx_kbps, _KIB)
    put("gpu_pcie_rx_bytes_per_second", r.pcie_rx_kbps, _KIB)
    put("gpu_ecc_corrected_errors_total", r.ecc_corrected)
    put("gpu_ecc_uncorrected_errors_total", r.ecc_uncorrected)
    if r.clock_event_mask is not None:
        put("gpu_clock_event_reasons", float(r.clock_event_mask))
    if r.clock_event_mask is not None and r.clock_event_mask != previous_mask:
        # Per-reason 0/1 series only when the mask changes: the mask itself is kept every
        # tick, and the exporter holds the latest value of each reason.
        active = set(decode_clock_events(r.clock_event_mask))
        for name in CLOCK_EVENT_REASONS:
            put("gpu_clock_event_active", 1.0 if name in active else 0.0, labels=f"reason={name}")
    if r.processes is not None:
        put("gpu_processes", float(len(r.processes)))
        for p in r.processes:
            put("gpu_process_memory_bytes", p.used_bytes, labels=f"pid={p.pid}")
    return out


@dataclass
class GpuSampler:
    """Samples every GPU NVML sees; XID events accumulate into per-GPU totals."""

    nvml: Nvml
    xid_total: dict[int, int] = field(default_factory=dict)
    last_xid: dict[int, int] = field(default_factory=dict)
    last_readings: list[DeviceReading] = field(default_factory=list)
    _masks: dict[int, int | None] = field(default_factory=dict)
    _faults: float = -1.0

    def sample(self, t_s: float) -> list[Sample]:
        """Samples of every GPU at Unix time ``t_s`` (which also paces the slow reads).

        Counters that change rarely (XID events, NVML faults) come with the slow quantities,
        and at once on the tick they change.
        """
        out: list[Sample] = []
        fresh: set[int] = set()
        for idx, xid in self.nvml.poll_xid():
            self.xid_total[idx] = self.xid_total.get(idx, 0) + 1
            self.last_xid[idx] = xid
            fresh.add(idx)
        readings = [self.nvml.read(i, now_s=t_s) for i in range(self.nvml.device_count)]
        self.last_readings = readings
        for r in readings:
            out.extend(reading_samples(t_s, r, self._masks.get(r.index)))
            self._masks[r.index] = r.clock_event_mask
            if not (r.full or r.lost or r.index in fresh):
                continue
            src = f"gpu:{r.index}"
            out.append(
                Sample(t_s, src, "gpu_xid_events_total", float(self.xid_total.get(r.index, 0)))
            )
            if r.index in self.last_xid:
                out.append(Sample(t_s, src, "gpu_last_xid", float(self.last_xid[r.index])))
        faults = float(sum(self.nvml.faults.values()))
        if faults != self._faults or any(r.full for r in readings):
            out.append(Sample(t_s, "nvml", "nvml_faults_total", faults))
            self._faults = faults
        return out
