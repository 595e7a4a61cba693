"""``/metrics`` pages of vLLM, SGLang and llama.cpp map onto the canonical columns."""

from __future__ import annotations

import pytest

from kvscope.bench.server_probe import COLUMNS, SERVER_SCHEMA, parse_metrics

# shaped like vLLM v1's page (two DP engines, histogram buckets that must be ignored)
VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.61
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
"""

LLAMA_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1234
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 567
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""

SGLANG_PAGE = """\
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.25
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 4.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 9.0
"""


def test_vllm_counts_add_over_engines_and_usage_takes_the_fullest() -> None:
    v = parse_metrics(VLLM_PAGE)
    assert v == {
        "requests_running": 12.0,
        "requests_waiting": 3.0,
        "kv_cache_usage_frac": 0.61,
        "preemptions_total": 3.0,
        "prefix_cache_queries_total": 1000.0,
        "prefix_cache_hits_total": 250.0,
    }


def test_llama_cpp_names() -> None:
    v = parse_metrics(LLAMA_PAGE)
    assert v == {
        "prompt_tokens_total": 1234.0,
        "generation_tokens_total": 567.0,
        "requests_running": 3.0,
        "requests_waiting": 1.0,
    }


def test_sglang_names() -> None:
    assert parse_metrics(SGLANG_PAGE) == {
        "kv_cache_usage_frac": 0.25,
        "requests_running": 4.0,
        "requests_waiting": 9.0,
    }


def test_unrelated_pages_give_nothing_and_garbage_raises() -> None:
    assert (
        parse_metrics("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n")
        == {}
    )
    assert parse_metrics("<html>not metrics</html>") == {}
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_running{engine=0 banana\n")


def test_schema_starts_with_time() -> None:
    assert SERVER_SCHEMA.names[0] == "t_s"
    assert set(COLUMNS) <= set(SERVER_SCHEMA.names)


def test_names_come_from_the_one_catalogue_with_renames_and_sglang_retractions() -> None:
    # The probe reads the names kvscope watch reads: SGLang's retracted requests are its
    # preemptions, and a vLLM page with both KV gauges (the rename's release) gives the new one.
    page = """# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{model_name="m"} 5.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0"} 0.9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.4
"""
    v = parse_metrics(page)
    assert v["preemptions_total"] == 5.0
    assert v["kv_cache_usage_frac"] == 0.4
    # the old name alone still feeds the column
    old = parse_metrics("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.7\n")
    assert old == {"kv_cache_usage_frac": 0.7}
