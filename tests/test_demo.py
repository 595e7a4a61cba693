"""The main job: plan + three simulated configurations + report, on built-in defaults."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvscope.demo import run_demo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> object:
    return run_demo(tmp_path_factory.mktemp("demo"))


def test_demo_runs_well_under_a_minute_and_writes_everything(demo: object) -> None:
    from kvscope.demo import DemoResult

    assert isinstance(demo, DemoResult)
    assert demo.wall_s < 60
    out = demo.report.parent
    for d in ("plan", "sim-default", "sim-max-num-seqs-64", "sim-no-prefix-caching"):
        assert (out / d / "summary.json").is_file()
    html = demo.report.read_text()
    assert "Memory per GPU as the engine budgets it" in html
    assert html.count('class="vl-chart') >= 10


def test_demo_figures_move_the_way_the_engine_would(demo: object) -> None:
    from kvscope.demo import DemoResult

    assert isinstance(demo, DemoResult)
    # V4-Flash on 8xH200, fp8 KV: ~104 GiB of KV per GPU. vLLM 0.33 logs tokens as
    # concurrency x max_model_len, each request charged its window groups' blocks for two
    # 8,192-token batches in flight (async scheduling, on by default since 0.26:
    # vllm/config/vllm.py VllmConfig.max_in_flight_tokens): ~10.8M tokens at 1M context, where
    # one batch in flight (0.25 and earlier) gave ~15.7M.
    assert demo.plan["kv_cache_gib"] > 100
    assert 10_000_000 < demo.plan["kv_tokens"] < 12_000_000
    base, capped, nocache = (
        demo.runs[k] for k in ("default", "max-num-seqs-64", "no-prefix-caching")
    )
    # Capping the batch queues conversations: tail TTFT grows by orders of magnitude.
    assert capped["ttft_p99_s"] > 50 * base["ttft_p99_s"]
    assert capped["output_token_throughput_per_s"] < base["output_token_throughput_per_s"]
    # Without prefix caching nothing is reused, the KV cache holds more and prefill slows.
    assert nocache["prefix_hit_rate"] == 0 and base["prefix_hit_rate"] > 0.5
    # (about 1.25x since each V4 step carries its TP all-reduce; 2x when steps were shorter)
    assert nocache["kv_usage_peak_frac"] > 1.1 * base["kv_usage_peak_frac"]
    assert nocache["ttft_p99_s"] > 10 * base["ttft_p99_s"]


@pytest.mark.integration
def test_demo_report_renders_in_chromium(demo: object, page: object) -> None:
    from kvscope.demo import DemoResult

    assert isinstance(demo, DemoResult)
    page.open(demo.report)  # type: ignore[attr-defined]
    assert page.charts_drawn() >= 10  # type: ignore[attr-defined]
    from browser import layout_problems

    assert layout_problems(page) == []  # type: ignore[arg-type]
    page.screenshot(Path(__file__).parents[1] / "test-artifacts" / "demo-report.png")  # type: ignore[attr-defined]
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.integration
def test_kvscope_demo_command(tmp_path: Path) -> None:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "demo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr
    assert "report:" in out.stdout and "--no-enable-prefix-caching" in out.stdout
    # The README's copy of this output is compared figure by figure in tests/test_readme.py.
    assert (tmp_path / "report.html").stat().st_size > 50_000
    assert time.perf_counter() - start < 60
