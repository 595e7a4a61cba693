"""vLLM ``--kv-transfer-config`` with LMCache (:mod:`kvscope.plan.kv_connector`): LMCache's GPU
staging buffer against the shapes LMCache itself logged, and the vllm#21348 start planned with
its connector."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.advice import command_line
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_connector import (
    LMCacheSettings,
    lmcache_settings,
    parse_kv_transfer,
    staging_buffer_bytes,
)
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, offline_hub, rel_err

H100 = get_gpu("H100")
#: The connector vllm#21348's command line passes.
THREAD = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
MIB = 2**20


def _model(name: str) -> ModelSpec:
    with offline_hub():
        return load_model(name)


def _plan(model: str, version: str, tp: int = 1, env: Any = None, **flags: Any) -> MemoryPlan:
    eng = EngineConfig(
        engine_version=version, kv_transfer=parse_kv_transfer(THREAD, env or {}), **flags
    )
    return plan_memory(_model(model), H100, Parallelism(tp=tp), eng)


def test_staging_buffer_has_the_shape_lmcache_logs_for_a_full_chunk() -> None:
    # The buffer is ``torch.empty(get_shape(chunk_size))`` and LMCache logs a full chunk's
    # memory object with the same ``get_shape``: LMCache#969 (vLLM 0.10.0,
    # Llama-3.1-8B-Instruct, TP1, bf16, chunk 256) prints torch.Size([2, 32, 256, 1024])
    # torch.bfloat16.
    model = _model("meta-llama/Llama-3.1-8B")
    got = staging_buffer_bytes(model, Parallelism(), "bfloat16", 32, LMCacheSettings())
    assert got == math.prod((2, 32, 256, 1024)) * 2


def test_mla_buffer_has_one_latent_row_per_token() -> None:
    # LMCache#842 (DeepSeek-V2-Lite-Chat, world_size 2, MLA): LMCacheEngineMetadata logs
    # kv_shape=(27, 1, 256, 1, 576) torch.bfloat16, use_mla=True.
    model = _model("deepseek-ai/DeepSeek-V2-Lite")
    got = staging_buffer_bytes(model, Parallelism(tp=2), "bfloat16", 27, LMCacheSettings())
    assert got == math.prod((27, 1, 256, 1, 576)) * 2


def test_settings_follow_lmcache_variables() -> None:
    model = _model("meta-llama/Llama-3.1-8B")
    lm = lmcache_settings({"LMCACHE_CHUNK_SIZE": "512", "LMCACHE_MAX_LOCAL_CPU_SIZE": "20"})
    assert staging_buffer_bytes(model, Parallelism(tp=2), "fp8", 32, lm) == (
        2 * 32 * 512 * 4 * 128  # fp8 cache: one byte; 8 KV heads over TP2
    )
    assert lm.max_local_cpu_size == 20.0
    assert lmcache_settings({"LMCACHE_ENABLE_NIXL": "True"}).enable_nixl
    nixl = lmcache_settings({"LMCACHE_ENABLE_NIXL": "1"})
    assert staging_buffer_bytes(model, Parallelism(), "bfloat16", 32, nixl) == 0
    layerwise = lmcache_settings({"LMCACHE_USE_LAYERWISE": "true"})
    assert staging_buffer_bytes(model, Parallelism(), "bfloat16", 32, layerwise) == 0


def test_gh21348_plans_the_same_pool_with_its_connector() -> None:
    # vllm#21348: 0.9.2, Qwen3-235B-A22B-FP8 TP4 with LMCacheConnectorV1 logged 178,880 tokens.
    # 0.9.2 builds the 2 x 94 x 256 x 128 bf16 buffer after the memory snapshot as torch
    # memory, so no term of its KV figure holds it: the pool, and the row's miss, stay.
    case = case_by_id("gh21348-vllm")
    bare = case.plan()
    with_lmcache = case.plan(kv_transfer=parse_kv_transfer(THREAD))
    assert with_lmcache.kv_tokens == bare.kv_tokens
    assert rel_err(with_lmcache.kv_tokens, 178_880) > 0.05
    assert any("11.75 MiB GPU staging buffer" in n for n in with_lmcache.notes)
    assert any("charges the buffer to no term" in n for n in with_lmcache.notes)
    assert with_lmcache.warnings == bare.warnings


def test_vllm_090_charges_the_buffer_and_the_plan_says_so() -> None:
    plan = _plan("meta-llama/Llama-3.1-8B", "0.9.0")
    assert any("32.00 MiB buffer to its profiled peak" in w for w in plan.warnings)


def test_layerwise_notes_one_layer_of_the_pool() -> None:
    plan = _plan("meta-llama/Llama-3.1-8B", "0.9.2", env={"LMCACHE_USE_LAYERWISE": "1"})
    layer_mib = plan.kv_cache_gib * 1024 / 32
    assert any(f"({layer_mib:.1f} MiB)" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "is not JSON"),
        ("[]", "must be a JSON object"),
        ('{"kv_role":"kv_both"}', 'needs "kv_connector"'),
        ('{"kv_connector":"NixlConnector","kv_role":"kv_both"}', "is not modelled"),
        ('{"kv_connector":"LMCacheConnectorV1"}', '"kv_role" must be one of'),
    ],
)
def test_bad_configs_are_refused(text: str, words: str) -> None:
    with pytest.raises(KvscopeError, match=words):
        parse_kv_transfer(text)


def test_bad_lmcache_variables_are_refused() -> None:
    with pytest.raises(KvscopeError, match="LMCACHE_CHUNK_SIZE='x' is not an integer"):
        parse_kv_transfer(THREAD, {"LMCACHE_CHUNK_SIZE": "x"})
    with pytest.raises(KvscopeError, match="must be positive"):
        parse_kv_transfer(THREAD, {"LMCACHE_MAX_LOCAL_CPU_SIZE": "-1"})


def test_refused_where_the_plan_cannot_follow() -> None:
    kv = parse_kv_transfer(THREAD)
    with pytest.raises(KvscopeError, match="is a vLLM setting"):
        EngineConfig(engine="sglang", kv_transfer=kv)
    with pytest.raises(KvscopeError, match="V1 connector"):
        _plan("meta-llama/Llama-3.1-8B", "0.8.2")
    with pytest.raises(KvscopeError, match="has sliding layers"):
        _plan("openai/gpt-oss-20b", "0.10.1")
    with pytest.raises(KvscopeError, match="layerwise MLA"):
        _plan("deepseek-ai/DeepSeek-V2-Lite", "0.9.2", env={"LMCACHE_USE_LAYERWISE": "1"})


def test_serve_line_passes_the_connector() -> None:
    model = _model("meta-llama/Llama-3.1-8B")
    eng = EngineConfig(engine_version="0.9.2", kv_transfer=parse_kv_transfer(THREAD))
    plan = plan_memory(model, H100, Parallelism(), eng)
    line = command_line("meta-llama/Llama-3.1-8B", plan, eng, Parallelism())
    assert line.endswith(
        """--kv-transfer-config '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'"""
    )
