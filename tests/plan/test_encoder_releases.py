"""vLLM's multimodal profiling pass at 0.32-0.34 (kvscope.plan.encoder_releases): the Qwen
towers are charged 0.31's terms but for the uint8 pixel values, and a tower whose pass is not
read gets a note in the plan instead of a silent zero."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import encoder_profile, phase_bytes
from kvscope.plan.encoder_releases import pass_read, pixel_value_bytes
from kvscope.plan.memory import plan_memory
from kvscope.plan.mm_limits import parse_limits
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import offline_hub

CONFIGS = Path(__file__).parent / "data" / "configs"
GIB = 1 << 30
V031, V032, V033, V034 = (0, 31, 0), (0, 32, 0), (0, 33, 0), (0, 34, 0)
NEW = [V032, V033, V034]
#: PyPI wheels unpacked (vllm/ of each); the source checks skip where one is absent
WHEELS = {
    (0, 28, 0): Path("/tmp/vllm028/vllm"),
    (0, 29, 0): Path("/tmp/h19new_whl/u0.29.0/vllm"),
    (0, 30, 0): Path("/tmp/vllm030/vllm"),
    V031: Path("/tmp/vllm031/vllm"),
    V032: Path("/tmp/h19new_whl/u0.32.0/vllm"),
    V033: Path("/tmp/h19new_whl/u0.33.0/vllm"),
    V034: Path("/tmp/v034/x/vllm"),
}


def _model(name: str):
    return load_model(str(CONFIGS / name))


@pytest.fixture(scope="module")
def qwen3_vl():
    return _model("qwen3-vl-30b-a3b-instruct.json")


@pytest.fixture(scope="module")
def qwen35():
    return _model("qwen3.5-9b.json")


@pytest.fixture(scope="module")
def q25():
    return _model("qwen2.5-vl-7b-instruct.json")


def _charge(model, version: str) -> float:
    """Bytes the plan takes off the KV pool for the encoder pass on an H100: the pool without
    the tower (every modality limited to 0) less the pool with it, less the tower's weights."""
    out = []
    for lim in (None, parse_limits('{"image": 0, "video": 0}')):
        eng = EngineConfig(
            engine="vllm", engine_version=version, max_model_len=32768, limit_mm_per_prompt=lim
        )
        p = plan_memory(model, get_gpu("H100"), Parallelism(tp=1), eng)
        out.append((p.kv_cache_gib * GIB, p.ranks[0].weights_gib * GIB))
    (kv_tower, w_tower), (kv_none, w_none) = out
    return (kv_none - kv_tower) - (w_tower - w_none)


@pytest.mark.parametrize(
    ("name", "parked"),
    [
        # one 4096 px image: 16,384 rows of the deepstack-widened output (4 x 2048), bf16
        ("qwen3-vl-30b-a3b-instruct.json", 16_384 * 8192 * 2),
        # Qwen3.5-9B: 16,384 rows of 4096 (no deepstack)
        ("qwen3.5-9b.json", 16_384 * 4096 * 2),
    ],
)
def test_a_plan_at_032_033_charges_the_parked_outputs_as_at_031(name: str, parked: int) -> None:
    # both run the V2 runner there, which keeps only the outputs through the language model's
    # pass; 0.34 sizes the pool after warmup (extensible KV cache), charging the pass too
    model = _model(name)
    for v in ("0.31.0", "0.32.0", "0.33.0"):
        assert _charge(model, v) == pytest.approx(parked, abs=1 << 16)
    assert _charge(model, "0.34.0") > parked


@pytest.mark.parametrize("v", NEW)
def test_the_qwen_towers_profile_031s_item_from_032(qwen3_vl, qwen35, q25, v) -> None:
    for model, mml in ((qwen3_vl, 65536), (qwen35, 8192), (q25, 128_000)):
        old = encoder_profile(model, V031, mml, 2048, 256)
        new = encoder_profile(model, v, mml, 2048, 256)
        assert old is not None and new is not None
        assert (new.modality, new.items, new.rows, new.patches, new.budget_tokens) == (
            old.modality,
            old.items,
            old.rows,
            old.patches,
            old.budget_tokens,
        )
        assert new.kept_bytes == old.kept_bytes  # the V2 runner: the outputs alone
        assert pass_read(model.vision_output.kind, v)


@pytest.mark.parametrize("v", NEW)
def test_from_032_qwen3_vl_pixels_are_uint8(qwen3_vl, v) -> None:
    # 65,536 patches of 3 x 2 x 16 x 16 values: bf16 at 0.31, one byte each from 0.32
    old = encoder_profile(qwen3_vl, V031, 65536, 2048, 256, v2=False)
    new = encoder_profile(qwen3_vl, v, 65536, 2048, 256, v2=False)
    assert old is not None and new is not None
    assert old.pixel_bytes == 65_536 * 1536 * 2
    assert new.pixel_bytes == 65_536 * 1536
    # V1 keeps the batched pixel values through the language model's pass
    assert old.kept_bytes - new.kept_bytes == 65_536 * 1536
    # the Triton normalization's bf16 copy is freed by the patch embedding, below the blocks:
    # the encoder phase is 0.31's less the byte a value saved
    h100 = get_gpu("H100")
    assert (
        phase_bytes(qwen3_vl, new, h100, 1, v)
        == phase_bytes(qwen3_vl, old, h100, 1, V031) - 65_536 * 1536
    )


