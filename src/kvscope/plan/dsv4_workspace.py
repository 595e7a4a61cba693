"""DeepSeek V4's share of vLLM's profiling pass: the worker's shared workspace and the indexer's
transient logits tensor, bytes on one GPU, growing with ``max_model_len``.

vLLM keeps one workspace buffer per worker (``WorkspaceManager``, vllm/v1/worker/workspace.py),
grown to the largest ``get_simultaneous`` request (each view rounded up to 256 B) and shared
with the fused-MoE modular kernel, so after the profiling pass it holds the largest of:

- the sparse indexer's K-gather (``sparse_attn_indexer`` with no attention metadata,
  vllm/model_executor/layers/sparse_attn_indexer.py): ``get_max_prefill_buffer_size`` // the
  compress ratio rows, i.e. 40 x ``max_model_len`` // 4 on V4's CSA layers
  (vllm/v1/attention/backends/mla/indexer.py; the indexer in vllm/models/deepseek_v4/
  attention.py), of ``index_head_dim`` fp8 bytes plus 4 scale bytes (an fp4 indexer cache:
  ``index_head_dim`` / 2 + ``index_head_dim`` / 32), plus the radix top-k's 1 MiB. DeepSeek
  V4.1 reserves the same on every index source, at 40 x ``max_model_len`` // its ratio (1 or
  2): its ``DeepseekV4Indexer`` passes ``get_max_prefill_buffer_size // compress_ratio`` as
  ``max_total_seq_len`` and calls ``indexer_op`` in the profiling pass too
  (``_sparse_indexer_and_attn``, vllm/models/deepseek_v41/attention.py at v0.31.0);
- the compressed layers' bf16 gather (``DeepseekV4FlashMLAAttention``, vllm/models/
  deepseek_v4/nvidia/flashmla.py; model_executor/layers/deepseek_v4_attention.py in 0.20.0):
  ``PREFILL_CHUNK_SIZE`` (4) x (cdiv(L, ratio) + window + T) x ``head_dim`` bf16 at the
  smallest ratio, from 0.27.0 with two int32 top-k arrays of T x round_up(index_topk + window,
  128) and T;
- the MoE scratch the planner already keeps (:mod:`kvscope.plan.activation`).

The indexer also allocates a ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` tensor (512 MiB by
default, vllm/envs.py) that lives while the layer runs, from 0.20.0 (absent in 0.15.0).
Read in the vLLM wheels 0.20.0, 0.22.0, 0.23.0, 0.25.0, 0.26.0, 0.27.0 and 0.31.0; 0.20.0 is
the first wheel holding DeepSeek V4.

DeepSeek V3.2 (``mla_sparse`` layers, :func:`dsv32_profile_workspace`) reserves into the same
workspace, read in the wheels 0.11.1, 0.12.0, 0.13.0, 0.14.0, 0.16.0, 0.17.0, 0.18.0, 0.19.0,
0.20.0, 0.22.0, 0.25.0 and 0.27.0:

- from 0.13.0 the indexer's K-gather at 40 x ``max_model_len`` rows of ``index_head_dim`` fp8
  bytes plus 4 scale bytes (no compression), and the FlashMLA-sparse impl's bf16 prefill
  workspace of 5 x ``max_model_len`` x (``kv_lora_rank`` + ``qk_rope_head_dim``) when the
  cache is ``fp8_ds_mla`` (``get_prefill_workspace_size``, vllm/v1/attention/backends/mla/
  flashmla_sparse.py), reserved in the impl's ``__init__``;
- from 0.18.0 FlashMLA-sparse adds its ``q_concat`` buffer (T x local heads x head size,
  bf16) to that request, with or without the fp8 cache (absent in 0.17.0);
- from 0.19.0 the indexer's logits tensor (absent in 0.18.0);
- from 0.20.0 the radix top-k's 1 MiB in the indexer's request (absent in 0.19.0).

The impl keeps views on its load-time request, so when the MoE scratch or the indexer asks
for more during profiling the manager's new buffer comes on top of it
(:meth:`ProfileWorkspace.held_with`); the load-time request falls inside "Model loading took".
Experts that run per-call scratch (WNA16 Marlin) are planned as if their scratch shared the
buffer.

Before 0.13.0 the indexer's profiling tensors were 2 x ``max_model_len`` rows, freed per layer;
they are not modelled. These are the CUDA paths (FLASHMLA_SPARSE); ROCm's are not read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvscope.plan.activation import ActivationPeak
from kvscope.plan.config import EngineConfig
from kvscope.specs.model import ModelSpec

#: First wheel with DeepSeek V4 and the indexer's logits reservation.
DSV4_WORKSPACE_SINCE = (0, 20, 0)
#: First release whose V4 gather reservation adds the combined top-k arrays.
TOPK_ARRAYS_SINCE = (0, 27, 0)
#: ``get_max_prefill_buffer_size`` = max_model_len x 40 (vllm/v1/attention/backends/mla/indexer.py)
PREFILL_BUFFER_PER_TOKEN = 40
#: ``RADIX_TOPK_WORKSPACE_SIZE`` (sparse_attn_indexer.py), bytes.
RADIX_TOPK_BYTES = 1 << 20
#: ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` default (vllm/envs.py, 0.20.0-0.31.0), bytes.
MAX_LOGITS_BYTES = 512 << 20
#: ``DeepseekV4MLAAttention.PREFILL_CHUNK_SIZE``.
PREFILL_CHUNK_SIZE = 4
#: ``WorkspaceManager.get_simultaneous`` aligns each view to this many bytes.
ALIGN = 256
MXFP4_BLOCK = 32
#: First wheel where V3.2's indexer and FlashMLA-sparse reserve through ``WorkspaceManager``.
DSV32_WORKSPACE_SINCE = (0, 13, 0)
#: First wheel whose FlashMLA-sparse request holds ``q_concat`` (absent in 0.17.0).
Q_CONCAT_SINCE = (0, 18, 0)
#: First wheel whose V3.2 indexer allocates the logits tensor in profiling (absent in 0.18.0).
DSV32_LOGITS_SINCE = (0, 19, 0)
#: First wheel whose indexer request holds the radix top-k bytes (absent in 0.19.0).
RADIX_TOPK_SINCE = (0, 20, 0)
#: ``get_prefill_workspace_size`` = max_model_len x 5 (FlashMLA-sparse, fp8_ds_mla only).
FLASHMLA_SPARSE_PREFILL_PER_TOKEN = 5


@dataclass(frozen=True)
class ProfileWorkspace:
    """V4's (or V3.2's) terms of the profiling pass on one GPU, bytes."""

    indexer_gather: float
    attention_gather: float
    #: the indexer's transient logits tensor
    logits: float
    #: whether the attention request is made at load and kept as views by the attention
    #: impl (V3.2's FlashMLA-sparse), so a later, larger request cannot reuse its storage
    attention_held: bool = False

    @property
    def workspace(self) -> float:
        """What the shared workspace must hold for these layers alone."""
        return max(self.indexer_gather, self.attention_gather)

    def held_with(self, moe_scratch: float) -> float:
        """Workspace bytes alive after the pass beside ``moe_scratch`` of fused-MoE requests.

        ``WorkspaceManager._ensure_workspace_size`` drops its own reference and allocates the
        larger buffer; FlashMLA-sparse's views (``self.prefill_bf16_workspace``,
        ``self.q_concat_buffer``) keep the load-time storage alive, so a later request larger
        than it adds a second buffer instead of replacing the first.
        """
        others = max(moe_scratch, self.indexer_gather)
        if not self.attention_held:
            return max(others, self.attention_gather)
        return self.attention_gather + (others if others > self.attention_gather else 0.0)


def _aligned(*sizes: int) -> int:
    return sum(-(-s // ALIGN) * ALIGN for s in sizes)


def dsv4_profile_workspace(
    model: ModelSpec, eng: EngineConfig, max_model_len: int, batched_tokens: int
) -> ProfileWorkspace | None:
    """V4's profiling workspace for ``max_model_len`` and ``batched_tokens`` (None when the
    model is not DeepSeek V4 or the release has no such pass)."""
    if not model.is_deepseek_v4 or eng.version < DSV4_WORKSPACE_SINCE:
        return None
    length, t = max_model_len, batched_tokens
    indexer = 0
    gather = 0
    for layer in model.layers:
        att = layer.attention
        ratio = max(1, att.compress_ratio)
        indexes = att.kind == "dsv4_csa" or (att.kind == "dsv41" and att.index_source)
        if indexes and att.index_head_dim:
            rows = PREFILL_BUFFER_PER_TOKEN * length // ratio
            hd = att.index_head_dim
            if eng.indexer_dtype == "fp4":
                values, scales = rows * (hd // 2), rows * (hd // MXFP4_BLOCK)
            else:
                values, scales = rows * hd, rows * 4
            indexer = max(indexer, _aligned(values, scales, RADIX_TOPK_BYTES))
        compressed = -(-length // ratio) if ratio > 1 else 0
        window = att.window or 0
        rows_m = compressed + window + t
        sizes = [PREFILL_CHUNK_SIZE * rows_m * att.head_dim * 2]
        if eng.version >= TOPK_ARRAYS_SINCE:
            top_k = model.index_topk if ratio > 1 else 0
            combined = -(-(top_k + window) // 128) * 128
            sizes += [t * combined * 4, t * 4]
        gather = max(gather, _aligned(*sizes))
    return ProfileWorkspace(float(indexer), float(gather), float(MAX_LOGITS_BYTES))


def with_profile_workspace(act: ActivationPeak, ws: ProfileWorkspace) -> ActivationPeak:
    """``act`` with V4's terms: the shared workspace holds the larger of the MoE scratch and
    V4's gathers for the whole pass, and the indexer layer's logits tensor stands beside the
    layer's hidden state and residual (it is freed when the layer returns)."""
    return replace(
        act,
        attention=max(act.attention, ws.logits),
        moe_workspace=ws.held_with(act.moe_workspace),
        moe_persistent=True,
    )


