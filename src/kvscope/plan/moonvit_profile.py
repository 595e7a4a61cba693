"""The MoonViT towers (Kimi-K2.5 / Kimi-K2.6's MoonViT-3D, ``KimiK25ForConditionalGeneration``;
Kimi-VL's 2-D MoonViT, ``KimiVLForConditionalGeneration``) in vLLM V1's multimodal profiling
pass: the dummy item the processor makes, and the tower's transient peak while it runs on it,
one GPU, bytes.

Units: patches, tokens, bytes. Sources, read identical for these paths in the vLLM 0.15.0,
0.20.0, 0.22.0, 0.23.0, 0.25.0 and 0.27.0 wheels (0.16-0.19, 0.21, 0.24 and 0.26 taken to
match): vllm/model_executor/models/kimi_k25.py and kimi_k25_vit.py, and the checkpoint's
processor (``navit_resize_image`` / ``navit_resize_video``, ported as vllm/transformers_utils/
processors/kimi_k25_vision_fused.py from 0.25). Read on to 0.34.0 against 0.27.0 (the wheels
of 0.28.0-0.34.0): the dummy builder, ``get_num_image_tokens`` / the resize, the one modality,
``_process_media_input``, the blocks' MLP and norms, the merger and the projector are 0.27's
(0.28 adds the opt-in encoder CUDA graph protocol, unused with ``cudagraph_mm_encoder`` off by
default; 0.29 drops a ``_call_hf_processor`` override that only called ``super()``; 0.31
projects the patches with ``Conv2dLayer.forward_native``, a GEMM on a view of the same bytes;
0.34 runs ``get_rope_shape`` eagerly, whose interpolated and flattened copies stay under the
patch embedding's 4 rows). What changes is Kimi-K2.5's rotation of q and k in
``MoonViTEncoderLayer.attention_qkvpacked`` (kimi_k25_vit.py) and, from 0.32, its input:

- 0.29.0-0.30.x: ``ApplyRotaryEmb(enable_fp32_compute=True).forward_cuda`` (vllm/model_executor/
  layers/rotary_embedding/common.py, flash-attn's Triton ``apply_rotary`` out of place) on
  ``rope_freqs_cis.real`` / ``.imag`` made contiguous (fp32, together one complex64 table, live
  until ``self.wo`` returns): for k it holds q's bf16 result, k in fp32 (2), the fp32 output
  (2) and its bf16 cast (1): ``2 + 9 / tp``;
- from 0.31.0: ``packed_qk_rope_`` (vllm/model_executor/layers/rotary_embedding/
  packed_qk_rope.py, Triton) rotates q and k inside ``xqkv``: ``2 + 3 / tp``, and ``self.wo``
  holds no separate q/k: ``3 + 4 / tp (+ 1)``;
- from 0.32.0: ``supports_mm_device_do_normalize`` (kimi_k25.py), the processor's identity
  LUT (``uint8`` pixel values) and ``FusedMMInputNorm`` in ``MoonVision3dPatchEmbed.forward``
  (:mod:`kvscope.plan.encoder_releases`).

Kimi-VL's moonvit.py and kimi_vl.py change through 0.34.0 only in asserts, docstrings, a
host-sync guard, the CUDA graph protocol and ``keep_on_cpu`` grid sizes: read as 0.27's.

* The dummy item (``KimiK25DummyInputsBuilder.get_dummy_mm_items``): one 3000 x 3000 image
  (``MaxImageTokenMeta``) or one video chunk of ``temporal_merge_kernel_size`` (4) such frames,
  whichever has more tokens (the chunk on a tie), all under the one modality ``vision_chunk``.
  The resize scales a side by ``min(1, sqrt(limit / ((w // 14) * (h // 14))), 512 * 14 / w,
  512 * 14 / h)``, truncates, and pads to a multiple of ``merge * patch`` (28): the image
  (``in_patch_limit`` 16,384) becomes 1820 x 1820 px, 130 x 130 = 16,900 patches and 4,225
  tokens; a frame of the chunk (``in_patch_limit_each_frame`` 4,096) 924 x 924 px, 4,356
  patches, and the chunk 4 x 4,356 = 17,424 patches pooled to 1,089 tokens; the image wins.
  Caps: ``media_proc_cfg`` of the moonshotai/Kimi-K2.5 ``preprocessor_config.json`` (in_patch_limit
  16384, patch_limit_on_one_side 512, in_patch_limit_each_frame 4096, temporal_merge_kernel_size
  4, patch_size 14, merge_kernel_size 2; Kimi-K2.6 ships the same file).
* Kimi-VL (kimi_vl.py, moonvit.py; read at 0.15.0, 0.20.0 and 0.25.0, the tower's blocks,
  ``apply_rope``, the 512 x 512 rotary grid (a ``cached_property``) and the projector as
  above): one 1024 x 1024 image (``MaxImageTokenMeta``) under the processor's
  ``in_token_limit`` (4,096 patches for Kimi-VL-A3B-Instruct's ``KimiVLImageProcessor``;
  ``KimiVLProcessingInfo.get_num_image_tokens``: 1024 // 14 = 73, 73**2 > 4096, scale
  sqrt(4096 / 5329), int(1024 x 0.8767) = 897 px, padded to 924: 66 x 66 = 4,356 patches and
  1,089 tokens), modality ``image``, no side cap and no video.
* Each output row is the projector's ``mm_hidden_size``, which ``KimiK25Config`` sets to the
  text model's width when the checkpoint states the tower's (1152 = 1152: 7,168).
* The tower runs eagerly (``compile_mm_encoder`` off; only the position-embedding
  interpolation ``get_rope_shape`` is a ``torch.compile``'d function) with
  ``--mm-encoder-tp-mode weights`` (heads, qkv and MLP sharded over TP; every
  ``RowParallelLinear`` output is full width and its all-reduce is out of place, pynccl and the
  custom all-reduce alike: vllm/distributed/device_communicators/cuda_communicator.py,
  pynccl.py), FlashAttention varlen on the ViT (head size 72, capability >= 8.0:
  ``CudaPlatform.get_vit_attn_backend``), so no ``[heads, seq, seq]`` scores. In units of one
  patch row of the tower width at bf16 (``L x d x 2`` bytes), the phases are:

  - patch embedding: the conv output, the interpolated 2-D embedding, ``torch.cat`` of it and
    the sum: 4;
  - ``Rope2DPosEmbRepeated._precompute_freqs_cis`` on the first call (inside the pass): a
    512 x 512 grid of ``head_dim / 4`` angle pairs (positions and angles in fp32, both cis
    tensors and their concatenation in complex64) over the 1 live row; the concatenation stays
    as the module's ``freqs_cis`` buffer (512 x 512 x ``head_dim / 2`` complex64, 75.5 MB at
    head 72) for the rest of the process, so it is held through the language model's pass too;
  - an encoder block, with the per-patch rotary table (``head_dim / 2`` complex64) live, to
    0.28 (and Kimi-VL's throughout): ``apply_rope`` holds x, ``norm0(x)``, qkv (3/tp), q and
    k in fp32 (2 + 2), their complex products (2 + 2) and the bf16 results (1 + 1):
    ``2 + 13 / tp``; ``self.wo`` holds x,
    ``norm0(x)``, qkv, rotated q/k, the attention output (6/tp), its output and, at tp > 1,
    the all-reduce's: ``3 + 6 / tp (+ 1)``; the MLP holds x, ``norm1(x)`` and fc0's and the
    GELU's outputs (``2 + 2 r / tp``, r = intermediate / width), then the GELU's, fc1's and
    the all-reduce's (``3 + r / tp (+ 1)``);
  - the tail: the temporal-pooling merger (the final norm, the mean and the regrouped copy: 3),
    then ``mm_projector_forward``'s concatenation of the tower output and the projector
    (``pre_norm`` and ``linear_1``, 1 each; then the GELU and ``linear_2``'s
    ``L / merge**2 x mm_hidden_size`` output, which is what vLLM parks).

The pixel values are counted by :mod:`kvscope.plan.encoder_profile`. Not modelled:
``--mm-encoder-tp-mode data`` (the rank that receives the item runs the tower whole, and the
outputs are all-gathered padded), non-NVIDIA GPUs, releases outside those read, and the few
``L x head_dim / 2`` complex64 copies ``get_freqs_cis`` makes before it keeps one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.specs.hardware import GPUSpec
from kvscope.specs.vision_output import VisionOutput

#: ``MaxImageTokenMeta`` (kimi_k25.py): the dummy image's width and height, pixels
DUMMY_SIDE = 3000
#: ``MaxImageTokenMeta`` of kimi_vl.py and Kimi-VL-A3B-Instruct's ``in_token_limit``
KIMI_VL_DUMMY_SIDE = 1024
KIMI_VL_IN_TOKEN_LIMIT = 4_096
#: ``media_proc_cfg`` of the Kimi-K2.5 / K2.6 ``preprocessor_config.json``
IN_PATCH_LIMIT = 16_384
IN_PATCH_LIMIT_EACH_FRAME = 4_096
PATCH_LIMIT_ON_ONE_SIDE = 512
FRAMES_PER_CHUNK = 4  # temporal_merge_kernel_size
#: the rotary grid ``MoonViT3dEncoder`` builds (``Rope2DPosEmbRepeated(head_dim, 512, 512)``)
ROPE_GRID = 512 * 512
#: releases whose MoonViT and Kimi-K2.5 dummy-input code was read (module docstring)
READ = ((0, 15, 0), (0, 35, 0))
#: Kimi-K2.5's attention rotates q and k with ``ApplyRotaryEmb`` (fp32, out of place, with
#: fp32 cos / sin copies of the table) from 0.29, and in place in ``xqkv`` from 0.31
ROTARY_EMB_SINCE = (0, 29, 0)
PACKED_ROPE_SINCE = (0, 31, 0)
FLASH_ATTN_MIN_CC = (8, 0)
COMPLEX64 = 8
FP32 = 4


@dataclass(frozen=True)
class MoonVitItem:
    """The dummy item vLLM profiles: its modality's name, tokens (output rows) and patches."""

    kind: str  # "image" or "video_chunk" (Kimi-K2.5 logs the modality "vision_chunk")
    tokens: int
    patches: int


