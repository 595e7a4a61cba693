"""Signals: what a rule can watch, in kvscope's store and under each exporter's real names.

A :class:`Signal` names one quantity in base units and says where it lives:

- in kvscope's own store (the sample ``metric`` the telemetry samplers write, optionally a
  ratio of two metrics, optionally filtered on one label and reduced by ``max``), and
- in Prometheus, one :class:`FamilyExpr` per exporter family: ``kvscope`` (kvscope's exporter,
  ``kvscope_<metric>``, :mod:`kvscope.telemetry.exporter`), ``vllm`` and ``sglang`` (engine
  names taken from :mod:`kvscope.telemetry.catalogue`, counters with the ``_total`` suffix
  ``prometheus_client`` adds), ``dcgm`` (NVIDIA dcgm-exporter default counters, FB in MiB,
  ``etc/default-counters.csv``) and ``prometheus`` (the server's own ``up``).

An exported rule unions its families (``a or b or c``) so one pack works whichever exporter a
site runs (the vendor-agnostic union of defilantech/LLMKube PR #1372).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.errors import UnknownNameError
from kvscope.telemetry.catalogue import BY_NAME, Kind
from kvscope.telemetry.exporter import PREFIX
from kvscope.telemetry.gpu import ALERTING_REASONS

#: dcgm-exporter reports framebuffer memory in MiB (etc/default-counters.csv).
MIB = 1048576.0


@dataclass(frozen=True, slots=True)
class FamilyExpr:
    """A PromQL expression of a signal for one exporter family.

    ``rangeable`` is True when ``selector`` is a plain series selector, so that range functions
    (``rate``, ``deriv``, ``quantile_over_time``) can be applied; ``scale`` converts the
    family's unit into the signal's base unit.
    """

    selector: str
    scale: float = 1.0
    rangeable: bool = True


@dataclass(frozen=True, slots=True)
class Signal:
    """A watched quantity: store metric(s) and Prometheus expressions per family."""

    name: str
    unit: str
    counter: bool
    store_metric: str
    description: str
    store_denominator: str | None = None
    label_key: str | None = None
    label_values: tuple[str, ...] = ()
    lo: float = 0.0
    hi: float = float("inf")
    families: dict[str, FamilyExpr] = field(default_factory=dict)

    @property
    def store_metrics(self) -> tuple[str, ...]:
        if self.store_denominator is None:
            return (self.store_metric,)
        return (self.store_metric, self.store_denominator)


def _engine(concept: str) -> dict[str, FamilyExpr]:
    """vLLM and SGLang names of a catalogue concept (current names, ``_total`` on counters)."""
    entry = BY_NAME[concept]
    out: dict[str, FamilyExpr] = {}
    for src in entry.sources:
        family = src.partition(":")[0]
        if family in ("vllm", "sglang"):
            name = src + "_total" if entry.kind is Kind.COUNTER else src
            out[family] = FamilyExpr(name)
    return out


def _kv(metric: str, labels: str = "") -> FamilyExpr:
    return FamilyExpr(PREFIX + metric + labels)


def _hist_quantile(name: str, q: float, window: str) -> FamilyExpr:
    return FamilyExpr(
        f"histogram_quantile({q}, sum by (le, instance, job) (rate({name}_bucket[{window}])))",
        rangeable=False,
    )


_THROTTLE = "|".join(sorted(ALERTING_REASONS))

SIGNALS: tuple[Signal, ...] = (
    Signal(
        "kv_cache_usage_ratio",
        "ratio",
        False,
        "kv_cache_usage_ratio",
        "Fraction of the KV cache in use (0..1).",
        hi=1.0,
        families={"kvscope": _kv("kv_cache_usage_ratio"), **_engine("kv_cache_usage_ratio")},
    ),
    Signal(
        "kv_fragmentation_ratio",
        "ratio",
        False,
        "kv_fragmentation_ratio",
        "Share of allocated KV slots not holding a token (tail waste of partial blocks).",
        hi=1.0,
        families={"kvscope": _kv("kv_fragmentation_ratio")},
    ),
    Signal(
        "preemptions",
        "requests",
        True,
        "preemptions_total",
        "Preempted requests, cumulative (SGLang: retractions).",
        families={"kvscope": _kv("preemptions_total"), **_engine("preemptions")},
    ),
    Signal(
        "kv_eviction_churn",
        "blocks",
        True,
        "kv_events_eviction_churn_total",
        "KV blocks stored again within 60 s of their eviction (watch --kv-events), cumulative.",
        families={"kvscope": _kv("kv_events_eviction_churn_total")},
    ),
    Signal(
        "allocation_retries",
        "events",
        True,
        "allocation_retries_total",
        "Allocator retries after a failed cudaMalloc (torch memory_stats num_alloc_retries).",
        families={"kvscope": _kv("allocation_retries_total")},
    ),
    Signal(
        "requests_waiting",
        "requests",
        False,
        "requests_waiting",
        "Requests queued, waiting for capacity.",
        families={"kvscope": _kv("requests_waiting"), **_engine("requests_waiting")},
    ),
    Signal(
        "ttft_p99_seconds",
        "seconds",
        False,
        "ttft_seconds_p99",
        "P99 time to first token over the scraper's 60 s window.",
        families={
            "kvscope": _kv("ttft_seconds_p99"),
            "vllm": _hist_quantile("vllm:time_to_first_token_seconds", 0.99, "1m"),
            "sglang": _hist_quantile("sglang:time_to_first_token_seconds", 0.99, "1m"),
        },
    ),
    Signal(
        "itl_p99_seconds",
        "seconds",
        False,
        "itl_seconds_p99",
        "P99 inter-token latency over the scraper's 60 s window.",
        families={
            "kvscope": _kv("itl_seconds_p99"),
            "vllm": _hist_quantile("vllm:inter_token_latency_seconds", 0.99, "1m"),
            "sglang": _hist_quantile("sglang:inter_token_latency_seconds", 0.99, "1m"),
        },
    ),
    Signal(
        "gpu_memory_used_ratio",
        "ratio",
        False,
        "gpu_memory_used_bytes",
        "GPU memory used / total. dcgm-exporter has no FB_TOTAL by default: used/(used+free).",
        store_denominator="gpu_memory_total_bytes",
        hi=1.0,
        families={
            "kvscope": FamilyExpr(
                f"{PREFIX}gpu_memory_used_bytes / {PREFIX}gpu_memory_total_bytes", rangeable=False
            ),
            "dcgm": FamilyExpr(
                "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
                rangeable=False,
            ),
        },
    ),
    Signal(
        "gpu_memory_used_bytes",
        "bytes",
        False,
        "gpu_memory_used_bytes",
        "GPU memory used, bytes.",
        families={
            "kvscope": _kv("gpu_memory_used_bytes"),
            "dcgm": FamilyExpr("DCGM_FI_DEV_FB_USED", scale=MIB),
        },
    ),
    Signal(
        "gpu_throttled",
        "flag",
        False,
        "gpu_clock_event_active",
        "1 while a hardware slowdown, thermal slowdown or power brake holds the clocks "
        "(NVML clock-event reasons; canonical/hardware-observer-operator PR #331).",
        label_key="reason",
        label_values=tuple(sorted(ALERTING_REASONS)),
        hi=1.0,
        families={"kvscope": _kv("gpu_clock_event_active", f'{{reason=~"{_THROTTLE}"}}')},
    ),
    Signal(
        "gpu_xid_events",
        "events",
        True,
        "gpu_xid_events_total",
        "XID error events seen by NVML, cumulative per GPU.",
        families={"kvscope": _kv("gpu_xid_events_total")},
    ),
    Signal(
        "engine_up",
        "flag",
        False,
        "engine_up",
        "1 when the last scrape of an engine succeeded, 0 when it failed.",
        hi=1.0,
        families={"kvscope": _kv("engine_up"), "prometheus": FamilyExpr("up")},
    ),
)

BY_SIGNAL: dict[str, Signal] = {s.name: s for s in SIGNALS}


def signal(name: str) -> Signal:
    """The signal called ``name`` (UnknownNameError with suggestions otherwise)."""
    try:
        return BY_SIGNAL[name]
    except KeyError:
        raise UnknownNameError("signal", name, BY_SIGNAL) from None


def reduce_label(sig: Signal) -> str | None:
    """Label reduced by ``max`` (the signal's filter label), if any."""
    return sig.label_key
