"""SGLang's ``--moe-runner-backend`` and the bytes DeepSeek V4's FP4 experts take under it.

Each expected figure is the engine's own tensor allocation, written out from the shapes in
SGLang's code (not from the planner's bytes-per-parameter constants):

- ``Fp8MoEMethod.create_weights`` (``is_fp4_expert``, srt/layers/quantization/fp8.py at
  0.5.12-0.5.14): ``w13_weight`` int8 [E, 2I, H/2], ``w2_weight`` int8 [E, H, I/2],
  ``w13_weight_scale_inv`` float32 [E, 2I, H/32], ``w2_weight_scale_inv`` float32 [E, H, I/32].
- ``Mxfp4MarlinMoEMethod.create_weights`` (mxfp4_marlin_moe.py): the same tensors, I rounded up
  to 128 and H to 256 from 0.5.14; ``prepare_moe_mxfp4_layer_for_marlin`` (marlin_utils_fp4.py)
  adds ``w13/w2_weight_scale`` of the same element counts as the float32 scales, one byte each
  (``mxfp4_marlin_process_scales`` -> float8_e8m0fnu), and leaves ``*_weight_scale_inv``.
  From 0.5.16 ``create_weights`` makes the ``*_weight_scale_inv`` one-byte e8m0 (``_e8m0_ones``)
  and the repack deletes them; at 0.5.23 the width stays logical on SM90 and the repack pads it
  to a multiple of 64 (the hidden size, rounded to 256, being a multiple of 128).
- ``Mxfp4FlashinferCutlassMoEMethod`` / ``Mxfp4FlashinferTrtllmMoEMethod``: the float32 scales
  replaced by uint8 ones.
"""

from __future__ import annotations

import math

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.plan.sglang_moe_runner import resolve_moe_runner_backend, sglang_expert_layout
from kvscope.plan.weights import all_stage_weights
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

FLASH, PRO = "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"


def _round_up(x: int, m: int) -> int:
    return math.ceil(x / m) * m


def engine_expert_bytes(
    hidden: int, inter: int, runner: str, version: tuple[int, ...], sm90: bool = True
) -> int:
    """Bytes SGLang allocates for one routed expert of one rank (``inter`` = I per rank)."""
    if runner == "marlin" and version >= (0, 5, 14):
        hidden = _round_up(hidden, 256)
        inter = _round_up(inter, 64 if sm90 and version >= (0, 5, 23) else 128)
    values = 2 * inter * hidden // 2 + hidden * inter // 2  # int8, two 4-bit values each
    groups = 2 * inter * hidden // 32 + hidden * inter // 32  # one scale per 32 values
    if runner == "flashinfer_mxfp4":
        return values + groups  # uint8 e8m0 scales
    if runner == "marlin" and version >= (0, 5, 16):
        return values + groups  # e8m0 Marlin scales; the loader's scale_inv deleted
    if runner == "marlin":
        return values + 4 * groups + groups  # float32 scale_inv kept + e8m0 Marlin scales
    return values + 4 * groups  # float32 scale_inv


def _planned_expert_bytes(model_id: str, gpu: str, tp: int, runner: str, v: tuple[int, ...]):
    model = load_model(model_id)
    par = Parallelism(tp=tp)
    layout = sglang_expert_layout(model, get_gpu(gpu), v, runner, par)
    w = all_stage_weights(model, par, 0, layout)[0]
    return model, w.by_component["routed_experts"]


@pytest.mark.parametrize(
    ("model_id", "gpu", "tp", "runner", "version"),
    [
        (FLASH, "H200", 4, "auto", (0, 5, 14)),
        (FLASH, "H200", 4, "marlin", (0, 5, 14)),
        (FLASH, "H200", 4, "flashinfer_mxfp4", (0, 5, 14)),
        (FLASH, "H100", 8, "triton", (0, 5, 12)),
        (PRO, "H20", 16, "marlin", (0, 5, 12)),  # 192 a rank: no pads before 0.5.14
        (PRO, "H20", 16, "marlin", (0, 5, 14)),  # 192 -> 256
        (PRO, "H200", 8, "marlin", (0, 5, 14)),  # 384: already a multiple of 128
        (FLASH, "H200", 4, "marlin", (0, 5, 15)),  # float32 scale_inv still kept
        (FLASH, "H200", 4, "marlin", (0, 5, 16)),  # e8m0 loader scales, deleted after repack
        (PRO, "H20", 16, "marlin", (0, 5, 20)),  # 192 -> 256
        (PRO, "H20", 16, "marlin", (0, 5, 23)),  # SM90: 192 stays (a multiple of 64)
        (PRO, "RTX-PRO-6000-Blackwell-96GB", 16, "marlin", (0, 5, 23)),  # SM120: 192 -> 256
    ],
)
def test_routed_expert_bytes_follow_the_engine_tensors(
    model_id: str, gpu: str, tp: int, runner: str, version: tuple[int, ...]
) -> None:
    model, planned = _planned_expert_bytes(model_id, gpu, tp, runner, version)
    moe = model.moe_layer
    assert moe is not None
    sm90 = get_gpu(gpu).compute_capability.startswith("9")
    per_expert = engine_expert_bytes(
        model.hidden_size, moe.expert_intermediate_size // tp, runner, version, sm90
    )
    moe_layers = sum(1 for layer in model.layers if layer.ffn.is_moe)
    assert planned == pytest.approx(moe_layers * moe.num_experts * per_expert, rel=1e-9)


