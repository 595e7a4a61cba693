"""Exporter: a scrape-time collector on its own registry, served on loopback, read by a real
Prometheus server."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from kvscope.telemetry.exporter import Exporter, LatestValues, make_registry, render_text
from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.nvml import Nvml
from kvscope.telemetry.nvml_replay import load_recording, replay_call
from kvscope.telemetry.series import Sample

RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


def _board() -> LatestValues:
    nv = Nvml.open(raw=replay_call(load_recording(RECORDING)))
    board = LatestValues()
    for i in range(nv.device_count):
        name, uuid = nv.identity(i)
        board.set_info(f"gpu:{i}", {"name": name, "uuid": uuid})
    board.update(GpuSampler(nv).sample(0.0))
    board.set_info("engine:127.0.0.1:8000", {"kind": "vllm", "model": "m"})
    board.update([Sample(0.0, "engine:127.0.0.1:8000", "kv_cache_usage_ratio", 0.75)])
    return board


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


@pytest.mark.integration
def test_scrape_renders_latest_values_with_consistent_labels() -> None:
    exp = Exporter.start(_board(), port=0)
    try:
        assert exp.host == "127.0.0.1"
        text = _get(f"http://127.0.0.1:{exp.port}/metrics")
    finally:
        exp.stop()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    used = {s.labels["gpu"]: s for s in fams["kvscope_gpu_memory_used_bytes"].samples}
    assert used["0"].value == 40972255232
    assert used["0"].labels["uuid"] == "GPU-5bb0a5a0-1b2e-4c6c-9c0e-000000000000"
    assert fams["kvscope_gpu_energy_joules"].type == "counter"
    kv = fams["kvscope_kv_cache_usage_ratio"].samples[0]
    assert kv.labels == {"engine": "127.0.0.1:8000", "kind": "vllm", "model": "m"}
    assert kv.value == 0.75
    reasons = {s.labels["reason"] for s in fams["kvscope_gpu_clock_event_active"].samples}
    assert "hw_thermal_slowdown" in reasons
    # Own registry: no process_/python_ series mixed in.
    assert not any(n.startswith(("process_", "python_")) for n in fams)


def test_collector_reflects_updates_at_scrape_time() -> None:
    from prometheus_client import generate_latest

    board = LatestValues()
    reg = make_registry(board)
    board.update([Sample(0.0, "gpu:0", "gpu_power_watts", 100.0)])
    assert b'kvscope_gpu_power_watts{gpu="0",name="",uuid=""} 100.0' in generate_latest(reg)
    board.update([Sample(1.0, "gpu:0", "gpu_power_watts", 250.0)])
    assert b"} 250.0" in generate_latest(reg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
@pytest.mark.slow
def test_real_prometheus_scrapes_the_exporter(tmp_path: Path) -> None:
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip(
            "prometheus binary absent (Debian package 'prometheus'; scripts/install_system_deps.sh)"
        )
    board = LatestValues()
    board.update([Sample(0.0, "gpu:3", "gpu_memory_used_bytes", 12345678901.0)])
    exp = Exporter.start(board, port=0)
    port = _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kvscope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exp.port}']\n"
    )
    proc = subprocess.Popen(
        [
            prom,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        q = urllib.parse.quote('kvscope_gpu_memory_used_bytes{gpu="3"}')
        result: list[dict[str, object]] = []
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not result:
            time.sleep(0.5)
            try:
                body = json.loads(_get(f"http://127.0.0.1:{port}/api/v1/query?query={q}"))
            except OSError:
                continue
            result = body["data"]["result"]
        assert result, "Prometheus never returned the series"
        value = result[0]["value"]
        assert isinstance(value, list)
        assert float(value[1]) == 12345678901.0
        assert result[0]["metric"]["job"] == "kvscope"  # type: ignore[index]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        exp.stop()


label_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=",="), max_size=12
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["gpu:0", "gpu:1", "engine:h:1", "nvml"]),
            st.sampled_from(["gpu_power_watts", "gpu_energy_joules_total", "kv_cache_usage_ratio"]),
            st.sampled_from(["", "pid=1", "reason=hw_slowdown"]),
            st.floats(allow_nan=True, allow_infinity=True),
        ),
        max_size=30,
    ),
    label_text,
)
def test_fast_render_is_byte_identical_to_generate_latest(
    rows: list[tuple[str, str, str, float]], odd: str
) -> None:
    from prometheus_client import generate_latest

    board = LatestValues()
    board.set_info("gpu:0", {"uuid": odd, "name": 'H100 "SXM"\\n'})
    board.update([Sample(0.0, src, m, v, lab) for src, m, lab, v in rows])
    assert render_text(board) == generate_latest(make_registry(board))
