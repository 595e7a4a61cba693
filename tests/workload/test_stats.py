"""Workload statistics: published trace figures and hand-checked small cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscope.workload.stats import prefix_reuse, workload_stats
from kvscope.workload.stream import Workload


def test_azure_conv_published_figures(traces_dir: Path) -> None:
    # Splitwise conv trace (Azure/AzurePublicDataset): 19,366 requests over ~3,502 s,
    # mean prompt ~1,155 and output ~211 tokens (shared/traces/azure_llm_2023/SOURCE.md).
    s = workload_stats(
        Workload.from_file(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    )
    assert s["requests"] == 19_366
    assert s["duration_s"] == pytest.approx(3502, abs=1)
    assert s["prompt_tokens"]["mean"] == pytest.approx(1155, abs=0.5)
    assert s["output_tokens"]["mean"] == pytest.approx(211, abs=0.5)
    assert s["prompt_tokens"]["p50"] == 1020 and s["prompt_tokens"]["max"] == 14_050
    assert s["output_tokens"]["p50"] == 129 and s["output_tokens"]["max"] == 1000
    assert s["mean_rate_per_s"] == pytest.approx(5.53, abs=0.005)
    assert s["prefix"] is None  # no hashes in the Azure columns


def test_azure_code_published_figures(traces_dir: Path) -> None:
    s = workload_stats(
        Workload.from_file(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv")
    )
    assert s["requests"] == 8_819
    assert s["duration_s"] == pytest.approx(3436, abs=1)
    assert s["prompt_tokens"]["mean"] == pytest.approx(2048, abs=0.5)
    assert s["output_tokens"]["mean"] == pytest.approx(28, abs=0.5)


def test_mooncake_conversation_block_reuse(traces_dir: Path) -> None:
    # Mooncake FAST'25 conversation trace: 12,031 requests, 36.6 % of hash_ids references
    # repeat an earlier id (shared/traces/mooncake_fast25/SOURCE.md).
    s = workload_stats(
        Workload.from_file(traces_dir / "mooncake_fast25" / "conversation_trace.jsonl")
    )
    assert s["requests"] == 12_031
    assert s["prefix"]["hash_block_size"] == 512
    assert s["prefix"]["block_reuse_share"] == pytest.approx(0.366, abs=0.0005)
    assert s["duration_s"] == pytest.approx(3537, abs=1)
    assert s["prompt_tokens"]["mean"] == pytest.approx(12_035, abs=1)


def test_mooncake_synthetic_block_reuse(traces_dir: Path) -> None:
    s = workload_stats(Workload.from_file(traces_dir / "mooncake_fast25" / "synthetic_trace.jsonl"))
    assert s["requests"] == 3_993
    assert s["prefix"]["block_reuse_share"] == pytest.approx(0.64, abs=0.005)


def _w(t: list[float], p: list[int], o: list[int], **kw: object) -> Workload:
    return Workload.build(t, p, o, **kw)  # type: ignore[arg-type]


def test_peaks_cv_and_offered_tokens_small_case() -> None:
    t = [0.0, 0.1, 0.2, 0.9, 5.0, 61.0, 61.5, 120.0]
    w = _w(t, [100] * 8, [10] * 8)
    s = workload_stats(w)
    assert s["peak_rate_per_s"] == 4  # 0.0, 0.1, 0.2, 0.9 fall in the first second
    assert s["peak_rate_per_min"] == 5  # first minute: five arrivals
    assert s["mean_rate_per_s"] == pytest.approx(8 / 120)
    assert s["offered_tokens_per_s"]["total"] == pytest.approx(880 / 120)
    gaps = np.diff(t)
    assert s["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())


def test_sizing_rule_p95_plus_margin() -> None:
    # totals 1..100 (prompt k, output 0): P95 = 95.05 -> +20 % = 114.06 -> 115 -> round to 128
    w = _w([float(i) for i in range(100)], list(range(1, 101)), [0] * 100)
    z = workload_stats(w)["sizing"]
    assert z["p95_context_tokens"] == pytest.approx(95.05)
    assert z["range_tokens"] == [110, 115]
    assert z["suggested_max_model_len"] == 128
    assert z["requests_over_suggested"] == 0


def test_prefix_reuse_counts_repeats_in_arrival_order_and_splits_blocks() -> None:
    # three requests, 4-token hashed blocks; request 2 repeats [1, 2], request 3 repeats [1]
    w = _w(
        [0.0, 1.0, 2.0],
        [8, 10, 6],
        [1, 1, 1],
        hash_offsets=[0, 2, 4, 5],
        hash_values=[1, 2, 1, 2, 1],
        hash_block_size=4,
    )
    r = prefix_reuse(w)
    assert r is not None
    assert r["block_refs"] == 5 and r["repeated_block_refs"] == 3
    assert r["block_reuse_share"] == pytest.approx(0.6)
    r2 = prefix_reuse(w, block_size=2)
    assert r2 is not None
    # full 2-token sub-blocks: 4 + 5 + 3 = 12; reused: 4 (req 2) + 2 (req 3) = 6
    assert r2["reusable_token_share"] == pytest.approx(0.5)
    r3 = prefix_reuse(w, block_size=3)
    assert r3 is not None and r3["reusable_token_share"] is None


def test_empty_and_single_request_streams() -> None:
    s = workload_stats(Workload.empty())
    assert s["requests"] == 0 and s["mean_rate_per_s"] is None and s["sizing"] is None
    s1 = workload_stats(_w([3.0], [5], [5]))
    assert s1["duration_s"] == 0 and s1["interarrival_cv"] is None
