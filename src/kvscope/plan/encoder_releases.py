"""The vLLM releases whose multimodal profiling pass kvscope has read, tower by tower; the
dtype and normalization of the dummy pixel values each release hands a tower; and the plan's
note where a tower's pass is not modelled (the plan then charges no encoder terms).

Units: releases as ``(major, minor, patch)``; bytes a pixel value. Sources, PyPI wheels:

- The runners: V1 ``GPUModelRunner.profile_run`` and ``_get_mm_dummy_batch``
  (vllm/v1/worker/gpu_model_runner.py) are 0.31.0's in the 0.32.0 and 0.33.0 wheels (the
  0.34.0 wheel has no V1 runner); the V2 runner's ``profile_run`` (vllm/v1/worker/gpu/
  model_runner.py) is 0.31.0's through 0.34.0 for the encoder (0.34.0 adds an opt-in
  auxiliary-output connector), and ``EncoderRunner.profile_encoder_cache`` (vllm/v1/worker/gpu/
  mm/encoder_runner.py) is the same; 0.32.0's ``execute_mm_encoder`` sorts the items by
  modality and restores their order (one modality in the pass: the same batch).
  vllm/multimodal/encoder_budget.py and ``InputProcessingContext._postprocess_output``
  (vllm/multimodal/processing/context.py, the cast of floating inputs to the model dtype) are
  0.31.0's in 0.32.0-0.34.0.
- Qwen3-VL / Qwen3.5 (qwen3_vl.py, qwen3_5.py; at 0.34.0 on CUDA Qwen3.5 is
  vllm/models/qwen3_5/nvidia/model.py, a ``Qwen3VLForConditionalGeneration`` with the same
  ``Qwen3_5ProcessingInfo``, ``Qwen3VLDummyInputsBuilder`` and ``Qwen3_VisionTransformer``):
  the processing classes change only how ``--mm-processor-kwargs`` are scoped at 0.32.0, and
  the tower's blocks, MLP, patch embedding and merger are 0.31.0's through 0.34.0. What
  changes at 0.32.0 is the input: ``supports_mm_device_do_normalize = True`` and
  ``MultiModalConfig.mm_device_do_normalize`` on by default (vllm/config/multimodal.py,
  resolved in vllm/config/model.py) make the processor skip ``do_rescale`` / ``do_normalize``
  (``merge_mm_processor_kwargs``), so the pixel values stay ``uint8`` (not floating: no cast to
  the model dtype), and ``Qwen3_VisionTransformer.forward`` normalizes them on the GPU
  (``FusedMMInputNorm.forward_cuda``, vllm/model_executor/layers/fusion/mm_input_norm.py: a
  Triton kernel into a new model-dtype tensor, freed once the patch embedding returns).
- Qwen2-VL / Qwen2.5-VL (qwen2_vl.py, qwen2_5_vl.py) normalize on the device from 0.28.0
  (``supports_mm_device_do_normalize``; the same default): at 0.28.0 and 0.29.0 the wrapper's
  ``_process_image_input`` calls ``FusedInputNorm`` (vllm/model_executor/models/vision.py:
  ``x.to(float32)``, ``x * weight + bias`` in float32, then the cast) and hands the
  normalized copy to the tower, which holds it until it returns; at 0.30.0 the tower's forward
  calls the same module before its patch embedding; from 0.31.0 the Triton
  ``FusedMMInputNorm``. Their processing classes change only the kwarg scoping at 0.32.0.
- Gemma 3 (gemma3_mm.py) and Llama 4 (mllama4.py), read at 0.29.0-0.34.0 against 0.28.0:
  ``get_num_image_tokens``, ``get_image_size_with_most_features`` / ``get_max_num_tiles``,
  ``_get_mm_fields_config`` (0.29.0 keeps Llama 4's tile counts on the host), the
  projectors and ``_process_image_input`` / ``embed_multimodal`` are 0.28.0's; 0.29.0
  moves ``_call_hf_processor``'s crop and tile bookkeeping, unchanged, to
  ``_postprocess_hf_mm_data`` and selects the placeholder's embeddings by token id (the same
  256, and 144 a tile, as ``PlaceholderRange.get_num_embeds`` counts, itself unchanged);
  0.31.0 lets Llama 4 take the context's default for ``use_fast``. Gemma 3 normalizes on the
  device from 0.34.0 (``supports_mm_device_do_normalize``): ``uint8`` pixels.
- Kimi-K2.5 / K2.6 and Kimi-VL (kimi_k25.py, kimi_k25_vit.py, kimi_vl.py, moonvit.py and
  the Kimi-K2.5 processor), read at 0.28.0-0.34.0 against 0.27.0: the same dummy item, token
  count and parked output; Kimi-K2.5's tower changes its q/k rotation at 0.29.0 and 0.31.0
  (:mod:`kvscope.plan.moonvit_profile`) and normalizes ``uint8`` pixels on the device from
  0.32.0 (``supports_mm_device_do_normalize``, ``build_mm_input_norm``: the Triton
  ``FusedMMInputNorm`` in the patch embedding, as ``media_proc_cfg`` states a mean and std).
  0.34.0's registry still builds them (and Mistral 3) from vllm/model_executor/models/.
- Mistral 3 in the Hugging Face format (mistral3.py; pixtral.py's ``PixtralHFEncoderInfo``),
  read at 0.29.0-0.34.0 against 0.28.0: ``get_num_image_tokens``,
  ``get_image_size_with_most_features``, ``_get_mm_fields_config``, ``embed_multimodal`` and
  ``PixtralHFEncoderInfo`` are 0.28's, ``_process_image_input`` changes only its annotations
  (0.33.0 adds an ``image_embeds`` input) and the projector's packed path (0.34.0) serves the
  opt-in encoder CUDA graph. From 0.29.0 ``get_vision_encoder_info`` builds
  ``Mistral3HFEncoderInfo`` on the processor's ``size["longest_edge"]`` (kvscope takes
  ``vision_config.image_size``: both 1540 for Mistral-Small-3.1), whose patch grid rounds up to
  the patch and then floors to the merge (0.29-0.30) or rounds up to the merged patch (0.31):
  55 x 55 either way for a multiple of 28. Device normalization from 0.32.0
  (``supports_mm_device_do_normalize``): ``uint8`` pixels. The tower's own transient is not
  modelled at any release (a fixed-size tower).
- Not read beyond: Mistral 3 in Mistral's format past 0.28.x (``PixtralForConditionalGeneration``
  and its processing in pixtral.py change in every release; :func:`model_pass_read`), the
  Qwen2-VL tower at 0.11, releases 0.12-0.14 and before 0.11, and towers of other
  ``model_type``\\ s.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.config_format import vllm_config_format
from kvscope.specs.model import ModelSpec
from kvscope.specs.vision_output import VisionOutput

QWEN3_VL_KINDS = frozenset(
    {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_vision", "qwen3_5_moe", "qwen3_5_moe_vision"}
)
QWEN2_VL_KINDS = frozenset({"qwen2_vl", "qwen2_5_vl"})
#: towers whose largest image is one fixed square (Gemma 3, Mistral 3, Llama 4)
FIXED_SQUARE_KINDS = frozenset({"gemma3", "mistral3", "llama4"})
#: Kimi-K2.5 / K2.6's MoonViT-3D and Kimi-VL's MoonViT
MOONVIT_KINDS = frozenset({"kimi_k25", "kimi_vl"})
#: releases whose ``profile_run`` expands each dummy output to the encoder budget
EXPANDS = ((0, 11, 0), (0, 12, 0))
#: towers read at 0.11 (Qwen2-VL's tower there is not)
EXPANDS_KINDS = QWEN3_VL_KINDS | {"qwen2_5_vl"}
#: first release that parks each dummy output as it is
PARKS_SINCE = (0, 15, 0)
#: the first release not read, by tower: every tower modelled is read through 0.34.x (the
#: newest modelled); Mistral 3 in Mistral's format (pixtral.py) through 0.28.x
NEWEST_READ_UNTIL = (0, 35, 0)
MISTRAL_FORMAT_READ_UNTIL = (0, 29, 0)
READ_THROUGH_NEWEST = QWEN3_VL_KINDS | QWEN2_VL_KINDS | FIXED_SQUARE_KINDS | MOONVIT_KINDS
#: first release that hands the tower ``uint8`` pixels and normalizes them on the GPU
DEVICE_NORMALIZE_SINCE = {
    "qwen2_vl": (0, 28, 0),
    "qwen2_5_vl": (0, 28, 0),
    "gemma3": (0, 34, 0),
    "kimi_k25": (0, 32, 0),
    "mistral3": (0, 32, 0),
} | dict.fromkeys(QWEN3_VL_KINDS, (0, 32, 0))
#: releases whose Qwen2-VL wrapper normalizes before the tower and keeps the copy through it
WRAPPER_NORMALIZES = ((0, 28, 0), (0, 30, 0))
#: first release that normalizes with the Triton kernel (one model-dtype output, no float32)
TRITON_NORMALIZE_SINCE = (0, 31, 0)
#: float32 bytes ``FusedInputNorm``'s eager path holds a value: the cast, the product, the sum
EAGER_NORMALIZE_BYTES = 12


def parks_until(kind: str) -> tuple[int, int, int]:
    """The first release past the read window of a tower that parks its outputs."""
    if kind in READ_THROUGH_NEWEST:
        return NEWEST_READ_UNTIL
    return PARKS_SINCE  # an unmodelled tower: no window


def pass_read(kind: str, version: tuple[int, int, int]) -> bool:
    """Whether vLLM's profiling pass for a ``kind`` tower is modelled at ``version``."""
    if EXPANDS[0] <= version < EXPANDS[1]:
        return kind in EXPANDS_KINDS
    return PARKS_SINCE <= version < parks_until(kind)


