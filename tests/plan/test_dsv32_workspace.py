"""DeepSeek V3.2's profiling workspace in vLLM 0.13-0.27, against the engine's own sizes.

Two figures are vLLM's own comments: ``get_max_prefill_buffer_size``
(vllm/v1/attention/backends/mla/indexer.py, 0.13.0-0.27.0) gives
"40 * 163840 * 132 = 865075200 bytes" for DeepSeek-V3.2, and ``get_prefill_workspace_size``
(vllm/v1/attention/backends/mla/flashmla_sparse.py) gives "5 * 163840 * 576 * 2". The others
are the shapes the wheels request: ``q_concat`` (max_num_batched_tokens x local heads x 576
bf16, 0.18.0 on), ``RADIX_TOPK_WORKSPACE_SIZE`` (1 MiB, 0.20.0 on) and
``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (512, 0.19.0 on).
"""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.dsv4_buffers import dsv4_buffer_bytes
from kvscope.plan.dsv4_workspace import (
    ProfileWorkspace,
    dsv4_profile_workspace,
    dsv32_profile_workspace,
)
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import offline_hub

MIB = 1 << 20
#: DeepSeek-V3.2's max_model_len (config.json max_position_embeddings)
LENGTH = 163_840


@pytest.fixture(scope="module")
def v32():  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model("deepseek-ai/DeepSeek-V3.2")


def _ws(model, version: str, kv: str = "fp8_ds_mla", tp: int = 8):  # type: ignore[no-untyped-def]
    ws = dsv32_profile_workspace(model, EngineConfig(engine_version=version), kv, tp, LENGTH, 8192)
    assert ws is not None
    return ws


def test_the_engine_comments_byte_counts_at_0_13(v32) -> None:  # type: ignore[no-untyped-def]
    ws = _ws(v32, "0.13.0")
    assert ws.indexer_gather == 865_075_200
    assert ws.attention_gather == 5 * 163_840 * 576 * 2
    # the FlashMLA-sparse prefill workspace is the larger request: it sizes the buffer
    assert ws.workspace == 943_718_400
    assert ws.logits == 0


def test_each_release_adds_its_own_request(v32) -> None:  # type: ignore[no-untyped-def]
    q_concat = 8192 * (128 // 8) * 576 * 2  # 150,994,944 B at TP8
    assert _ws(v32, "0.17.0").attention_gather == 943_718_400
    assert _ws(v32, "0.18.0").attention_gather == 943_718_400 + q_concat
    assert _ws(v32, "0.18.0").logits == 0
    assert _ws(v32, "0.19.0").logits == 512 * MIB
    assert _ws(v32, "0.19.0").indexer_gather == 865_075_200
    assert _ws(v32, "0.20.0").indexer_gather == 865_075_200 + MIB


def test_a_bf16_cache_has_no_prefill_workspace(v32) -> None:  # type: ignore[no-untyped-def]
    assert _ws(v32, "0.17.0", kv="bfloat16").attention_gather == 0
    # q_concat alone at TP1 (128 heads), so the indexer's gather sizes the buffer
    ws = _ws(v32, "0.20.0", kv="bfloat16", tp=1)
    assert ws.attention_gather == 8192 * 128 * 576 * 2
    assert ws.workspace == ws.attention_gather


def test_no_v32_workspace_before_the_manager_or_for_other_models(v32) -> None:  # type: ignore[no-untyped-def]
    eng = EngineConfig(engine_version="0.12.0")
    assert dsv32_profile_workspace(v32, eng, "fp8_ds_mla", 8, LENGTH, 8192) is None
    with offline_hub():
        v3 = load_model("deepseek-ai/DeepSeek-V3")
        flash = load_model("deepseek-ai/DeepSeek-V4-Flash")
    assert dsv32_profile_workspace(v3, EngineConfig(), "fp8_ds_mla", 8, LENGTH, 8192) is None
    assert dsv32_profile_workspace(flash, EngineConfig(), "fp8_ds_mla", 8, LENGTH, 8192) is None
    # and V4's own rule leaves V3.2 alone
    assert dsv4_profile_workspace(v32, EngineConfig(), LENGTH, 8192) is None


def test_the_top_k_buffer_at_load(v32) -> None:  # type: ignore[no-untyped-def]
    # DeepseekV2Model's topk_indices_buffer: 8,192 x 2,048 int32 = 64 MiB
    assert dsv4_buffer_bytes(v32, EngineConfig(), 8192, last_stage=True) == 64 * MIB


def test_the_kv_budget_by_context_and_release(v32) -> None:  # type: ignore[no-untyped-def]
    h200 = get_gpu("H200")

    def kv(par: Parallelism, version: str, length: int) -> float:
        eng = EngineConfig(engine_version=version, max_model_len=length, kv_cache_dtype="fp8")
        return plan_memory(v32, h200, par, eng).kv_cache_gib

    tp8 = Parallelism(tp=8)
    # Up to 0.17 the MoE scratch outgrows the 0.88 GiB prefill workspace at TP8, and the impl's
    # views keep the load-time buffer: the prefill workspace is not "free" (the engine's
    # comment) but costs its 0.88 GiB less the 16K one's 0.09 GiB
    drop = kv(tp8, "0.17.0", 16_384) - kv(tp8, "0.17.0", LENGTH)
    assert drop == pytest.approx((943_718_400 - 94_371_840) / 2**30, abs=0.02)
    # from 0.18 q_concat joins the load-time request (8,192 x 16 heads x 576 bf16, 0.14 GiB);
    # the MoE scratch, 8,192 x 8 routed copies x (7,168 + 7,168) bf16 = 1.75 GiB at TP8
    # (a rank's 256-wide expert slice is padded to the hidden size by the buffer shapes,
    # kvscope.plan.activation.moe_scratch_width), still outgrows the 1.02 GiB request at
    # 163,840, so it comes on top at both lengths and the drop is the prefill workspace's
    drop = kv(tp8, "0.20.0", 16_384) - kv(tp8, "0.20.0", LENGTH)
    assert drop == pytest.approx((943_718_400 - 94_371_840) / 2**30, abs=0.02)


def test_rocm_gpus_keep_their_unread_path(v32) -> None:  # type: ignore[no-untyped-def]
    # the rule models FLASHMLA_SPARSE (CUDA); ROCm's sparse-MLA backend is not read
    mi300x, par = get_gpu("MI300X"), Parallelism(tp=8)

    def kv(length: int) -> float:
        eng = EngineConfig(engine_version="0.20.0", max_model_len=length, kv_cache_dtype="fp8")
        return plan_memory(v32, mi300x, par, eng).kv_cache_gib

    assert kv(16_384) == pytest.approx(kv(LENGTH), abs=1e-6)


def test_a_larger_later_request_comes_on_top_of_the_held_one() -> None:
    held = ProfileWorkspace(865_075_200.0, 943_718_400.0, 0.0, attention_held=True)
    # a MoE request above the held 943,718,400 B: a second buffer beside it
    assert held.held_with(1_000_000_000.0) == 943_718_400 + 1_000_000_000
    # below it: the manager reuses the load-time buffer
    assert held.held_with(500_000_000.0) == 943_718_400
    # V4's requests are all made in the pass: the largest one alone
    v4 = ProfileWorkspace(865_075_200.0, 943_718_400.0, 0.0)
    assert v4.held_with(1_000_000_000.0) == 1_000_000_000
