"""The watch loop end to end: GPUs from a recording, an engine page on loopback, the store,
the exporter and the run directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.nvml import Nvml
from kvscope.telemetry.nvml_replay import load_recording, replay_call
from kvscope.telemetry.store import Store
from kvscope.telemetry.watch import Watch, WatchConfig

RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


@pytest.mark.integration
def test_watch_writes_store_and_run_dir(
    tmp_path: Path, page_server: type, fixture_text: Callable[[str], str]
) -> None:
    srv = page_server([fixture_text("vllm_0_33_0_metrics_t1.txt")])
    cfg = WatchConfig(
        interval_s=0.1,
        duration_s=1.0,
        engines=(srv.url,),
        store_path=tmp_path / "w.duckdb",
        flush_s=0.3,
        derive_every_s=0.2,
        exporter_port=0,
        out_dir=tmp_path / "run",
    )
    gpus = GpuSampler(Nvml.open(raw=replay_call(load_recording(RECORDING))))
    summary = Watch(cfg, gpus=gpus).run()
    assert summary["kind"] == "watch"
    assert summary["ticks"] + summary["missed_ticks"] == 10
    assert summary["store_rows"] == summary["samples"]  # everything flushed at the end
    waves = summary["waveforms"]
    assert waves["gpu:0/gpu_memory_used_bytes"]["peak"] == 40972255232
    kv = waves[f"engine:127.0.0.1:{srv.server.server_address[1]}/kv_cache_usage_ratio"]
    assert kv["peak"] == pytest.approx(18 / 19)
    with Store(cfg.store_path, read_only=True) as st:  # type: ignore[arg-type]
        assert st.count() == summary["samples"]
        peaks = st.query("SELECT DISTINCT metric FROM samples WHERE metric LIKE '%peak%'")
        assert ("kv_cache_usage_peak_ratio",) in peaks
    table = pq.read_table(tmp_path / "run" / "server.parquet")
    assert table.column_names[0] == "t_s"
    assert "gpu:0/gpu_memory_used_bytes" in table.column_names
    assert "gpu:0/gpu_clock_event_active{reason=sw_power_cap}" in table.column_names
    t = table.column("t_s").to_pylist()
    assert t == sorted(t) and 0 <= t[0] < 1.0
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["kvscope_version"] and on_disk["config"]["interval_s"] == 0.1
