"""Bytes per GPU of vLLM's MXFP4 experts on Hopper (Triton or Marlin) and gpt-oss's float32 rope.

Both are what "Model loading took" counts on one GPU, in bytes.

"Model loading took" is ``DeviceMemoryProfiler.consumed_memory`` around ``load_model``
(vllm/utils/mem_utils.py; ``get_current_memory_usage`` in vllm/platforms/cuda.py is
``torch.cuda.max_memory_allocated`` right after ``reset_peak_memory_stats``): the tensors
alive at the end of loading, whether or not the kernel still reads them.

Hopper (SM90), vLLM 0.12.0 to 0.31 (read in the 0.12.0, 0.13.0, 0.14.1, 0.15.1, 0.16.0,
0.17.0, 0.19.0, 0.20.0, 0.21.0, 0.22.1, 0.23.0, 0.25.0, 0.27.0, 0.28.0, 0.30.0 and 0.31.0
wheels): the wheels bundle ``triton_kernels`` (``vllm/third_party``, absent at 0.11.x), so
without a FlashInfer or Marlin override the MXFP4 MoE runs on the Triton backend
(``get_mxfp4_backend`` in quantization/mxfp4.py up to 0.17, ``_get_priority_backends`` in
fused_moe/oracle/mxfp4.py from 0.19). Per GPU and expert, with ``I`` the per-rank
intermediate width rounded up to 64 (``create_weights`` / ``mxfp4_round_up_hidden_size_and_
intermediate_size``) and ``H`` the hidden size:

- ``_swizzle_mxfp4`` (quantization/utils/mxfp4_utils.py) re-lays the 4-bit values with
  ``HopperMXValueLayout``: gate_up as a (H/2, 2I) byte matrix, down as (I/2, H). The bundled
  ``triton_kernels`` of 0.17.0-0.21.0 pre-pads both byte dimensions to multiples of 64
  ("Pre-pad both matrix dims to multiples of 64", tensor_details/layout_details/
  hopper_value.py); those of 0.12.0-0.16.0 and of 0.22.0 onwards pad only to the mma tile
  (16 rows of the transposed matrix, 32 bytes along K).
- ``HopperMXScaleLayout`` (num_warps 8) pads the scale rows (2I for gate_up, H for down) to
  multiples of 256 and the scale columns to 2.
- The checkpoint-shaped ``w13/w2_weight_scale`` parameters stay registered (the Triton branch
  keeps the swizzled scales in ``PrecisionConfig``, deleting only ``w13/w2_weight``), so the
  one-byte scales are held twice.
- The biases become float32 (``w13_bias.to(torch.float32)``).

Hopper before the bundle (read in the 0.10.2, 0.11.0 and 0.11.2 wheels): ``get_mxfp4_backend``
takes Marlin when ``has_triton_kernels()`` is false, as in a plain ``pip install vllm`` ("Using
Marlin backend"), so the experts take Marlin's pads of :func:`kvscope.plan.weights.expert_layout`
(width to 128, hidden size to 256). gpt-oss-120b on one 80 GB H100 at 0.11.2 logs 65.97 GiB loaded
(Kaggle start of blog.huikang.dev, 2025-12-28): 65.87 with Marlin's pads, 64.53 with a 256 width
pad; vllm-project/vllm#27508 (0.11.0, one H100) logs 1.71 GiB of KV: 1.69 planned with the pads,
3.04 without.

gpt-oss (``vllm/model_executor/models/gpt_oss.py``, 0.10.1.1 to 0.34.0): ``OAIAttention``
calls ``get_rope(..., dtype=torch.float32)``, so its one YaRN ``cos_sin_cache``
(``original_max_position_embeddings x factor`` rows of ``head_dim``) is float32.
"""

from __future__ import annotations

