"""KV layout: page sizes, groups and DeepSeek V4 block strides against published figures."""

from __future__ import annotations

import math

import pytest

from kvscope.plan.kv_layout import vllm_layout
from kvscope.specs.registry import load_model

FLASH = load_model("deepseek-ai/DeepSeek-V4-Flash")
PRO = load_model("deepseek-ai/DeepSeek-V4-Pro")


@pytest.mark.parametrize(
    ("model", "indexer", "release", "stride"),
    # vLLM's DeepSeek V4 KV specs (vllm/v1/kv_cache_interface.py): the widest group from 0.27,
    # the MLA pages x 22 / 31 layer tuples of 0.21-0.22 (vllm/v1/core/kv_cache_utils.py).
    [
        (FLASH, "fp8", (0, 31, 0), 1_002_240),
        (FLASH, "fp4", (0, 31, 0), 917_568),
        (PRO, "fp8", (0, 31, 0), 1_435_968),
        (PRO, "fp4", (0, 31, 0), 1_315_008),
        # up to 0.26 the MXFP4 indexer cache is allocated at fp8's 132 bytes a token
        # (k_cache_head_dim, vllm/models/deepseek_v4/attention.py of 0.26.0): fp8's stride
        (FLASH, "fp4", (0, 26, 0), 1_039_680),
        (FLASH, "fp8", (0, 26, 0), 1_039_680),
        (FLASH, "fp8", (0, 22, 0), 1_051_776),
        (PRO, "fp8", (0, 22, 0), 1_482_048),
    ],
)
def test_dsv4_block_stride(model, indexer: str, release: tuple[int, int, int], stride: int) -> None:  # type: ignore[no-untyped-def]
    layers = tuple(range(model.num_layers))
    lay = vllm_layout(model, layers, "fp8", 8, 256, indexer, release=release)
    assert lay.block_bytes == stride
    assert len(lay.groups) == 5


@pytest.mark.parametrize(
    ("t", "f"), [(1024, 442), (2048, 858), (4096, 1690), (8192, 3354), (16384, 6682)]
)
def test_dsv4_window_blocks_per_request(t: int, f: int) -> None:
    lay = vllm_layout(FLASH, tuple(range(43)), "fp8", 1, 256)
    length = 1 << 20
    assert lay.blocks_per_request(length, t) - math.ceil(length / 256) == f
    # Steady decode (one token in flight) holds ceil(L/256) + 26 blocks (§4.4).
    assert lay.blocks_per_request(66_343, 1) == 286


def test_gh200_one_request_need_matches_the_logged_error() -> None:
    # vllm#44376: old stride, L = 30,000, T = 16,384 -> "6.66 GiB KV cache is needed".
    lay = vllm_layout(FLASH, tuple(range(43)), "fp8", 2, 256, release=(0, 22, 0))
    need = lay.blocks_per_request(30_000, 16_384) * lay.block_bytes / (1 << 30)
    assert round(need, 2) == 6.66


def test_gqa_page_follows_kv_heads_per_rank() -> None:
    qwen = load_model("Qwen/Qwen2.5-7B-Instruct")  # 4 KV heads
    layers = tuple(range(qwen.num_layers))
    tp1 = vllm_layout(qwen, layers, "bfloat16", 1, 16)
    tp4 = vllm_layout(qwen, layers, "bfloat16", 4, 16)
    tp8 = vllm_layout(qwen, layers, "bfloat16", 8, 16)
    assert tp1.bytes_per_token == 28 * 2 * 4 * 128 * 2
    assert tp4.bytes_per_token == tp1.bytes_per_token / 4
    assert tp8.bytes_per_token == tp4.bytes_per_token  # one head replicated per rank


def test_gpt_oss_forms_two_groups_of_equal_pages() -> None:
    oss = load_model("openai/gpt-oss-120b")
    lay = vllm_layout(oss, tuple(range(oss.num_layers)), "bfloat16", 1, 16)
    assert [g.kind for g in lay.groups] == ["sliding", "full"]
    assert lay.block_bytes == 16 * 8 * 64 * 2 * 2 * 18


@pytest.mark.parametrize(("mode", "need"), [("none", 66), ("align", 69), ("all", 63 + 3 * 63)])
def test_hybrid_state_blocks_follow_the_mamba_cache_mode(mode: str, need: int) -> None:
    """vLLM ``MambaSpec.max_memory_usage_bytes`` (vllm/v1/kv_cache_interface.py at v0.24.0):
    one state page per request in ``none``, ``2 + spec blocks`` in ``align`` (what
    ``--enable-prefix-caching`` selects for Qwen3.5), a page per block of tokens in ``all``.
    Qwen3.6-35B-A3B at fp8 KV: 10 attention + 30 Gated DeltaNet layers, 2,096-token blocks of
    2,146,304 B (the fp32 recurrent state), one attention and three state groups."""
    from .log_cases import offline_hub

    with offline_hub():
        model = load_model("nvidia/Qwen3.6-35B-A3B-NVFP4")
    lay = vllm_layout(model, tuple(range(model.num_layers)), "fp8", 1, 16, mamba_cache_mode=mode)
    assert lay.block_size == 2096
    assert lay.block_bytes == 10 * 2_146_304
    assert lay.blocks_per_request(131_072, 8192) == need


def test_align_mode_reproduces_the_logged_hybrid_capacity() -> None:
    """noonghunna/club-3090#612 (vLLM 0.24.0, RTX 5090, --enable-prefix-caching, fp8 KV):
    'Available KV cache memory: 5.98 GiB', 'GPU KV cache size: 567,978 tokens', 4.33x at
    131,072. 5.98 GiB holds 299 blocks; 299 x 131,072 / 69 = 567,978 (align), not the
    593,798 one state block per group would report."""
    from kvscope.plan.vllm_budget import VllmDefaults, logged_capacity

    from .log_cases import offline_hub

    with offline_hub():
        model = load_model("nvidia/Qwen3.6-35B-A3B-NVFP4")
    lay = vllm_layout(model, tuple(range(model.num_layers)), "fp8", 1, 16, mamba_cache_mode="align")
    blocks = int(5.98 * 2**30 // lay.block_bytes)
    assert blocks == 299
    defaults = VllmDefaults(0.9, 131_072, 8192, 1, 2096, cudagraph_subtracted=True)
    tokens, concurrency = logged_capacity(lay, blocks, defaults, (0, 24, 0))
    assert tokens == 567_978
    assert round(concurrency, 2) == 4.33


def test_pre_mla_deepseek_v2_keeps_padded_heads() -> None:
    """vLLM < 0.7.1 cached DeepSeek V2 as 16 local heads x 256-padded K and V (fp16).

    Published figure (vllm PR #10927, "Before" run, one H100): 35.42 GiB for the KV cache
    gave ``# GPU blocks: 5373`` at block size 16; the MLA latent (576 elements) would give
    about 14x more blocks, so the test fails if the old layout is not applied.
    """
    lite = load_model("deepseek-ai/DeepSeek-V2-Lite")
    layers = tuple(range(lite.num_layers))
    old = vllm_layout(lite, layers, "float16", 1, 16, mla_as_heads=True)
    new = vllm_layout(lite, layers, "float16", 1, 16)
    assert old.block_bytes == 16 * 27 * 2 * 16 * 256 * 2
    assert int(35.42 * 2**30 // old.block_bytes) == 5373
    assert int(35.42 * 2**30 // new.block_bytes) > 14 * 5373
