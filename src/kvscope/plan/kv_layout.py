"""How an engine lays the KV cache of one GPU out in blocks: groups, page sizes, block bytes.

vLLM v1 (``vllm/v1/kv_cache_interface.py``, ``vllm/v1/core/kv_cache_utils.py``):

- Every attention layer declares a spec whose page is ``block_size x per-token bytes``
  (K and V heads of this TP rank, or one MLA latent).
- A model whose layers all keep full history (GQA or MLA; V3.2 adds an indexer spec of a
  different size, a "uniform type" case) forms one group: a block spans all layers, so
  ``block_bytes = block_size x sum of per-token bytes``.
- Full and sliding-window layers with equal pages (gpt-oss) are split into groups of
  ``group_size`` layers (the smallest per-kind layer count); one tensor is shared by one
  layer of each group, so ``block_bytes = page x group_size`` and each group draws its own
  blocks from the pool.
- Full and sliding layers of unequal per-token bytes (Gemma 4) keep one page size: the
  smaller spec's block size grows by the page ratio (:func:`unified_page_layout`); Gemma 4's
  KV-shared layers own no cache and join no group.
- DeepSeek V4 uses one pool of 256-token logical blocks; its groups (MLA, window halves,
  compressor states; a drafter's window-only layers join the window bucket) and the block
  stride follow the release (:mod:`kvscope.plan.dsv4_pool`). Up to vLLM 0.26 the logged
  concurrency weighs each group's blocks by its page bytes over the first group's
  (``get_max_concurrency_for_kv_cache_config``: ``num_layer_per_group x`` the groups' summed
  ``max_memory_usage_bytes`` over ``num_layer_per_group x`` the first group's page, 0.21.0-
  0.26.0); from 0.27 it counts blocks (:meth:`KVLayout.reported_blocks_per_request`). The
  weighting is the report's only: every group still draws whole blocks from the one pool.
- An MXFP4 indexer cache (``use_fp4_indexer_cache``) keeps 68 bytes a token from vLLM 0.27.0;
  up to 0.26.x vLLM allocates it at the fp8 size, 132 bytes, and uses the first half
  ("we still allocate the same amount of memory as FP8": ``k_cache_head_dim`` in
  ``DeepseekV4Indexer.__init__``, vllm/models/deepseek_v4/attention.py of the 0.22.0, 0.23.0,
  0.25.0 and 0.26.0 wheels; the 0.27.0 wheel sizes it ``head_dim // 2 + head_dim // 32``).
- DeepSeek V4.1 (kind ``dsv41``) packs window, compressed and compressor-ring groups of
  unequal block sizes (32 / 64 / 8 tokens) into one pool (:mod:`kvscope.plan.dsv41_pool`); a
  request holds one ring block per ring group.
- Attention + linear-attention hybrids (Qwen3-Next's Gated DeltaNet) keep one fixed state
  per request in the linear layers. vLLM raises the attention block size until one
  attention page (``block_size x`` one layer's per-token bytes) holds a linear layer's state,
  rounded up to the kernel alignment of 16 tokens, then pads the state page to that size
  (``HybridAttentionMambaModelConfig.verify_and_update_config``, vllm/model_executor/models/
  config.py at v0.10.2: "Setting attention block size to 544 tokens" for Qwen3-Next at TP2);
  layers form groups of the smallest per-kind count as above, and a request holds one block
  in each linear group (prefix caching is off for these models in that release). A hybrid
  started with ``--enable-prefix-caching`` runs ``--mamba-cache-mode align`` and holds two
  (``MambaSpec.max_memory_usage_bytes``: ``page x (2 + spec blocks)`` in ``align``,
  ``cdiv(max_model_len, block_size)`` pages in ``all``; vllm/v1/kv_cache_interface.py at
  v0.24.0), which the admission check and the logged concurrency both count. With
  speculative decoding each linear group's request holds ``num_speculative_tokens`` more
  state blocks (``MambaSpec.num_speculative_blocks``, set in ``MambaBase.get_kv_cache_spec``,
  vllm/model_executor/layers/mamba/abstract.py of the 0.28.0 and 0.30.0 wheels) and each
  state's conv window as many more rows (``conv_kernel_size - 1 + num_spec``), which can
  raise the attention block size too; Qwen3.5-0.8B's MTP starts on vLLM 0.29.0 log it
  (2,313,885 / 2,273,296 tokens at N = 1 / 2: 1,072- and 1,088-token blocks, 3 and 4 state
  blocks a request in each of three linear groups).
- Llama 4's chunked local attention layers, when vLLM keeps them apart
  (:mod:`kvscope.plan.vllm_chunked`), form ``chunked`` groups of ``layers_per_group`` layers
  beside the full ones, pages equal; a request needs
  ``cdiv(min(chunk + in-flight tokens, max_model_len), block_size)`` blocks of each
  (``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``). ``bytes_per_token`` keeps
  counting them as history, the simulator's full-history view of Llama 4.

Units: bytes, tokens.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kvscope.plan import dsv4_pool, dsv41_pool
from kvscope.plan._cache import per_model_cache
from kvscope.plan.vllm_chunked import is_chunked_layer
from kvscope.specs.attention import (
    DSV4_ENTRY,
    AttentionLayer,
    indexer_entry_bytes,
)
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: DeepSeek V4 logical block (tokens) and page alignment (vLLM ``alignment=576``).
DSV4_BLOCK = 256
DSV4_ALIGN = 576
#: a release with the current DeepSeek V4 pool rules (the default of :func:`vllm_layout`)
DSV4_LATEST_RULES = (0, 31, 0)
#: First release whose DeepSeek V4 MXFP4 indexer cache is allocated at its own size (see the
#: module text); earlier ones allocate fp8's.
FP4_INDEXER_PAGE_SINCE = (0, 27, 0)
#: vLLM's kernel block alignment for the hybrid attention block size (FlashAttention, 0.10.2).
HYBRID_BLOCK_ALIGN = 16
#: MLA + linear-attention hybrids (Kimi Linear / K3): vLLM makes the block a multiple of 128
#: tokens so that TRTLLM / FlashInfer MLA decode kernels see whole 128-token pages
#: (``Platform._align_hybrid_block_size``: ``kernel_block_alignment_size = max(..., 128)``
#: when ``use_mla``, vllm/platforms/interface.py of the 0.27.0 to 0.34.0 wheels). Before,
#: a multiple of 64: ``HybridAttentionMambaModelConfig`` took 64 for MLA backends (128 only
#: for an explicitly chosen CUTLASS_MLA, not modelled; vllm/model_executor/models/config.py
#: of the 0.14.1 and 0.19 wheels), which vllm#28228's Kimi-Linear start on 2 x RTX 3090
#: logs ("Setting attention block size to 960 tokens": 64 x 15 for a 1,085,440-B state at
#: TP2); 0.22-0.26 take the backend's smallest kernel block, 64 for FlashMLA (not pinned
#: by a log).
MLA_HYBRID_ALIGN = 128
MLA_HYBRID_ALIGN_SINCE = (0, 27, 0)
MLA_HYBRID_ALIGN_BEFORE = 64
#: head size vLLM < 0.7.1 padded DeepSeek V2/V3 heads to (model_executor/models/deepseek_v2.py)
PRE_MLA_HEAD_DIM = 256
#: first vLLM release caching DeepSeek V2/V3 as the MLA latent (v0.7.1, ``ModelConfig.use_mla``)
MLA_CACHE_SINCE = (0, 7, 1)


@dataclass(frozen=True)
class KVGroupLayout:
    """One KV-cache group: its kind, layer count, block size and blocks a request needs."""

    kind: str  # full | sliding | chunked | mla | dsv4_mla | dsv4_swa | dsv4_state | linear_state
    num_layers: int
    block_size: int
    window: int | None = None
    #: bytes of one block of this group (0: not tracked, every group counts one pool block)
    page_bytes: int = 0
    #: vLLM ``--mamba-cache-mode`` of a ``linear_state`` group (``none``, ``align``, ``all``)
    mamba_cache_mode: str = "none"
    #: state blocks a ``linear_state`` group's request holds for speculative tokens
    #: (``MambaSpec.num_speculative_blocks``: ``num_speculative_tokens``)
    spec_blocks: int = 0

    def blocks_for(self, max_model_len: int, batched_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` needs (vLLM ``max_memory_usage_bytes``)."""
        if self.kind == "linear_state":
            if self.mamba_cache_mode == "all":
                return math.ceil(max_model_len / self.block_size) + self.spec_blocks
            return (2 if self.mamba_cache_mode == "align" else 1) + self.spec_blocks
        if self.kind == "dsv41_ring":
            return 1  # one compressor ring per request
        if self.window is None:
            return math.ceil(max_model_len / self.block_size)
        if self.kind == "chunked":  # ChunkedLocalAttentionSpec: the chunk, no extra block
            return math.ceil(min(self.window + batched_tokens, max_model_len) / self.block_size)
        span = min(self.window - 1 + batched_tokens, max_model_len)
        return math.ceil(span / self.block_size) + 1


