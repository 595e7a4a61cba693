"""vLLM V1's multimodal profiling pass before 0.11 for Qwen2.5-VL (kvscope.plan.encoder_profile_v08)
against two published start-up logs and the engine's code at 0.8.2 and 0.9.0.1.

Logs: ``kserve-l4-qwen25vl7b-0.9.0.1`` (one L4, max model len 2048, every input logged: "Encoder
cache will be initialized with a budget of 16384 tokens, and profiled with 1 image items of the
maximum feature size", "Available KV cache memory: 1.81 GiB", 33,824 tokens) and
``qwen3vl1057-h100-qwen25vl7b-0.8.2`` (QwenLM/Qwen3-VL#1057, one H100, LLM() with 10 images and
10 videos a prompt: the same budget line, 905,648 tokens).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.plan.encoder_profile import encoder_profile, phase_bytes
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

CONFIGS = Path(__file__).parent / "data" / "configs"
V082, V090 = (0, 8, 2), (0, 9, 0)
README_LIMITS = (("image", 10), ("video", 10))
#: one dummy image: 128 x 128 merged patches of 2 x 2, each 3 x 2 x 14 x 14 pixel values
PATCHES, VALUES = 65_536, 1176


@pytest.fixture(scope="module")
def q25():
    return load_model(str(CONFIGS / "qwen2.5-vl-7b-instruct.json"))


def test_the_kserve_l4_log_line(q25) -> None:
    p = encoder_profile(q25, V090, 2048, 2048, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("image", 16_384, 1, 16_384)
    assert p.pixel_bytes == PATCHES * VALUES * 2  # as_kwargs casts to the model dtype


def test_the_qwen3vl_1057_log_line_keeps_float32_pixels(q25) -> None:
    p = encoder_profile(q25, V082, 128_000, 16_384, 1024, README_LIMITS)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items) == ("image", 16_384, 1)
    assert p.pixel_bytes == PATCHES * VALUES * 4  # moved as the processor made them


def test_a_video_with_more_rows_is_not_modelled(q25) -> None:
    """0.8.2 counts the configured limits (1 where unnamed): at 128,000 tokens one video holds
    12 frames (98,304 rows) and is profiled instead; 0.9.0.1 counts one item a modality, so the
    video outgrows the image from 49,152 tokens (3 frames)."""
    assert encoder_profile(q25, V082, 128_000, 16_384, 1024) is None
    assert encoder_profile(q25, V090, 49_152, 2048, 256) is None
    p = encoder_profile(q25, V090, 49_151, 2048, 256)
    assert p is not None and p.modality == "image"
    assert encoder_profile(q25, V090, 2048, 2048, 256, (("image", 0),)) is None


def test_items_round_the_budget_up(q25) -> None:
    """``cdiv(budget, tokens an item)`` before 0.11 (0.11's MultiModalBudget floors it)."""
    p = encoder_profile(q25, V090, 8192, 20_000, 256)
    assert p is not None and (p.budget_tokens, p.items) == (20_000, 2)
    floor = encoder_profile(q25, (0, 11, 0), 8192, 20_000, 256)
    assert floor is not None and floor.items == 1


def test_the_0_8_2_tower_peaks_above_0_9(q25) -> None:
    """0.8.2's torch rotary holds 16 rows of the width a patch against 0.9.0.1's Triton rotary's
    13, and its float32 pixel values get a model-dtype copy while the tower runs."""
    l4 = get_gpu("l4")
    new = encoder_profile(q25, V090, 2048, 2048, 256)
    old = encoder_profile(q25, V082, 2048, 2048, 256, README_LIMITS)
    assert new is not None and old is not None
    tower_new = phase_bytes(q25, new, l4, 1, V090) - new.pixel_bytes
    tower_old = phase_bytes(q25, old, l4, 1, V082) - old.pixel_bytes
    extra_rows = tower_old - tower_new - PATCHES * VALUES * 2
    assert extra_rows / (PATCHES * 1280 * 2) == pytest.approx(3.25, abs=0.01)


def test_xformers_runs_on_every_cuda_gpu_but_tp_and_rocm_are_not_modelled(q25) -> None:
    """``get_vit_attn_backend`` takes xFormers below compute capability 8.0 too (T4); the
    tensor-parallel ViT and ROCm are not read."""
    p = encoder_profile(q25, V090, 2048, 2048, 256)
    assert p is not None
    t4, l4 = get_gpu("t4"), get_gpu("l4")
    assert phase_bytes(q25, p, t4, 1, V090) == phase_bytes(q25, p, l4, 1, V090) > 2 * GIB
    assert phase_bytes(q25, p, l4, 2, V090) == 0.0
    assert phase_bytes(q25, p, get_gpu("mi300x"), 1, V090) == 0.0


def test_the_kserve_l4_start_loads_the_logged_weights() -> None:
    # "Model loading took 15.6271 GiB": the checkpoint plus M-RoPE's four rotary folds
    # (kvscope.plan.mrope_buffers). The pool (1.81 GiB logged) is planned ~0.1 GiB short:
    # the H100 non-torch figure on an L4 (KNOWN_OFF in test_memory.py); within 5.5 %.
    case = case_by_id("kserve-l4-qwen25vl7b-0.9.0.1")
    plan = case.plan()
    assert abs(plan.weights_gib / 15.6271 - 1) < 0.005
    assert abs(plan.kv_tokens / 33_824 - 1) < 0.055
    assert abs(plan.kv_cache_gib - 1.81) < 0.11


def test_the_h100_start_is_the_pytorch_sampler() -> None:
    """The pip-installed 0.8.2 start sorts the vocabulary for 1,024 dummy requests; the tower's
    pass is not planned there (default limits, a video)."""
    case = case_by_id("qwen3vl1057-h100-qwen25vl7b-0.8.2")
    assert abs(case.plan().kv_tokens / 905_648 - 1) < 0.05


def test_0_9_2_moves_float32_pixels_but_holds_no_cast_copy(q25) -> None:
    """0.9.2 drops ``as_kwargs``' dtype (float32 on the GPU, kept through the language model's
    pass) and casts inside the tower, where the copy dies with ``patch_embed``: its tower peak
    is 0.9.0.1's."""
    l4 = get_gpu("l4")
    v092 = encoder_profile(q25, (0, 9, 2), 2048, 2048, 256)
    v090 = encoder_profile(q25, V090, 2048, 2048, 256)
    assert v092 is not None and v090 is not None
    assert v092.pixel_bytes == 2 * v090.pixel_bytes
    assert v092.kept_bytes - v090.kept_bytes == v090.pixel_bytes
    tower = phase_bytes(q25, v092, l4, 1, (0, 9, 2)) - v092.pixel_bytes
    assert tower == phase_bytes(q25, v090, l4, 1, V090) - v090.pixel_bytes
    assert encoder_profile(q25, (0, 9, 1), 2048, 2048, 256) is None  # not read