def dsv32_profile_workspace(
    model: ModelSpec,
    eng: EngineConfig,
    kv_dtype: str,
    tp: int,
    max_model_len: int,
    batched_tokens: int,
) -> ProfileWorkspace | None:
    """DeepSeek V3.2's profiling workspace on one GPU (None when the model has no
    ``mla_sparse`` layer, is DeepSeek V4, or the release predates the workspace manager).

    ``kv_dtype`` is the resolved cache dtype (``fp8_ds_mla`` turns on FlashMLA-sparse's
    prefill workspace); ``tp`` splits the attention heads that size ``q_concat``.
    """
    if model.is_deepseek_v4 or eng.version < DSV32_WORKSPACE_SINCE:
        return None
    sparse = [ly.attention for ly in model.layers if ly.attention.kind == "mla_sparse"]
    if not sparse or not sparse[0].index_head_dim:
        return None
    att = sparse[0]
    v = eng.version
    rows = PREFILL_BUFFER_PER_TOKEN * max_model_len
    indexer_sizes = [rows * att.index_head_dim, rows * 4]
    if v >= RADIX_TOPK_SINCE:
        indexer_sizes.append(RADIX_TOPK_BYTES)
    head_size = att.kv_lora_rank + att.qk_rope_head_dim
    gather_sizes = []
    if v >= Q_CONCAT_SINCE:
        gather_sizes.append(batched_tokens * (att.num_heads // tp) * head_size * 2)
    if kv_dtype == "fp8_ds_mla":
        gather_sizes.append(FLASHMLA_SPARSE_PREFILL_PER_TOKEN * max_model_len * head_size * 2)
    return ProfileWorkspace(
        float(_aligned(*indexer_sizes)),
        float(_aligned(*gather_sizes)),
        float(MAX_LOGITS_BYTES if v >= DSV32_LOGITS_SINCE else 0),
        attention_held=bool(gather_sizes),
    )