def test_qwen25_vl_normalizes_on_the_device_from_028(q25) -> None:
    a100 = get_gpu("A100-SXM-80GB")
    p = {
        v: encoder_profile(q25, v, 16_384, 16_384, 256, v2=False)
        for v in ((0, 27, 0), (0, 28, 0), (0, 29, 0), (0, 30, 0), (0, 31, 0), V034)
    }
    bf16 = 65_536 * 1176 * 2  # 16,384 rows x 4 patches x 3 x 2 x 14 x 14 values
    assert p[(0, 27, 0)].pixel_bytes == bf16
    assert all(p[v].pixel_bytes == bf16 // 2 for v in p if v >= (0, 28, 0))
    # 0.28 / 0.29: the wrapper's normalized bf16 copy is held while the tower runs
    assert p[(0, 28, 0)].normalized_bytes == p[(0, 29, 0)].normalized_bytes == bf16
    assert p[(0, 30, 0)].normalized_bytes == p[(0, 31, 0)].normalized_bytes == 0
    # the eager float32 path (cast, product, sum: 12 bytes a value) before the Triton kernel
    assert p[(0, 30, 0)].normalize_peak == 6 * bf16
    assert p[(0, 31, 0)].normalize_peak == p[V034].normalize_peak == bf16
    # same ViT code at 0.29 and 0.31: the phases differ by the held copy alone
    gap = phase_bytes(q25, p[(0, 29, 0)], a100, 1, (0, 29, 0)) - phase_bytes(
        q25, p[(0, 31, 0)], a100, 1, (0, 31, 0)
    )
    assert gap == bf16


def test_other_towers_keep_the_model_dtype() -> None:
    assert pixel_value_bytes("llama4", V034, 2) == 2
    assert pixel_value_bytes("gemma3", V033, 2) == 2
    assert pixel_value_bytes("qwen3_vl", V031, 2) == 2
    assert pixel_value_bytes("qwen3_5", V032, 2) == 1


def _notes(model, version: str, engine: str = "vllm", **kw) -> tuple[str, ...]:
    eng = EngineConfig(engine=engine, engine_version=version, max_model_len=32768, **kw)
    return plan_memory(model, get_gpu("H100"), Parallelism(tp=1), eng).notes


def _encoder_notes(notes: tuple[str, ...]) -> list[str]:
    return [n for n in notes if "profiling pass" in n]


@pytest.mark.parametrize(
    ("name", "kind", "read", "unread"),
    [
        # Mistral 3 loaded in Mistral's format (params.json and consolidated.safetensors):
        # pixtral.py's PixtralForConditionalGeneration, read through 0.28 only
        ("mistral-small-3.1-24b-instruct-2503.json", "mistral3", "0.28.0", "0.33.0"),
    ],
)
def test_an_unread_tower_is_noted_not_silently_free(name, kind, read, unread) -> None:
    model = replace(_model(name), mistral_files=("params.json", "consolidated.safetensors"))
    assert not _encoder_notes(_notes(model, read))
    (note,) = _encoder_notes(_notes(model, unread))
    assert f"vLLM {unread}'s" in note and f"the {kind} vision tower" in note
    assert "not modelled" in note
    # the default release (0.33) and the newest modelled (0.34) say so too
    assert _encoder_notes(_notes(model, "0.34.0"))
    # no tower, no note: --language-model-only drops it
    assert not _encoder_notes(_notes(model, unread, language_model_only=True))


def test_read_towers_and_other_engines_get_no_note(qwen3_vl, qwen35, q25) -> None:
    for model in (qwen3_vl, qwen35, q25):
        for v in ("0.31.0", "0.32.0", "0.33.0", "0.34.0"):
            assert not _encoder_notes(_notes(model, v))
    gemma = _model("gemma-3-4b-it.json")
    for v in ("0.28.0", "0.29.0", "0.33.0", "0.34.0"):
        assert not _encoder_notes(_notes(gemma, v))
    assert not _encoder_notes(_notes(gemma, "0.5.23", engine="sglang"))


@pytest.mark.parametrize("v", [(0, 29, 0), (0, 30, 0), (0, 31, 0), *NEW])
def test_gemma3_and_llama4_profile_028s_items_through_034(v) -> None:
    gemma = _model("gemma-3-4b-it.json")
    with offline_hub():
        scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    # Gemma 3 (dense: V2) parks 8192 // 256 = 32 outputs of the text width alone
    p = encoder_profile(gemma, v, 32768, 8192, 256)
    assert p is not None and (p.items, p.rows) == (32, 256)
    assert p.kept_bytes == 32 * 256 * 2560 * 2
    # Llama 4 Scout (V2 too from 0.29) parks three 17-tile images' outputs; on V1 it keeps
    # their bf16 pixel values as well (Llama 4 does not normalize on the device)
    s = encoder_profile(scout, v, 32768, 8192, 256)
    assert s is not None and s.items == 3 and s.kept_bytes == 3 * 2448 * 5120 * 2
    s1 = encoder_profile(scout, v, 32768, 8192, 256, v2=False)
    assert s1 is not None
    assert s1.kept_bytes == 3 * (2448 * 5120 + 17 * 3 * 336 * 336) * 2
    # on V1 Gemma 3 keeps its pixel values too: uint8 from 0.34 (device normalization)
    v1 = encoder_profile(gemma, v, 32768, 8192, 256, v2=False)
    assert v1 is not None
    pixels = 32 * 3 * 896 * 896
    assert v1.pixel_bytes == (pixels if v >= V034 else 2 * pixels)


def _node(path: Path, qualname: str) -> ast.AST:
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part
        )
        body = node.body
    assert node is not None
    return node


