"""The MoonViT towers (Kimi-K2.5 / K2.6, Kimi-VL) in vLLM's profiling pass at 0.28-0.34
(kvscope.plan.moonvit_profile, kvscope.plan.encoder_releases): the same dummy item and parked
outputs as at 0.27, Kimi-K2.5's q/k rotation as it changes at 0.29 and 0.31, and its uint8
pixel values from 0.32.

Figures walked by hand (Kimi-K2.5's tower: width 1152, 16 heads of 72, intermediate 4304, the
dummy image's 16,900 patches; one patch row of the width at bf16 is 38,937,600 B, the per-patch
rotary table 16,900 x 36 x 8 = 4,867,200 B, the kept ``freqs_cis`` buffer 75,497,472 B):

* 0.29-0.30, ``ApplyRotaryEmb`` (fp32, out of place) on fp32 cos / sin copies (together one
  more table): TP 1, rotating k holds x, norm0(x), qkv (3), q's bf16 result (1), k in fp32 (2),
  the fp32 output (2) and its cast (1) = 11 rows + 2 tables + the buffer = 513,545,472 B; TP 8,
  ``self.wo`` binds: 4 + 6 / 8 = 4.75 rows + 2 tables + the buffer = 270,185,472 B;
* from 0.31, ``packed_qk_rope_`` in place: TP 1, the MLP binds (x, norm1(x), fc0's and the
  GELU's 16,900 x 4,304 outputs) = 77,875,200 + 290,950,400 + 1 table + the buffer =
  449,190,272 B; TP 8, ``self.wo`` holds x, norm0(x), its output and the all-reduce's (4) and
  qkv plus the attention output (4 / 8) = 4.5 rows + 1 table + the buffer = 255,583,872 B;
* parked (the V2 runner, default for this model from 0.29): 4,225 x 7,168 x 2 = 60,569,600 B of
  output and the buffer, 136,067,072 B (0.27-0.28 on V1 keep the 19,874,400 B of pixel values
  too: 155,941,472 B); Kimi-VL-A3B: 7 x 1,089 x 2,048 x 2 + the buffer = 106,721,280 B (V1:
  + 7 x 4,356 x 588 x 2 = 142,579,872 B);
* from 0.32 the pixel values are one byte each: 9,937,200 B, and the Triton normalization's
  bf16 copy (19,874,400 B) is freed by the patch embedding, under the tower's peak.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import encoder_profile, phase_bytes
from kvscope.plan.encoder_releases import pass_read
from kvscope.plan.memory import plan_memory
from kvscope.plan.mm_limits import parse_limits
from kvscope.plan.moonvit_profile import moonvit_transient_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).parent / "data" / "configs"
GIB = 1 << 30
PATCHES = 16_900
RELEASES = [(0, minor, 0) for minor in range(27, 35)]
#: PyPI wheels unpacked (vllm/ of each); the source checks skip where one is absent
WHEELS = {
    (0, 27, 0): Path("/tmp/vllm0.27.0/vllm"),
    (0, 28, 0): Path("/tmp/vllm028/vllm"),
    (0, 29, 0): Path("/tmp/bf16_029/vllm"),
    (0, 30, 0): Path("/tmp/vllm030/vllm"),
    (0, 31, 0): Path("/tmp/vllm031/vllm"),
    (0, 32, 0): Path("/tmp/vlnew_032full/vllm"),
    (0, 33, 0): Path("/tmp/vlnew_033/vllm"),
    (0, 34, 0): Path("/tmp/v034/x/vllm"),
}


@pytest.fixture(scope="module")
def kimi():
    return load_model(str(CONFIGS / "kimi-k2.5.json"))


@pytest.fixture(scope="module")
def kimi_vl():
    return load_model(str(CONFIGS / "kimi-vl-a3b-instruct.json"))


def _text(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def _plan(model, v, gpu: str, tp: int, lim=None):
    eng = EngineConfig(
        engine="vllm", engine_version=_text(v), max_model_len=32768, limit_mm_per_prompt=lim
    )
    return plan_memory(model, get_gpu(gpu), Parallelism(tp=tp), eng)


def _charge(model, v, gpu: str, tp: int, modality: str) -> float:
    """The pool without the tower (its modality limited to 0) less the pool with it, less the
    tower's weights: what the plan charges for the encoder pass."""
    with_tower = _plan(model, v, gpu, tp)
    without = _plan(model, v, gpu, tp, parse_limits(f'{{"{modality}": 0}}'))
    weights = (with_tower.ranks[0].weights_gib - without.ranks[0].weights_gib) * GIB
    return (without.kv_cache_gib - with_tower.kv_cache_gib) * GIB - weights


