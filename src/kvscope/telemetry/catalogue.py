"""One catalogue of engine metrics, with the names each engine and version exposes.

Each :class:`CatalogueEntry` is a serving concept in base units (``kv_cache_usage_ratio``,
``preemptions``, ``ttft_seconds``...) and lists the exposition names that carry it in vLLM,
SGLang and llama.cpp, old names included, so a renamed metric resolves to the same entry.

Sources of the names:
- vLLM v1: ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) and ``docs/usage/metrics.md``;
  ``vllm:gpu_cache_usage_perc`` was renamed ``vllm:kv_cache_usage_perc`` in 0.9;
  ``vllm:time_per_output_token_seconds`` became ``vllm:inter_token_latency_seconds``;
  V0 / early V1 exposed ``vllm:gpu_prefix_cache_{queries,hits}``.
- SGLang: ``python/sglang/srt/metrics/collector.py``; retractions are SGLang's preemptions.
- llama.cpp: ``tools/server/README.md`` (``/metrics`` with ``--metrics``); older builds had
  ``llamacpp:kv_cache_usage_ratio`` and ``llamacpp:kv_cache_tokens``.

Counters are listed without the ``_total`` suffix that ``prometheus_client`` adds on exposition;
:func:`lookup` accepts both spellings.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """Prometheus metric type of a catalogue entry."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Aggregate(StrEnum):
    """How several label sets of one name (data-parallel engines, reasons) become one value."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """A serving concept and the exposition names that carry it.

    ``unit`` names the base unit of the value (``ratio`` is 0..1, ``tokens`` and ``requests``
    are counts). ``deprecated`` lists names kept only for older engine versions.
    """

    name: str
    kind: Kind
    unit: str
    description: str
    sources: tuple[str, ...]
    deprecated: tuple[str, ...] = ()
    aggregate: Aggregate = Aggregate.SUM


E = CatalogueEntry
G, C, H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM

CATALOGUE: tuple[CatalogueEntry, ...] = (
    E(
        "kv_cache_usage_ratio",
        G,
        "ratio",
        "Fraction of the KV cache in use (vLLM: 1 - free_blocks/num_gpu_blocks).",
        ("vllm:kv_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio"),
        deprecated=("vllm:gpu_cache_usage_perc",),
        aggregate=Aggregate.MEAN,
    ),
    E(
        "kv_cache_used_tokens",
        G,
        "tokens",
        "Tokens held in the KV cache.",
        ("sglang:num_used_tokens", "llamacpp:kv_cache_tokens"),
    ),
    E(
        "kv_cache_capacity_tokens",
        G,
        "tokens",
        "KV cache capacity in tokens (vLLM: num_gpu_blocks x block_size from cache_config_info).",
        ("sglang:max_total_num_tokens",),
    ),
    E(
        "context_tokens_max",
        G,
        "tokens",
        "High watermark of context tokens observed (llama.cpp).",
        ("llamacpp:n_tokens_max",),
        aggregate=Aggregate.MAX,
    ),
    E(
        "requests_running",
        G,
        "requests",
        "Requests in the running batch.",
        ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    ),
    E(
        "requests_waiting",
        G,
        "requests",
        "Requests queued, waiting for capacity.",
        ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    ),
    E(
        "requests_swapped",
        G,
        "requests",
        "Requests swapped to CPU (vLLM V0).",
        (),
        deprecated=("vllm:num_requests_swapped",),
    ),
    E(
        "busy_slots_per_decode",
        G,
        "slots",
        "Average busy slots per decode call (llama.cpp).",
        ("llamacpp:n_busy_slots_per_decode",),
        aggregate=Aggregate.MEAN,
    ),
    E(
        "preemptions",
        C,
        "requests",
        "Preempted requests (SGLang: retracted requests).",
        ("vllm:num_preemptions", "sglang:num_retracted_requests"),
    ),
    E(
        "prefix_cache_queries_tokens",
        C,
        "tokens",
        "Tokens looked up in the prefix cache.",
        ("vllm:prefix_cache_queries",),
        deprecated=("vllm:gpu_prefix_cache_queries",),
    ),
    E(
        "prefix_cache_hits_tokens",
        C,
        "tokens",
        "Tokens found in the prefix cache.",
        ("vllm:prefix_cache_hits",),
        deprecated=("vllm:gpu_prefix_cache_hits",),
    ),
    E(
        "prefix_cache_hit_ratio",
        G,
        "ratio",
        "Prefix (radix) cache hit rate reported by the engine.",
        ("sglang:cache_hit_rate",),
        aggregate=Aggregate.MEAN,
    ),
    E(
        "prompt_tokens",
        C,
        "tokens",
        "Prompt tokens processed.",
        ("vllm:prompt_tokens", "sglang:prompt_tokens", "llamacpp:prompt_tokens"),
    ),
    E(
        "cached_prompt_tokens",
        C,
        "tokens",
        "Prompt tokens served from the prefix cache.",
        ("vllm:prompt_tokens_cached", "sglang:cached_tokens", "llamacpp:prompt_tokens_cached"),
    ),
    E(
        "generation_tokens",
        C,
        "tokens",
        "Output tokens generated.",
        ("vllm:generation_tokens", "sglang:generation_tokens", "llamacpp:tokens_predicted"),
    ),
    E(
        "decode_calls",
        C,
        "calls",
        "llama_decode() calls (llama.cpp).",
        ("llamacpp:n_decode",),
    ),
    E(
        "requests_finished",
        C,
        "requests",
        "Requests finished (all reasons).",
        ("vllm:request_success", "sglang:num_requests"),
    ),
    E(
        "ttft_seconds",
        H,
        "seconds",
        "Time to first token.",
        ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    ),
    E(
        "itl_seconds",
        H,
        "seconds",
        "Inter-token latency.",
        ("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"),
        deprecated=(
            "vllm:time_per_output_token_seconds",
            "sglang:time_per_output_token_seconds",
        ),
    ),
    E(
        "e2e_seconds",
        H,
        "seconds",
        "End-to-end request latency.",
        ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    ),
    E(
        "queue_seconds",
        H,
        "seconds",
        "Time a request waited in the queue.",
        ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    ),
)

#: Info-style gauge whose labels carry vLLM's CacheConfig (block_size, num_gpu_blocks, ...).
CACHE_CONFIG_INFO = "vllm:cache_config_info"

BY_NAME: dict[str, CatalogueEntry] = {e.name: e for e in CATALOGUE}


def _build_index() -> dict[str, CatalogueEntry]:
    index: dict[str, CatalogueEntry] = {}
    for entry in CATALOGUE:
        for src in entry.sources + entry.deprecated:
            index[src] = entry
            if entry.kind is Kind.COUNTER:
                index[src + "_total"] = entry
    return index


_INDEX = _build_index()


def lookup(exposed_name: str) -> CatalogueEntry | None:
    """The catalogue entry an exposed family or counter name maps to, or None if unknown."""
    return _INDEX.get(exposed_name)


def engine_kind(exposed_name: str) -> str | None:
    """'vllm', 'sglang' or 'llamacpp' from a metric's prefix; None for other metrics."""
    prefix, sep, _ = exposed_name.partition(":")
    if sep and prefix in ("vllm", "sglang", "llamacpp"):
        return prefix
    return None


def known_prefixes() -> tuple[str, ...]:
    """Every exposed family name the catalogue knows (for cheap pre-filtering of pages)."""
    return tuple(sorted(set(_INDEX) | {CACHE_CONFIG_INFO}))
