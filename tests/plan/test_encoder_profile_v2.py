"""vLLM's V2 model runner and the multimodal profiling pass (kvscope.plan.encoder_profile),
against the unpacked 0.25.0-0.34.0 wheels.

The V2 ``profile_run`` (vllm/v1/worker/gpu/model_runner.py) runs the language model alone up to
0.26.0 and calls ``EncoderRunner.profile_encoder_cache`` first from 0.27.0, on the first
pipeline stage only; the encoder runs on one GPU batch of the dummy items
(``execute_mm_encoder``), whose pixel values are freed when it returns, and only the outputs
stay parked through the language model's pass. The published figures the rule meets are the
wheels' own code: the items are :class:`MultiModalBudget`'s, executed here from the wheels'
source on a grid of starts.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import (
    V2_PROFILES_ENCODER_SINCE,
    encoder_profile,
    phase_bytes,
    profiles_on_stage,
)
from kvscope.plan.memory import plan_memory
from kvscope.plan.mm_limits import parse_limits
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import offline_hub
from .vl_configs import dense_qwen3_vl

CONFIGS = Path(__file__).parent / "data" / "configs"
#: Unpacked PyPI wheels on this machine (each test skips where its wheel is absent).
WHEELS = {
    (0, 25, 0): Path("/tmp/vllm025/vllm"),
    (0, 26, 0): Path("/tmp/h19new_whl/u0.26.0/vllm"),
    (0, 27, 0): Path("/tmp/vllm0.27.0/vllm"),
    (0, 27, 1): Path("/tmp/h19new_whl/u0.27.1/vllm"),
    (0, 28, 0): Path("/tmp/vllm028/vllm"),
    (0, 29, 0): Path("/tmp/h19new_whl/u0.29.0/vllm"),
    (0, 30, 0): Path("/tmp/vllm030/vllm"),
    (0, 31, 0): Path("/tmp/vllm031/vllm"),
    (0, 32, 0): Path("/tmp/h19new_whl/u0.32.0/vllm"),
    (0, 33, 0): Path("/tmp/h19new_whl/u0.33.0/vllm"),
    (0, 34, 0): Path("/tmp/v034/x/vllm"),
}
V2_RUNNER = "v1/worker/gpu/model_runner.py"
ENCODER_RUNNER = "v1/worker/gpu/mm/encoder_runner.py"


def _root(v: tuple[int, int, int]) -> Path:
    root = WHEELS[v]
    if not root.is_dir():
        pytest.skip(f"vLLM {v} wheel not unpacked at {root}")
    return root


def _node(path: Path, qualname: str) -> ast.FunctionDef | ast.ClassDef:
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    node: ast.stmt | None = None
    for part in qualname.split("."):
        node = next(
            n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part
        )
        body = node.body
    assert isinstance(node, (ast.FunctionDef, ast.ClassDef))
    return node


def _src(path: Path, qualname: str) -> str:
    return ast.unparse(_node(path, qualname))


@pytest.mark.parametrize("v", [v for v in WHEELS if v < V2_PROFILES_ENCODER_SINCE])
def test_the_v2_profile_run_runs_no_encoder_before_027(v) -> None:
    run = _src(_root(v) / V2_RUNNER, "GPUModelRunner.profile_run")
    assert "encoder" not in run and "_dummy_run(" in run


@pytest.mark.parametrize("v", [v for v in WHEELS if v >= V2_PROFILES_ENCODER_SINCE])
def test_from_027_the_v2_profile_run_runs_the_encoder_on_the_first_stage(v) -> None:
    run = _node(_root(v) / V2_RUNNER, "GPUModelRunner.profile_run")
    tests = {ast.unparse(n.test): n for n in run.body if isinstance(n, ast.If)}
    first = tests["self.supports_mm_inputs and self.is_first_pp_rank"]
    assert "encoder_runner.profile_encoder_cache(" in ast.unparse(first)
    # the parked outputs are dropped after the language model's pass and the sampler run
    # (0.28 also drops them early for an encoder-only model, which has no such pass)
    tail = ast.unparse(run)
    assert tail.index("_dummy_run(") < tail.rindex("self.reset_encoder_cache()")
    assert profiles_on_stage(True, 0) and not profiles_on_stage(True, 1)


@pytest.mark.parametrize("v", [v for v in WHEELS if v > V2_PROFILES_ENCODER_SINCE])
def test_profile_encoder_cache_is_027s_in_every_later_wheel(v) -> None:
    same = _src(_root((0, 27, 0)) / ENCODER_RUNNER, "EncoderRunner.profile_encoder_cache")
    assert _src(_root(v) / ENCODER_RUNNER, "EncoderRunner.profile_encoder_cache") == same


@pytest.mark.parametrize("v", [v for v in WHEELS if v >= V2_PROFILES_ENCODER_SINCE])
def test_only_the_outputs_outlive_the_encoder_call(v) -> None:
    root = _root(v)
    profile = _src(root / ENCODER_RUNNER, "EncoderRunner.profile_encoder_cache")
    assert "self.encoder_cache.encoder_outputs.update(" in profile
    # the GPU batch (pixel values) is a local of execute_mm_encoder, never stored on self
    execute = _node(root / ENCODER_RUNNER, "EncoderRunner.execute_mm_encoder")
    text = ast.unparse(execute)
    assert "group_and_batch_mm_kwargs(" in text and "device=self.device" in text
    stores = [
        t
        for n in ast.walk(execute)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
    ]
    assert not any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in stores)
    # V1 (while it ships) keeps its batch in profile_run's frame: the pixels stay
    v1 = root / "v1/worker/gpu_model_runner.py"
    if v1.is_file():
        v1_run = _src(v1, "GPUModelRunner.profile_run")
        assert "batched_dummy_mm_inputs = self._get_mm_dummy_batch(" in v1_run
        assert "is_first_pp_rank" not in v1_run  # V1 profiles the encoder on every stage


def _wheel_items(root: Path, per_item: int, mml: int, mnbt: int, seqs: int, cap: int) -> int:
    """``MultiModalBudget._get_max_items`` and ``compute_mm_encoder_budget`` of the wheel,
    executed on a stub of their inputs (chunked prefill on, the V1 default)."""
    ns: dict[str, Any] = {"logger": logging.getLogger("wheel")}
    for rel, name in (
        ("v1/core/encoder_cache_manager.py", "compute_mm_encoder_budget"),
        ("multimodal/encoder_budget.py", "MultiModalBudget._get_max_items"),
    ):
        fn = _node(root / rel, name)
        assert isinstance(fn, ast.FunctionDef)
        fn.args.args[0].annotation = None  # quoted config types
        fn.returns = None
        code = ast.Module(body=[fn], type_ignores=[])
        exec(compile(ast.fix_missing_locations(code), str(root / rel), "exec"), ns)
    sched = SimpleNamespace(
        disable_chunked_mm_input=False,
        enable_chunked_prefill=True,
        max_num_batched_tokens=mnbt,
        max_num_encoder_input_tokens=mnbt,  # SchedulerConfig: both default to the token budget
        encoder_cache_size=mnbt,
    )
    compute, size = ns["compute_mm_encoder_budget"](sched, {"image": per_item})
    stub = SimpleNamespace(
        get_encoder_budget=lambda: min(compute, size),
        mm_limits={"image": cap},
        max_model_len=mml,
        scheduler_config=sched,
        max_num_reqs=seqs,
    )
    return int(ns["_get_max_items"](stub, "image", per_item)[1])


@pytest.fixture(scope="module")
def gemma():
    return load_model(str(CONFIGS / "gemma-3-4b-it.json"))


@pytest.mark.parametrize("v", [(0, 27, 0), (0, 31, 0), (0, 34, 0)])
@pytest.mark.parametrize(
    ("mml", "mnbt", "seqs", "cap"),
    [(32768, 8192, 256, 999), (2048, 8192, 2, 999), (32768, 2048, 256, 3), (4096, 100, 8, 999)],
)
def test_items_match_the_wheels_budget_code(gemma, v, mml, mnbt, seqs, cap) -> None:
    # Gemma 3: 256 embeddings an image; kvscope's items on the V2 runner against the wheel's
    limits = parse_limits(json.dumps({"image": cap}))
    p = encoder_profile(gemma, (0, 27, 0), mml, mnbt, seqs, limits, v2=True)
    assert p is not None
    assert p.items == _wheel_items(_root(v), 256, mml, mnbt, seqs, cap)


@pytest.fixture(scope="module", name="dense_qwen3_vl")
def _dense_qwen3_vl():
    return dense_qwen3_vl()


def test_dense_qwen3_vl_on_v2_parks_the_output_alone(dense_qwen3_vl) -> None:
    args = (65536, 8192, 256)
    assert encoder_profile(dense_qwen3_vl, (0, 25, 0), *args) is None
    assert encoder_profile(dense_qwen3_vl, (0, 26, 0), *args) is None
    for v in ((0, 27, 0), (0, 28, 0)):
        p = encoder_profile(dense_qwen3_vl, v, *args)  # the default runner: V2
        v1 = encoder_profile(dense_qwen3_vl, v, *args, v2=False)
        assert p is not None and v1 is not None
        # one 4096 x 4096 image: 16,384 rows of 4 x 2048 (deepstack) and 65,536 patches
        assert (p.modality, p.items, p.rows, p.patches) == ("image", 1, 16_384, 65_536)
        raw, pixels = 16_384 * 8192 * 2, 16_384 * 4 * 1536 * 2
        assert p.kept_bytes == raw and v1.kept_bytes == raw + pixels
        # the encoder phase (pixels + ViT transients) is the same on either runner
        h100 = get_gpu("H100")
        assert phase_bytes(dense_qwen3_vl, p, h100, 1, v) == phase_bytes(
            dense_qwen3_vl, v1, h100, 1, v
        )
        assert phase_bytes(dense_qwen3_vl, p, h100, 1, v) > p.pixel_bytes == pixels
    # 0.35 is past the newest release read: not modelled there
    assert encoder_profile(dense_qwen3_vl, (0, 35, 0), *args) is None


def _kv_bytes(model, version: str, limits) -> float:
    eng = EngineConfig(
        engine="vllm", engine_version=version, max_model_len=32768, limit_mm_per_prompt=limits
    )
    return plan_memory(model, get_gpu("H100"), Parallelism(tp=1), eng).kv_cache_gib * GIB


def test_a_gemma3_v2_start_at_027_gives_up_the_parked_images(gemma) -> None:
    # the pool with the tower against the same start at --limit-mm-per-prompt image=0 (no
    # tower, no pass): at 0.26 the difference is the tower's weights alone, at 0.27 it is
    # those plus the 32 parked outputs (32 x 256 x 2560 x 2 B), not the 154 MB of pixel values
    no_image = parse_limits('{"image": 0}')
    weights = _kv_bytes(gemma, "0.26.0", no_image) - _kv_bytes(gemma, "0.26.0", None)
    parked = _kv_bytes(gemma, "0.27.0", no_image) - _kv_bytes(gemma, "0.27.0", None) - weights
    assert parked == pytest.approx(32 * 256 * 2560 * 2, abs=4096)


def _semantics(path: Path, qualname: str) -> str:
    """The function without docstrings and type annotations (0.31 retypes some signatures)."""
    node = _node(path, qualname)
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            n.annotation = None
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
            first = n.body[0] if n.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                n.body = n.body[1:] or [ast.Pass()]
    text = ast.unparse(node)
    return "\n".join(line for line in text.splitlines() if line.strip())


#: the Qwen3-VL tower's code paths behind vit_peak and the items, by file
QWEN3_VL_PATHS = [
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionTransformer.forward"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionTransformer.rot_pos_emb"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionTransformer.fast_pos_embed_interpolate"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionBlock.forward"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionMLP.forward"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionPatchMerger.forward"),
    ("model_executor/models/qwen3_vl.py", "Qwen3_VisionPatchEmbed.forward"),
    ("model_executor/models/qwen3_vl.py", "Qwen3VLForConditionalGeneration._process_image_input"),
    ("model_executor/models/qwen2_5_vl.py", "Qwen2_5_VisionAttention.forward"),
    ("model_executor/layers/attention/mm_encoder_attention.py", "MMEncoderAttention._forward_fa"),
    ("model_executor/layers/rotary_embedding/common.py", "ApplyRotaryEmb.forward_cuda"),
    ("platforms/cuda.py", "CudaPlatformBase.get_vit_attn_backend"),
    ("multimodal/processing/context.py", "InputProcessingContext._postprocess_output"),
    ("multimodal/encoder_budget.py", "MultiModalBudget._get_max_items"),
    ("multimodal/encoder_budget.py", "MultiModalBudget.get_modality_with_max_tokens"),
]


@pytest.mark.parametrize("v", [(0, 29, 0), (0, 30, 0), (0, 31, 0)])
@pytest.mark.parametrize(("rel", "name"), QWEN3_VL_PATHS)
def test_the_qwen3_vl_tower_paths_are_028s_through_031(v, rel, name) -> None:
    assert _semantics(_root(v) / rel, name) == _semantics(_root((0, 28, 0)) / rel, name)


def test_032_changes_the_towers_input_cast_so_the_window_stops_there() -> None:
    rel, name = "model_executor/models/qwen3_vl.py", "Qwen3VLForConditionalGeneration"
    old = _src(_root((0, 31, 0)) / rel, f"{name}._process_image_input")
    new = _src(_root((0, 32, 0)) / rel, f"{name}._process_image_input")
    cast = "pixel_values = image_input['pixel_values'].type(self.visual.dtype)"
    assert cast in old and cast not in new


def test_from_029_every_qwen3_vl_style_start_is_v2_and_parks_the_output_alone(
    dense_qwen3_vl,
) -> None:
    with offline_hub():
        qwen35 = load_model("Qwen/Qwen3.5-0.8B")  # hybrid: V1 at 0.28, V2 from 0.29
    a100 = get_gpu("A100-PCIe-80GB")
    at_028 = encoder_profile(qwen35, (0, 28, 0), 8192, 2048, 32)
    assert at_028 is not None and at_028.kept_bytes == 16_384 * (1024 + 4 * 1536) * 2
    for v in ((0, 29, 0), (0, 30, 0), (0, 31, 0)):
        p = encoder_profile(qwen35, v, 8192, 2048, 32)
        assert p is not None and p.kept_bytes == 16_384 * 1024 * 2  # no pixel values
        assert phase_bytes(qwen35, p, a100, 1, v) == phase_bytes(qwen35, at_028, a100, 1, v)
        dense = encoder_profile(dense_qwen3_vl, v, 65536, 8192, 256)
        assert dense is not None and dense.kept_bytes == 16_384 * 8192 * 2
    assert encoder_profile(qwen35, (0, 35, 0), 8192, 2048, 32) is None


FIXED_SQUARE_PATHS = [
    ("model_executor/models/gemma3_mm.py", "Gemma3ProcessingInfo"),
    ("model_executor/models/gemma3_mm.py", "Gemma3DummyInputsBuilder"),
    ("model_executor/models/gemma3_mm.py", "Gemma3MultiModalProcessor"),
    ("model_executor/models/gemma3_mm.py", "Gemma3ForConditionalGeneration.embed_multimodal"),
    ("model_executor/models/mistral3.py", "Mistral3ProcessingInfo"),
    ("model_executor/models/mistral3.py", "Mistral3DummyInputsBuilder"),
    ("model_executor/models/mistral3.py", "Mistral3MultiModalProcessor"),
    ("model_executor/models/pixtral.py", "PixtralProcessingInfo"),
    ("model_executor/models/pixtral.py", "PixtralDummyInputsBuilder"),
    ("model_executor/models/pixtral.py", "PixtralMultiModalProcessor"),
    ("model_executor/models/mllama4.py", "Mllama4ProcessingInfo"),
    ("model_executor/models/mllama4.py", "Mllama4DummyInputsBuilder"),
    ("model_executor/models/mllama4.py", "Mllama4MultiModalProcessor"),
    ("multimodal/inputs.py", "PlaceholderRange.get_num_embeds"),
    ("multimodal/encoder_budget.py", "get_mm_max_toks_per_item"),
]


@pytest.mark.parametrize(("rel", "name"), FIXED_SQUARE_PATHS)
def test_the_fixed_square_towers_process_at_028_as_at_027(rel, name) -> None:
    old = _src(_root((0, 27, 0)) / rel, name)
    assert _src(_root((0, 28, 0)) / rel, name) == old


def test_gemma3_and_llama4_at_028(gemma) -> None:
    # Gemma 3 (dense: V2) parks its 32 outputs alone; 0.29-0.34 are read the same
    # (test_encoder_releases), 0.35 is not
    p = encoder_profile(gemma, (0, 28, 0), 32768, 8192, 256)
    assert p is not None and p.items == 32 and p.kept_bytes == 32 * 256 * 2560 * 2
    assert encoder_profile(gemma, (0, 35, 0), 32768, 8192, 256) is None
    # Llama 4 Scout (MoE, off the 0.28 list: V1) keeps its three images' pixel values too
    with offline_hub():
        scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    s = encoder_profile(scout, (0, 28, 0), 32768, 8192, 256)
    assert s is not None
    assert s.kept_bytes == 3 * (2448 * 5120 + 17 * 3 * 336 * 336) * 2


@pytest.mark.parametrize("v", [v for v in WHEELS if v >= V2_PROFILES_ENCODER_SINCE])
def test_the_v2_encoder_cache_reserves_no_budget_sized_tensor(v) -> None:
    # EncoderCache is two dicts: the budget sizes the items profiled, never a preallocation
    init = _src(_root(v) / "v1/worker/gpu/mm/encoder_cache.py", "EncoderCache.__init__")
    assert "torch." not in init.replace("torch.Tensor", "")
    assert "self.encoder_outputs: dict[str, torch.Tensor] = {}" in init