@pytest.mark.parametrize("v", RELEASES[1:])
def test_the_moonvit_towers_are_read_and_carry_no_note(kimi, kimi_vl, v) -> None:
    assert pass_read("kimi_k25", v) and pass_read("kimi_vl", v)
    for model, gpu, tp in ((kimi, "H200", 8), (kimi_vl, "H100", 1)):
        assert not [n for n in _plan(model, v, gpu, tp).notes if "profiling pass" in n]
    assert not pass_read("kimi_k25", (0, 35, 0))


@pytest.mark.parametrize(
    ("v", "k25", "vl"),
    [
        ((0, 27, 0), 155_941_472, 142_579_872),
        ((0, 28, 0), 155_941_472, 142_579_872),
        *[((0, m, 0), 136_067_072, 106_721_280) for m in range(29, 34)],
    ],
)
def test_the_plan_charges_the_parked_outputs_as_at_027(kimi, kimi_vl, v, k25, vl) -> None:
    # Kimi-K2.5 at TP 8 on H200 and Kimi-VL at TP 1 on H100: the language model's pass binds,
    # so the charge is what the pass keeps (0 if the window closed again)
    assert _charge(kimi, v, "H200", 8, "vision_chunk") == pytest.approx(k25, abs=1 << 16)
    assert _charge(kimi_vl, v, "H100", 1, "image") == pytest.approx(vl, abs=1 << 16)


@pytest.mark.parametrize("v", RELEASES[1:])
def test_the_dummy_item_is_027s(kimi, kimi_vl, v) -> None:
    for model in (kimi, kimi_vl):
        old = encoder_profile(model, (0, 27, 0), 262_144, 8192, 128)
        new = encoder_profile(model, v, 262_144, 8192, 128)
        assert old is not None and new is not None
        assert (new.modality, new.items, new.rows, new.patches) == (
            old.modality,
            old.items,
            old.rows,
            old.patches,
        )


@pytest.mark.parametrize(
    ("v", "tp1", "tp8"),
    [
        ((0, 28, 0), 664_428_672, 265_318_272),  # 0.27's apply_rope
        ((0, 29, 0), 513_545_472, 270_185_472),
        ((0, 30, 0), 513_545_472, 270_185_472),
        *[((0, m, 0), 449_190_272, 255_583_872) for m in range(31, 35)],
    ],
)
def test_kimi_k25_tower_peak_follows_its_rotation(kimi, v, tp1: int, tp8: int) -> None:
    gpu = get_gpu("H100")
    t = kimi.vision_output
    assert moonvit_transient_bytes(t, PATCHES, gpu, 1, v, 2) == pytest.approx(tp1)
    assert moonvit_transient_bytes(t, PATCHES, gpu, 8, v, 2) == pytest.approx(tp8)


def test_kimi_vl_tower_peak_is_027s_throughout(kimi_vl) -> None:
    t, gpu = kimi_vl.vision_output, get_gpu("H100")
    for tp in (1, 2):
        peaks = {moonvit_transient_bytes(t, 7 * 4356, gpu, tp, v, 2) for v in RELEASES}
        assert len(peaks) == 1 and peaks.pop() > 0


def test_from_032_kimi_k25_pixels_are_uint8(kimi) -> None:
    old = encoder_profile(kimi, (0, 31, 0), 262_144, 8192, 128, v2=False)
    assert old is not None and old.pixel_bytes == 19_874_400 and old.normalize_peak == 0
    h100 = get_gpu("H100")
    for v in RELEASES[5:]:
        new = encoder_profile(kimi, v, 262_144, 8192, 128, v2=False)
        assert new is not None
        assert (new.pixel_bytes, new.normalize_peak) == (9_937_200, 19_874_400)
        assert old.kept_bytes - new.kept_bytes == 9_937_200  # V1 keeps the pixel values
        # the same tower peak; the phase is 0.31's less the byte a value saved
        gap = phase_bytes(kimi, old, h100, 1, (0, 31, 0)) - phase_bytes(kimi, new, h100, 1, v)
        assert gap == 9_937_200


# --- the code read (skipped where the wheels are not unpacked) ---


def _strip_docstrings(node: ast.AST) -> ast.AST:
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]
    return node


def _src(v: tuple[int, int, int], rel: str, qualname: str) -> str:
    root = WHEELS[v]
    if not root.is_dir():
        pytest.skip(f"vLLM {_text(v)} wheel not unpacked at {root}")
    body: list[ast.stmt] = ast.parse((root / rel).read_text()).body
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next(
            n
            for n in body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.name == part
        )
        body = node.body
    assert node is not None
    return ast.unparse(_strip_docstrings(node))


