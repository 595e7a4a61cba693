"""vLLM's chunked-local-attention KV groups for Llama 4 (kvscope.plan.vllm_chunked).

Hand-worked from the public Scout config (48 layers, 8 KV heads x 128, ``attention_chunk_size``
8192; layer i chunked when (i + 1) % 4 != 0: 36 chunked, 12 full) and vLLM's rules: at TP4 a
layer keeps 2 heads x 256 x 2 B = 1,024 B a token, a 16-token page 16,384 B. With the hybrid
manager, ``layers_per_group`` (36 >= 1.5 x 12) gives groups of 12 layers: three chunked and
one full, a block of 12 pages = 196,608 B; without it one 48-layer group, 786,432 B. A request
needs ``cdiv(L, 16)`` full blocks plus ``cdiv(min(8192 + in-flight, L), 16)`` in each chunked
group (``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``); in flight: 8,192 at
0.19 (``max_num_batched_tokens``), 16,384 at 0.33 (two async batches).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import vllm_layout
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import SpeculativeDecoding
from kvscope.plan.vllm_chunked import chunked_span
from kvscope.specs.hardware import get_gpu

from .vl_configs import llama4_scout

MODEL = llama4_scout()


def _plan(version: str, length: int, blocks: int | None = None, **eng: Any) -> Any:
    e = EngineConfig(
        engine_version=version, max_model_len=length, num_gpu_blocks_override=blocks, **eng
    )
    return plan_memory(MODEL, get_gpu("H100"), Parallelism(tp=4), e)


def test_groups_three_chunked_one_full() -> None:
    layers = tuple(range(48))
    on = vllm_layout(MODEL, layers, "bfloat16", 4, 16, chunk=8192)
    assert [(g.kind, g.num_layers, g.window) for g in on.groups] == [
        ("chunked", 12, 8192),
        ("chunked", 12, 8192),
        ("chunked", 12, 8192),
        ("full", 12, None),
    ]
    assert on.block_bytes == 196_608
    off = vllm_layout(MODEL, layers, "bfloat16", 4, 16)
    assert [(g.kind, g.num_layers) for g in off.groups] == [("full", 48)]
    assert off.block_bytes == 786_432
    # the pool's history bytes are the simulator's full-history view either way
    assert on.bytes_per_token == off.bytes_per_token == 49_152


@pytest.mark.parametrize(
    ("version", "length", "per_request"),
    [
        ("0.19.0", 8_192, 2_048),  # 4 x 512: the chunk covers the whole request
        ("0.19.0", 131_072, 8_192 + 3 * 1_024),  # (8192 + 8192) / 16 per chunked group
        ("0.19.0", 1_048_576, 65_536 + 3 * 1_024),
        ("0.33.0", 8_192, 2_048),
        ("0.33.0", 131_072, 8_192 + 3 * 1_536),  # (8192 + 16384) / 16
        ("0.33.0", 1_048_576, 65_536 + 3 * 1_536),
    ],
)
def test_concurrency_counts_the_chunk(version: str, length: int, per_request: int) -> None:
    plan = _plan(version, length, blocks=10 * per_request)
    assert plan.num_kv_groups == 4
    assert plan.max_concurrency == pytest.approx(10.0)
    if version == "0.19.0":  # num_blocks // groups x block_size
        assert plan.kv_tokens == 10 * per_request // 4 * 16
    else:  # int(concurrency x max_model_len)
        assert plan.kv_tokens == 10 * length


@pytest.mark.parametrize(
    ("version", "length", "concurrency"),
    [
        # plan values, not log figures; 0.19's moved with the sampler phase read from the code
        # (kvscope.plan.sampler_phase: +0.03 GiB), which brings the logged start of this
        # model (llmd-llama4-scout-tp4) from 0.75 % to 0.57 % of its kv_tokens
        ("0.19.0", 8_192, 34.3696),  # unchanged: the chunk spans the request
        ("0.19.0", 131_072, 6.2490),  # 2.1481 as full history
        ("0.19.0", 1_048_576, 1.0260),  # 0.2685 as full history: would not start
        # 5.2329 until the 2.1 GiB non-torch figure stopped at 0.26.0 on NVSwitch parts
        ("0.33.0", 131_072, 6.0734),
    ],
)
def test_scout_tp4_h100_concurrency(version: str, length: int, concurrency: float) -> None:
    plan = _plan(version, length)
    assert plan.max_concurrency == pytest.approx(concurrency, abs=1e-4)
    assert plan.fits
    full = _plan(version, length, chunked_local_hybrid=False)
    assert full.num_kv_groups == 1
    if length == 8_192:
        assert full.max_concurrency == pytest.approx(concurrency, rel=1e-4)
    else:
        assert full.max_concurrency < concurrency / 2.5


@pytest.mark.parametrize(
    ("version", "given", "groups"),
    [
        ("0.11.0", None, 1),  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE "0"
        ("0.13.0", None, 1),
        ("0.14.0", None, 4),  # "1" from the 0.14.0 wheel
        ("0.34.0", None, 4),
        ("0.13.0", True, 4),  # the env var set to 1
        ("0.19.0", False, 1),  # =0, --disable-hybrid-kv-cache-manager, a KV connector
    ],
)
def test_release_switch(version: str, given: bool | None, groups: int) -> None:
    plan = _plan(version, 131_072, blocks=100_000, chunked_local_hybrid=given)
    assert plan.num_kv_groups == groups


def test_eagle_drafter_turns_it_off() -> None:
    def eng(method: str) -> EngineConfig:
        spec = SpeculativeDecoding(method=method, num_speculative_tokens=3, verify_tokens=4)
        return EngineConfig(engine_version="0.19.0", speculative=spec, chunked_local_hybrid=True)

    assert chunked_span(MODEL, eng("eagle3")) == 0
    assert chunked_span(MODEL, eng("ngram")) == 8192
    assert chunked_span(MODEL, EngineConfig(engine="sglang", engine_version="0.5.9")) == 0
