"""Two tensors vLLM's M-RoPE vision-language models make at load, which "Model loading took"
counts and the checkpoint does not hold: the rotary cache's three extra folds and Qwen3-VL's
deepstack buffers. Units: bytes on one GPU.

- ``MRotaryEmbedding``, the class ``get_rope`` builds for rotary parameters with an
  ``mrope_section`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 / 3.6; ``ModelSpec.mrope``),
  caches cos/sin over ``max_position_embeddings * 4`` positions ("In Qwen2.5-VL, the maximum
  index value is related to the duration of the input video. We enlarge
  max_position_embeddings to 4 times"): ``MRotaryEmbedding.__init__`` in
  vllm/model_executor/layers/rotary_embedding.py of the 0.7.2 and 0.9.2 wheels and in
  rotary_embedding/mrope.py of the 0.11.0, 0.13.0, 0.20.0, 0.26.0 and 0.27.1 wheels (the
  0.7.1 and 0.6.3 wheels cache one fold; ``MRotaryEmbeddingInterleaved`` of 0.20.0-0.27.1
  hands its ``max_position_embeddings`` to that same constructor, so it too caches four).
  :func:`kvscope.plan.weights.rank_weights` counts one fold (``rope_cache``, model dtype,
  ``positions x rotary width``); :func:`mrope_extra_cache_bytes` is the other three, on every
  pipeline stage (each stage builds attention layers, and ``get_rope`` shares one cache).
- ``Qwen3VLForConditionalGeneration`` / ``Qwen3VLMoeForConditionalGeneration.__init__``
  (vllm/model_executor/models/qwen3_vl.py and qwen3_vl_moe.py of the 0.11.0 and 0.13.0 wheels;
  qwen3_vl.py of 0.20.0, 0.26.0 and 0.27.1) register, where the tower is built, one
  ``torch.zeros(max_num_batched_tokens, text hidden_size)`` per ``deepstack_visual_indexes``
  entry, in the default dtype and device model loading sets: :func:`deepstack_buffer_bytes`.

Published checks: Qwen3-VL-30B-A3B-Instruct logs 58.2299 GiB loaded on one H100 NVL at 0.13.0
(8,192 batched tokens), 29.3114 GiB a GPU at TP2 on H100s at 0.12.0 (8,192) and 14.7708 at
TP4 on RTX 3090s at 0.11.0 (2,048): the checkpoint's share and one rotary fold are 0.294,
0.300 and 0.222 GiB short of them, and the two terms are 0.281, 0.281 and 0.211 GiB.
"""

from __future__ import annotations

from kvscope.plan.weights import rope_cache_elements
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: First release whose ``MRotaryEmbedding`` caches four times ``max_position_embeddings``
#: (the 0.7.2 wheel; 0.7.1's caches one).
MROPE_FOURFOLD_SINCE = (0, 7, 2)
#: First release whose Qwen3-VL / Qwen3.5 decoder layers pass their own factor (1).
MROPE_FACTOR_PARAM_SINCE = (0, 32, 0)
#: ``model_type`` values (wrappers and text configs) of the families that pass it.
FACTOR_ONE_TYPES = frozenset(
    {
        "qwen3_vl", "qwen3_vl_moe", "qwen3_vl_text", "qwen3_vl_moe_text",
        "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text",
    }
)  # fmt: skip


def mrope_extra_cache_bytes(model: ModelSpec, version: tuple[int, int, int]) -> float:
    """The three folds of an M-RoPE cos/sin cache beyond the one the weights count."""
    if not model.mrope or version < MROPE_FOURFOLD_SINCE:
        return 0.0
    if version >= MROPE_FACTOR_PARAM_SINCE and _passes_factor_one(model):
        return 0.0
    return 3.0 * rope_cache_elements(model) * element_bytes(model.dtype)


def _passes_factor_one(model: ModelSpec) -> bool:
    """Qwen3.5 (by ``model_type``) or Qwen3-VL, whose text config kvscope reads as ``qwen3`` /
    ``qwen3_moe``: the M-RoPE family whose tower feeds deepstack outputs."""
    tower = model.vision_output
    return model.model_type in FACTOR_ONE_TYPES or bool(tower is not None and tower.deepstack)


def deepstack_buffer_bytes(model: ModelSpec, batched_tokens: int) -> float:
    """Qwen3-VL's deepstack input buffers, on the stage that builds the vision tower."""
    tower = model.vision_output
    if not model.vision_params or tower is None or not tower.deepstack:
        return 0.0
    return float(tower.deepstack * batched_tokens * model.hidden_size) * element_bytes(model.dtype)
