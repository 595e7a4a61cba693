"""The Qwen3-VL-style vision tower's transient peak in vLLM's profiling pass
(kvscope.plan.vit_peak), against facts read in the engine's code at v0.19.0-v0.27.0.

Figures pinned: the Qwen3.6-35B-A3B tower (config.json: depth 27, hidden_size 1152,
intermediate_size 4304, num_heads 16, out_hidden_size 2048, no deepstack mergers; patch 16,
merge 2) on one image at the processor's 16,777,216-pixel cap is 16,777,216 / 16**2 = 65,536
patches. Walking ``Qwen2_5_VisionAttention.forward`` by hand: x, norm1(x), qkv (3), the q/k
copy (2), rotated q/k (2), FlashAttention's output (1) and the projection's output (1) are 11
rows of 1152 a patch at bf16 while ``self.proj`` runs, beside ``pos_embeds`` (1152) and the
rotary cos/sin (72): 65,536 x (12 x 1152 + 72) x 2 B = 1.6963 GiB (FlashAttention's log-sum-exp
is freed by then).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.plan.activation import ActivationPeak
from kvscope.plan.encoder_profile import encoder_phase_bytes, encoder_profile
from kvscope.plan.vit_peak import vit_transient_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).parent / "data" / "configs"
V024 = (0, 24, 0)
GIB = 1 << 30
IMAGE_PATCHES = 16_777_216 // 16**2


@pytest.fixture(scope="module")
def qwen36():
    return load_model(str(CONFIGS / "qwen3.6-35b-a3b-nvfp4.json"))


@pytest.fixture(scope="module")
def qwen3_vl():
    return load_model(str(CONFIGS / "qwen3-vl-30b-a3b-instruct.json"))


def test_tower_size_comes_from_vision_config(qwen36, qwen3_vl) -> None:
    a, b = qwen36.vision_output, qwen3_vl.vision_output
    assert a is not None and b is not None
    assert (a.depth, a.width, a.intermediate, a.heads, a.deepstack) == (27, 1152, 4304, 16, 0)
    assert (b.deepstack, b.merger_width, b.out_width) == (3, 2048, 8192)


def test_one_capped_image_peaks_in_attention_at_the_hand_walked_figure(qwen36) -> None:
    tower = qwen36.vision_output
    assert tower is not None
    got = vit_transient_bytes(tower, IMAGE_PATCHES, get_gpu("RTX-5090-32GB"), 1, V024, 2)
    assert got / GIB == pytest.approx(1.6963, rel=1e-4)


def test_the_profiled_item_is_the_capped_image(qwen36) -> None:
    # 0.24 counts a video's rows alone: the 16,384-row image wins, one item at 8192 tokens
    p = encoder_profile(qwen36, V024, 131_072, 8192, 256)
    assert p is not None
    assert (p.modality, p.items, p.patches) == ("image", 1, IMAGE_PATCHES)
    assert p.pixel_bytes == IMAGE_PATCHES * 1536 * 2  # 3 x 2 x 16 x 16 values a patch, bf16


def test_flash_attention_keeps_the_peak_linear_in_patches(qwen36) -> None:
    # varlen FlashAttention materialises no [heads, seq, seq] scores: two images cost twice one
    tower = qwen36.vision_output
    assert tower is not None
    gpu = get_gpu("H100-SXM-80GB")
    one = vit_transient_bytes(tower, IMAGE_PATCHES, gpu, 1, V024, 2)
    assert vit_transient_bytes(tower, 2 * IMAGE_PATCHES, gpu, 1, V024, 2) == 2 * one


@given(tp=st.sampled_from([2, 4, 8]))
def test_tensor_parallel_shards_only_the_projections(qwen36, tp: int) -> None:
    # norms, residual and the row-parallel outputs stay full width on every rank
    tower = qwen36.vision_output
    assert tower is not None
    gpu = get_gpu("H100-SXM-80GB")
    full = vit_transient_bytes(tower, IMAGE_PATCHES, gpu, 1, V024, 2)
    shard = vit_transient_bytes(tower, IMAGE_PATCHES, gpu, tp, V024, 2)
    assert full / tp < shard < full


def test_a_wide_mlp_takes_over_from_attention(qwen36) -> None:
    tower = qwen36.vision_output
    assert tower is not None
    gpu = get_gpu("H100-SXM-80GB")
    base = vit_transient_bytes(tower, IMAGE_PATCHES, gpu, 1, V024, 2)
    # 2 x 1152 + 2 x inter passes attention's 11 x 1152 once inter > 4.5 x 1152 (5184)
    assert vit_transient_bytes(replace(tower, intermediate=5000), 1024, gpu, 1, V024, 2) == (
        vit_transient_bytes(tower, 1024, gpu, 1, V024, 2)
    )
    assert (
        vit_transient_bytes(replace(tower, intermediate=8192), IMAGE_PATCHES, gpu, 1, V024, 2)
        > base
    )


@pytest.mark.parametrize(
    ("gpu", "version"),
    [
        ("T4-16GB", V024),  # cc 7.5: FlashAttention unsupported, SDPA path not modelled
        ("MI300X-192GB", V024),  # ROCm's own ViT backends
        ("RTX-5090-32GB", (0, 18, 0)),  # releases not read
        ("RTX-5090-32GB", (0, 35, 0)),
    ],
)
def test_unread_paths_add_nothing(qwen36, gpu: str, version: tuple[int, int, int]) -> None:
    tower = qwen36.vision_output
    assert tower is not None
    assert vit_transient_bytes(tower, IMAGE_PATCHES, get_gpu(gpu), 1, version, 2) == 0.0


def test_the_pass_peak_is_the_larger_phase(qwen36) -> None:
    enc = encoder_phase_bytes(qwen36, V024, get_gpu("RTX-5090-32GB"), 1, 131_072, 8192, 256)
    assert enc > 1.8 * GIB  # pixel values (0.19 GiB) + the tower's 1.70 GiB
    act = ActivationPeak(1, 0.5 * GIB, 0.2 * GIB, 0.1 * GIB, 0.0, 0.0)
    assert act.total_bytes < enc
    assert replace(act, encoder_peak=enc).total_bytes == enc
    assert replace(act, encoder_peak=0.1 * GIB).total_bytes == act.total_bytes
