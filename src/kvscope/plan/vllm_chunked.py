"""Whether vLLM keeps Llama 4's chunked local attention as its own KV groups, by release.

Llama 4's RoPE layers attend within ``attention_chunk_size``-token chunks (8192 in Scout's
and Maverick's config.json); its NoPE layers, every fourth (layer ``i`` with
``(i + 1) % 4 == 0``: transformers' ``Llama4TextConfig`` default ``no_rope_layers``), keep
full history. vLLM builds a RoPE layer as ``ChunkedLocalAttention``
(``use_chunked_local_attn = not self.nope and config.attention_chunk_size``,
vllm/model_executor/models/llama4.py), whose spec is ``ChunkedLocalAttentionSpec``. With the
hybrid KV cache manager on, those layers form their own groups (36 chunked + 12 full layers:
three chunked groups and one full group of 12 layers each) and a request's chunked group
needs ``cdiv(min(chunk + in-flight tokens, max_model_len), block_size)`` blocks
(``ChunkedLocalAttentionSpec.max_memory_usage_bytes`` / ``max_admission_blocks_per_request``,
vllm/v1/kv_cache_interface.py; the in-flight tokens are ``max_num_batched_tokens`` up to 0.25
and ``VllmConfig.max_in_flight_tokens`` from 0.26, as for sliding windows). With it off,
``unify_hybrid_kv_cache_specs`` turns every chunked spec into a ``FullAttentionSpec``: one
group, full history.

``VllmConfig.__post_init__`` (vllm/config/vllm.py, 0.19.0 and 0.34.0 wheels) turns the
hybrid manager off for a model with ``attention_chunk_size`` when the drafter is an EAGLE-type
one (``SpeculativeConfig.use_eagle``: eagle, eagle3, mtp; dflash and dspark too at 0.34) or
``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is "0"; for every model, it is off with
``--disable-hybrid-kv-cache-manager``, ``--kv-events-config``, or ``--kv-transfer-config``
unless the hybrid manager is asked for. The env var defaults to "0" in the 0.11.0, 0.12.0 and
0.13.0 wheels' vllm/envs.py and to "1" from 0.14.0 (0.14.0, 0.14.1, 0.19, 0.22, 0.25, 0.27,
0.28, 0.31, 0.34 wheels). Before ``ChunkedLocalAttentionSpec`` (absent from the 0.9.2 wheel)
every layer is full attention. Units: tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvscope.plan.config import EngineConfig
    from kvscope.specs.model import ModelSpec

#: First release whose ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` defaults to "1"
#: (vllm/envs.py: "0" in the 0.13.0 wheel, "1" in the 0.14.0 wheel).
CHUNKED_HYBRID_DEFAULT_SINCE = (0, 14, 0)
#: ``SpeculativeConfig.use_eagle`` methods (vllm/config/speculative.py at 0.34.0)
EAGLE_TYPE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
#: Llama 4's NoPE (full-attention) layer interval (``no_rope_layer_interval``)
NOPE_INTERVAL = 4


def is_rope_layer(i: int) -> bool:
    """Whether Llama 4's layer ``i`` is a RoPE (chunked-attention) layer, not a NoPE one; the
    same split decides SGLang's SWA layers (``get_hybrid_layer_ids``, kvscope.plan.sglang_swa)."""
    return (i + 1) % NOPE_INTERVAL != 0


def is_chunked_layer(model: ModelSpec, i: int) -> bool:
    """Whether layer ``i`` of ``model`` is a chunked-local (RoPE) layer of Llama 4."""
    return model.attention_chunk_size > 0 and is_rope_layer(i)


def chunked_span(model: ModelSpec, eng: EngineConfig) -> int:
    """The chunk (tokens) vLLM keeps Llama 4's chunked layers to as their own KV groups under
    ``eng``, or 0 when they are planned as full attention (see the module text).

    ``eng.chunked_local_hybrid``: ``None`` follows the release's default; ``False`` stands for
    ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0``,
    ``--disable-hybrid-kv-cache-manager``, a KV connector or KV events; ``True`` for the env
    var at "1" on a release that defaults to "0". An EAGLE-type drafter turns it off always.
    """
    if eng.engine != "vllm" or model.attention_chunk_size <= 0:
        return 0
    spec = eng.speculative
    if spec is not None and spec.method in EAGLE_TYPE_METHODS:
        return 0
    on = eng.chunked_local_hybrid
    if on is None:
        on = eng.version >= CHUNKED_HYBRID_DEFAULT_SINCE
    return model.attention_chunk_size if on else 0
