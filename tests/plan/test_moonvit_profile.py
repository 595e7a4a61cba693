"""Kimi-K2.5 / K2.6's MoonViT tower in vLLM's multimodal profiling pass
(kvscope.plan.moonvit_profile, through kvscope.plan.encoder_profile), against facts read in the
engine's code (kimi_k25.py, kimi_k25_vit.py at v0.15.0-v0.27.0; later releases:
test_moonvit_releases.py) and a published start log.

Figures pinned, walked by hand:

* the tower from the checkpoint's ``vision_config`` (``vt_num_hidden_layers`` 27,
  ``vt_hidden_size`` 1152, ``vt_intermediate_size`` 4304, ``vt_num_attention_heads`` 16,
  patch 14, merge 2 x 2; ``mm_hidden_size`` 1152 equals the tower width, so vLLM's
  ``KimiK25Config`` projects to the text width, 7168);
* the dummy 3000 x 3000 image under the processor's 16,384-patch cap: 3000 // 14 = 214 patches
  a side, scale sqrt(16384 / 214**2) = 0.5981, int(3000 x 0.5981) = 1794 px, padded to
  1820 = 65 x 28: 130 x 130 = 16,900 patches, 65 x 65 = 4,225 tokens; the four-frame chunk
  (4,096 patches a frame) is 924 px a side, 33 x 33 = 1,089 tokens, so the image is profiled;
* a Kimi-K2.6 start on vLLM 0.22.0 with 32,768 batched tokens logged "Encoder cache will be
  initialized with a budget of 32768 tokens, and profiled with 7 vision_chunk items"
  (vllm-project/vllm issue #42426): 32768 // 4225 = 7 (8 items would need <= 4,096 tokens);
* parked through the language model's pass: 4,225 x 7,168 x 2 B = 60,569,600 of output,
  16,900 x 3 x 14 x 14 x 2 B = 19,874,400 of pixel values and the 512 x 512 x 36 complex64
  rotary buffer, 75,497,472 B: 155,941,472 B;
* the tower's peak at TP 8 (one patch row of 1152 at bf16 over 16,900 patches is 38,937,600 B):
  ``self.wo`` holds x, norm0(x), its output and the all-reduce's (4) plus qkv, rotated q/k and
  the attention output (6 / 8): 4.75 rows, + the per-patch rotary table (16,900 x 36 x 8 B =
  4,867,200) + the buffer = 265,318,272 B; at TP 1 ``apply_rope`` binds: x, norm0(x), qkv (3),
  q/k in fp32 (4), their complex products (4), the bf16 results (2) = 15 rows: 664,428,672 B;
* Kimi-VL-A3B-Instruct (2-D MoonViT, same blocks): the 1024 px dummy under its 4,096-patch
  ``in_token_limit`` is 897 px padded to 924: 66 x 66 = 4,356 patches, 1,089 tokens, so 8192 //
  1089 = 7 images are parked (7 x 1089 x 2048 x 2 B + 30,492 x 588 x 2 B + the 75,497,472 B
  rotary buffer = 142,579,872 B); llm-d-planner's vLLM 0.19.0 H100 starts of that model log
  "2.92 GiB for peak activation" (TP 1) and "2.85 GiB" (TP 2) (jgchn/llm-d-planner
  accuracy/results/v0.19.0/logs/moonshotai-kimi-vl-a3b-i--h100-80gb--tp{1,2}pp1dp1--8192.log at
  6417620b546c621155b3f2814b994f7abd6d18e8), which the language model's pass alone misses by
  0.14 GiB.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import encoder_phase_bytes, encoder_profile
from kvscope.plan.memory import plan_memory
from kvscope.plan.moonvit_profile import dummy_item, moonvit_transient_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

CONFIGS = Path(__file__).parent / "data" / "configs"
V020 = (0, 20, 0)
PATCHES = 16_900
RTX = "RTX-PRO-6000-Blackwell-Server-96GB"


@pytest.fixture(scope="module")
def kimi():
    return load_model(str(CONFIGS / "kimi-k2.5.json"))


def test_tower_comes_from_the_checkpoint_vision_config(kimi) -> None:
    t = kimi.vision_output
    assert t is not None
    assert (t.kind, t.depth, t.width, t.intermediate, t.heads) == ("kimi_k25", 27, 1152, 4304, 16)
    assert (t.patch_size, t.merge_size, t.out_width) == (14, 2, 7168)


def test_the_dummy_item_is_the_capped_image(kimi) -> None:
    item = dummy_item(kimi.vision_output)
    assert item is not None
    assert (item.kind, item.tokens, item.patches) == ("image", 4225, PATCHES)


@pytest.mark.parametrize(("batched", "items"), [(8192, 1), (32_768, 7), (4096, 1)])
def test_items_follow_the_encoder_budget(kimi, batched: int, items: int) -> None:
    # 32,768 -> 7 items is the logged figure of issue #42426 (vLLM 0.22.0)
    p = encoder_profile(kimi, (0, 22, 0), 249_984, batched, 128)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items) == ("vision_chunk", max(batched, 4225), items)
    assert p.patches == items * PATCHES


def test_parked_bytes_are_outputs_pixels_and_the_rotary_buffer(kimi) -> None:
    p = encoder_profile(kimi, V020, 262_144, 8192, 128)
    assert p is not None
    assert p.pixel_bytes == 19_874_400
    assert p.kept_bytes == 155_941_472


def test_tower_peak_at_tp8_and_tp1_is_the_hand_walked_figure(kimi) -> None:
    gpu = get_gpu(RTX)
    assert moonvit_transient_bytes(kimi.vision_output, PATCHES, gpu, 8, V020, 2) == (
        pytest.approx(265_318_272)
    )
    assert moonvit_transient_bytes(kimi.vision_output, PATCHES, gpu, 1, V020, 2) == (
        pytest.approx(664_428_672)
    )


def test_the_language_model_phase_binds_on_the_k26_rows(kimi) -> None:
    # TP 8 on RTX PRO 6000: the encoder phase (pixels + tower, 0.27 GiB) stays under the
    # language model's pass, so the plan's peak grows by exactly the parked bytes
    eng = EngineConfig(
        engine="vllm",
        engine_version="0.20.0",
        gpu_memory_utilization=0.94,
        max_model_len=262_144,
        max_num_batched_tokens=8192,
        max_num_seqs=128,
        kv_cache_dtype="fp8",
        attention_backend="TRITON_MLA",
    )
    gpu, par = get_gpu(RTX), Parallelism(tp=8)
    enc = encoder_phase_bytes(kimi, V020, gpu, 8, 262_144, 8192, 128)
    assert 0.25 < enc / 2**30 < 0.3
    with_tower = plan_memory(kimi, gpu, par, eng)
    without = plan_memory(replace(kimi, vision_output=None), gpu, par, eng)
    grown = (with_tower.activation_peak_gib - without.activation_peak_gib) * 2**30
    assert grown == pytest.approx(155_941_472, rel=1e-6)
    assert with_tower.kv_tokens < without.kv_tokens


@pytest.mark.parametrize(
    ("gpu", "version"),
    [
        ("T4-16GB", V020),  # cc 7.5: no FlashAttention, the SDPA path is not modelled
        ("MI300X-192GB", V020),  # ROCm's ViT backends
        (RTX, (0, 14, 0)),  # before the read releases
        (RTX, (0, 35, 0)),  # past the newest read
    ],
)
def test_unread_paths_add_no_transient(kimi, gpu: str, version: tuple[int, int, int]) -> None:
    assert moonvit_transient_bytes(kimi.vision_output, PATCHES, get_gpu(gpu), 8, version, 2) == 0


def test_no_profile_where_the_pass_is_not_modelled(kimi) -> None:
    assert encoder_profile(kimi, (0, 11, 0), 262_144, 8192, 128) is None  # 0.11 expands
    assert encoder_profile(kimi, (0, 35, 0), 262_144, 8192, 128) is None


@pytest.fixture(scope="module")
def kimi_vl():
    return load_model(str(CONFIGS / "kimi-vl-a3b-instruct.json"))


def test_kimi_vl_profiles_seven_capped_images(kimi_vl) -> None:
    t = kimi_vl.vision_output
    assert t is not None
    assert (t.kind, t.depth, t.width, t.out_width) == ("kimi_vl", 27, 1152, 2048)
    item = dummy_item(t)
    assert item is not None and (item.tokens, item.patches) == (1089, 4356)
    p = encoder_profile(kimi_vl, (0, 19, 0), 8192, 8192, 1024)
    assert p is not None
    assert (p.modality, p.items, p.patches) == ("image", 7, 7 * 4356)
    assert p.kept_bytes == 142_579_872


@pytest.mark.parametrize(
    ("row", "logged"), [("llmd-kimi-vl-a3b-tp1", 2.92), ("llmd-kimi-vl-a3b-tp2", 2.85)]
)
def test_kimi_vl_peak_activation_matches_the_log(row: str, logged: float) -> None:
    case = case_by_id(row)
    plan = case.plan()
    assert plan.activation_peak_gib == pytest.approx(logged, abs=0.01)
