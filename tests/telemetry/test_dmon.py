"""nvidia-smi dmon and --query-gpu logs (layouts as nvidia-smi prints them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.dmon import parse_dmon, parse_query_csv, parse_smi_log

FIX = Path(__file__).parent / "fixtures"
MIB = 1024 * 1024


def _by(log, source: str, metric: str) -> list[float]:  # type: ignore[no-untyped-def]
    return [s.value for s in log.samples if s.source == source and s.metric == metric]


def test_dmon_pucm_with_repeated_headers_and_dashes() -> None:
    log = parse_dmon((FIX / "dmon_pucm.txt").read_text())
    assert log.rows == 6
    assert _by(log, "gpu:0", "gpu_power_watts") == [69.0, 218.0, 365.0]
    assert _by(log, "gpu:1", "gpu_memory_used_bytes") == [4 * MIB, 40960 * MIB, 41000 * MIB]
    assert _by(log, "gpu:0", "gpu_sm_clock_hertz") == [345e6, 2325e6, 2415e6]
    assert _by(log, "gpu:1", "gpu_utilization_ratio") == [0.0, 0.95, 0.98]
    # '-' is a missing value: gpu 0 reports no memory temperature (3 rows), gpu 1 row 2 no enc..ofa.
    assert _by(log, "gpu:0", "gpu_memory_temperature_celsius") == []
    assert log.missing_values == 3 + 4
    assert "ccpm" in log.columns


def test_dmon_with_date_time_columns_and_old_temp_name() -> None:
    log = parse_dmon((FIX / "dmon_dt_old.txt").read_text())
    temps = [s for s in log.samples if s.metric == "gpu_temperature_celsius"]
    assert [s.value for s in temps] == [33.0, 39.0, 41.0]
    assert temps[1].t_s - temps[0].t_s == 1.0
    assert temps[0].t_s == 1727950501.0  # 2024-10-03 10:15:01 UTC
    assert _by(log, "gpu:0", "gpu_power_watts") == [86.0, 267.0]


def test_query_gpu_csv_with_units_and_na() -> None:
    log = parse_query_csv((FIX / "query_gpu.csv").read_text())
    assert log.rows == 4
    assert _by(log, "gpu:0", "gpu_memory_used_bytes") == [40960 * MIB, 41984 * MIB]
    assert _by(log, "gpu:1", "gpu_power_watts") == [69.80]
    assert _by(log, "gpu:0", "gpu_utilization_ratio") == [0.87, 0.91]
    assert log.missing_values == 2
    s0 = [s for s in log.samples if s.metric == "gpu_memory_used_bytes" and s.source == "gpu:0"]
    assert round(s0[1].t_s - s0[0].t_s, 3) == 1.002


def test_autodetect_and_errors(tmp_path: Path) -> None:
    assert parse_smi_log(FIX / "dmon_pucm.txt").format == "dmon"
    assert parse_smi_log(FIX / "query_gpu.csv").format == "query-csv"
    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    with pytest.raises(KvscopeError):
        parse_smi_log(bad)
    with pytest.raises(KvscopeError, match="values under"):
        parse_dmon("# gpu pwr\n# Idx W\n 0 1 2\n")
    with pytest.raises(KvscopeError, match="before any"):
        parse_dmon(" 0 1\n")
    with pytest.raises(KvscopeError):
        parse_smi_log(tmp_path / "missing.txt")
