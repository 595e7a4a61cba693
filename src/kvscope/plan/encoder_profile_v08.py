"""vLLM V1's multimodal profiling pass before 0.11 for Qwen2.5-VL (0.8.2, 0.9.0.1 and 0.9.2
read): the dummy item, the items, the bytes parked through the language model's pass, and the
vision tower's transient peak, one GPU.

Units: tokens, patches and bytes. Sources: the vllm 0.8.2, 0.9.0.1 and 0.9.2 wheels (0.9.2's
``profile_run``, budget, dummy video and tower are 0.9.0.1's but for the pixel values' dtype).

* ``GPUModelRunner.profile_run`` (vllm/v1/worker/gpu_model_runner.py, both): the modality with
  the most tokens an item (``max(..., key=lambda item: item[1])``: a tie keeps "image", the
  first key of ``Qwen2VLProcessingInfo.get_mm_max_tokens_per_item``), an encoder budget of
  ``max(max_num_batched_tokens, tokens an item)`` (``compute_encoder_budget``,
  vllm/v1/core/encoder_cache_manager.py) and ``min(cdiv(budget, tokens an item), max_num_seqs
  x limit)`` copies of the first dummy item, batched on the GPU; the outputs stay in
  ``encoder_cache["tmp"]`` and the batched inputs in a local through ``_dummy_run`` and the
  sampler run. 0.8.2 moves the pixel values as the processor made them, float32
  (``MultiModalKwargs.as_kwargs(..., device=...)``), and ``_process_image_input``
  (qwen2_5_vl.py) casts a model-dtype copy that lives while the tower runs; 0.9.0.1 casts in
  ``as_kwargs(..., dtype=model_config.dtype, ...)``; 0.9.2 moves float32 values again and
  casts them in ``Qwen2_5_VisionTransformer.forward`` (``x.to(...)``, dropped once
  ``patch_embed`` returns).
* The dummy video (qwen2_vl.py ``get_num_frames_with_most_features``): the frames whose rows fit
  ``max_model_len`` less the image limit's rows, over the video limit, at most 14, at least one;
  0.8.2 counts the configured limits (``MultiModalConfig.get_limit_per_prompt``: 1 where not
  named), 0.9.0.1 and 0.9.2 one item a modality allowed (``get_max_tokens_per_item_by_modality``,
  vllm/multimodal/registry.py). A video with more rows than the image (``max_model_len`` at
  least 49,152 with one image) is profiled from another dummy: not modelled.
* The tower (qwen2_5_vl.py, qwen2_vl.py ``apply_rotary_pos_emb_vision``; vllm/model_executor/
  models/vision.py ``get_vit_attn_backend``): without the ``flash-attn`` package (neither wheel
  requires it; the vLLM images log "Current `vllm-flash-attn` has a bug inside vision module, so
  we use xformers backend instead") the ViT runs xFormers' memory-efficient attention over a
  ``BlockDiagonalMask`` (no ``[heads, seq, seq]`` scores). The attention holds its input ``x``
  and ``norm1(x)`` (the caller's argument), the qkv projection (3 rows of ``width``) and the
  contiguous q, k and v copies (3), and rotates q, then k, in float32: 0.9.0.1 calls
  vllm_flash_attn's Triton ``apply_rotary_emb`` (``t.float()``, a new float32 output, the cast
  back: 2 + 2 + 1 rows), 0.8.2 the torch ``apply_rotary_emb_torch`` on the xFormers path, whose
  ``x * cos``, ``rotate_half(x) * sin`` and their sum are live with ``t.float()`` (4 float32
  copies: 8 rows). So 13 rows of ``width`` a patch at 0.9.0.1 and 16 at 0.8.2, above the
  SwiGLU MLP's ``3 x width + 3 x intermediate + width`` (Qwen2.5-VL-7B: 12.0); plus the
  float32 rotary table (``head_dim / 2`` a patch) and its cos and sin.

Not modelled: other releases (0.8.3-0.8.5, 0.9.1 and 0.10.x are unread), other towers (Qwen2-VL's
attention is not read here), a video profile, ``--tensor-parallel-size`` above 1 (the ViT
all-gathers its qkv), the ``flash-attn`` package's path, and non-NVIDIA GPUs.
"""

from __future__ import annotations

from kvscope.plan.mm_limits import Limits
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.vision_output import VisionOutput

