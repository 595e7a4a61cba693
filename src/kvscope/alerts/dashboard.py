"""Grafana dashboard JSON over the real metric names (kvscope, vLLM, SGLang, dcgm-exporter).

Each panel query unions the exporter families (``a or b``), so one dashboard serves a vLLM
fleet, an SGLang fleet, a dcgm-exporter node and kvscope's own exporter. Queries use fixed
range windows rather than Grafana's ``$__rate_interval`` so every query is plain PromQL that
a Prometheus server can execute as written (the tests run each one against a real server).

Panels: KV usage as a waveform with its peak, preemptions,
prefix-cache hits, TTFT/ITL percentiles, queue, GPU memory / power / clocks / temperature,
throttling and the leak slope in MB/min (MB = 10^6 bytes, as :mod:`kvscope.telemetry.waveform`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvscope.alerts.signals import MIB
from kvscope.telemetry.engine import QUANTILES
from kvscope.telemetry.exporter import PREFIX as K

_DS = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    unit: str  # Grafana unit id
    queries: tuple[Query, ...]
    description: str = ""
    kind: str = "timeseries"


def _union(*exprs: str) -> str:
    return " or ".join(f"({e})" for e in exprs)


def _hq(q: float, name: str, window: str = "5m") -> str:
    return f"histogram_quantile({q}, sum by (le, instance) (rate({name}_bucket[{window}])))"


def _percentiles(kv_metric: str, vllm: str, sglang: str) -> tuple[Query, ...]:
    return tuple(
        Query(
            _union(f"{K}{kv_metric}_p{round(q * 100)}", _hq(q, vllm), _hq(q, sglang)),
            f"P{round(q * 100)} {{{{instance}}}}{{{{engine}}}}",
        )
        for q in QUANTILES
    )


KV = (f"{K}kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "sglang:token_usage")
PREEMPT = (
    f"{K}preemptions_total",
    "vllm:num_preemptions_total",
    "sglang:num_retracted_requests_total",
)

PANELS: tuple[Panel, ...] = (
    Panel(
        "KV cache usage (waveform)",
        "percentunit",
        (Query(_union(*KV), "{{instance}}{{engine}}"),),
        "KV usage breathes; the peak often comes in steady decode, not at prefill.",
    ),
    Panel(
        "KV cache usage peak (1 h)",
        "percentunit",
        (Query(_union(*(f"max_over_time({m}[1h])" for m in KV)), "{{instance}}{{engine}}"),),
        "Highest KV usage in the last hour (vLLM dashboard: orange 0.9, red 0.98).",
    ),
    Panel(
        "Preemptions per minute",
        "short",
        (Query(_union(*(f"rate({m}[5m]) * 60" for m in PREEMPT)), "{{instance}}{{engine}}"),),
        "SGLang calls them retractions. Any sustained rate means KV pressure.",
    ),
    Panel(
        "Prefix cache hit ratio",
        "percentunit",
        (
            Query(
                _union(
                    f"{K}prefix_cache_hit_ratio",
                    "sum by (instance) (rate(vllm:prefix_cache_hits_total[5m])) / "
                    "(sum by (instance) (rate(vllm:prefix_cache_queries_total[5m])) > 0)",
                    "sglang:cache_hit_rate",
                ),
                "{{instance}}{{engine}}",
            ),
        ),
        "Token-level hits over queries (vLLM counters), radix hit rate (SGLang).",
    ),
    Panel(
        "TTFT percentiles",
        "s",
        _percentiles(
            "ttft_seconds", "vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"
        ),
    ),
    Panel(
        "Inter-token latency percentiles",
        "s",
        _percentiles(
            "itl_seconds", "vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"
        ),
    ),
    Panel(
        "Requests running / waiting",
        "short",
        (
            Query(
                _union(
                    f"{K}requests_running", "vllm:num_requests_running", "sglang:num_running_reqs"
                ),
                "running {{instance}}{{engine}}",
            ),
            Query(
                _union(
                    f"{K}requests_waiting", "vllm:num_requests_waiting", "sglang:num_queue_reqs"
                ),
                "waiting {{instance}}{{engine}}",
            ),
        ),
    ),
    Panel(
        "GPU memory used",
        "bytes",
        (
            Query(
                _union(f"{K}gpu_memory_used_bytes", f"DCGM_FI_DEV_FB_USED * {MIB:.0f}"),
                "GPU {{gpu}}",
            ),
            Query(f"max_over_time({K}gpu_memory_used_bytes[1h])", "peak 1 h GPU {{gpu}}"),
        ),
        "dcgm-exporter reports MiB; converted to bytes.",
    ),
    Panel(
        "GPU memory leak slope",
        "MBs",
        (
            Query(
                _union(
                    f"deriv({K}gpu_memory_used_bytes[15m]) * 60 / 1e6",
                    f"deriv(DCGM_FI_DEV_FB_USED[15m]) * 60 * {MIB:.0f} / 1e6",
                ),
                "GPU {{gpu}} MB/min",
            ),
        ),
        "Least-squares slope over 15 min in MB/min; the GpuMemoryLeak rule fires above 1.",
    ),
    Panel(
        "GPU power",
        "watt",
        (
            Query(_union(f"{K}gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE"), "GPU {{gpu}}"),
            Query(f"{K}gpu_power_limit_watts", "limit GPU {{gpu}}"),
        ),
    ),
    Panel(
        "GPU clocks",
        "hertz",
        (
            Query(_union(f"{K}gpu_sm_clock_hertz", "DCGM_FI_DEV_SM_CLOCK * 1e6"), "SM GPU {{gpu}}"),
            Query(
                _union(f"{K}gpu_memory_clock_hertz", "DCGM_FI_DEV_MEM_CLOCK * 1e6"),
                "memory GPU {{gpu}}",
            ),
        ),
        "dcgm-exporter reports MHz; converted to Hz.",
    ),
    Panel(
        "GPU temperature and throttling",
        "celsius",
        (
            Query(_union(f"{K}gpu_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP"), "GPU {{gpu}}"),
            Query(f"{K}gpu_clock_event_active > 0", "{{reason}} GPU {{gpu}}"),
        ),
    ),
    Panel(
        "Firing kvscope alerts",
        "short",
        (Query('ALERTS{alertstate="firing"}', "{{alertname}} {{severity}}"),),
        "Rules exported by `kvscope alerts export`.",
        kind="table",
    ),
)


def queries() -> list[str]:
    """Every query of the dashboard (for validation)."""
    return [q.expr for p in PANELS for q in p.queries]


def dashboard(
    title: str = "kvscope: KV cache and GPU memory", uid: str = "kvscope"
) -> dict[str, Any]:
    """The Grafana dashboard (schema version 39) as a JSON-ready dict."""
    panels = []
    for i, p in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": p.kind,
                "title": p.title,
                "description": p.description,
                "datasource": _DS,
                "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
                "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + j),
                        "datasource": _DS,
                        "expr": q.expr,
                        "legendFormat": q.legend,
                        "range": p.kind != "table",
                        "instant": p.kind == "table",
                    }
                    for j, q in enumerate(p.queries)
                ],
            }
        )
    return {
        "title": title,
        "uid": uid,
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "tags": ["kvscope", "llm-serving", "kv-cache", "gpu"],
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": panels,
    }
