"""Mistral 3 (Hugging Face format, ``Mistral3ForConditionalGeneration``) in vLLM's profiling
pass at 0.29-0.34 (kvscope.plan.encoder_releases): the same dummy square and embeddings as at
0.28, uint8 pixel values from 0.32; Mistral's format (pixtral.py) stays noted past 0.28.

Figures walked by hand (Mistral-Small-3.1-24B: the 1540 px square, 55 x 55 = 3,025 embeddings
of the 5,120 text width; 8192 // 3025 = 2 images): parked 2 x 3,025 x 5,120 x 2 = 61,952,000 B;
their pixel values 2 x 3 x 1540**2 = 14,229,600 values, bf16 (28,459,200 B) to 0.31 and one
byte each from 0.32.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import encoder_profile
from kvscope.plan.encoder_releases import model_pass_read
from kvscope.plan.memory import plan_memory
from kvscope.plan.mm_limits import parse_limits
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .test_moonvit_releases import WHEELS, _src

CONFIGS = Path(__file__).parent / "data" / "configs"
GIB = 1 << 30
LATER = [(0, minor, 0) for minor in range(29, 35)]
MISTRAL3, PIXTRAL = "model_executor/models/mistral3.py", "model_executor/models/pixtral.py"


@pytest.fixture(scope="module")
def mistral():
    return load_model(str(CONFIGS / "mistral-small-3.1-24b-instruct-2503.json"))


def _charge(model, v: tuple[int, int, int]) -> float:
    out = []
    for lim in (None, parse_limits('{"image": 0}')):
        eng = EngineConfig(
            engine="vllm",
            engine_version=".".join(map(str, v)),
            max_model_len=32768,
            limit_mm_per_prompt=lim,
        )
        p = plan_memory(model, get_gpu("H100"), Parallelism(tp=1), eng)
        out.append((p.kv_cache_gib * GIB, p.ranks[0].weights_gib * GIB))
    (kv_tower, w_tower), (kv_none, w_none) = out
    return (kv_none - kv_tower) - (w_tower - w_none)


@pytest.mark.parametrize("v", [(0, 28, 0), *LATER[:-1]])
def test_the_plan_charges_two_parked_images_as_at_028(mistral, v) -> None:
    # the V2 runner keeps the outputs alone; 0 if the window closed again
    assert model_pass_read(mistral, v)
    assert _charge(mistral, v) == pytest.approx(61_952_000, abs=1 << 16)


@pytest.mark.parametrize("v", LATER)
def test_the_v1_pass_keeps_uint8_pixels_from_032(mistral, v) -> None:
    p = encoder_profile(mistral, v, 32768, 8192, 256, v2=False)
    assert p is not None and (p.modality, p.items, p.rows) == ("image", 2, 3025)
    pixels = 2 * 3 * 1540 * 1540
    assert p.pixel_bytes == (pixels if v >= (0, 32, 0) else 2 * pixels)
    assert p.kept_bytes == 61_952_000 + p.pixel_bytes


# --- the code read (skipped where the wheels are not unpacked) ---

SAME_AS_028 = [
    (MISTRAL3, "Mistral3ProcessingInfo.get_num_image_tokens"),
    (MISTRAL3, "Mistral3ProcessingInfo.get_image_size_with_most_features"),
    (MISTRAL3, "Mistral3MultiModalProcessor._get_mm_fields_config"),
    (MISTRAL3, "Mistral3ForConditionalGeneration.embed_multimodal"),
    (PIXTRAL, "PixtralHFEncoderInfo"),
]


@pytest.mark.parametrize("v", LATER)
@pytest.mark.parametrize(("rel", "qualname"), SAME_AS_028)
def test_the_code_read_at_028_is_unchanged(v, rel: str, qualname: str) -> None:
    assert _src(v, rel, qualname) == _src((0, 28, 0), rel, qualname)


def _unannotated(src: str) -> str:
    tree = ast.parse(src)
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef):
            n.returns = None
        if isinstance(n, ast.arg):
            n.annotation = None
    return ast.unparse(tree)


@pytest.mark.parametrize("v", LATER)
def test_process_image_input_changes_only_its_annotations(v) -> None:
    qualname = "Mistral3ForConditionalGeneration._process_image_input"
    new, old = _src(v, MISTRAL3, qualname), _src((0, 28, 0), MISTRAL3, qualname)
    assert _unannotated(new) == _unannotated(old)


@pytest.mark.parametrize("v", LATER)
def test_the_1540_square_is_55_by_55_merged_patches(v) -> None:
    # 0.29 gives Mistral 3 its own encoder info (the processor's longest_edge; 0.31 rounds to
    # the merged patch): run its get_patch_grid_size on the square kvscope takes
    src = _src(v, MISTRAL3, "Mistral3HFEncoderInfo.get_patch_grid_size")
    # 0.30 asserts the config's class: the stand-in's
    scope: dict[str, object] = {"math": math, "Mistral3Config": SimpleNamespace}
    exec(compile(ast.parse(src), "mistral3.py", "exec"), scope)
    fake = SimpleNamespace(
        get_image_size=lambda: 1540,
        vision_config=SimpleNamespace(patch_size=14),
        hf_config=SimpleNamespace(spatial_merge_size=2),
    )
    grid = scope["get_patch_grid_size"](fake, image_width=1540, image_height=1540)  # type: ignore[operator]
    assert grid == (55, 55)
    info = _src(v, MISTRAL3, "Mistral3ProcessingInfo.get_vision_encoder_info")
    assert "size['longest_edge']" in info


@pytest.mark.parametrize("v", [(0, 28, 0), *LATER])
def test_mistral3_normalizes_on_the_device_from_032(v) -> None:
    cls = _src(v, MISTRAL3, "Mistral3ForConditionalGeneration")
    assert ("supports_mm_device_do_normalize = True" in cls) == (v >= (0, 32, 0))


def test_the_wheels_listed_are_the_releases_read() -> None:
    assert set(LATER) | {(0, 28, 0)} <= set(WHEELS)
