"""SGLang's ``--moe-runner-backend``: which MoE runner a start gets (``auto`` resolved by
release and GPU) and how that runner stores DeepSeek V4's FP4 routed experts (bytes per expert
parameter, per-rank pads), read in ``srt/server_args.py``, ``srt/layers/quantization/fp8.py``,
``mxfp4_marlin_moe.py``, ``mxfp4_flashinfer_cutlass_moe.py``,
``mxfp4_flashinfer_trtllm_moe.py`` and ``marlin_utils_fp4.py`` of the 0.5.12, 0.5.13 and
0.5.14 wheels (the Marlin path also at 0.5.15, 0.5.16, 0.5.18, 0.5.20 and 0.5.23).

MXFP4 checkpoints (gpt-oss; ``Mxfp4MoEMethod.create_weights`` in mxfp4.py, read at 0.5.9,
0.5.12, 0.5.13, 0.5.14 and 0.5.23; a release between two read ones takes the earlier one's
rule) keep one-byte scales and pad the per-rank expert width (and for some runners the hidden
size) by runner. FP8-block and W4A16 experts keep the checkpoint's bytes under every runner:
``Fp8MoEMethod`` has no Marlin MoE path, and the W4A16 Marlin repack
(``CompressedTensorsWNA16MoE``, ``gptq_marlin_moe_repack`` + ``replace_parameter``) swaps
tensors of the same size, adding only a ``workspace`` of SMs x 4 int32 a layer.
"""

from __future__ import annotations

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.weights import ExpertLayout
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: V4 FP4 experts as ``Fp8MoEMethod.create_weights`` loads them (``is_fp4_expert``): int8-packed
#: 4-bit values plus one float32 ``w13/w2_weight_scale_inv`` per 32, where the checkpoint keeps
#: one e8m0 byte (0.53125). The triton / DeepGEMM runners on Hopper keep that (0.5.12-0.5.14).
SGLANG_DSV4_FP4_EXPERT_BYTES = 0.5 + 4 / 32
#: ``--moe-runner-backend marlin`` (``Fp8Config.get_quant_method`` returns
#: ``Mxfp4MarlinMoEMethod``): ``prepare_moe_mxfp4_layer_for_marlin`` repacks the 4-bit values
#: in place of ``w13/w2_weight`` and stores one-byte e8m0 Marlin scales as a new
#: ``w13/w2_weight_scale`` (``mxfp4_marlin_process_scales``), while the float32
#: ``*_weight_scale_inv`` stays registered (0.5.12-0.5.15): 1/32 B a parameter more. Its
#: ``workspace`` (SMs x 4 int32 a layer) is a few KiB.
SGLANG_DSV4_FP4_MARLIN_EXPERT_BYTES = SGLANG_DSV4_FP4_EXPERT_BYTES + 1 / 32
#: ``Mxfp4MarlinMoEMethod.create_weights`` rounds the per-rank intermediate width up to 128
#: and the hidden size up to 256 from 0.5.14 (0.5.12 and 0.5.13 allocate the checkpoint's
#: widths, and ``prepare_moe_mxfp4_layer_for_marlin`` pads nothing there).
SGLANG_MARLIN_PADS_SINCE = (0, 5, 14)
#: From 0.5.16 ``Mxfp4MarlinMoEMethod.create_weights`` loads the scales as one-byte e8m0
#: (``_e8m0_ones``) and ``prepare_moe_mxfp4_layer_for_marlin`` deletes the loader-format
#: ``*_weight_scale_inv`` after the repack ("release the loader-format parameters"), so the
#: experts hold the checkpoint's 0.53125 B a parameter (4-bit values and one e8m0 Marlin scale
#: per 32). Absent from the 0.5.14 and 0.5.15 wheels, present at 0.5.16, 0.5.18, 0.5.20, 0.5.23.
SGLANG_MARLIN_E8M0_SCALES_SINCE = (0, 5, 16)
#: 0.5.23's ``create_weights`` keeps the per-rank width logical on SM90 ("early padding to 128
#: turns a TP8 width of 288 into 384 instead of 320"); the repack then pads it to 64, the
#: (256-rounded) hidden size being a multiple of 128 (``prepare_moe_mxfp4_layer_for_marlin``).
#: Other GPUs, and SM90 up to 0.5.20, round it to 128 at creation.
SGLANG_MARLIN_SM90_WIDTH64_SINCE = (0, 5, 23)
#: 0.5.13 adds "Use marlin as MoE runner backend on SM120 for DeepseekV4"
#: (``ServerArgs._handle_model_specific_adjustments``): ``auto`` becomes ``marlin`` on SM120.
SGLANG_DSV4_SM120_MARLIN_SINCE = (0, 5, 13)


#: gpt-oss MXFP4 runners read at these releases (``Mxfp4MoEMethod.create_weights``).
_V0_5_12, _V0_5_14, _V0_5_23 = (0, 5, 12), (0, 5, 14), (0, 5, 23)


def _cc_major(gpu: GPUSpec) -> int:
    cc = gpu.compute_capability
    return int(cc.split(".")[0]) if cc else 9


def has_dsv4_fp4_experts(model: ModelSpec) -> bool:
    """DeepSeek V4 with 4-bit routed experts (``SGLANG_DSV4_FP4_EXPERTS``, on by default)."""
    eb = model.quantization.expert_bytes
    return model.is_deepseek_v4 and eb is not None and eb < 0.6