K25, VIT = "model_executor/models/kimi_k25.py", "model_executor/models/kimi_k25_vit.py"
KVL, MOON = "model_executor/models/kimi_vl.py", "model_executor/models/moonvit.py"
FUSED = "transformers_utils/processors/kimi_k25_vision_fused.py"
SAME_AS_027 = [
    (K25, "MaxImageTokenMeta"),
    (K25, "KimiK25MultiModalProcessor._get_mm_fields_config"),
    (K25, "KimiK25ForConditionalGeneration._process_media_input"),
    (K25, "KimiK25ForConditionalGeneration.embed_multimodal"),
    (VIT, "MLP2"),
    (VIT, "MoonViT3dEncoder"),
    (VIT, "Learnable2DInterpPosEmbDivided_fixed"),
    (VIT, "Rope2DPosEmbRepeated"),
    (VIT, "tpool_patch_merger"),
    (VIT, "mm_projector_forward"),
    (FUSED, "navit_resize_image"),
    (FUSED, "navit_resize_video"),
    (KVL, "KimiVLProcessingInfo"),
    (KVL, "KimiVLForConditionalGeneration._process_image_pixels"),
    (KVL, "KimiVLMultiModalProjector"),
    (MOON, "MoonVitEncoderLayer"),
    (MOON, "MoonVisionPatchEmbed"),
    (MOON, "apply_rope"),
    (MOON, "Rope2DPosEmb"),
    (MOON, "MLP2"),
]


@pytest.mark.parametrize("v", RELEASES[1:])
@pytest.mark.parametrize(("rel", "qualname"), SAME_AS_027)
def test_the_code_read_at_027_is_unchanged(v, rel: str, qualname: str) -> None:
    assert _src(v, rel, qualname) == _src((0, 27, 0), rel, qualname)


@pytest.mark.parametrize("v", RELEASES[5:])
def test_from_032_the_dummy_chunk_only_gains_keywords(v) -> None:
    # 0.32 names uuid / prompt / video_idx on the dummy items: the same image and chunk
    tree = ast.parse(_src(v, K25, "KimiK25DummyInputsBuilder.get_dummy_mm_items"))
    added = {"uuid", "prompt", "video_idx"}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call):
            call.keywords = [k for k in call.keywords if k.arg not in added]
    old = _src((0, 31, 0), K25, "KimiK25DummyInputsBuilder.get_dummy_mm_items")
    assert ast.unparse(tree) == old


@pytest.mark.parametrize("v", RELEASES)
def test_kimi_k25_rotation_by_release(v) -> None:
    attn = _src(v, VIT, "MoonViTEncoderLayer.attention_qkvpacked")
    assert ("apply_rope(xq, xk" in attn) == (v < (0, 29, 0))
    assert ("rope_freqs_cis.real.contiguous()" in attn) == (v >= (0, 29, 0))
    assert ("packed_qk_rope_(xqkv" in attn) == (v >= (0, 31, 0))
    if (0, 29, 0) <= v < (0, 31, 0):  # the fp32 path is the only one
        assert "self.apply_rotary_emb(xk" in attn and "HAS_TRITON" not in attn


@pytest.mark.parametrize("v", RELEASES)
def test_kimi_k25_normalizes_on_the_device_from_032(v) -> None:
    cls = _src(v, K25, "KimiK25ForConditionalGeneration")
    assert ("supports_mm_device_do_normalize = True" in cls) == (v >= (0, 32, 0))
    embed = _src(v, VIT, "MoonVision3dPatchEmbed.forward")
    assert ("self.input_norm(" in embed) == (v >= (0, 32, 0))


@pytest.mark.parametrize("v", RELEASES[1:])
def test_the_encoder_cuda_graph_stays_opt_in(v) -> None:
    # 0.28 adds SupportsEncoderCudaGraph to Kimi-K2.5; the runner uses it only when asked
    cfg = _src(v, "config/compilation.py", "CompilationConfig")
    assert "cudagraph_mm_encoder: bool = False" in cfg


def test_034_still_builds_these_towers_from_model_executor() -> None:
    # 0.34 moves some models to vllm/models/<name>/ packages; not these
    root = WHEELS[(0, 34, 0)]
    if not root.is_dir():
        pytest.skip(f"vLLM 0.34.0 wheel not unpacked at {root}")
    registry = (root / "model_executor/models/registry.py").read_text()
    for arch, module in (
        ("KimiK25ForConditionalGeneration", "kimi_k25"),
        ("KimiVLForConditionalGeneration", "kimi_vl"),
        ("Mistral3ForConditionalGeneration", "mistral3"),
    ):
        entry = registry[registry.index(f'"{arch}": (') :].split(")", 1)[0]
        assert f'"{module}"' in entry
