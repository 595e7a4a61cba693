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

Modelled: the towers vLLM serves through ``Qwen3VLProcessingInfo`` (Qwen3-VL, and Qwen3.5 /
Qwen3.6, whose ``Qwen3_5ProcessingInfo`` subclasses it: vllm/model_executor/models/qwen3_5.py),
by ``vision_config.model_type``. Their processors cap an image at 16,777,216 pixels and a video
at 25,165,824 (the checkpoints' ``preprocessor_config.json`` and
``video_preprocessor_config.json``), so an image is ``16,777,216 / (patch * merge)**2`` rows
(16,384) and a video, at two frames folded by the temporal patch, ``25,165,824 / temporal /
(patch * merge)**2`` rows (12,288). At 0.11.x ``get_max_video_tokens`` counts ``int(12.5 *
rows)`` tokens a video (timestamps and frame markers), so the video is profiled (153,600
tokens) and its output is expanded; from 0.15 it counts the rows alone, so the image is
profiled and its output parked as it is (``encoder_cache[f"tmp_{i}"]``, no expansion).
Releases read: 0.11.0 (expansion); 0.15.0, 0.20.0, 0.22.0, 0.23.0, 0.25.0, 0.27.0 (no
expansion, image), and 0.28.0 for the Qwen3-VL-style towers (0.28.0's V1 ``profile_run``,
``_get_mm_dummy_batch`` and vllm/multimodal/encoder_budget.py are 0.27.0's line for line, and
qwen3_vl.py / qwen3_5.py change no processing code), 0.29.0, 0.30.0 and 0.31.0 for them too
(``Qwen3VLProcessingInfo`` / ``Qwen3VLDummyInputsBuilder`` only scope the
``--mm-processor-kwargs`` by modality and add an opt-in ``cap_pixels_per_frame``; the budget's
``_get_max_items``, ``compute_mm_encoder_budget`` and ``get_modality_with_max_tokens`` and the
processor's cast to the model dtype, ``InputProcessingContext._postprocess_output``, are
0.28.0's), and 0.32.0, 0.33.0 and 0.34.0 for them and the Qwen2-VL towers, where the pass is
0.31.0's but for the pixel values: from 0.32 (Qwen2-VL / Qwen2.5-VL from 0.28) they are
``uint8`` and normalized on the GPU (:mod:`kvscope.plan.encoder_releases`, which holds the
windows and the files compared); 0.9.2 parks without expansion but counts video tokens its own
way, and 0.12-0.14 are unread: not modelled there, nor from 0.29 for Mistral 3 in Mistral's
format (the MoonViT towers are read through 0.34.0, :mod:`kvscope.plan.moonvit_profile`, and
Mistral 3's Hugging Face format too; the fixed-square towers'
0.28.0 processing classes, ``embed_multimodal`` and ``PlaceholderRange.get_num_embeds`` are
0.27.0's; Gemma 3's and Llama 4's are read the same through 0.34.0,
:mod:`kvscope.plan.encoder_releases`); where a tower's pass is not modelled the plan says so
in a note (:func:`kvscope.plan.encoder_releases.unmodelled_note`) rather than charge nothing
silently
(the releases between those read are taken to match the identical code on either side).
The V2 runner (vllm/v1/worker/gpu/model_runner.py ``profile_run``; from 0.25
``VllmConfig._is_default_v2_model_runner_model``, vllm/config/vllm.py, sends it every generate
model that is neither MoE nor hybrid, dense vision-language wrappers included; the runner rule
is :func:`kvscope.plan.vllm_runner.runs_v2`) runs the language model alone in the 0.22.0-0.26.0
wheels. From 0.27.0 (read in the 0.27.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0,
0.33.0 and 0.34.0 wheels) it first calls ``EncoderRunner.profile_encoder_cache``
(vllm/v1/worker/gpu/mm/encoder_runner.py, the same code in all of them) on the first pipeline
stage only: the same ``MultiModalBudget`` (vllm/multimodal/encoder_budget.py) picks the modality
and the items, ``execute_mm_encoder`` batches them on the GPU (``group_and_batch_mm_kwargs``,
one batch of identical items as V1's) and runs the tower, and the outputs are parked in
``encoder_cache.encoder_outputs`` (``tmp_{i}``) until ``reset_encoder_cache`` after the sampler
run. So the encoder phase (pixel values plus the tower's transient peak) is V1's, inside the
worker's ``memory_profiling`` window, but the GPU pixel values are a local of
``execute_mm_encoder`` and are freed before the language model's pass: only the outputs are
kept there (no expansion; ``profile_run``'s own ``dummy_mm_inputs`` are host tensors).
:data:`V2_PROFILES_ENCODER_SINCE` marks the release; the tower windows above still bound it.
Gemma 3 (gemma3_mm.py, read at 0.15.0, 0.20.0, 0.25.0, 0.27.0 and 0.28.0): an image is
``mm_tokens_per_image`` (256) embeddings of the text width from one ``vision_config.image_size``
square (896; no pan-and-scan by default); from 0.15 ``get_mm_max_toks_per_item`` counts embeddings
(``PlaceholderRange.get_num_embeds``), so ``max_num_batched_tokens // 256`` images are profiled.
0.11 counts the whole placeholder (newlines and BOI/EOI too) and is not modelled.
Mistral 3 (mistral3.py; pixtral.py for the Mistral-format checkpoint; 0.15-0.28; the Hugging
Face format to 0.34):
the largest image is the ``image_size`` square (1540), one embedding a merged patch
(``(1540 // (14 * 2))**2`` = 3,025; the [IMG_BREAK] / [IMG_END] tokens are not embeddings),
so 8192 // 3025 = 2 images.
Llama 4 (mllama4.py; 0.15, 0.20, 0.25, 0.27, 0.28): the largest image is 16:1
(``get_max_num_tiles``, the processor's ``max_patches`` 16) cut into 16 tiles of 336 px plus a
global tile, 144 embeddings each after the pixel shuffle (``get_patch_per_chunk``): 2,448 an image,
8192 // 2448 = 3.
Qwen2-VL / Qwen2.5-VL (``Qwen2VLProcessingInfo``, qwen2_vl.py, read at 0.11.0, 0.14.1, 0.19.0,
0.22.0, 0.25.0, 0.27.0, 0.28.0, 0.30.0 and 0.31.0; Qwen2.5-VL's subclass changes no count): the
largest image is the checkpoints' ``max_pixels`` (12,845,056) factored into a 128 x 128 grid of
merged 28 px patches, 16,384 rows; a video is as many 2-frame pairs of that image as
``max_model_len`` holds (``_get_max_video_frames`` with one video in ``mm_counts``), at most
7 (``_MAX_FRAMES_PER_VIDEO`` 14), at least one. So at 128,000 tokens the video is profiled
(114,688 rows: "budget of 114688 tokens, and profiled with 1 video items", vLLM 0.23.0 on an
A100); below 32,768 both have 16,384 rows and the tie goes to "image" before 0.19 (0.11.0:
``key=lambda x: x[1]``, a Ray Data log on L4 prints "1 image items") and to "video" from 0.19
(``key=lambda x: (x[1], x[0])``), with the same bytes. Qwen2-VL's 0.11.0 tower is not read.
The encoder's own transient peak (its ViT activations) is :mod:`kvscope.plan.vit_peak`'s;
:func:`encoder_phase_bytes` adds the pixel values to it (Qwen3-VL-style towers; the pass's
peak is the larger of that phase and the parked outputs plus the language model's pass).
Kimi-K2.5 / K2.6 (kimi_k25.py; 0.15-0.34): one dummy item of the one modality
``vision_chunk``, the 3000 px image at the processor's 16,384-patch cap (4,225 rows of the text
width, 16,900 patches: :mod:`kvscope.plan.moonvit_profile`), so 8192 // 4225 = 1 item; the
tower's rotary ``freqs_cis`` buffer, registered by its first forward, is kept too. Kimi-VL
(kimi_vl.py, moonvit.py; 0.15-0.34): the 1024 px image at Kimi-VL-A3B-Instruct's 4,096-patch
``in_token_limit`` (1,089 rows of the text width, 4,356 patches), so 8192 // 1089 = 7 images.
``--limit-mm-per-prompt`` (:mod:`kvscope.plan.mm_limits`) removes a modality limited to 0 from
the choice (a zero image limit profiles the video) and caps the items a prompt; a zero limit for
every modality, or ``--language-model-only`` (:mod:`kvscope.plan.language_model_only`), skips
the pass. Not modelled: ``--mm-processor-kwargs`` and the limit's dummy-size options,
``--skip-mm-profiling``, and other towers, whose outputs vLLM parks the same way.
Before 0.11, Qwen2.5-VL at 0.8.2, 0.9.0.x and 0.9.2 (the V1 pass's first dummy image, float32
pixel values at 0.8.2 and 0.9.2, xFormers in the tower) is
:mod:`kvscope.plan.encoder_profile_v08`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.plan import encoder_profile_v08 as pre011
from kvscope.plan.encoder_releases import (
    EXPANDS,
    FIXED_SQUARE_KINDS,
    MOONVIT_KINDS,
    QWEN2_VL_KINDS,
    QWEN3_VL_KINDS,
    model_pass_read,
    normalize_bytes,
    pixel_value_bytes,
)
from kvscope.plan.mm_limits import Limits, limit
from kvscope.plan.moonvit_profile import dummy_item, freqs_buffer_bytes, moonvit_transient_bytes
from kvscope.plan.vit_peak import vit_transient_bytes
from kvscope.plan.vllm_runner import v2_by_default
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec
from kvscope.specs.vision_output import VisionOutput

#: ``size.longest_edge`` of the ``video_preprocessor_config.json`` the Qwen/Qwen3-VL, Qwen3.5
#: and Qwen3.6 checkpoints ship (``Qwen3VLVideoProcessor``): the pixels of all frames of a video
QWEN3_VL_VIDEO_PIXELS = 25_165_824
#: ``size.longest_edge`` of their ``preprocessor_config.json`` (``Qwen2VLImageProcessorFast``)
QWEN3_VL_IMAGE_PIXELS = 16_777_216
#: text tokens vLLM 0.11 counts per video row (qwen3_vl.py ``get_max_video_tokens``)
QWEN3_VL_VIDEO_TOKEN_FACTOR = 12.5
#: Qwen2-VL / Qwen2.5-VL (qwen2_vl.py, qwen2_5_vl.py): ``max_pixels`` of the checkpoints'
#: ``preprocessor_config.json`` (12,845,056 = 16,384 merged 28 x 28 patches), which
#: ``get_image_size_with_most_features`` factors into a 3,584 px square
QWEN2_VL_IMAGE_PIXELS = 12_845_056
#: ``_MAX_FRAMES_PER_VIDEO`` (qwen2_vl.py): frames of the largest dummy video
QWEN2_VL_MAX_FRAMES = 14
#: first release whose ``get_modality_with_max_tokens`` breaks a tie by the name (0.19.0 reads
#: ``key=lambda x: (x[1], x[0])``, so "video" wins; 0.14.1 keeps the first, "image")
TIE_BY_NAME_SINCE = (0, 19, 0)
#: first release whose V2 runner runs the encoder in its profiling pass (0.26.0's does not)
V2_PROFILES_ENCODER_SINCE = (0, 27, 0)


@dataclass(frozen=True)
class EncoderProfile:
    """One profiling pass of the encoder: what the engine logs and the bytes it keeps."""

    modality: str
    budget_tokens: int  # "Encoder cache will be initialized with a budget of N tokens"
    items: int  # "... and profiled with N <modality> items of the maximum feature size"
    rows: int  # rows of one item's encoder output
    kept_bytes: float  # held through the language model's dummy pass, one GPU
    pixel_bytes: float = 0.0  # the dummy pixel values (in kept_bytes on the V1 runner only)
    patches: int = 0  # a patched tower's patches over all items (0: fixed-size tower)
    normalize_peak: float = 0.0  # the on-device normalization's transient, before the blocks
    normalized_bytes: float = 0.0  # its model-dtype copy, held through the blocks (0.28-0.29)


def encoder_profile(
    model: ModelSpec,
    version: tuple[int, int, int],
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    limits: Limits | None = None,
    v2: bool | None = None,
) -> EncoderProfile | None:
    """The profiling pass of ``model``'s encoder at ``version``; None where not modelled or
    where ``limits`` (``--limit-mm-per-prompt``, :mod:`kvscope.plan.mm_limits`) leave the
    tower no modality. ``v2``: the start runs the V2 model runner (default: the release's
    default runner, :func:`kvscope.plan.vllm_runner.v2_by_default`)."""
    tower = model.vision_output
    if tower is None:
        return None
    if pre011.covers(tower, version):  # the V1 pass of 0.8.2 / 0.9.0.x
        return _pre011_profile(
            model, tower, version, max_model_len, max_num_batched_tokens, max_num_seqs, limits
        )
    expands = EXPANDS[0] <= version < EXPANDS[1]
    if not model_pass_read(model, version):  # the plan notes it (encoder_releases)
        return None
    on_v2 = v2_by_default(model, version) if v2 is None else v2
    if on_v2 and version < V2_PROFILES_ENCODER_SINCE:  # the V2 runner profiles no encoder
        return None
    b = element_bytes(model.dtype)
    kept = 0.0  # module buffers the tower's first forward registers
    patches = 0
    if tower.kind in MOONVIT_KINDS:
        item = dummy_item(tower)
        if item is None or expands:  # 0.11 has no Kimi-K2.5
            return None
        # Kimi-K2.5 has one modality, "vision_chunk"; every output row is an embedding
        modality = "vision_chunk" if tower.kind == "kimi_k25" else "image"
        if limit(limits, modality) == 0:
            return None
        rows, per_item = item.tokens, item.tokens
        item_pixels = item.patches * tower.patch_values
        patches = item.patches
        kept = freqs_buffer_bytes(tower)
    elif tower.kind in FIXED_SQUARE_KINDS:
        if expands or limit(limits, "image") == 0:  # 0.11: the placeholder's other tokens too
            return None
        # an image is image_rows embeddings (get_num_embeds, 0.15-0.24) of one image_size square
        modality, rows, per_item = "image", tower.image_rows, tower.image_rows
        item_pixels = tower.image_tiles * tower.in_channels * tower.image_size**2
    elif tower.kind in QWEN3_VL_KINDS:
        unit = (tower.patch_size * tower.merge_size) ** 2
        image_rows = QWEN3_VL_IMAGE_PIXELS // unit
        # the processor resizes the frames to fit its pixel budget, so the rows level off
        # there; below it vLLM 0.11 takes the most frames whose rows fit max_model_len
        video_rows = QWEN3_VL_VIDEO_PIXELS // tower.temporal_patch_size // unit
        video_tokens = video_rows
        if expands:
            video_rows = min(video_rows, max_model_len)
            video_tokens = int(video_rows * QWEN3_VL_VIDEO_TOKEN_FACTOR)
        # MultiModalBudget keeps the modalities allowed at least one item and profiles the one
        # with the most tokens; get_modality_with_max_tokens's max() keeps "image" on a tie
        video = ("video", video_rows, video_tokens) if limit(limits, "video") else None
        image = ("image", image_rows, image_rows) if limit(limits, "image") else None
        if image is None or (video is not None and video_tokens > image_rows):
            if video is None:
                return None
            modality, rows, per_item = video
        else:
            modality, rows, per_item = image
        # images are tiled to the temporal patch: a patch has as many values as a video's
        item_pixels = rows * tower.merge_size**2 * tower.patch_values
        patches = rows * tower.merge_size**2
    elif tower.kind in QWEN2_VL_KINDS:
        if expands and tower.kind != "qwen2_5_vl":  # Qwen2-VL's 0.11 tower is unread
            return None
        picked = _qwen2_vl_item(tower, version, max_model_len, limits)
        if picked is None:
            return None
        modality, rows = picked
        per_item = rows
        patches = rows * tower.merge_size**2
        item_pixels = patches * tower.patch_values
    else:
        return None
    budget = max(max_num_batched_tokens, per_item)
    per_prompt = max(1, min(limit(limits, modality), max_model_len // per_item))
    items = max(1, min(budget // per_item, max_num_seqs * per_prompt))
    raw = items * rows * tower.out_width * b
    # uint8 where the release normalizes on the GPU, else the model dtype (encoder_releases)
    pixels = items * item_pixels * pixel_value_bytes(tower.kind, version, b)
    norm = normalize_bytes(tower.kind, version, b)
    norm_peak, norm_held = (items * item_pixels * x for x in norm)
    expanded = items * budget * tower.out_width * b if expands and rows < budget else 0.0
    # V1 keeps its batched pixel values through the language model's pass; V2 frees them
    kept += raw + expanded + (0.0 if on_v2 else pixels)
    return EncoderProfile(
        modality, budget, items, rows, kept, pixels, items * patches, norm_peak, norm_held
    )


def _qwen2_vl_item(
    tower: VisionOutput,
    version: tuple[int, int, int],
    max_model_len: int,
    limits: Limits | None,
) -> tuple[str, int] | None:
    """(modality, rows) of the largest dummy item of a Qwen2-VL / Qwen2.5-VL tower.

    An image is ``max_pixels / (patch * merge)**2`` rows (16,384). A video's frames are the
    most whose rows fit ``max_model_len`` (``_get_max_video_frames``: ``mm_counts`` holds one
    video), at most 14, padded to the temporal patch; each pair of frames is an image's rows
    (``_get_vision_info``), so a video is ``min(max_model_len // image_rows, 7)`` images' rows,
    at least one: 114,688 rows at 128,000 tokens (no timestamps: rows are tokens).
    """
    image_rows = QWEN2_VL_IMAGE_PIXELS // (tower.patch_size * tower.merge_size) ** 2
    if image_rows <= 0:
        return None
    pairs = max(
        1, min(max_model_len // image_rows, QWEN2_VL_MAX_FRAMES // tower.temporal_patch_size)
    )
    video_rows = pairs * image_rows
    video = limit(limits, "video") > 0
    image = limit(limits, "image") > 0
    if not (video or image):
        return None
    tie_to_video = version >= TIE_BY_NAME_SINCE
    if video and (
        not image or video_rows > image_rows or (video_rows == image_rows and tie_to_video)
    ):
        return "video", video_rows
    return "image", image_rows


def _pre011_profile(
    model: ModelSpec,
    tower: VisionOutput,
    version: tuple[int, int, int],
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    limits: Limits | None,
) -> EncoderProfile | None:
    """:func:`encoder_profile` at the releases :mod:`kvscope.plan.encoder_profile_v08` reads:
    copies of the largest image, their outputs and pixel values kept (float32 at 0.8.2)."""
    image_rows = QWEN2_VL_IMAGE_PIXELS // (tower.patch_size * tower.merge_size) ** 2
    picked = pre011.profiled_item(tower, version, image_rows, max_model_len, limits)
    if picked is None:
        return None
    rows, per_prompt = picked
    budget = max(max_num_batched_tokens, rows)
    n = pre011.items(budget, rows, max_num_seqs, per_prompt)
    patches = rows * tower.merge_size**2
    b = element_bytes(model.dtype)
    pixels = n * patches * tower.patch_values * (4 if pre011.pixels_fp32(version) else b)
    kept = n * rows * tower.out_width * b + pixels
    return EncoderProfile("image", budget, n, rows, kept, pixels, n * patches)


def profiles_on_stage(v2: bool, pp_rank: int) -> bool:
    """Whether a pipeline stage runs the encoder's profiling pass: every stage on the V1
    runner (``GPUModelRunner.profile_run`` tests ``supports_mm_inputs`` alone), the first one on
    the V2 runner (``self.is_first_pp_rank``; vllm/v1/worker/gpu/model_runner.py, 0.27-0.34)."""
    return not v2 or pp_rank == 0


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


def encoder_phase_bytes(
    model: ModelSpec,
    version: tuple[int, int, int],
    gpu: GPUSpec,
    tp: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> float:
    """Bytes the profiling pass holds at the tower's peak while the encoder runs (pixel values
    plus :func:`kvscope.plan.vit_peak.vit_transient_bytes`), one GPU; 0 where not modelled."""
    p = encoder_profile(model, version, max_model_len, max_num_batched_tokens, max_num_seqs)
    return phase_bytes(model, p, gpu, tp, version)


def phase_bytes(
    model: ModelSpec,
    p: EncoderProfile | None,
    gpu: GPUSpec,
    tp: int,
    version: tuple[int, int, int],
) -> float:
    """:func:`encoder_phase_bytes` from a profile already built (0 without one)."""
    tower = model.vision_output
    if p is None or tower is None or p.patches <= 0:
        return 0.0
    b = element_bytes(model.dtype)
    walk = moonvit_transient_bytes if tower.kind in MOONVIT_KINDS else vit_transient_bytes
    if pre011.covers(tower, version):
        walk = pre011.vit_transient_bytes
    peak = walk(tower, p.patches, gpu, tp, version, b)
    if peak <= 0:
        return 0.0
    return p.pixel_bytes + max(p.normalize_peak, p.normalized_bytes + peak)
