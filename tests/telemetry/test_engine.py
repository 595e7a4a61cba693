"""Engine scraper over time against recorded pages (vLLM 0.33.0 real, vLLM 0.6 / SGLang
reconstructed) served by a real HTTP server on loopback."""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Callable

import pytest

from kvscope.telemetry.engine import EngineScraper, metrics_url
from metrics_page_server import render


def test_metrics_url_normalisation() -> None:
    assert metrics_url("127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://h:1/custom") == "http://h:1/custom"


@pytest.mark.integration
def test_scraper_rates_and_percentiles_over_real_vllm_pages(
    page_server: type, fixture_text: Callable[[str], str]
) -> None:
    t1, t2 = fixture_text("vllm_0_33_0_metrics_t1.txt"), fixture_text("vllm_0_33_0_metrics_t2.txt")
    srv = page_server([t1, t2])
    scr = EngineScraper(srv.url, window_s=600)
    first = {s.metric: s.value for s in scr.sample(1000.0)}
    srv.advance()
    second = {s.metric: s.value for s in scr.sample(1010.0)}
    assert first["engine_up"] == 1.0 and srv.hits == 2
    assert first["kv_cache_capacity_tokens"] == 16 * 96
    assert first["kv_cache_used_tokens"] == pytest.approx(0.9473684210526316 * 1536)
    # Between the two pages vLLM counted 9 - 1 preemptions and 2026 - 373 output tokens.
    assert second["preemptions_per_second"] == pytest.approx(8 / 10)
    assert second["generation_tokens_per_second"] == pytest.approx((2026 - 373) / 10)
    assert second["prefix_cache_hit_ratio"] == pytest.approx((1216 - 256) / (9034 - 1798))
    p50, p99 = second["ttft_seconds_p50"], second["ttft_seconds_p99"]
    assert 0 < p50 <= p99 < 2560


@pytest.mark.integration
def test_unreachable_engine_is_a_counted_fault_not_a_crash() -> None:
    scr = EngineScraper("http://127.0.0.1:9", timeout_s=0.5)
    out = scr.sample(0.0)
    assert [(s.metric, s.value) for s in out] == [("engine_up", 0.0)]
    assert scr.faults == 1 and "cannot scrape" in scr.last_error


@pytest.mark.integration
def test_renamed_metric_across_versions_gives_one_series(
    page_server: type, fixture_text: Callable[[str], str]
) -> None:
    # An engine upgraded in place (0.6 -> 0.33) keeps one kvscope series for KV usage.
    srv = page_server(
        [fixture_text("vllm_v0_6_metrics.txt"), fixture_text("vllm_0_33_0_metrics_t1.txt")]
    )
    scr = EngineScraper(srv.url)
    a = [s for s in scr.sample(0.0) if s.metric == "kv_cache_usage_ratio"]
    srv.advance()
    b = [s for s in scr.sample(1.0) if s.metric == "kv_cache_usage_ratio"]
    assert [s.value for s in a + b] == [0.4375, pytest.approx(0.9473684210526316)]
    assert math.isclose(b[0].value, 18 / 19)


@pytest.mark.integration
def test_gauge_scrapes_ask_prometheus_client_servers_for_the_gauges_only(
    page_server: type, fixture_text: Callable[[str], str]
) -> None:
    srv = page_server([fixture_text("vllm_0_33_0_metrics_t1.txt")])
    scr = EngineScraper(srv.url)
    full = {s.metric: s.value for s in scr.sample(100.0)}
    fast = {s.metric: s.value for s in scr.sample(100.1)}
    assert srv.paths[0] == "/metrics"
    path, _, query = srv.paths[1].partition("?")
    asked = urllib.parse.parse_qs(query)["name[]"]
    assert path == "/metrics" and sorted(asked) == [
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ]
    # What a prometheus_client server sends for that query: three series, not 550 lines.
    body = render(fixture_text("vllm_0_33_0_metrics_t1.txt"), query)
    assert len(body) < 1500 and body.count(b"\nvllm:") == 3
    for name in ("kv_cache_usage_ratio", "requests_running", "requests_waiting"):
        assert fast[name] == full[name]
    assert len(srv.paths) == 2  # no fallback to the whole page was needed


@pytest.mark.integration
def test_a_server_that_cannot_filter_is_asked_for_the_whole_page(
    page_server: type, fixture_text: Callable[[str], str]
) -> None:
    # vLLM with several API servers renders a multiprocess registry: ?name[]= gets an empty
    # page. The scraper reads the whole page in the same tick and stops filtering.
    srv = page_server([fixture_text("vllm_0_33_0_metrics_t1.txt")], multiprocess=True)
    scr = EngineScraper(srv.url)
    ticks = [{s.metric: s.value for s in scr.sample(200.0 + k / 10)} for k in range(4)]
    assert all(t["kv_cache_usage_ratio"] == pytest.approx(18 / 19) for t in ticks)
    assert [p.partition("?")[0] for p in srv.paths] == ["/metrics"] * 5
    assert "?" in srv.paths[1] and all("?" not in p for p in srv.paths[2:])
    assert scr.faults == 0
