"""NVML layer over recorded answers: errors become missing values and counted faults."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.nvml import Nvml, NvmlUnavailable, nvml_error_name
from kvscope.telemetry.nvml_replay import load_recording, nvml_error, replay_call

RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


@pytest.fixture
def nv() -> Nvml:
    return Nvml.open(raw=replay_call(load_recording(RECORDING)))


def test_healthy_device_uses_memory_info_v2_with_reserved(nv: Nvml) -> None:
    r = nv.read(0)
    assert r.memory_info_version == 2
    assert r.memory_reserved == 567279616
    assert r.memory_used == 40972255232  # v2 'used' (excludes reserved), not v1's figure
    assert r.memory_total == 85520809984  # 81559 MiB, what nvidia-smi shows for an H100 80GB
    assert r.clock_event_mask == 0x4 and r.temp_memory_c == 72.0
    assert r.processes is not None and r.processes[0].pid == 4242


def test_old_driver_falls_back_to_v1_and_throttle_reasons(nv: Nvml) -> None:
    for k in range(3):  # fallbacks stick across ticks, without a new fault per tick
        r = nv.read(1, now_s=float(k))
        assert r.memory_info_version == 1 and r.memory_reserved is None
        assert r.memory_used == 911605760
        assert r.clock_event_mask == 0x1  # from the deprecated ClocksThrottleReasons
        assert r.temp_memory_c is None  # field value returned NOT_SUPPORTED
        assert r.processes is not None and r.processes[0].used_bytes is None  # N/A
    assert nv.faults["nvmlDeviceGetMemoryInfo_v2:NVMLError_FunctionNotFound"] == 1
    assert nv.faults["nvmlDeviceGetCurrentClocksEventReasons:NVMLError_FunctionNotFound"] == 1
    assert nv.faults["nvmlDeviceGetTotalEnergyConsumption:NVMLError_NotSupported"] == 1


def test_slow_quantities_are_read_once_per_period() -> None:
    calls: list[str] = []
    raw = replay_call(load_recording(RECORDING))

    def counting(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return raw(name, *args, **kwargs)

    nv = Nvml.open(raw=counting, slow_period_s=1.0)
    first = nv.read(0, now_s=100.0)
    assert first.full and first.temp_gpu_c is not None and first.pcie_tx_kbps == 51200
    calls.clear()
    fast = nv.read(0, now_s=100.5)
    # Between slow reads: memory, clock events and SM clock only (NVML averages utilisation
    # and power over up to a second: re-reading them at 10 Hz repeats one average).
    assert not fast.full and fast.memory_used == first.memory_used
    assert fast.clock_event_mask == 0x4 and fast.clock_sm_mhz == first.clock_sm_mhz
    assert fast.power_mw is None and fast.util_gpu_pct is None
    assert fast.temp_gpu_c is None and fast.processes is None and fast.energy_mj is None
    assert len(calls) == 3
    assert nv.read(0, now_s=101.0).full  # one period after the last slow read


def test_gpu_fallen_off_the_bus_is_reported_not_fatal(nv: Nvml) -> None:
    r = nv.read(2)
    assert r.lost and r.memory_used is None
    assert nv.faults["nvmlDeviceGetMemoryInfo_v2:NVMLError_GpuIsLost"] == 1
    assert nv.read(0).memory_used is not None  # the other GPUs keep sampling


def test_xid_events_accumulate_per_gpu(nv: Nvml) -> None:
    g = GpuSampler(nv)
    out = {(s.source, s.metric): s.value for s in g.sample(0.0)}
    assert out[("gpu:2", "gpu_last_xid")] == 79.0
    assert out[("gpu:2", "gpu_xid_events_total")] == 1.0
    assert out[("gpu:0", "gpu_last_xid")] == 13.0
    assert out[("gpu:2", "gpu_lost")] == 1.0
    again = {(s.source, s.metric): s.value for s in g.sample(1.0)}
    assert again[("gpu:2", "gpu_xid_events_total")] == 1.0  # drained, not double counted


def test_real_pynvml_error_classes_are_recognised() -> None:
    pynvml = pytest.importorskip("pynvml")
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    assert type(lost).__name__ == "NVMLError_GpuIsLost"
    assert nvml_error_name(lost) == "NVMLError_GpuIsLost"
    assert nvml_error_name(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == (
        "NVMLError_NotSupported"
    )
    assert nvml_error_name(ValueError("x")) is None

    calls: list[str] = []

    def raw(name: str, *args: Any, **kw: Any) -> Any:
        calls.append(name)
        if name == "nvmlDeviceGetPowerUsage":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return 1

    n = Nvml(raw=raw)
    assert n.call("nvmlDeviceGetPowerUsage", object(), device=0) is None
    assert n.faults == {"nvmlDeviceGetPowerUsage:NVMLError_GpuIsLost": 1}


def test_non_nvml_exceptions_are_bugs_and_propagate() -> None:
    def raw(name: str, *args: Any, **kw: Any) -> Any:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        Nvml(raw=raw).call("nvmlDeviceGetCount")


def test_no_driver_gives_one_clear_line() -> None:
    # This machine has nvidia-ml-py but no libnvidia-ml.so.1: the real path must say so.
    pytest.importorskip("pynvml")
    try:
        nv = Nvml.open()
    except NvmlUnavailable as err:
        line = err.one_line()
        assert "\n" not in line and line.startswith("NVML not available: ")
        assert "driver" in line
    else:  # a GPU host
        assert nv.device_count >= 0
        nv.close()


def test_init_error_from_recording_is_reported() -> None:
    raw = replay_call({"devices": [], "init_error": "DriverNotLoaded"})
    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        Nvml.open(raw=raw)


def test_bad_recording_is_a_user_error(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"nope": 1}))
    from kvscope.errors import KvscopeError

    with pytest.raises(KvscopeError):
        load_recording(p)
    assert nvml_error_name(nvml_error("Timeout")) == "NVMLError_Timeout"


def test_only_the_nvml_module_touches_pynvml() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "kvscope"
    uses = re.compile(r"import pynvml|from pynvml|getattr\(pynvml")
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if uses.search(p.read_text()))
    assert users == ["telemetry/nvml.py"]