@dataclass(frozen=True)
class KVLayout:
    """KV layout of one GPU: groups, bytes of one block, and per-token bytes."""

    groups: tuple[KVGroupLayout, ...]
    block_size: int
    block_bytes: int
    bytes_per_token: float  # amortised full-history bytes per token on this GPU
    #: bytes per block of the engine's start-up admission check (0: ``block_bytes``)
    admission_block_bytes: int = 0

    def request_bytes(self, max_model_len: int, batched_tokens: int) -> int:
        """KV bytes the engine requires for one ``max_model_len`` request before it starts."""
        per_block = self.admission_block_bytes or self.block_bytes
        return self.blocks_per_request(max_model_len, batched_tokens) * per_block

    def blocks_per_request(self, max_model_len: int, batched_tokens: int) -> int:
        return sum(g.blocks_for(max_model_len, batched_tokens) for g in self.groups)

    def reported_blocks_per_request(
        self, max_model_len: int, batched_tokens: int, by_page_bytes: bool
    ) -> int:
        """Blocks per request behind vLLM's logged concurrency. ``by_page_bytes`` (vLLM
        <= 0.26): ``cdiv(sum of blocks x group page bytes, first group's page bytes)``, which
        differs from the block count only where group pages differ (DeepSeek V4)."""
        if not by_page_bytes or any(g.page_bytes <= 0 for g in self.groups):
            return self.blocks_per_request(max_model_len, batched_tokens)
        total = sum(g.blocks_for(max_model_len, batched_tokens) * g.page_bytes for g in self.groups)
        return -(-total // self.groups[0].page_bytes)


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _dsv4_layout(
    model: ModelSpec,
    layers: tuple[int, ...],
    indexer: str,
    release: tuple[int, int, int],
    draft_window_layers: int = 0,
) -> KVLayout:
    atts = [model.layers[i].attention for i in layers]
    kinds = Counter(a.kind for a in atts)
    n_csa, n_hca = kinds.get("dsv4_csa", 0), kinds.get("dsv4_hca", 0)
    idx = indexer_entry_bytes(indexer if release >= FP4_INDEXER_PAGE_SINCE else "fp8")
    c4 = _align(DSV4_BLOCK // 4 * DSV4_ENTRY, DSV4_ALIGN)
    c4_idx = _align(DSV4_BLOCK // 4 * idx, DSV4_ALIGN)
    c128 = _align(DSV4_BLOCK // 128 * DSV4_ENTRY, DSV4_ALIGN)
    index_dim = next((a.index_head_dim for a in atts if a.kind == "dsv4_csa"), 128)
    bks = dsv4_pool.buckets(
        n_csa,
        n_hca,
        len(layers) + draft_window_layers,
        (c4, c4_idx, c128),
        DSV4_ENTRY,
        atts[0].head_dim,
        index_dim,
    )
    pool, stride, admission = dsv4_pool.pool(release, bks)
    groups = tuple(
        KVGroupLayout(g.kind, g.num_layers, g.block_size, g.window, g.page_bytes) for g in pool
    )
    per_token = n_csa * (DSV4_ENTRY + idx) / 4 + n_hca * DSV4_ENTRY / 128
    return KVLayout(groups, DSV4_BLOCK, stride, per_token, admission)


def _dsv41_layout(
    model: ModelSpec, layers: tuple[int, ...], indexer: str, draft_window_layers: int = 0
) -> KVLayout:
    """DeepSeek V4.1's packed pool (:mod:`kvscope.plan.dsv41_pool`); a drafter's
    window-only stages join the window bucket."""
    atts = [model.layers[i].attention for i in layers]
    idx = indexer_entry_bytes(indexer)
    pool, stride = dsv41_pool.groups(atts, idx, draft_window_layers)
    groups = tuple(
        KVGroupLayout(g.kind, g.num_layers, g.block_size, g.window, g.page_bytes) for g in pool
    )
    per_token = sum(
        (DSV4_ENTRY + (idx if a.index_source else 0)) / a.compress_ratio
        for a in atts
        if a.kv_source and a.compress_ratio
    )
    return KVLayout(groups, dsv41_pool.CACHE_BLOCK, stride, per_token, stride)


def _linear_hybrid_layout(
    model: ModelSpec,
    layers: tuple[int, ...],
    kv_dtype: str,
    tp: int,
    block_size: int,
    mamba_cache_mode: str = "none",
    release: tuple[int, int, int] = DSV4_LATEST_RULES,
    num_spec: int = 0,
) -> KVLayout:
    """Attention + Gated DeltaNet / KDA layers in one pool of equal pages (see the module
    text); beside MLA the block is a multiple of 128 tokens from 0.27, of 64 before
    (:data:`MLA_HYBRID_ALIGN`). ``num_spec`` speculative tokens widen each linear layer's
    conv state by as many rows and add as many state blocks to its request (see the module
    text)."""
    attn = [model.layers[i].attention for i in layers if model.layers[i].attention.kind != "gdn"]
    linear = [model.layers[i].attention for i in layers if model.layers[i].attention.kind == "gdn"]
    per_token = max(math.fsum(c.entry_bytes for c in a.kv_caches(kv_dtype, tp)) for a in attn)
    state = max(a.gdn_state_bytes(tp, num_spec) for a in linear)
    align = HYBRID_BLOCK_ALIGN
    if all(a.is_mla_family for a in attn):
        new = release >= MLA_HYBRID_ALIGN_SINCE
        align = max(MLA_HYBRID_ALIGN if new else MLA_HYBRID_ALIGN_BEFORE, block_size)
    block = max(block_size, align * math.ceil(state / (align * per_token)))
    page = block * per_token
    group_size = min(len(attn), len(linear))
    groups: list[KVGroupLayout] = []
    for kind, n in (("full", len(attn)), ("linear_state", len(linear))):
        for g in range(math.ceil(n / group_size)):
            mode = mamba_cache_mode if kind == "linear_state" else "none"
            spec = num_spec if kind == "linear_state" else 0
            layers_in = min(group_size, n - g * group_size)
            groups.append(
                KVGroupLayout(kind, layers_in, block, mamba_cache_mode=mode, spec_blocks=spec)
            )
    return KVLayout(tuple(groups), block, int(page * group_size), per_token * len(attn))


@per_model_cache()
def vllm_layout(
    model: ModelSpec,
    layers: tuple[int, ...],
    kv_dtype: str,
    tp: int,
    block_size: int,
    indexer: str = "fp8",
    release: tuple[int, int, int] = DSV4_LATEST_RULES,
    v0_mla_padding: bool = False,
    mla_as_heads: bool = False,
    extra: tuple[AttentionLayer, ...] = (),
    draft_window_layers: int = 0,
    mamba_cache_mode: str = "none",
    chunk: int = 0,
    num_spec: int = 0,
) -> KVLayout:
    """vLLM's KV layout for the ``layers`` of one GPU (TP rank ``tp`` of a PP stage).

    ``release``: the vLLM release whose DeepSeek V4 pool rules apply.
    ``extra``: a drafter's full-attention layers of another page, counted only beside an
    all-full-attention stage, where vLLM keeps one group whose page is the sum of every
    layer's (``UniformTypeKVCacheSpecs``). ``draft_window_layers``: a DeepSeek V4 drafter's
    window-only layers (MTP layer, DSpark stages) on this stage. ``mamba_cache_mode``: the
    state blocks a linear-attention hybrid's request holds (see the module text).
    ``chunk``: Llama 4's chunk when vLLM keeps its chunked layers as their own groups
    (:func:`kvscope.plan.vllm_chunked.chunked_span`; 0: planned as full attention).
    ``num_spec``: the start's ``num_speculative_tokens`` (a linear-attention hybrid's state
    and state blocks grow with it).
    ``mla_as_heads``: vLLM before 0.7.1 ran DeepSeek V2/V3 attention as plain multi-head
    attention over ``num_heads // tp`` local heads with K and V zero-padded to 256
    (``Attention(self.num_local_heads, 256, ...)`` in model_executor/models/deepseek_v2.py and
    deepseek_v3.py of the 0.6.3 and 0.6.6 wheels), so an ``mla`` layer keeps
    2 x heads x 256 elements per token instead of the latent."""
    if any(model.layers[i].attention.kind == "dsv41" for i in layers):
        return _dsv41_layout(model, layers, indexer, draft_window_layers)
    if any(model.layers[i].attention.kind.startswith("dsv4") for i in layers):
        return _dsv4_layout(model, layers, indexer, release, draft_window_layers)
    if any(model.layers[i].attention.kind == "gdn" for i in layers):
        return _linear_hybrid_layout(
            model, layers, kv_dtype, tp, block_size, mamba_cache_mode, release, num_spec
        )
    per_layer: list[tuple[str, float, int | None]] = []
    for i in layers:
        att = model.layers[i].attention
        caches = att.kv_caches(kv_dtype, tp, indexer)
        if not caches:  # a KV-shared layer (Gemma 4) reads another layer's cache
            continue
        entry = math.fsum(c.entry_bytes for c in caches)
        if mla_as_heads and att.kind == "mla":
            entry = float(2 * (att.num_heads // tp) * PRE_MLA_HEAD_DIM * element_bytes(kv_dtype))
        if v0_mla_padding and att.kind == "mla":
            # vLLM V0 padded the MLA entry to a 256-byte multiple (VLLM_CUDA_MEM_ALIGN_KV_CACHE).
            entry = float(_align(int(entry), 256))
        kind = "sliding" if att.kind == "sliding" else ("mla" if att.is_mla_family else "full")
        window = att.window if kind == "sliding" else None
        if chunk and kind == "full" and is_chunked_layer(model, i):
            kind, window = "chunked", chunk
        per_layer.append((kind, entry, window))
    if extra and all(k == "full" for k, _, _ in per_layer):
        for att in extra:
            entry = math.fsum(c.entry_bytes for c in att.kv_caches(kv_dtype, tp, indexer))
            per_layer.append(("full", entry, None))
    counts = Counter(k for k, _, _ in per_layer)
    total_per_token = math.fsum(e for _, e, _ in per_layer)
    if len(counts) == 1:
        kind = next(iter(counts))
        window = per_layer[0][2]
        group = KVGroupLayout(kind, len(per_layer), block_size, window)
        return KVLayout((group,), block_size, int(block_size * total_per_token), total_per_token)
    if len({e for _, e, _ in per_layer}) > 1:
        return unified_page_layout(per_layer, block_size)
    # Hybrid full + sliding: groups of layers_per_group layers share one tensor per slot.
    group_size = layers_per_group(counts.values())
    page = max(e for _, e, _ in per_layer) * block_size
    groups: list[KVGroupLayout] = []
    for kind, n in counts.items():
        window = next(w for k, _, w in per_layer if k == kind)
        for g in range(math.ceil(n / group_size)):
            size = min(group_size, n - g * group_size)
            groups.append(KVGroupLayout(kind, size, block_size, window))
    history = math.fsum(e for k, e, _ in per_layer if k != "sliding")
    return KVLayout(tuple(groups), block_size, int(page * group_size), history)


def layers_per_group(counts: Iterable[int]) -> int:
    """Layers in each KV-cache group when layers of several specs share one pool: the smallest
    per-spec count, or the largest when it is under 1.5 x the smallest (fewer padding layers).
    ``_get_kv_cache_groups_uniform_page_size``, vllm/v1/core/kv_cache_utils.py (0.25.0-0.31.0
    wheels), ``kv_cache_planning.py`` at 0.34.0. A spec's layers form ``ceil(n / size)`` groups.
    """
    sizes = list(counts)
    smallest, largest = min(sizes), max(sizes)
    return largest if largest < smallest * 1.5 else smallest


def unified_page_layout(
    per_layer: list[tuple[str, float, int | None]], block_size: int
) -> KVLayout:
    """Full and sliding layers whose per-token bytes differ (Gemma 4: 16 x 256 sliding heads
    against 4 x 512 global ones): vLLM's ``unify_kv_cache_spec_page_size`` raises the block size
    of a smaller-page spec by ``max page / its page`` when that divides, else pads its page to
    the largest; ``_get_kv_cache_groups_uniform_page_size`` then splits each spec's layers
    into groups of the smallest count (the largest when it is under 1.5 x the smallest), one
    page per group slot (vllm/v1/core/kv_cache_utils.py, 0.25.0-0.31.0 wheels)."""
    max_entry = max(e for _, e, _ in per_layer)
    page = max_entry * block_size
    specs: dict[tuple[str, float, int | None], int] = {}
    for key in per_layer:
        specs[key] = specs.get(key, 0) + 1
    group_size = layers_per_group(specs.values())
    groups: list[KVGroupLayout] = []
    for (kind, entry, window), n in specs.items():
        ratio = max_entry / entry
        size = block_size * int(ratio) if ratio == int(ratio) else block_size
        for g in range(math.ceil(n / group_size)):
            layers_in = min(group_size, n - g * group_size)
            groups.append(KVGroupLayout(kind, layers_in, size, window, int(page)))
    history = math.fsum(e for k, e, _ in per_layer if k != "sliding")
    return KVLayout(tuple(groups), block_size, int(page * group_size), history)


@per_model_cache()
def sglang_cell_bytes(
    model: ModelSpec, layers: tuple[int, ...], kv_dtype: str, attn_tp: int
) -> float:
    """SGLang ``cell_size``: KV bytes per token on one GPU over the ``layers`` of its stage.

    Heads are split over the attention-TP size (``tp / dp`` with DP attention); MLA keeps one
    latent; V3.2 adds the 132-B indexer key (sglang PR #11309). Sliding layers are counted at
    full length: SGLang's single token pool (Gemma 2/3, gpt-oss where its hybrid pool is off);
    the two-pool cell of Gemma 4 and gpt-oss is :func:`kvscope.plan.sglang_swa.swa_cell`.
    """
    total = 0.0
    for i in layers:
        caches = model.layers[i].attention.kv_caches(kv_dtype, attn_tp)
        total += math.fsum(c.entry_bytes for c in caches)
    return total