def test_marlin_costs_v4_flash_two_gib_a_rank_at_tp4() -> None:
    """The figure an earlier pass estimated (1/32 B a routed parameter): ~2.0 GiB a rank."""
    _, auto = _planned_expert_bytes(FLASH, "H200", 4, "auto", (0, 5, 14))
    _, marlin = _planned_expert_bytes(FLASH, "H200", 4, "marlin", (0, 5, 14))
    assert 1.9 < (marlin - auto) / GIB < 2.1


def test_marlin_pads_v4_pro_at_tp16_from_0_5_14_only() -> None:
    _, old = _planned_expert_bytes(PRO, "H20", 16, "marlin", (0, 5, 12))
    _, new = _planned_expert_bytes(PRO, "H20", 16, "marlin", (0, 5, 14))
    assert new / old == pytest.approx(256 / 192)


def test_auto_is_marlin_on_sm120_from_0_5_13() -> None:
    v4, sm120 = load_model(FLASH), get_gpu("RTX-PRO-6000-Blackwell-96GB")
    assert resolve_moe_runner_backend(v4, sm120, (0, 5, 12)) == "auto"
    assert resolve_moe_runner_backend(v4, sm120, (0, 5, 13)) == "marlin"
    assert resolve_moe_runner_backend(v4, get_gpu("H200"), (0, 5, 14)) == "auto"
    assert resolve_moe_runner_backend(v4, sm120, (0, 5, 13), "triton") == "triton"


def test_marlin_shrinks_the_sglang_pool_and_other_models_keep_their_bytes() -> None:
    gpu = get_gpu("H200")

    def plan(model: ModelSpec, runner: str, tp: int) -> MemoryPlan:
        eng = EngineConfig(engine="sglang", engine_version="0.5.14", moe_runner_backend=runner)
        return plan_memory(model, gpu, Parallelism(tp=tp), eng)

    v4 = load_model(FLASH)
    auto, marlin = plan(v4, "auto", 4), plan(v4, "marlin", 4)
    assert marlin.weights_gib - auto.weights_gib == pytest.approx(2.02, abs=0.02)
    assert marlin.kv_tokens < auto.kv_tokens
    v3 = load_model("deepseek-ai/DeepSeek-V3")  # FP8 block experts: the checkpoint's bytes
    assert plan(v3, "marlin", 8).weights_gib == plan(v3, "auto", 8).weights_gib


@pytest.mark.parametrize(
    ("model_id", "gpu", "tp", "runner", "needle"),
    [
        (FLASH, "B200", 4, "marlin", "needs SM90 or SM120"),
        (FLASH, "MI300X", 4, "marlin", "needs SM90 or SM120"),
        (PRO, "H20", 16, "flashinfer_mxfp4", "multiples of 128"),
    ],
)
def test_runner_the_engine_refuses(
    model_id: str, gpu: str, tp: int, runner: str, needle: str
) -> None:
    with pytest.raises(KvscopeError, match=needle):
        sglang_expert_layout(load_model(model_id), get_gpu(gpu), (0, 5, 14), runner,
                             Parallelism(tp=tp))  # fmt: skip


def test_vllm_refuses_the_flag_and_unknown_runners_are_refused() -> None:
    with pytest.raises(KvscopeError, match="--moe-runner-backend is SGLang's"):
        EngineConfig(engine="vllm", moe_runner_backend="marlin")
    with pytest.raises(KvscopeError, match="must be one of"):
        EngineConfig(engine="sglang", moe_runner_backend="trition")


@pytest.mark.parametrize(
    ("gpu", "runner", "version", "width", "hidden"),
    [
        # Mxfp4MoEMethod.create_weights: w13 [E, 2 x width, hidden/2] uint8 and its scales.
        ("H100", "auto", (0, 5, 14), 768, 2880),  # triton_kernel: 720 -> 64-aligned
        ("H100", "auto", (0, 5, 9), 736, 2880),  # 0.5.9 aligns to mxfp4_block (32)
        ("H100", "marlin", (0, 5, 14), 768, 3072),  # 128 / 256
        ("H100", "flashinfer_mxfp4", (0, 5, 14), 768, 2944),  # SM90 CUTLASS rebuild: 128/128
        ("B200", "auto", (0, 5, 14), 768, 3072),  # flashinfer_mxfp4 on SM100: 256 / 256
        ("B200", "auto", (0, 5, 23), 768, 2944),  # 128 / 128 at 0.5.23
        ("B200", "triton", (0, 5, 14), 768, 2880),
    ],
)
def test_gpt_oss_mxfp4_pads_by_runner(
    gpu: str, runner: str, version: tuple[int, ...], width: int, hidden: int
) -> None:
    model, par = load_model("openai/gpt-oss-120b"), Parallelism(tp=4)
    layout = sglang_expert_layout(model, get_gpu(gpu), version, runner, par)
    padded = all_stage_weights(model, par, 0, layout)[0].by_component["routed_experts"]
    bare = all_stage_weights(model, par)[0].by_component["routed_experts"]
    assert padded / bare == pytest.approx(width / 720 * hidden / 2880, rel=1e-9)


def test_gpt_oss_auto_runner_by_gpu_and_release() -> None:
    oss = load_model("openai/gpt-oss-20b")
    sm120 = get_gpu("RTX-PRO-6000-Blackwell-96GB")
    assert resolve_moe_runner_backend(oss, get_gpu("B200"), (0, 5, 12)) == "flashinfer_mxfp4"
    assert resolve_moe_runner_backend(oss, sm120, (0, 5, 13)) == "triton_kernel"
    assert resolve_moe_runner_backend(oss, sm120, (0, 5, 14)) == "marlin"
    assert resolve_moe_runner_backend(oss, sm120, (0, 5, 23)) == "flashinfer_mxfp4"
    assert resolve_moe_runner_backend(oss, get_gpu("H100"), (0, 5, 23)) == "triton_kernel"
