"""The catalogue resolves every engine's and version's name for a concept to one entry."""

from __future__ import annotations

import pytest

from kvscope.telemetry.catalogue import BY_NAME, CATALOGUE, Kind, engine_kind, lookup


@pytest.mark.parametrize(
    ("old", "new", "entry"),
    [
        ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "kv_cache_usage_ratio"),
        ("sglang:token_usage", "vllm:kv_cache_usage_perc", "kv_cache_usage_ratio"),
        ("llamacpp:kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "kv_cache_usage_ratio"),
        ("sglang:num_retracted_requests_total", "vllm:num_preemptions_total", "preemptions"),
        (
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:prefix_cache_hits_total",
            "prefix_cache_hits_tokens",
        ),
        ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds", "itl_seconds"),
        ("llamacpp:requests_deferred", "sglang:num_queue_reqs", "requests_waiting"),
        ("llamacpp:tokens_predicted_total", "sglang:generation_tokens_total", "generation_tokens"),
    ],
)
def test_renamed_metrics_resolve_to_one_entry(old: str, new: str, entry: str) -> None:
    a, b = lookup(old), lookup(new)
    assert a is not None and b is not None
    assert a is b is BY_NAME[entry]


def test_counters_resolve_with_and_without_total_suffix() -> None:
    for e in CATALOGUE:
        if e.kind is Kind.COUNTER:
            for src in e.sources:
                assert lookup(src) is e
                assert lookup(src + "_total") is e


def test_every_source_name_belongs_to_a_known_engine_and_is_unique() -> None:
    seen: set[str] = set()
    for e in CATALOGUE:
        for src in e.sources + e.deprecated:
            assert engine_kind(src) in ("vllm", "sglang", "llamacpp"), src
            assert src not in seen, src
            seen.add(src)
            assert not src.endswith("_total"), "counters are listed without _total"


def test_unknown_names_are_not_guessed() -> None:
    assert lookup("vllm:request_queue_size") is None  # a name community rules use; vLLM has none
    assert lookup("process_resident_memory_bytes") is None
