"""``tune --confirm URL``: the winner's workload sent to a live server (a real
``kvscope mock-server`` on 127.0.0.1), measured beside the simulated figures."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import run_in_process

pytestmark = pytest.mark.integration
sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
from bench_helpers import start_mock, stop  # noqa: E402


@pytest.fixture
def server() -> Iterator[str]:
    proc, url = start_mock("--ttft", "0.02", "--itl", "0.005", "--max-running", "32")
    try:
        yield url
    finally:
        stop(proc)


def test_confirm_puts_the_measured_point_beside_the_simulated_one(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [auto]\nmax_num_seqs: [null]\n"
        "max_num_batched_tokens: [null]\n"
    )
    out = tmp_path / "tune"
    argv = [
        "tune",
        "--arrival",
        "poisson:rate=10",
        "--prompt-len",
        "64",
        "--output-len",
        "16",
        "--num-requests",
        "30",
        "--slo",
        "ttft_p99=1,tpot_p99=100ms",
        "--max-gpus",
        "2",
        "--workers",
        "1",
        "--eta",
        "1",
        "--space",
        str(space),
        "--out",
        str(out),
        "--confirm",
        server,
        "--json",
    ]
    code, stdout, err = run_in_process(argv, capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    c = doc["confirm"]
    assert c["simulated"]["ttft_p99_s"] == doc["winner"]["ttft_p99_s"]
    # the mock answers its first token after ~20 ms: measured, not simulated
    assert 0.015 < c["measured"]["ttft_p50_s"] < 0.5
    assert c["measured"]["request_throughput_per_s"] > 0
    assert (out / "confirm" / "requests.parquet").is_file()
    assert json.loads((out / "summary.json").read_text())["confirm"] == c
    assert "measured live" in (out / "report.html").read_text()