#: the releases read: the ViT attention's peak in rows of ``width`` a patch, whether the pixel
#: values reach the GPU as float32 (0.8.2, 0.9.2) or in the model dtype (0.9.0.1), and whether a
#: model-dtype copy of them lives while the tower runs (0.8.2's ``_process_image_input``; 0.9.2
#: casts inside the tower's forward, and the copy is dropped once ``patch_embed`` returns)
READ = {(0, 8, 2): (16, True, True), (0, 9, 0): (13, False, False), (0, 9, 2): (13, True, False)}
#: ``get_limit_per_prompt``'s count for a modality the flag does not name, at 0.8.2 (0.9.0.1
#: gives V1 999, and counts one item a modality in the budget's dummy)
DEFAULT_LIMIT_082 = 1
#: ``_MAX_FRAMES_PER_VIDEO`` (qwen2_vl.py)
MAX_FRAMES = 14
KINDS = frozenset({"qwen2_5_vl"})
#: the release whose ViT rotates with torch ops (``apply_rotary_emb_torch`` off FlashAttention)
TORCH_ROTARY = (0, 8, 2)
FP32 = 4


def covers(tower: VisionOutput | None, version: tuple[int, int, int]) -> bool:
    """Whether this module models ``tower``'s profiling pass at ``version``."""
    return tower is not None and tower.kind in KINDS and version in READ


def _limit(limits: Limits | None, modality: str, version: tuple[int, int, int]) -> int:
    named = dict(limits or ())
    if version == (0, 8, 2):
        return named.get(modality, DEFAULT_LIMIT_082)
    return named.get(modality, 999)


def profiled_item(
    tower: VisionOutput,
    version: tuple[int, int, int],
    image_rows: int,
    max_model_len: int,
    limits: Limits | None,
) -> tuple[int, int] | None:
    """(rows of the profiled image, its limit a prompt), or None where the image is not the
    profiled item (a zero image limit, or a video with more rows)."""
    images = _limit(limits, "image", version)
    videos = _limit(limits, "video", version)
    if images <= 0 or image_rows <= 0:
        return None
    counted = (images, videos) if version == (0, 8, 2) else (1, min(videos, 1))
    if counted[1] > 0:
        fit = max(0, (max_model_len - image_rows * counted[0]) // image_rows)
        frames = max(1, min(fit * tower.temporal_patch_size // counted[1], MAX_FRAMES))
        pairs = -(-frames // tower.temporal_patch_size)
        if pairs * image_rows > image_rows:
            return None
    return image_rows, images


def items(budget_rows: int, per_item: int, max_num_seqs: int, per_prompt: int) -> int:
    """``min(cdiv(encoder budget, tokens an item), max_num_seqs x limit)``."""
    return max(1, min(-(-budget_rows // per_item), max_num_seqs * per_prompt))


def pixels_fp32(version: tuple[int, int, int]) -> bool:
    """Whether the batched pixel values reach the GPU as float32 (0.8.2, 0.9.2)."""
    return READ[version][1]


def vit_transient_bytes(
    tower: VisionOutput,
    patches: int,
    gpu: GPUSpec,
    tp: int,
    version: tuple[int, int, int],
    dtype_bytes: float,
) -> float:
    """Peak bytes the tower allocates over its batched pixel values while it runs on
    ``patches`` patches, one GPU (0 where not modelled)."""
    if not covers(tower, version) or gpu.vendor != "nvidia" or tp != 1:
        return 0.0
    if min(tower.width, tower.intermediate, tower.heads, patches) <= 0:
        return 0.0
    d, inter = tower.width, tower.intermediate
    head = d // tower.heads
    attention_rows, _, cast_held = READ[version]
    attention = attention_rows * d
    mlp = 4 * d + 3 * inter  # input, x + attn, norm2(x), down_proj; gate, up, their product
    # the float32 rotary table (head / 2 a patch) and its cos and sin
    rotary = 3 * (head // 2) * FP32 / dtype_bytes
    if version == TORCH_ROTARY:  # the torch rotary also repeats cos and sin to the head width
        rotary += 2 * head * FP32 / dtype_bytes
    peak = patches * (max(attention, mlp) + rotary) * dtype_bytes
    if cast_held:  # _process_image_input's model-dtype copy of the float32 pixel values
        peak += patches * tower.patch_values * dtype_bytes
    return peak