from kvscope.plan.config import Parallelism
from kvscope.plan.weights import ExpertLayout, expert_layout
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First wheel that bundles ``triton_kernels`` (vllm/third_party/triton_kernels).
TRITON_KERNELS_BUNDLED_SINCE = (0, 12, 0)
#: Releases whose Hopper default is Marlin for want of ``triton_kernels`` (0.10.2-0.11.2 wheels).
HOPPER_MARLIN = ((0, 10, 2), (0, 12, 0))
#: Last release read whose Triton path keeps the checkpoint-shaped scales beside the swizzled
#: ones; 0.34.0 stores the swizzled tensors in the parameters' storage
#: (``store_params_in_triton``), a layout not modelled here.
TRITON_LAYOUT_UNTIL = (0, 32, 0)
#: Releases whose bundled ``HopperMXValueLayout.swizzle_data`` pre-pads to 64 bytes.
HOPPER_VALUE_PREPAD = ((0, 17, 0), (0, 22, 0))
#: Width rounding of the Triton backend (``round_up(intermediate_size, 64)``).
TRITON_WIDTH_ALIGN = 64
#: ``HopperMXScaleLayout``: rows to ``2 * num_warps * 2 * 8`` (num_warps 8), columns to 2.
SCALE_ROW_ALIGN = 2 * 8 * 2 * 8
SCALE_COL_ALIGN = 2
#: MXFP4 block: one e8m0 scale byte per 32 values.
MX_BLOCK = 32


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def hopper_triton(gpu: GPUSpec, version: tuple[int, ...]) -> bool:
    """Whether vLLM ``version`` on ``gpu`` runs MXFP4 experts on the Triton Hopper layout."""
    cc = gpu.compute_capability
    major = int(cc.split(".")[0]) if cc else 0
    is_hopper = gpu.vendor.lower() == "nvidia" and major == 9
    return is_hopper and TRITON_KERNELS_BUNDLED_SINCE <= version < TRITON_LAYOUT_UNTIL


def hopper_marlin(gpu: GPUSpec, version: tuple[int, ...]) -> bool:
    """Whether vLLM ``version`` on ``gpu`` falls back to Marlin MXFP4 experts on Hopper."""
    cc = gpu.compute_capability
    major = int(cc.split(".")[0]) if cc else 0
    lo, hi = HOPPER_MARLIN
    return gpu.vendor.lower() == "nvidia" and major == 9 and lo <= version < hi


def triton_expert_bytes(hidden: int, width: int, version: tuple[int, ...]) -> int:
    """Bytes of one routed expert on one GPU under the Triton Hopper path.

    ``width`` is the expert's per-rank intermediate width before the backend's rounding.
    """
    i = _up(width, TRITON_WIDTH_ALIGN)
    lo, hi = HOPPER_VALUE_PREPAD
    # rows: the output side of the transposed byte matrix; cols: its reduction side
    row_align, col_align = (64, 64) if lo <= version < hi else (16, 32)  # else the mma tile
    gate_up = _up(2 * i, row_align) * _up(hidden // 2, col_align)
    down = _up(hidden, row_align) * _up(i // 2, col_align)
    values = gate_up + down
    gate_up_scales = _up(2 * i, SCALE_ROW_ALIGN) * _up(hidden // MX_BLOCK, SCALE_COL_ALIGN)
    down_scales = _up(hidden, SCALE_ROW_ALIGN) * _up(i // MX_BLOCK, SCALE_COL_ALIGN)
    swizzled_scales = gate_up_scales + down_scales
    checkpoint_scales = 2 * i * (hidden // MX_BLOCK) + hidden * (i // MX_BLOCK)
    biases = 4 * (2 * i + hidden)
    return values + swizzled_scales + checkpoint_scales + biases


def vllm_expert_layout(
    model: ModelSpec, gpu: GPUSpec, engine: str, version: tuple[int, ...], par: Parallelism
) -> ExpertLayout:
    """vLLM's expert layout: the Triton Hopper one where it applies (as bytes per expert
    parameter of :func:`kvscope.plan.weights.rank_weights`), else
    :func:`kvscope.plan.weights.expert_layout`."""
    moe = model.moe_layer
    if engine != "vllm" or moe is None or model.quantization.method != "mxfp4":
        return expert_layout(model, gpu, engine)
    if hopper_marlin(gpu, version):
        return ExpertLayout(128, 256)
    if not hopper_triton(gpu, version):
        return expert_layout(model, gpu, engine)
    share = 1 if par.ep else par.tp
    width = moe.expert_intermediate_size // share
    counted = moe.one_expert_params() / share  # what rank_weights multiplies by the bytes
    return ExpertLayout(bytes=triton_expert_bytes(moe.hidden_size, width, version) / counted)


def float32_rope_bytes(model: ModelSpec, engine: str) -> float:
    """gpt-oss's float32 rotary table under vLLM (bytes on every GPU); 0 otherwise."""
    if engine != "vllm" or model.model_type != "gpt_oss":
        return 0.0
    att = model.first_attention
    rotary = int(att.head_dim * model.partial_rotary_factor)
    positions = model.rope_cache_positions or model.max_position_embeddings
    return float(positions * rotary * 4)
