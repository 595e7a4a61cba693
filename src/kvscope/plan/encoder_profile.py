"""Bytes vLLM V1's multimodal profiling pass keeps on a GPU through the language model's dummy
pass (the dummy encoder outputs parked in the encoder cache, and their inputs), by release.

Units: tokens and bytes. Source: ``GPUModelRunner.profile_run`` in
vllm/v1/worker/gpu_model_runner.py at v0.11.0. When the model supports multimodal inputs (and
``skip_mm_profiling`` is off) it picks the one modality with the most tokens per item
(``MultiModalBudget.get_modality_with_max_tokens``), runs the encoder once on
``max_items_per_batch`` dummy items of that modality's largest size, and, when one output has
fewer rows than the encoder budget, copies each output into a zeroed ``(encoder_budget, width)``
tensor; those tensors sit in ``encoder_cache["tmp"]`` until after ``_dummy_run`` and the sampler
run, so torch's peak holds them beside the language model's pass. The loop variable ``output``
still references the last raw output (a view of the encoder's one concatenated output, so all of
it stays alive), and ``batched_dummy_mm_inputs`` keeps the dummy pixel values on the GPU in the
model dtype (``_postprocess_output`` casts floating inputs, vllm/multimodal/processing.py).
The budget (vllm/v1/core/encoder_cache_manager.py ``compute_mm_encoder_budget``) is
``max(max_num_batched_tokens, max tokens an item)``; the items
(vllm/v1/worker/utils.py ``MultiModalBudget.get_max_items``) are
``max(1, min(budget // per_item, max_num_seqs * max(1, min(limit, max_model_len // per_item))))``
with the V1 default limit of 999 items a prompt.

Modelled: Qwen3-VL towers (``vision_config.model_type`` ``qwen3_vl`` / ``qwen3_vl_moe``), whose
largest item is a video: ``Qwen3VLProcessingInfo.get_max_video_tokens`` (qwen3_vl.py at v0.11.0)
counts ``int(12.5 * rows)`` tokens an item (timestamps and frame markers), where ``rows`` is
the video processor's pixel budget over ``patch**2 * temporal_patch * merge**2``. The
releases modelled are 0.11.x, read at v0.11.0; v0.9.2 parks the outputs without the expansion
and v0.22.0 parks them one by one without it (not modelled there, nor 0.12-0.21, unread).
Not modelled: the encoder's own transient peak (its ViT activations; at these sizes it stays
below the expanded outputs it then holds), ``--limit-mm-per-prompt`` and
``--skip-mm-profiling`` (the planner takes neither flag), and other towers (Gemma 3, Pixtral,
Llama 4, MoonViT), whose outputs vLLM 0.11 parks the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: ``size.longest_edge`` of the ``video_preprocessor_config.json`` the Qwen/Qwen3-VL checkpoints
#: ship (``Qwen3VLVideoProcessor``): the pixels of all frames of one video item together
QWEN3_VL_VIDEO_PIXELS = 25_165_824
#: text tokens vLLM 0.11 counts per video row (qwen3_vl.py ``get_max_video_tokens``)
QWEN3_VL_VIDEO_TOKEN_FACTOR = 12.5
QWEN3_VL_KINDS = frozenset({"qwen3_vl", "qwen3_vl_moe"})
#: V1's default ``limit_mm_per_prompt`` per modality (vllm/config/multimodal.py at v0.11.0)
DEFAULT_ITEMS_PER_PROMPT = 999
#: releases whose ``profile_run`` expands each dummy output to the encoder budget
EXPANDS_SINCE = (0, 11, 0)
EXPANDS_BEFORE = (0, 12, 0)


@dataclass(frozen=True)
class EncoderProfile:
    """One profiling pass of the encoder: what the engine logs and the bytes it keeps."""

    modality: str
    budget_tokens: int  # "Encoder cache will be initialized with a budget of N tokens"
    items: int  # "... and profiled with N <modality> items of the maximum feature size"
    rows: int  # rows of one item's encoder output
    kept_bytes: float  # held through the language model's dummy pass, one GPU


def encoder_profile(
    model: ModelSpec,
    version: tuple[int, int, int],
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> EncoderProfile | None:
    """The profiling pass of ``model``'s encoder at ``version``; None where not modelled."""
    tower = model.vision_output
    if tower is None or tower.kind not in QWEN3_VL_KINDS:
        return None
    if not EXPANDS_SINCE <= version < EXPANDS_BEFORE:
        return None
    per_row = tower.patch_size**2 * tower.temporal_patch_size * tower.merge_size**2
    # the processor resizes the frames to fit its pixel budget, so the rows level off there;
    # below it vLLM takes the most frames whose rows fit max_model_len (approximated by it)
    rows = min(QWEN3_VL_VIDEO_PIXELS // per_row, max_model_len)
    per_item = int(rows * QWEN3_VL_VIDEO_TOKEN_FACTOR)
    budget = max(max_num_batched_tokens, per_item)
    per_prompt = max(1, min(DEFAULT_ITEMS_PER_PROMPT, max_model_len // per_item))
    items = max(1, min(budget // per_item, max_num_seqs * per_prompt))
    b = element_bytes(model.dtype)
    raw = items * rows * tower.out_width * b
    pixels = items * rows * tower.merge_size**2 * tower.patch_values * b
    expanded = items * budget * tower.out_width * b if rows < budget else 0.0
    return EncoderProfile("video", budget, items, rows, raw + pixels + expanded)


def encoder_kept_bytes(
    model: ModelSpec,
    version: tuple[int, int, int],
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> float:
    """:func:`encoder_profile`'s kept bytes, 0 where the pass is not modelled."""
    p = encoder_profile(model, version, max_model_len, max_num_batched_tokens, max_num_seqs)
    return p.kept_bytes if p is not None else 0.0
