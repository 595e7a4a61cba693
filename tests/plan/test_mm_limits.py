"""vLLM's ``--limit-mm-per-prompt`` in the plan: a modality at 0 leaves the profiling choice, a
count caps the items a prompt, every modality at 0 drops the tower (vLLM PR #22299)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig
from kvscope.plan.encoder_profile import encoder_profile
from kvscope.plan.memory import plan_memory
from kvscope.plan.mm_limits import parse_limits, tower_dropped
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

DATA = Path(__file__).parent / "data" / "configs"
V024 = (0, 24, 0)


def test_parse_takes_vllm_json_and_counts() -> None:
    assert parse_limits('{"video": 0, "image": 2}') == (("image", 2), ("video", 0))
    assert parse_limits('{"image": {"count": 3}}') == (("image", 3),)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("image=2", "JSON object"),
        ("{}", "non-empty"),
        ('{"image": -1}', "whole number"),
        ('{"image": true}', "whole number"),
        ('{"image": 1.5}', "whole number"),
        ('{"Image!": 1}', "modality name"),
        ('{"image": {"count": 1, "width": 512}}', "dummy item's size"),
    ],
)
def test_bad_limits_are_one_line(text: str, needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle) as info:
        parse_limits(text)
    assert "\n" not in info.value.one_line()


def test_a_zero_image_limit_profiles_the_video() -> None:
    """Qwen3.6's processors: an image is 16,777,216 px / (16 x 2)^2 = 16,384 rows, a video
    25,165,824 px / 2 frames / 32^2 = 12,288; with images off the video is profiled."""
    qwen = load_model(str(DATA / "qwen3.6-35b-a3b.json"))
    full = encoder_profile(qwen, V024, 32768, 8192, 256)
    video = encoder_profile(qwen, V024, 32768, 8192, 256, parse_limits('{"image": 0}'))
    assert full is not None and (full.modality, full.rows) == ("image", 16_384)
    assert video is not None and (video.modality, video.rows) == ("video", 12_288)
    assert (
        encoder_profile(qwen, V024, 32768, 8192, 256, parse_limits('{"image":0,"video":0}')) is None
    )


def test_a_count_caps_the_items_a_prompt() -> None:
    """Gemma 3 at 8,192 batched tokens profiles 8192 // 256 = 32 images (one sequence holds
    min(999, 32768 // 256) = 128); at two images a prompt MultiModalBudget takes
    min(32, 1 x min(2, 128)) = 2."""
    gemma = load_model(str(DATA / "gemma-3-4b-it.json"))
    v = (0, 19, 0)
    default = encoder_profile(gemma, v, 32768, 8192, 1)
    assert default is not None and default.items == 32
    two = encoder_profile(gemma, v, 32768, 8192, 1, parse_limits('{"image": 2}'))
    assert two is not None and two.items == 2


def test_every_modality_at_zero_is_the_text_model() -> None:
    qwen = load_model(str(DATA / "qwen3.6-35b-a3b.json"))
    off = parse_limits('{"image": 0, "video": 0}')
    assert tower_dropped(qwen, off, V024)
    assert not tower_dropped(qwen, off, (0, 10, 0))  # before PR #22299 the tower is built
    assert not tower_dropped(qwen, parse_limits('{"image": 0}'), V024)
    gpu, common = get_gpu("H100"), dict(engine_version="0.24.0", max_model_len=32768)
    zero = plan_memory(qwen, gpu, None, EngineConfig(limit_mm_per_prompt=off, **common))
    lmo = plan_memory(qwen, gpu, None, EngineConfig(language_model_only=True, **common))
    full = plan_memory(qwen, gpu, None, EngineConfig(**common))
    assert zero.kv_tokens == lmo.kv_tokens > full.kv_tokens
    assert zero.weights_gib == lmo.weights_gib < full.weights_gib


def test_sglang_has_no_such_flag() -> None:
    with pytest.raises(KvscopeError, match="vLLM's"):
        EngineConfig(engine="sglang", limit_mm_per_prompt=(("image", 1),))
