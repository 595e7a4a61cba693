"""How one request's tokens map onto KV blocks, and how many blocks the GPU pool holds.

A :class:`KVLayout` is the simulator's view of vLLM's KV-cache groups: one *full-history*
group (the blocks that grow with context and that prefix caching shares, ``block_size``
tokens each) plus zero or more *window* groups that draw from the same pool but keep only
a bounded tail of the context (sliding-window attention, DeepSeek V4's SWA caches and
compressor states). All groups draw one-block units from one pool, as vLLM's hybrid
allocator does (``vllm/v1/core/kv_cache_coordinator.py``).

A decoding request holds at most ``cdiv(window - 1, b) + 1`` blocks of a window group
(:attr:`WindowGroup.cap_blocks`; 26 per V4 request besides ``ceil(L/256)``, as live V4
snapshots show: tant2tls/Deepseek-serving memory_tables.md). How vLLM 0.33.0 gets there
step by step (blocks freed at the next allocation, the admission cap
``cdiv(min(W - 1 + in_flight, max_model_len), b) + 1`` of
``vllm/v1/kv_cache_interface.py::SlidingWindowSpec.max_admission_blocks_per_request``, window
blocks cached) is :mod:`kvscope.sim.hybrid_pool`'s; the counts here are the steady bounds.

DeepSeek V4.1 (:func:`deepseek_v41_layout`) adds *ring* groups (``ring_groups``): vLLM
0.31.0's ``CircularBufferSpec`` compressor rings, one block per request for its whole life
(``CircularBufferManager`` in ``vllm/v1/core/single_type_kv_cache_manager.py``), never cached.

Llama 4's chunked local attention is simulated as full history. vLLM keeps its 36 chunked
layers in three ``ChunkedLocalAttentionSpec`` groups beside one full group (from 0.14.0;
:mod:`kvscope.plan.vllm_chunked`), and ``ChunkedLocalAttentionManager``
(``vllm/v1/core/single_type_kv_cache_manager.py``) frees a chunked group's blocks before the
start of the request's current chunk; that manager (its frees, cache-hit rule and admission
cap) is not modelled here. The simulator draws one full-history block per ``block_size``
tokens from ``num_gpu_blocks // groups`` (:mod:`kvscope.sim.deployment`): vLLM's count while a
request stays within its first chunk (8,192 tokens for Scout and Maverick), conservative
beyond it, where vLLM holds at most ``cdiv(min(chunk + in-flight, L), b)`` blocks per
chunked group.

The pool's size (blocks, block size, bytes per block) comes from the planner,
:func:`kvscope.plan.memory.plan_memory`, exactly as ``kvscope plan`` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError

#: vLLM's default block size (``CacheConfig.DEFAULT_BLOCK_SIZE``, vllm/config/cache.py).
DEFAULT_BLOCK_SIZE = 16
#: DeepSeek V4 cache block size (the sparse-SWA backend's preferred block size, tokens):
#: vLLM ``vllm/v1/attention/backends/mla/sparse_swa.py``.
V4_BLOCK_SIZE = 256


@dataclass(frozen=True)
class WindowGroup:
    """A KV-cache group that keeps only the last ``window_tokens`` tokens.

    ``block_tokens``: tokens per block of this group (64 for V4 SWA, 4/8 for its C4/C128
    compressor states, whose rows are one per token before compression).
    """

    name: str
    block_tokens: int
    window_tokens: int

    @property
    def cap_blocks(self) -> int:
        """Blocks one request holds in this group once its window is full."""
        return -(-(self.window_tokens - 1) // self.block_tokens) + 1

    def blocks(self, slots: int) -> int:
        """Blocks held by a request with ``slots`` token slots allocated."""
        return min(-(-slots // self.block_tokens), self.cap_blocks)

    def admission_cap(self, in_flight_tokens: int, max_model_len: int) -> int:
        """Blocks vLLM's full-sequence admission check reserves at most for one request.

        vLLM 0.33.0 ``vllm/v1/kv_cache_interface.py::SlidingWindowSpec.
        max_admission_blocks_per_request``: the last ``W - 1`` processed tokens plus the
        tokens in flight (``max_concurrent_batches x max_num_batched_tokens``), never more
        than ``max_model_len``, plus one block for a window that starts mid-block.
        """
        span = min(self.window_tokens - 1 + in_flight_tokens, max_model_len)
        return -(-span // self.block_tokens) + 1


@dataclass(frozen=True)
class KVLayout:
    """Block size of the full-history group plus the window groups beside it.

    ``full_history=False``: no full-history group at all, only the window groups (a model
    whose layers all slide, vLLM's single ``SlidingWindowSpec`` group); ``block_size`` is
    then the window groups' block (the scheduler block).
    """

    block_size: int = DEFAULT_BLOCK_SIZE
    windows: tuple[WindowGroup, ...] = ()
    name: str = "full"
    #: groups holding one block per request from its first allocation to its end
    ring_groups: int = 0
    full_history: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise KvscopeError(f"--block-size must be >= 1, got {self.block_size}.")
        if self.ring_groups and not self.windows:
            raise KvscopeError("ring groups need the hybrid pool (a layout with window groups).")
        if not self.full_history and not self.windows:
            raise KvscopeError("a layout without full history needs window groups.")
        # (block tokens, cap) pairs, precomputed: these are on the simulator's hot path
        object.__setattr__(
            self, "_wins", tuple((w.block_tokens, w.cap_blocks) for w in self.windows)
        )

    def full_blocks(self, slots: int) -> int:
        return -(-slots // self.block_size) if self.full_history else 0

    def blocks(self, slots: int) -> int:
        """All blocks (every group) a request with ``slots`` token slots holds."""
        n = -(-slots // self.block_size) if self.full_history else 0
        if slots > 0:
            n += self.ring_groups
        for b, cap in self._wins:  # type: ignore[attr-defined]
            m = -(-slots // b)
            n += m if m < cap else cap
        return n

    def window_blocks(self, slots: int) -> int:
        """Blocks of every group but the full-history one (windows and rings)."""
        n = self.ring_groups if slots > 0 else 0
        for b, cap in self._wins:  # type: ignore[attr-defined]
            m = -(-slots // b)
            n += m if m < cap else cap
        return n

    def next_growth(self, slots: int) -> int:
        """Smallest slot count above ``slots`` at which :meth:`blocks` increases."""
        nxt = -(-slots // self.block_size) * self.block_size + 1 if self.full_history else 1 << 62
        for b, cap in self._wins:  # type: ignore[attr-defined]
            held = -(-slots // b)
            if held < cap and held * b + 1 < nxt:
                nxt = held * b + 1
        return nxt

    @property
    def fixed_blocks_per_request(self) -> int:
        """Window and ring blocks a long request holds (26 for DeepSeek V4)."""
        return sum(w.cap_blocks for w in self.windows) + self.ring_groups


def deepseek_v4_layout() -> KVLayout:
    """DeepSeek V4 in vLLM: one 256-token MLA group plus SWA and compressor-state groups.

    From vLLM's ``sparse_swa.py`` and ``kv_cache_utils.py``: two SWA groups (window 128 over
    64-token blocks), C4 compressor state (window 8 over 4-row blocks) and C128 state
    (window 128 over 8-row blocks): 2x3 + 3 + 17 = 26 blocks per request.
    """
    return KVLayout(
        block_size=V4_BLOCK_SIZE,
        windows=(
            WindowGroup("swa_main", 64, 128),
            WindowGroup("swa_indexer", 64, 128),
            WindowGroup("c4_state", 4, 8),
            WindowGroup("c128_state", 8, 128),
        ),
        name="deepseek_v4",
    )


def deepseek_v41_layout(model: object, indexer: str = "fp8") -> KVLayout:
    """DeepSeek V4.1 in vLLM 0.31.0: the planner's packed groups, as block tables.

    The groups are :func:`kvscope.plan.dsv41_pool.groups`'s (the ones ``kvscope plan`` sizes
    the pool with): the compressed + indexer group (64-token blocks, growing with the
    context) is the full-history group; each window group (32-token blocks, window 128) caps
    at ``cdiv(127, 32) + 1 = 5`` blocks; each ring group holds one block per request.
    """
    from kvscope.plan import dsv41_pool
    from kvscope.specs.attention import indexer_entry_bytes
    from kvscope.specs.model import ModelSpec

    assert isinstance(model, ModelSpec)
    atts = [layer.attention for layer in model.layers]
    idx = indexer_entry_bytes(indexer)
    pool, _stride = dsv41_pool.groups(atts, idx)
    full = [g for g in pool if g.kind == "dsv4_mla"]
    if len(full) != 1:
        raise KvscopeError(f"{model.name}: DeepSeek V4.1 without a compressed KV source.")
    windows = tuple(
        WindowGroup(f"swa_{i}", g.block_size, g.window or 0)
        for i, g in enumerate(g for g in pool if g.kind == "dsv4_swa")
    )
    rings = sum(1 for g in pool if g.kind == "dsv41_ring")
    return KVLayout(full[0].block_size, windows, "deepseek_v41", rings)


def layout_for(
    model: object, block_size: int | None = None, indexer: str = "fp8", tp: int | None = None
) -> KVLayout:
    """The block layout vLLM uses for ``model`` (a :class:`kvscope.specs.model.ModelSpec`);
    ``indexer``: the V3.2/V4 indexer key cache dtype (``EngineConfig.indexer_dtype``).

    With ``tp`` (a vLLM pool on ranks of that tensor-parallel size), where full and sliding
    layers keep unequal bytes a token (Gemma 4), the smaller page's group takes ``block_size x``
    the page ratio in tokens, as vLLM's ``unify_kv_cache_spec_page_size`` sets it
    (:func:`kvscope.plan.kv_layout.unified_page_layout`); without it every group keeps
    ``block_size`` (llama.cpp's slots have no pages to unify).
    """
    from kvscope.plan.dsv41_pool import CACHE_BLOCK
    from kvscope.plan.kv_layout import layers_per_group
    from kvscope.specs.model import ModelSpec

    assert isinstance(model, ModelSpec)
    if "dsv41" in model.attention_kinds:
        if block_size not in (None, CACHE_BLOCK):
            raise KvscopeError(
                f"DeepSeek V4.1 runs with --block-size {CACHE_BLOCK} in vLLM (its sparse "
                f"backends set it), got {block_size}."
            )
        return deepseek_v41_layout(model, indexer)
    if model.is_deepseek_v4:
        if block_size not in (None, V4_BLOCK_SIZE):
            raise KvscopeError(
                f"DeepSeek V4 runs with --block-size {V4_BLOCK_SIZE} in vLLM "
                f"(sparse-SWA backend), got {block_size}."
            )
        return deepseek_v4_layout()
    bs = block_size or DEFAULT_BLOCK_SIZE
    groups = [g for g in model.kv_groups(tp=tp or 1) if g.caches]
    entries = [sum(c.entry_bytes for c in g.caches) for g in groups]
    widest = max((e for e in entries if e > 0), default=0.0)

    def tokens(entry: float) -> int:
        ratio = widest / entry if entry > 0 and tp is not None else 1.0
        return bs * int(ratio) if ratio == int(ratio) else bs

    # vLLM splits each spec's layers into groups of layers_per_group layers, and a request
    # holds its window's blocks in every one of them (one block table per group), e.g. six
    # sliding groups beside one full group for Gemma 3 27B (52 sliding, 10 full layers)
    size = layers_per_group(len(g.layers) for g in groups) if groups else 1
    windows: list[WindowGroup] = []
    full_bs = bs
    for g, entry in zip(groups, entries, strict=True):
        if g.kind == "full" and entry > 0:
            full_bs = tokens(entry)
        for c in g.caches:
            if c.window_tokens is not None and c.entry_bytes > 0:
                n = -(-len(g.layers) // size) if tp is not None else 1
                for i in range(n):
                    name = f"{g.kind}_{c.name}" + (f"_{i}" if n > 1 else "")
                    windows.append(WindowGroup(name, tokens(entry), c.window_tokens))
                break
    if tp is None:  # llama.cpp: one SWA cache per window, not per group of layers
        windows = list({(w.block_tokens, w.window_tokens): w for w in windows}.values())
    if windows and all(g.kind == "sliding" for g in groups):
        # Every layer slides (Phi-3-mini-4k, Mistral 7B v0.1): vLLM keeps sliding groups only
        # (one SlidingWindowSpec group, UnitaryKVCacheCoordinator) and no full-history one;
        # a request holds its window's blocks, the rest freed (SlidingWindowManager).
        # llama.cpp (no tp) is simulated with a full-history view here (its SWA cache unmodelled)
        if tp is None:
            return KVLayout(block_size=windows[0].block_tokens, name="sliding-only")
        return KVLayout(
            block_size=windows[0].block_tokens,
            windows=tuple(windows),
            name="sliding-only",
            full_history=False,
        )
    name = "hybrid" if windows else "full"
    return KVLayout(block_size=full_bs, windows=tuple(windows), name=name)
