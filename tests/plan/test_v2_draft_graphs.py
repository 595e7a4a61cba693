"""The graphs drafting adds to vLLM's V2-runner graph estimate (kvscope.plan.v2_draft_graphs)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from tests.plan.log_cases import Case, load_cases

from kvscope.plan.cudagraph import estimate_bytes, listed_sizes
from kvscope.plan.v2_draft_graphs import (
    decode_graph_sizes,
    drafter_graphs,
    drafting_graph_bytes,
    indexer_logit_length,
    target_graphs,
)
from kvscope.specs.hardware import GIB

CASES = {c.id: c for c in load_cases()}
V030 = (0, 30, 1)
FIXED = "tant2tls-v41flash-h100-tp8-0.30-dspark5"


def test_speculation_off_lists_are_the_logged_ones() -> None:
    # tant2tls/Deepseek-serving at ae9b27e, reports/v41-vs-0731/data/v41/_server/
    # serve-off-prefix-reusecheck-20260928-024626.log (0.30.1rc1, max_num_seqs 64): the
    # engine's config line lists cudagraph_capture_sizes [1, 2, 4, 8, 16, ..., 128] and the
    # real capture bars read 19 PIECEWISE and 11 FULL graphs
    assert listed_sizes(64, 8192, V030) == (1, 2, 4, *range(8, 129, 8))
    pw, full = target_graphs(64, 8192, V030, 0)
    assert (pw, len(full), max(full)) == (19, 11, 64)


def test_dspark_k5_lists() -> None:
    # cap 64 x 6 x 2 = 768 -> 512; uniform decode sizes n x 6 appended (vllm/config/vllm.py,
    # 0.30.0); FULL decode graphs rounded to 6 up to 384; DSpark's own FULL_DECODE_ONLY
    # graphs at k = 5 query tokens a request up to 320
    pw, full = target_graphs(64, 8192, V030, 5)
    assert pw == 53 and len(full) == 41 and max(full) == 384
    assert all(s % 6 == 0 for s in full)
    assert drafter_graphs("dspark", 64, 8192, V030, 5) == 38
    # DFlash drafts 1 + k query tokens a request: its graphs are the target's decode sizes
    assert drafter_graphs("dflash", 64, 8192, V030, 5) == len(full)
    assert drafter_graphs("eagle", 64, 8192, V030, 5) == 0
    # adaptive verification keys varlen decode graphs: every listed size up to 384
    _, varlen = target_graphs(64, 8192, V030, 5, varlen=True)
    assert varlen == tuple(s for s in listed_sizes(64, 8192, V030, 5) if s <= 384)


@given(
    seqs=st.integers(1, 1024),
    k=st.integers(0, 8),
    mnbt=st.sampled_from([512, 2048, 8192, 16384]),
)
def test_decode_graphs_cover_every_uniform_decode_batch(seqs: int, k: int, mnbt: int) -> None:
    q = 1 + k
    sizes = listed_sizes(seqs, mnbt, V030, k)
    cap = max(sizes)
    full = decode_graph_sizes(sizes, seqs, q, cap)
    assert all(s % q == 0 and s <= min(seqs * q, cap) for s in full)
    # any uniform decode batch the largest FULL graph holds has a graph at or above it
    for n in range(1, max(full, default=0) // q + 1):
        assert any(s >= n * q for s in full)


def test_per_graph_rate_matches_the_off_launchs_real_capture() -> None:
    # Same off log: "Graph capturing finished ..., took 0.37 GiB" for the real capture of
    # 19 PIECEWISE + 11 FULL graphs; the fit's per-graph rate for its 40 MoE layers prices
    # those 29 graphs beyond the first within 5 %
    assert abs(estimate_bytes(40, True, 19 + 11 - 1) / GIB - 0.37) < 0.05 * 0.37


def test_indexer_logit_length() -> None:
    model, *_ = _args(CASES[FIXED])
    # V4.1's index sources include compress ratio 1: the whole context
    assert indexer_logit_length(model, 262_144) == 262_144
    # V4-Flash-0731's C4 indexer layers: a quarter of it
    v0731, *_ = _args(CASES["tant2tls-v4flash0731-h100-tp8-0.30-dspark5"])
    assert indexer_logit_length(v0731, 262_144) == 65_536
    dense = next(c for c in CASES.values() if c.row["model"] == "Qwen/Qwen3-8B")
    qwen, *_ = _args(dense)
    assert indexer_logit_length(qwen, 262_144) == 0


def test_drafting_adds_nothing_without_drafting_or_outside_the_releases() -> None:
    model, eng, *rest = _args(CASES[FIXED])
    assert drafting_graph_bytes(model, eng, *rest) > 0
    assert drafting_graph_bytes(model, dataclasses.replace(eng, speculative=None), *rest) == 0
    for version in ("0.28.0", "0.33.0"):
        other = dataclasses.replace(eng, engine_version=version)
        assert drafting_graph_bytes(model, other, *rest) == 0
    # an explicit capture cap: the planner follows the capture list instead
    capped = dataclasses.replace(eng, max_cudagraph_capture_size=256)
    assert drafting_graph_bytes(model, capped, *rest) == 0


def test_fixed_arm_is_priced_below_what_its_pool_lost() -> None:
    # The fixed arm's scrape (231,835 blocks) loses 4.17 GiB of pool a GPU against the
    # speculation-off launch of the same build; before this rule the planner took 1.61 GiB
    # (drafter weights, speculator buffers, captures). The graphs drafting adds must take
    # part of the rest and no more than all of it; the planned estimate stays below the
    # report's graph figure (~3 GiB, 4d).
    case = CASES[FIXED]
    off = Case({**case.row, "speculative_config": ""}).plan()
    added = drafting_graph_bytes(*_args(case))
    assert 0.9 * GIB < added < (4.17 - 1.61) * GIB
    assert case.plan().cudagraph_gib == off.cudagraph_gib + added / GIB
    assert case.plan().cudagraph_gib < 3.0


def _args(case: Case) -> tuple:  # type: ignore[type-arg]
    """(model, engine, GPU, layers, MoE, seqs, batched tokens, max_model_len, last stage) of
    a tant2tls 8x H100 TP8 start (40 layers a rank: TP keeps every layer)."""
    from tests.plan.log_cases import _speculative, offline_hub

    from kvscope.plan.config import EngineConfig
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    with offline_hub():
        model = load_model(case.row["model"], None, None)
    eng = EngineConfig(
        engine="vllm", engine_version="0.30.1", speculative=_speculative(case.row, model)
    )
    return (model, eng, get_gpu("H100"), len(model.layers), True, 64, 8192, 262_144, True)