def model_pass_read(model: ModelSpec, version: tuple[int, int, int]) -> bool:
    """:func:`pass_read` for ``model``'s tower, where Mistral 3 loaded in Mistral's format
    (``PixtralForConditionalGeneration``, :mod:`kvscope.plan.config_format`) is read to 0.28."""
    tower = model.vision_output
    if tower is None or not pass_read(tower.kind, version):
        return False
    return not (
        tower.kind == "mistral3"
        and version >= MISTRAL_FORMAT_READ_UNTIL
        and vllm_config_format(model, version) == "mistral"
    )


def device_normalizes(kind: str, version: tuple[int, int, int]) -> bool:
    """Whether the release hands the tower ``uint8`` pixels (``mm_device_do_normalize``)."""
    since = DEVICE_NORMALIZE_SINCE.get(kind)
    return since is not None and version >= since


def pixel_value_bytes(kind: str, version: tuple[int, int, int], dtype_bytes: float) -> float:
    """Bytes of one dummy pixel value on the GPU: 1 (``uint8``) where the release normalizes
    on the device, else the model dtype's (``_postprocess_output``'s cast)."""
    return 1.0 if device_normalizes(kind, version) else dtype_bytes


def normalize_bytes(
    kind: str, version: tuple[int, int, int], dtype_bytes: float
) -> tuple[float, float]:
    """(transient, held) bytes a pixel value of the on-device normalization: its peak before
    the tower's blocks, and the model-dtype copy kept through them (0.28-0.29 wrapper)."""
    if not device_normalizes(kind, version):
        return 0.0, 0.0
    if version >= TRITON_NORMALIZE_SINCE:
        return dtype_bytes, 0.0
    held = dtype_bytes if WRAPPER_NORMALIZES[0] <= version < WRAPPER_NORMALIZES[1] else 0.0
    return float(EAGER_NORMALIZE_BYTES), held


def unmodelled_note(model: ModelSpec, eng: EngineConfig) -> tuple[str, ...]:
    """One line for the plan where ``model`` has a vision tower whose vLLM profiling pass is
    not modelled at ``eng``'s release: the plan charges no encoder terms for it."""
    tower: VisionOutput | None = model.vision_output
    if eng.engine != "vllm" or tower is None or model_pass_read(model, eng.version):
        return ()
    name = tower.kind or "this"
    return (
        f"vLLM {eng.version_text}'s multimodal profiling pass for the {name} vision tower is "
        "not modelled (its code is not read at this release): the plan charges no dummy "
        "encoder outputs, pixel values or ViT activations, so it may over-count the KV cache.",
    )
