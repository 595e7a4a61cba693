"""DeepSeek V4's profiling workspace in vLLM 0.20-0.31, against the engine's own sizes.

The figures are the byte counts vLLM's code requests for DeepSeek-V4-Flash (CSA ratio 4,
index_head_dim 128, head_dim 512, window 128, index_topk 512), worked out by hand from
``get_max_prefill_buffer_size`` (40 x max_model_len), ``_gather_workspace_shapes``,
``RADIX_TOPK_WORKSPACE_SIZE`` (1 MiB), the FlashMLA dummy-run gather of
vllm/models/deepseek_v4/nvidia/flashmla.py and ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (512).
"""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.dsv4_workspace import dsv4_profile_workspace
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import offline_hub

MIB = 1 << 20


@pytest.fixture(scope="module")
def flash():  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model("deepseek-ai/DeepSeek-V4-Flash")


def test_the_indexer_gather_at_one_million_tokens(flash) -> None:  # type: ignore[no-untyped-def]
    ws = dsv4_profile_workspace(flash, EngineConfig(engine_version="0.26.0"), 1_048_576, 8192)
    assert ws is not None
    # 10,485,760 rows x (128 fp8 + 4 scale bytes) + 1 MiB radix top-k
    assert ws.indexer_gather == 1_342_177_280 + 41_943_040 + MIB
    # 4 x (262,144 + 128 + 8,192) x 512 bf16
    assert ws.attention_gather == 1_107_820_544
    assert ws.workspace == ws.indexer_gather
    assert ws.logits == 512 * MIB


def test_the_gather_gains_two_top_k_arrays_from_027(flash) -> None:  # type: ignore[no-untyped-def]
    ws = dsv4_profile_workspace(flash, EngineConfig(engine_version="0.27.0"), 1_048_576, 8192)
    assert ws is not None
    # + 8,192 x round_up(512 + 128, 128) int32 + 8,192 int32
    assert ws.attention_gather == 1_107_820_544 + 20_971_520 + 32_768


def test_a_short_context_and_an_fp4_indexer(flash) -> None:  # type: ignore[no-untyped-def]
    short = dsv4_profile_workspace(flash, EngineConfig(engine_version="0.26.0"), 121_344, 8192)
    assert short is not None
    # 1,213,440 rows x 132 B + 1 MiB (0.15 GiB)
    assert short.indexer_gather == 155_320_320 + 4_853_760 + MIB
    fp4 = dsv4_profile_workspace(
        flash, EngineConfig(engine_version="0.26.0", indexer_dtype="fp4"), 1_048_576, 8192
    )
    assert fp4 is not None
    # packed MXFP4: 64 B of values and 4 ue8m0 scale bytes a row
    assert fp4.indexer_gather == 671_088_640 + 41_943_040 + MIB


def test_no_v4_workspace_before_its_first_wheel_or_for_other_models(flash) -> None:  # type: ignore[no-untyped-def]
    assert (
        dsv4_profile_workspace(flash, EngineConfig(engine_version="0.19.0"), 1 << 20, 8192) is None
    )
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert dsv4_profile_workspace(llama, EngineConfig(), 131_072, 8192) is None


def test_a_longer_context_costs_v4_kv_budget_but_not_a_dense_model(flash) -> None:  # type: ignore[no-untyped-def]
    h200, par = get_gpu("H200"), Parallelism(tp=4)

    def kv(model, length: int) -> float:  # type: ignore[no-untyped-def]
        eng = EngineConfig(engine_version="0.26.0", max_model_len=length, kv_cache_dtype="fp8")
        return plan_memory(model, h200, par, eng).kv_cache_gib

    assert kv(flash, 1_048_576) < kv(flash, 262_144) - 0.5
    llama = load_model("meta-llama/Llama-3.1-70B")
    assert kv(llama, 131_072) == pytest.approx(kv(llama, 32_768))