def resolve_moe_runner_backend(
    model: ModelSpec, gpu: GPUSpec, version: tuple[int, ...], backend: str = "auto"
) -> str:
    """The runner ``ServerArgs`` settles on; only the V4 choice that changes bytes is resolved
    (``auto`` stays ``auto`` elsewhere: its pick keeps the checkpoint's expert bytes)."""
    if backend != "auto":
        return backend
    if model.quantization.method == "mxfp4" and gpu.vendor.lower() == "nvidia":
        # GptOssForCausalLM in ServerArgs (srt/arg_groups/model_overrides/gpt_oss.py at 0.5.23):
        # SM100 -> flashinfer_mxfp4; SM120 -> triton_kernel (0.5.12, 0.5.13), marlin (0.5.14),
        # flashinfer_mxfp4 (0.5.23); otherwise triton_kernel (ep 1, no --quantization).
        major = _cc_major(gpu)
        if major == 10:
            return "flashinfer_mxfp4"
        if major == 12 and version >= _V0_5_23:
            return "flashinfer_mxfp4"
        if major == 12 and version >= _V0_5_14:
            return "marlin"
        return "triton_kernel"
    if (
        model.is_deepseek_v4
        and gpu.vendor.lower() == "nvidia"
        and _cc_major(gpu) == 12
        and version >= SGLANG_DSV4_SM120_MARLIN_SINCE
    ):
        return "marlin"
    return "auto"


def _expert_width(model: ModelSpec, par: Parallelism) -> int:
    """Per-rank intermediate width of one routed expert (whole under expert parallelism)."""
    moe = model.moe_layer
    width = moe.expert_intermediate_size if moe else 0
    return width if par.ep else width // par.tp


def sglang_expert_layout(
    model: ModelSpec,
    gpu: GPUSpec,
    version: tuple[int, ...],
    backend: str = "auto",
    par: Parallelism | None = None,
) -> ExpertLayout:
    """How SGLang's MoE runner stores the routed experts on this GPU (checkpoint bytes for
    everything but DeepSeek V4's FP4 experts on NVIDIA parts)."""
    if gpu.vendor.lower() != "nvidia":
        if backend == "marlin" and has_dsv4_fp4_experts(model):
            raise KvscopeError(
                f"SGLang's Marlin runner for DeepSeek V4's FP4 experts needs SM90 or SM120; "
                f"{gpu.name} is not an NVIDIA GPU.",
                "Drop --moe-runner-backend marlin (MXFP4 Marlin requires SM90 or SM120).",
            )
        return ExpertLayout()
    if model.quantization.method == "mxfp4" and not model.is_deepseek_v4:
        return _mxfp4_layout(_cc_major(gpu), version, resolve_moe_runner_backend(
            model, gpu, version, backend))  # fmt: skip
    if not has_dsv4_fp4_experts(model):
        return ExpertLayout()
    par = par or Parallelism()
    major = _cc_major(gpu)
    runner = resolve_moe_runner_backend(model, gpu, version, backend)
    if runner == "marlin":
        if major not in (9, 12):
            raise KvscopeError(
                f"SGLang's Marlin runner for DeepSeek V4's FP4 experts needs SM90 or SM120; "
                f"{gpu.name} is SM{gpu.compute_capability.replace('.', '')}.",
                "Drop --moe-runner-backend marlin (MXFP4 Marlin requires SM90 or SM120).",
            )
        inter_pad, hidden_pad = (128, 256) if version >= SGLANG_MARLIN_PADS_SINCE else (1, 1)
        if major == 9 and version >= SGLANG_MARLIN_SM90_WIDTH64_SINCE:
            inter_pad = 64
        if version >= SGLANG_MARLIN_E8M0_SCALES_SINCE:
            return ExpertLayout(inter_pad, hidden_pad)  # the checkpoint's bytes
        return ExpertLayout(inter_pad, hidden_pad, bytes=SGLANG_DSV4_FP4_MARLIN_EXPERT_BYTES)
    if runner == "flashinfer_mxfp4":
        if major == 9 and (model.hidden_size % 128 or _expert_width(model, par) % 128):
            raise KvscopeError(
                "SGLang's FlashInfer MXFP4 runner on SM90 needs the hidden size and the "
                f"per-rank expert width in multiples of 128 ({model.hidden_size}, "
                f"{_expert_width(model, par)}).",
                "Use --moe-runner-backend marlin or auto, or another --tp.",
            )
        # SM90: Mxfp4FlashinferCutlassMoEMethod; SM100: Mxfp4FlashinferTrtllmMoEMethod. Both
        # replace the float32 scales by one-byte e8m0 ones: the checkpoint's 0.53125.
        return ExpertLayout()
    if major in (10, 11):
        # Blackwell's DeepGEMM packs the scales back to e8m0 (transform_sf_into_required_layout).
        return ExpertLayout()
    return ExpertLayout(bytes=SGLANG_DSV4_FP4_EXPERT_BYTES)


def _mxfp4_layout(major: int, version: tuple[int, ...], runner: str) -> ExpertLayout:
    """``Mxfp4MoEMethod.create_weights``'s pads (per-rank width, hidden) by runner and GPU; the
    weights and scales stay one byte per two values / per 32 (the checkpoint's bytes)."""
    if runner == "marlin" and version >= _V0_5_14:
        return ExpertLayout(128, 256)
    if runner == "deep_gemm" and version >= _V0_5_23:
        return ExpertLayout()
    if runner == "flashinfer_mxfp4":
        if major == 10:
            return ExpertLayout(128, 128) if version >= _V0_5_23 else ExpertLayout(256, 256)
        # SM90 (0.5.12+) and SM120 (0.5.23) CUTLASS: the buffer is rebuilt padded after load.
        if (major == 9 and version >= _V0_5_12) or (major == 12 and version >= _V0_5_23):
            return ExpertLayout(128, 128)
    # triton_kernels' alignment: 64 on SM100 and, from 0.5.12, everywhere; 32 before.
    return ExpertLayout(64 if major == 10 or version >= _V0_5_12 else 32)
