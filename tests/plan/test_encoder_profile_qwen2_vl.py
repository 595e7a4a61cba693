"""vLLM's multimodal profiling pass for Qwen2-VL / Qwen2.5-VL (kvscope.plan.encoder_profile,
kvscope.plan.vit_peak) against the engine's code and a published start-up log.

The log (row ``a100-qwen25vl7b-v023-gmu022-refused``: Qwen2.5-VL-7B, vLLM 0.23.0, one
A100-SXM4-80GB, max model len 128000 by default, --gpu-memory-utilization 0.22) prints
"Encoder cache will be initialized with a budget of 114688 tokens, and profiled with 1 video
items of the maximum feature size" and "Available KV cache memory: -14.28 GiB": the tower's pass
over a 14-frame 3584 x 3584 px video is what leaves the pool 14 GiB short.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.plan.encoder_profile import encoder_profile, phase_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

CONFIGS = Path(__file__).parent / "data" / "configs"
V023 = (0, 23, 0)
GIB = 2**30


@pytest.fixture(scope="module")
def q25():
    return load_model(str(CONFIGS / "qwen2.5-vl-7b-instruct.json"))


@pytest.fixture(scope="module")
def q2():
    return load_model(str(CONFIGS / "qwen2-vl-2b-instruct.json"))


def test_the_log_line_at_the_default_context(q25) -> None:
    p = encoder_profile(q25, V023, 128_000, 2048, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("video", 114_688, 1, 114_688)
    # 7 temporal pairs of 128 x 128 merged patches of 2 x 2; 3 x 2 x 14 x 14 values a patch
    assert p.patches == 458_752
    assert p.pixel_bytes == 458_752 * 1176 * 2


@pytest.mark.parametrize(
    ("max_model_len", "rows"),
    [(8192, 16_384), (16_384, 16_384), (32_768, 32_768), (50_000, 49_152), (1_000_000, 114_688)],
)
def test_video_frames_follow_the_context_up_to_14(q25, max_model_len: int, rows: int) -> None:
    p = encoder_profile(q25, V023, max_model_len, 2048, 256)
    assert p is not None and p.rows == rows


def test_a_tie_goes_to_video_from_019_and_to_image_before(q25) -> None:
    new = encoder_profile(q25, V023, 8192, 8192, 256)
    old = encoder_profile(q25, (0, 15, 0), 8192, 8192, 256)
    assert new is not None and old is not None
    assert (new.modality, old.modality) == ("video", "image")
    assert new.kept_bytes == old.kept_bytes


def test_a_zero_video_limit_profiles_one_image(q25) -> None:
    p = encoder_profile(q25, V023, 128_000, 2048, 256, limits=(("video", 0),))
    assert p is not None
    assert (p.modality, p.rows, p.patches) == ("image", 16_384, 65_536)


def test_the_output_is_the_text_width(q25, q2) -> None:
    p25 = encoder_profile(q25, V023, 16_384, 16_384, 256)
    p2 = encoder_profile(q2, V023, 16_384, 16_384, 256)
    assert p25 is not None and p2 is not None
    # V1 keeps the raw output (rows x text width) and the pixel values, bf16
    assert p25.kept_bytes == 16_384 * 3584 * 2 + p25.pixel_bytes
    assert p2.kept_bytes == 16_384 * 1536 * 2 + p2.pixel_bytes


def test_releases_not_read_are_not_modelled(q25, q2) -> None:
    assert encoder_profile(q25, (0, 35, 0), 128_000, 2048, 256) is None
    assert encoder_profile(q2, (0, 11, 0), 128_000, 2048, 256) is None  # its 0.11 tower


def test_at_011_the_image_wins_the_tie_and_is_expanded_to_the_budget(q25) -> None:
    """0.11.0 keeps the first modality on a tie (``key=lambda x: x[1]``): the Ray Data log
    prints "budget of 16384 tokens, and profiled with 1 image items"; a larger batch budget
    copies the output into a zeroed (budget, width) tensor."""
    p = encoder_profile(q25, (0, 11, 0), 8192, 2048, 256)
    assert p is not None and (p.modality, p.budget_tokens, p.items) == ("image", 16_384, 1)
    wide = encoder_profile(q25, (0, 11, 0), 8192, 32_768, 256)
    assert wide is not None and wide.items == 2
    assert wide.kept_bytes - wide.pixel_bytes == 2 * (16_384 + 32_768) * 3584 * 2


def test_011_rotates_in_float32(q25) -> None:
    """0.11.0's attention peaks at 2 + 18 rows of the width a patch (float32 q+k and its
    rotated copy), above its MLP's 5 x 1280 + 3 x 3420."""
    a100 = get_gpu("a100-sxm-80gb")
    p = encoder_profile(q25, (0, 11, 0), 8192, 2048, 256)
    assert p is not None
    peak = phase_bytes(q25, p, a100, 1, (0, 11, 0)) - p.pixel_bytes
    assert peak == 65_536 * (80 + 20 * 1280) * 2


def test_the_swiglu_tower_peaks_higher_than_the_gelu_one(q25, q2) -> None:
    """Same 32 x 1280 blocks: Qwen2.5-VL holds 5 x 1280 + 3 x 3420 rows a patch in its MLP,
    Qwen2-VL 3 x 1280 + 5120 (both above attention's 11 x 1280), plus the rotary tables."""
    a100 = get_gpu("a100-sxm-80gb")
    p25 = encoder_profile(q25, V023, 16_384, 16_384, 256)
    p2 = encoder_profile(q2, V023, 16_384, 16_384, 256)
    peak25 = phase_bytes(q25, p25, a100, 1, V023) - p25.pixel_bytes
    peak2 = phase_bytes(q2, p2, a100, 1, V023) - p2.pixel_bytes
    assert peak25 == 65_536 * (80 + 5 * 1280 + 3 * 3420) * 2
    assert peak2 == 65_536 * (80 + max(11 * 1280, 2 * 1280 + 2 * 5120, 3 * 1280 + 5120)) * 2


def test_the_ray_data_l4_start_is_planned_within_two_percent() -> None:
    case = case_by_id("raydata-l4-qwen25vl3b-0.11.0")
    assert abs(case.plan().kv_tokens / 269_568 - 1) < 0.02


def test_the_refused_a100_start_is_planned_short_by_as_much() -> None:
    case = case_by_id("a100-qwen25vl7b-v023-gmu022-refused")
    plan = case.plan()
    assert not plan.fits
    assert abs(plan.kv_cache_gib - (-14.28)) < 0.5
