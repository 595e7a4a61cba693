"""DeepSeek V4's vLLM KV pool by release (kvscope.plan.dsv4_pool) against logged start-ups.

The logged figures are integers the engine derives from an integer block count, so a rule is
pinned when some block count inside the logged "Available KV cache memory" (rounded to 0.01
GiB) reproduces the logged "GPU KV cache size" to the token.
"""

from __future__ import annotations

import pytest

from kvscope.plan.kv_layout import KVLayout, vllm_layout
from kvscope.plan.vllm_budget import REPORT_COUNTS_BLOCKS_SINCE
from kvscope.specs.hardware import GIB
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

FLASH = load_model("deepseek-ai/DeepSeek-V4-Flash")
LAYERS = tuple(range(43))


def flash(release: tuple[int, int, int], drafter_layers: int = 0) -> KVLayout:
    return vllm_layout(
        FLASH, LAYERS, "fp8", 2, 256, "fp8", release=release, draft_window_layers=drafter_layers
    )


def reproduces(
    lay: KVLayout, gib: float, length: int, in_flight: int, tokens: int, by_bytes: bool
) -> bool:
    """Some block count inside ``gib`` +- 0.005 GiB gives the logged ``tokens`` exactly."""
    need = lay.reported_blocks_per_request(length, in_flight, by_bytes)
    lo = int((gib - 0.005) * GIB) // lay.block_bytes
    hi = int((gib + 0.005) * GIB) // lay.block_bytes
    return any(int(nb / need * length) == tokens for nb in range(lo, hi + 1))


@pytest.mark.parametrize(
    ("release", "drafter_layers", "stride"),
    # vllm/v1/core/kv_cache_utils.py: 0.22.0 MLA pages (47,808) x the longest layer list
    # (22, 23 with DSpark's three window-only stages); 0.23.0-0.26.0 each padded page class x
    # its most slots in one group (22 or 23 x 37,440 + 21 x 8,640 + 20 x 1,728); 0.27.0+ the
    # widest group, the MLA one, whatever the drafter. The same figures came out of the
    # 0.22.0, 0.23.0, 0.25.0, 0.27.0 and 0.31.0 wheels' own grouping code run on CPU.
    [
        ((0, 22, 0), 0, 1_051_776),
        ((0, 22, 0), 1, 1_051_776),
        ((0, 22, 0), 3, 1_099_584),
        ((0, 23, 0), 0, 1_039_680),
        ((0, 25, 0), 1, 1_039_680),
        ((0, 26, 0), 3, 1_077_120),
        ((0, 27, 0), 3, 1_002_240),
        ((0, 31, 0), 0, 1_002_240),
        ((0, 31, 0), 3, 1_002_240),
    ],
)
def test_block_stride_by_release_and_drafter(
    release: tuple[int, int, int], drafter_layers: int, stride: int
) -> None:
    assert flash(release, drafter_layers).block_bytes == stride


@pytest.mark.parametrize(
    ("drafter_layers", "halves"), [(0, [22, 21]), (1, [22, 22]), (3, [23, 23])]
)
def test_drafter_window_layers_join_the_window_halves(
    drafter_layers: int, halves: list[int]
) -> None:
    for release in ((0, 22, 0), (0, 25, 0), (0, 31, 0)):
        lay = flash(release, drafter_layers)
        assert [g.num_layers for g in lay.groups if g.kind == "dsv4_swa"] == halves
        assert len(lay.groups) == 5


def test_rtx_pro_6000_0_25_mtp_start_to_the_token() -> None:
    # Stock vLLM 0.25.0, V4-Flash + MTP k=2 on 2x RTX PRO 6000 (TP2, 1,048,576, 4,096 batched
    # tokens): "Available KV cache memory: 10.29 GiB", "GPU KV cache size: 1,993,100 tokens",
    # 1.90x (row ghlog-2xrtxpro6000-v4flash-1m-mtp2-0.25). Only the 0.25 stride with the
    # page-weighted report reproduces it: cdiv(sum of blocks x group pages, MLA page) = 5,593.
    lay = flash((0, 25, 0), 1)
    assert lay.reported_blocks_per_request(1 << 20, 4096, True) == 5593
    assert reproduces(lay, 10.29, 1 << 20, 4096, 1_993_100, by_bytes=True)
    assert not reproduces(lay, 10.29, 1 << 20, 4096, 1_993_100, by_bytes=False)
    assert not reproduces(flash((0, 31, 0), 1), 10.29, 1 << 20, 4096, 1_993_100, by_bytes=False)


def test_h20_0_26_mtp_start_to_the_token() -> None:
    # vllm#51041: V4-Flash-0731 + MTP on 2x H20, vLLM 0.26.0, 7.71 GiB, 150,992 tokens at
    # 121,344 (1.24x); 0.26 reserves two batches of 8,192 in flight under async scheduling.
    lay = flash((0, 26, 0), 1)
    assert reproduces(lay, 7.71, 121_344, 16_384, 150_992, by_bytes=True)
    assert not reproduces(lay, 7.71, 121_344, 16_384, 150_992, by_bytes=False)


def test_h100_0_31_start_counts_blocks() -> None:
    # tant2tls/Deepseek-serving blog-architecture-h100-v1: V4-Flash-0731, vLLM 0.31.1, 8x H100
    # TP8, 47.43 GiB, 1,728,531 tokens at 262,144 (6.59x): from 0.27 the report counts blocks.
    lay = flash((0, 31, 0))
    assert REPORT_COUNTS_BLOCKS_SINCE <= (0, 31, 1)
    assert lay.reported_blocks_per_request(262_144, 16_384, False) == 7706
    assert reproduces(lay, 47.43, 262_144, 16_384, 1_728_531, by_bytes=False)
    # DSpark's three window-only stages leave the 0.31 stride and report unchanged
    with_stages = flash((0, 31, 0), 3)
    assert with_stages.block_bytes == lay.block_bytes
    assert with_stages.reported_blocks_per_request(262_144, 16_384, False) == 7706


@pytest.mark.parametrize(
    ("release", "drafter_layers", "per_block"),
    # ``_max_memory_usage_bytes_from_groups`` (vllm/v1/core/kv_cache_utils.py): up to 0.28 the
    # MLA pages' sum (47,808) x the most layer tuples of a group (22, 23 with DSpark), whatever
    # the pool's stride; from 0.29 the pool's bytes per block. 0.22 GH200 check above: 6.66 GiB.
    [((0, 25, 0), 1, 1_051_776), ((0, 27, 0), 3, 1_099_584), ((0, 31, 0), 3, 1_002_240)],
)
def test_admission_check_bytes_per_block(
    release: tuple[int, int, int], drafter_layers: int, per_block: int
) -> None:
    lay = flash(release, drafter_layers)
    assert lay.request_bytes(30_000, 16_384) == lay.blocks_per_request(30_000, 16_384) * per_block


def test_0_25_start_refused_by_the_admission_check_despite_the_report() -> None:
    # With 5.55 GiB left, 0.25's report would say 1.02x (5,731 blocks over 5,593 weighted per
    # 1M request) but its admission check needs 5,786 blocks x 1,051,776 B = 5.67 GiB: refused.
    case = case_by_id("ghlog-2xrtxpro6000-v4flash-1m-mtp2-0.25")
    plan = case.plan(kv_cache_memory_bytes=int(5.55 * GIB))
    assert plan.max_concurrency > 1.0
    assert not plan.fits
    assert "5.67 GiB" in (plan.problem or "")
    assert case.plan(kv_cache_memory_bytes=int(5.70 * GIB)).fits
