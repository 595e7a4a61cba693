"""One engine /metrics page mapped to the catalogue: recorded pages (vLLM 0.33.0 real, vLLM 0.6
and SGLang reconstructed), the gauge fast path against the maintained parser, bad pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.catalogue import BY_NAME, Kind
from kvscope.telemetry.metrics_page import parse_page


def test_vllm_0_33_page_from_prometheus_stat_logger(fixture_text: Callable[[str], str]) -> None:
    page = parse_page(fixture_text("vllm_0_33_0_metrics_t1.txt"))
    assert page.kind == "vllm" and page.model_name == "kvscope/tiny-llama"
    # Values vLLM's own logger wrote after 60 scheduler steps (see the page's header).
    assert page.values["kv_cache_usage_ratio"] == pytest.approx(0.9473684210526316)
    assert page.values["requests_running"] == 6.0
    assert page.values["requests_waiting"] == 32.0
    assert page.values["preemptions"] == 1.0
    assert page.values["prefix_cache_hits_tokens"] == 256.0
    assert page.cache_config is not None
    assert (page.cache_config.block_size, page.cache_config.num_gpu_blocks) == (16, 96)
    assert page.resolved_from["kv_cache_usage_ratio"] == "vllm:kv_cache_usage_perc"
    assert {"ttft_seconds", "itl_seconds", "e2e_seconds", "queue_seconds"} <= set(page.histograms)
    # Nothing silently dropped: every engine family not in the catalogue is listed.
    assert "vllm:num_requests_waiting_by_reason" in page.unmapped
    assert not any(n.endswith("_created") for n in page.unmapped)


def test_old_vllm_and_sglang_names_map_to_the_same_entries(
    fixture_text: Callable[[str], str],
) -> None:
    old = parse_page(fixture_text("vllm_v0_6_metrics.txt"))
    sg = parse_page(fixture_text("sglang_metrics.txt"))
    assert old.resolved_from["kv_cache_usage_ratio"] == "vllm:gpu_cache_usage_perc"
    assert old.values["kv_cache_usage_ratio"] == 0.4375
    assert old.resolved_from["itl_seconds"] == "vllm:time_per_output_token_seconds"
    assert sg.resolved_from["kv_cache_usage_ratio"] == "sglang:token_usage"
    assert sg.values["kv_cache_usage_ratio"] == 0.62
    assert sg.resolved_from["preemptions"] == "sglang:num_retracted_requests"
    assert sg.values["preemptions"] == 9.0
    assert sg.values["kv_cache_capacity_tokens"] == 458320.0
    assert old.cache_config is not None and old.cache_config.capacity_tokens == 16 * 27298


def test_non_engine_families_are_dropped_before_parsing(fixture_text: Callable[[str], str]) -> None:
    page = parse_page(fixture_text("vllm_v0_6_metrics.txt"))
    assert all(n.startswith("vllm:") for n in page.unmapped)


@pytest.mark.parametrize(
    "page",
    [
        "vllm_0_33_0_metrics_t1.txt",
        "vllm_0_33_0_metrics_t2.txt",
        "vllm_v0_6_metrics.txt",
        "sglang_metrics.txt",
    ],
)
def test_gauge_fast_path_agrees_with_the_maintained_parser(
    page: str, fixture_text: Callable[[str], str]
) -> None:
    text = fixture_text(page)
    full, fast = parse_page(text, full=True), parse_page(text, full=False)
    gauges = {k: v for k, v in full.values.items() if BY_NAME[k].kind is Kind.GAUGE}
    assert gauges and fast.values == gauges
    assert (fast.kind, fast.model_name) == (full.kind, full.model_name)
    assert fast.resolved_from == {k: full.resolved_from[k] for k in gauges}


def test_gauge_fast_path_reads_values_after_awkward_label_sets() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="a \\"quoted\\" model} 9",engine="0"} 3 1700000000\n'
        'vllm:num_requests_running{engine="1",model_name="a \\"quoted\\" model} 9"} 4.5\n'
        "vllm:num_requests_waiting 2e1\n"
    )
    fast, full = parse_page(text, full=False), parse_page(text, full=True)
    assert fast.values == full.values == {"requests_running": 7.5, "requests_waiting": 20.0}
    assert fast.model_name == full.model_name == 'a "quoted" model} 9'


def test_malformed_page_raises_user_error() -> None:
    with pytest.raises(KvscopeError):
        parse_page('vllm:num_requests_running{model_name="x} 1\n')
    with pytest.raises(KvscopeError, match="malformed"):
        parse_page('vllm:num_requests_running{model_name="x"} one\n', full=False)