def _src(v: tuple[int, int, int], rel: str, qualname: str) -> str:
    root = WHEELS[v]
    if not root.is_dir():
        pytest.skip(f"vLLM {v} wheel not unpacked at {root}")
    return ast.unparse(_node(root / rel, qualname))


QWEN3_VL = "model_executor/models/qwen3_vl.py"
SAME_FROM_031 = [
    ("v1/worker/gpu/mm/encoder_runner.py", "EncoderRunner.profile_encoder_cache"),
    ("multimodal/encoder_budget.py", "MultiModalBudget"),
    ("multimodal/processing/context.py", "InputProcessingContext._postprocess_output"),
    (QWEN3_VL, "Qwen3_VisionBlock"),
    (QWEN3_VL, "Qwen3_VisionMLP"),
    (QWEN3_VL, "Qwen3_VisionPatchEmbed"),
    (QWEN3_VL, "Qwen3_VisionPatchMerger"),
    ("model_executor/layers/rotary_embedding/common.py", "ApplyRotaryEmb"),
    ("platforms/cuda.py", "CudaPlatformBase.get_vit_attn_backend"),
    ("platforms/cuda.py", "CudaPlatformBase.get_supported_vit_attn_backends"),
]


@pytest.mark.parametrize("v", NEW)
@pytest.mark.parametrize(("rel", "qualname"), SAME_FROM_031)
def test_the_code_read_at_031_is_unchanged(v, rel: str, qualname: str) -> None:
    assert _src(v, rel, qualname) == _src(V031, rel, qualname)


GEMMA3, LLAMA4 = "model_executor/models/gemma3_mm.py", "model_executor/models/mllama4.py"
FIXED_SQUARE_SAME_FROM_028 = [
    (GEMMA3, "Gemma3ProcessingInfo.get_num_image_tokens"),
    (GEMMA3, "Gemma3ProcessingInfo.get_image_size_with_most_features"),
    (GEMMA3, "Gemma3MultiModalProcessor._get_mm_fields_config"),
    (GEMMA3, "Gemma3MultiModalProjector"),
    (GEMMA3, "Gemma3ForConditionalGeneration._process_image_input"),
    (GEMMA3, "Gemma3ForConditionalGeneration.embed_multimodal"),
    (LLAMA4, "Mllama4ProcessingInfo.get_max_num_tiles"),
    (LLAMA4, "Mllama4ProcessingInfo.get_patch_per_chunk"),
    (LLAMA4, "Mllama4ProcessingInfo.get_image_size_with_most_features"),
    (LLAMA4, "Llama4MultiModalProjector"),
    (LLAMA4, "Llama4ForConditionalGeneration._process_image_input"),
    (LLAMA4, "Llama4ForConditionalGeneration.embed_multimodal"),
    ("multimodal/inputs.py", "PlaceholderRange.get_num_embeds"),
]


@pytest.mark.parametrize("v", [(0, 29, 0), (0, 30, 0), V031, *NEW])
@pytest.mark.parametrize(("rel", "qualname"), FIXED_SQUARE_SAME_FROM_028)
def test_the_fixed_square_code_read_at_028_is_unchanged(v, rel: str, qualname: str) -> None:
    assert _src(v, rel, qualname) == _src((0, 28, 0), rel, qualname)


@pytest.mark.parametrize("v", NEW)
def test_from_032_the_qwen3_vl_tower_normalizes_its_uint8_input(v) -> None:
    cls = _src(v, QWEN3_VL, "Qwen3VLForConditionalGeneration")
    assert "supports_mm_device_do_normalize = True" in cls
    fwd = _src(v, QWEN3_VL, "Qwen3_VisionTransformer.forward")
    # the normalized copy is rebound by the patch embedding, so it is freed before the blocks
    assert fwd.index("self.input_norm(") < fwd.index("hidden_states = self.patch_embed(")
    old = _src(V031, QWEN3_VL, "Qwen3VLForConditionalGeneration")
    assert "supports_mm_device_do_normalize" not in old