def _resize(side: int, patch: int, merge: int, limit: int) -> int:
    """Patches along one side of a square ``side`` after ``navit_resize_image``."""
    per_side = max(1, side // patch)
    scale = min(
        1.0, math.sqrt(limit / (per_side * per_side)), PATCH_LIMIT_ON_ONE_SIDE * patch / side
    )
    new = min(max(1, int(side * scale)), PATCH_LIMIT_ON_ONE_SIDE * patch)
    factor = merge * patch
    return (new + (factor - new % factor) % factor) // patch


def _resize_kimi_vl(side: int, patch: int, merge: int, limit: int) -> int:
    """Patches along one side of a square ``side`` after Kimi-VL's resize and pad."""
    per_side = side // patch
    if per_side * per_side > limit:
        side = int(side * math.sqrt(limit / (per_side * per_side)))
    factor = merge * patch
    return (side + (factor - side % factor) % factor) // patch


def dummy_item(tower: VisionOutput) -> MoonVitItem | None:
    """Kimi-K2.5: the larger of the 3000 px image and the four-frame chunk (the chunk on a
    tie); Kimi-VL: the 1024 px image."""
    patch, merge = tower.patch_size, tower.merge_size
    if patch <= 0 or merge <= 0:
        return None
    if tower.kind == "kimi_vl":
        side = _resize_kimi_vl(KIMI_VL_DUMMY_SIDE, patch, merge, KIMI_VL_IN_TOKEN_LIMIT)
        return MoonVitItem("image", (side // merge) ** 2, side * side)
    image = _resize(DUMMY_SIDE, patch, merge, IN_PATCH_LIMIT)
    frame = _resize(DUMMY_SIDE, patch, merge, IN_PATCH_LIMIT_EACH_FRAME)
    image_tokens = (image // merge) ** 2
    chunk_tokens = (frame // merge) ** 2  # the frames are pooled into one
    if chunk_tokens >= image_tokens:
        return MoonVitItem("video_chunk", chunk_tokens, FRAMES_PER_CHUNK * frame * frame)
    return MoonVitItem("image", image_tokens, image * image)


def freqs_buffer_bytes(tower: VisionOutput) -> float:
    """The rotary ``freqs_cis`` buffer the first forward registers (kept for good)."""
    if tower.heads <= 0:
        return 0.0
    return float(ROPE_GRID * (tower.width // tower.heads) // 2 * COMPLEX64)


def _precompute_bytes(tower: VisionOutput) -> float:
    """Peak of ``_precompute_freqs_cis``: 3 fp32 position vectors, the x/y angles (fp32), the
    x/y cis (complex64) and their concatenation (complex64), ``head_dim / 4`` angles each."""
    quarter = tower.width // tower.heads // 4
    return float(ROPE_GRID * (3 * FP32 + 2 * quarter * FP32 + 4 * quarter * COMPLEX64))


def _attention_rows(
    kind: str, version: tuple[int, int, int], tp: int, ar: int
) -> tuple[float, float, int]:
    """An encoder block's attention: (the rotation's peak, ``self.wo``'s, in patch rows of the
    tower width) and the per-patch rotary tables live through both (the complex64 table, plus
    0.29-0.30's fp32 cos and sin, together as large)."""
    if kind != "kimi_k25" or version < ROTARY_EMB_SINCE:  # apply_rope: fp32 and complex64
        return 2 + 13 / tp, 3 + ar + 6 / tp, 1
    if version < PACKED_ROPE_SINCE:  # x.float(), the fp32 output, its bf16 cast; q kept
        return 2 + 9 / tp, 3 + ar + 6 / tp, 2
    return 2 + 3 / tp, 3 + ar + 4 / tp, 1  # packed_qk_rope_ rotates xqkv in place


def moonvit_transient_bytes(
    tower: VisionOutput,
    patches: int,
    gpu: GPUSpec,
    tp: int,
    version: tuple[int, int, int],
    dtype_bytes: float,
) -> float:
    """Peak bytes the tower allocates over its input on ``patches`` patches (all dummy items),
    one GPU of a ``tp``-way group, the kept ``freqs_cis`` buffer included; 0 where not
    modelled."""
    if not READ[0] <= version < READ[1] or gpu.vendor != "nvidia":
        return 0.0
    if min(tower.depth, tower.width, tower.intermediate, tower.heads, patches) <= 0:
        return 0.0
    head = tower.width // tower.heads
    try:
        cc = tuple(int(x) for x in gpu.compute_capability.split("."))
    except ValueError:
        return 0.0
    if cc < FLASH_ATTN_MIN_CC or head % 8 or head > 256:
        return 0.0  # the Triton / SDPA paths are not modelled
    tp = max(1, tp)
    ar = 1 if tp > 1 else 0  # the row-parallel all-reduce's out-of-place output
    r = tower.intermediate / tower.width
    unit = patches * tower.width * dtype_bytes  # one patch row of the tower width
    rope_rows = patches * head // 2 * COMPLEX64  # the per-patch rotary table
    rope, wo, tables = _attention_rows(tower.kind, version, tp, ar)
    attention = max(rope, wo) * unit + tables * rope_rows
    block = max(attention, max(2 + 2 * r / tp, 3 + ar + r / tp) * unit + rope_rows)
    merged = tower.merge_size**2
    tail = max(4.0, 3 + tower.out_width / (merged * tower.width))
    buffer = freqs_buffer_bytes(tower)
    return max(
        4 * unit,  # patch embedding
        unit + _precompute_bytes(tower),  # the rotary grid, first call
        block + buffer,
        tail * unit + buffer,
    )
