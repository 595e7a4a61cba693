"""vLLM 0.11's multimodal profiling pass (kvscope.plan.encoder_profile) against the engine's log
and code.

The published figure: the start-up log of row ``nanokvm-4x3090-qwen3vl30b-tp4-0.11.0``
(Qwen3-VL-30B-A3B, vLLM 0.11.0, --max-model-len 65536, max_num_batched_tokens 2048) prints
"Encoder cache will be initialized with a budget of 153600 tokens, and profiled with 1 video
items of the maximum feature size"; the row's KV pool (2.31 GiB) is pinned by test_memory.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvscope.plan.encoder_profile import encoder_kept_bytes, encoder_profile
from kvscope.specs.registry import load_model

from .log_cases import offline_hub
from .vl_configs import dense_qwen3_vl

CONFIG = Path(__file__).parent / "data" / "configs" / "qwen3-vl-30b-a3b-instruct.json"
V0110 = (0, 11, 0)


@pytest.fixture(scope="module")
def qwen3_vl():
    return load_model(str(CONFIG))


def test_log_line_budget_and_items(qwen3_vl) -> None:
    p = encoder_profile(qwen3_vl, V0110, 65536, 2048, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items) == ("video", 153_600, 1)


def test_tower_output_width_counts_the_deepstack_mergers(qwen3_vl) -> None:
    # config.json: out_hidden_size 2048, deepstack_visual_indexes [8, 16, 24], patch 16,
    # temporal patch 2, merge 2; Qwen3_VisionTransformer concatenates 1 + 3 outputs
    t = qwen3_vl.vision_output
    assert t is not None
    assert (t.kind, t.out_width, t.patch_values, t.merge_size) == ("qwen3_vl_moe", 8192, 1536, 2)


def test_the_zeroed_budget_copy_dominates_what_is_kept(qwen3_vl) -> None:
    # profile_run copies the 12,288-row output into a zeroed (153,600, width) tensor and keeps
    # the raw output and the pixel values beside it: all three, nothing more
    p = encoder_profile(qwen3_vl, V0110, 65536, 2048, 256)
    assert p is not None
    copy = 153_600 * 8192 * 2
    assert copy < p.kept_bytes < 1.15 * copy
    assert p.rows == 12_288


def test_items_follow_the_encoder_budget(qwen3_vl) -> None:
    # budget = max(max_num_batched_tokens, tokens an item); items = budget // tokens an item
    one = encoder_profile(qwen3_vl, V0110, 65536, 8192, 256)
    two = encoder_profile(qwen3_vl, V0110, 65536, 2 * 153_600, 256)
    assert one is not None and two is not None
    assert (one.budget_tokens, one.items) == (153_600, 1)
    assert (two.budget_tokens, two.items) == (307_200, 2)
    # a twice-larger budget widens each zeroed copy and adds an item (four times the copies);
    # the raw outputs and pixel values only double
    assert 3.5 * one.kept_bytes < two.kept_bytes < 4 * one.kept_bytes
    # the batch size does not move a budget that one item sets
    assert one.kept_bytes == encoder_kept_bytes(qwen3_vl, V0110, 65536, 2048, 256)


@pytest.mark.parametrize("version", [(0, 9, 2), (0, 10, 2), (0, 12, 0), (0, 14, 0), (0, 35, 0)])
def test_releases_not_read_are_not_modelled(qwen3_vl, version) -> None:
    assert encoder_profile(qwen3_vl, version, 65536, 2048, 256) is None
    assert encoder_kept_bytes(qwen3_vl, version, 65536, 2048, 256) == 0.0


@pytest.mark.parametrize("version", [(0, 15, 0), (0, 20, 0), (0, 24, 0), (0, 27, 0), (0, 28, 0)])
def test_from_015_the_image_is_profiled_and_parked_as_it_is(qwen3_vl, version) -> None:
    # get_max_video_tokens counts a two-frame video at half the video pixel budget (12,288
    # rows, no 12.5 factor), below the 16,384 rows of a 4096 x 4096 image
    p = encoder_profile(qwen3_vl, version, 65536, 8192, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("image", 16_384, 1, 16_384)
    raw = 16_384 * 8192 * 2
    pixels = 16_384 * 4 * 1536 * 2
    assert p.kept_bytes == raw + pixels  # no zeroed copy
    # far below 0.11's parked video
    old = encoder_profile(qwen3_vl, V0110, 65536, 8192, 256)
    assert old is not None and old.kept_bytes > 5 * p.kept_bytes


def test_from_025_a_dense_wrapper_runs_on_the_v2_runner() -> None:
    # VllmConfig._is_default_v2_model_runner_model (0.25): neither MoE nor hybrid -> V2 runner,
    # whose profile_run does not run the encoder
    dense = dense_qwen3_vl()
    assert dense.vision_output is not None and not dense.is_moe
    assert encoder_profile(dense, (0, 24, 0), 65536, 8192, 256) is not None
    assert encoder_profile(dense, (0, 25, 0), 65536, 8192, 256) is None


def test_gemma3_profiles_as_many_images_as_the_batch_holds() -> None:
    # Gemma 3: 256 embeddings an image (mm_tokens_per_image; get_num_embeds from 0.15), so
    # 8192 // 256 = 32 images of one 896 x 896 square, parked as they are
    gemma = load_model(str(CONFIG.with_name("gemma-3-4b-it.json")))
    t = gemma.vision_output
    assert t is not None and (t.kind, t.out_width, t.image_rows, t.image_size) == (
        "gemma3",
        2560,
        256,
        896,
    )
    p = encoder_profile(gemma, (0, 19, 0), 32768, 8192, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("image", 8192, 32, 256)
    assert p.kept_bytes == 32 * (256 * 2560 + 3 * 896 * 896) * 2
    # few sequences cap the items: max_num_seqs x min(999, max_model_len // 256)
    capped = encoder_profile(gemma, (0, 19, 0), 2048, 8192, 2)
    assert capped is not None and capped.items == 16
    # a dense wrapper runs on the V2 runner from 0.25; 0.11 counts placeholder tokens too
    assert encoder_profile(gemma, (0, 25, 0), 32768, 8192, 256) is None
    assert encoder_profile(gemma, V0110, 32768, 8192, 256) is None


def test_mistral3_profiles_two_1540_pixel_images() -> None:
    # Pixtral in Mistral Small 3.1: a 1540 x 1540 square in 14-pixel patches merged 2 x 2 is
    # 55 x 55 = 3,025 embeddings (the break tokens are not embeddings): 8192 // 3025 = 2 images
    mistral = load_model(str(CONFIG.with_name("mistral-small-3.1-24b-instruct-2503.json")))
    t = mistral.vision_output
    assert t is not None and (t.kind, t.out_width, t.image_rows, t.image_size) == (
        "mistral3",
        5120,
        3025,
        1540,
    )
    p = encoder_profile(mistral, (0, 19, 0), 32768, 8192, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("image", 8192, 2, 3025)
    assert p.kept_bytes == 2 * (3025 * 5120 + 3 * 1540 * 1540) * 2


def test_llama4_profiles_three_16_to_1_images() -> None:
    # Llama 4 Scout: a 16:1 image is 16 tiles of 336 px plus a global tile, each 24 x 24
    # patches pixel-shuffled by 0.5 to 144 tokens: 2,448 an image, 8192 // 2448 = 3 images
    with offline_hub():
        scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    t = scout.vision_output
    assert t is not None and (t.kind, t.out_width, t.image_rows, t.image_tiles) == (
        "llama4",
        5120,
        2448,
        17,
    )
    p = encoder_profile(scout, (0, 19, 0), 32768, 8192, 256)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows) == ("image", 8192, 3, 2448)
    assert p.kept_bytes == 3 * (2448 * 5120 + 17 * 3 * 336 * 336) * 2
    # a MoE model stays on the V1 runner past 0.25
    assert encoder_profile(scout, (0, 25, 0), 32768, 8192, 256) is not None


def test_towers_without_a_modelled_output_are_left_out() -> None:
    # Kimi-VL's MoonViT is modelled (tests/plan/test_moonvit_profile.py); the same tower under
    # a kind the module does not know (InternVL's) is left out
    with offline_hub():
        kimi = load_model("moonshotai/Kimi-VL-A3B-Instruct")
    assert kimi.vision_params > 0 and kimi.vision_output is not None
    assert encoder_profile(kimi, (0, 19, 0), 32768, 8192, 256) is not None
    other = replace(kimi, vision_output=replace(kimi.vision_output, kind="internvl_chat"))
    assert encoder_profile(other, (0, 19, 0), 32768, 8192, 256) is None
