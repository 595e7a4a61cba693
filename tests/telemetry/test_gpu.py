"""GPU samples in base units; clock-event reasons decoded by name."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kvscope.telemetry.gpu import (
    ALERTING_REASONS,
    CLOCK_EVENT_REASONS,
    GpuSampler,
    decode_clock_events,
)
from kvscope.telemetry.nvml import Nvml
from kvscope.telemetry.nvml_replay import load_recording, replay_call

RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


def test_decode_golden_masks() -> None:
    # nvml.h: SwPowerCap 0x4, HwSlowdown 0x8, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80.
    assert decode_clock_events(0x0) == ()
    assert decode_clock_events(0x4) == ("sw_power_cap",)
    assert decode_clock_events(0xC8) == (
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    )
    assert decode_clock_events(0x1 | 0x400) == ("gpu_idle", "bit_0x400")
    assert set(decode_clock_events(0xC8)) == ALERTING_REASONS


@given(st.integers(0, 2**16 - 1))
def test_decode_round_trips_every_bit(mask: int) -> None:
    names = decode_clock_events(mask)
    back = 0
    for n in names:
        back |= CLOCK_EVENT_REASONS[n] if n in CLOCK_EVENT_REASONS else int(n[4:], 16)
    assert back == mask


def test_samples_are_in_base_units() -> None:
    g = GpuSampler(Nvml.open(raw=replay_call(load_recording(RECORDING))))
    got = {(s.source, s.metric, s.labels): s.value for s in g.sample(0.0)}
    assert got[("gpu:0", "gpu_power_watts", "")] == 512.345  # 512345 mW
    assert got[("gpu:0", "gpu_energy_joules_total", "")] == 8123456.789  # mJ -> J
    assert got[("gpu:0", "gpu_sm_clock_hertz", "")] == 1.98e9
    assert got[("gpu:0", "gpu_utilization_ratio", "")] == 0.87
    assert got[("gpu:0", "gpu_pcie_tx_bytes_per_second", "")] == 51200 * 1024
    assert got[("gpu:0", "gpu_clock_event_active", "reason=sw_power_cap")] == 1.0
    assert got[("gpu:0", "gpu_process_memory_bytes", "pid=4242")] == 40265318400
    # Missing values are absent, never zero-filled.
    assert ("gpu:1", "gpu_energy_joules_total", "") not in got
    assert ("gpu:1", "gpu_process_memory_bytes", "pid=777") not in got
    assert got[("gpu:1", "gpu_processes", "")] == 1.0
    assert got[("nvml", "nvml_faults_total", "")] >= 5
    assert got[("gpu:0", "gpu_clock_event_reasons", "")] == 4.0
    # The per-reason series come again only when the mask changes.
    again = {(s.source, s.metric, s.labels) for s in g.sample(1.0)}
    assert ("gpu:0", "gpu_clock_event_reasons", "") in again
    assert ("gpu:0", "gpu_clock_event_active", "reason=sw_power_cap") not in again
