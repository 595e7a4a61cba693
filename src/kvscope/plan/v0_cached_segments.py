"""Torch's cached segments that vLLM V0 up to 0.6.3 charges as profiling peak, bytes a GPU.

The rule (vllm/worker/worker.py of the 0.6.3.post1 wheel, ``determine_num_available_blocks``):
the worker calls ``torch.cuda.empty_cache()``, runs ``profile_run()``, then takes
``peak_memory = self.init_gpu_memory - free_gpu_memory`` from ``torch.cuda.mem_get_info()``
with no ``empty_cache`` in between. Free memory only comes back to the device on
``empty_cache``, so the charge is every segment torch's caching allocator reserved during the
pass, not the allocated peak: the gap is the allocator's fragmentation, which the authors name
in the PR that introduced the formula (vllm-project/vllm#2031, "allocator fragmentation" in the
review of ``peak_memory = total_gpu_memory - free_gpu_memory``). 0.6.4 measures
``allocated_bytes.all.peak`` plus memory outside torch after ``empty_cache`` (vllm PR #9352),
so from there the cached segments are no longer charged.

How large they get follows from two things, both read at the source:

- the order of the pass's tensors in a dense decoder layer of the V0 eager path (llama.py of
  0.6.3.post1): the caller keeps the layer's input alive for the whole call
  (``hidden_states, residual = layer(...)``); the first layer normalises into a new tensor and
  keeps the embedding as residual, later ones normalise in place (``fused_add_rms_norm``);
  attention makes the fused QKV output, the backend's ``output = torch.empty_like(query)``
  plus the kernel's own output copied into it (attention/backends/rocm_flash_attn.py; the
  CUDA backends of the same wheel write the same two), then ``o_proj``'s output; the MLP holds
  ``gate_up`` and the activation until the down projection's output exists
  (``LlamaMLP.forward``). The tensor-parallel all-reduce is in place when custom all-reduce
  does not run (``GroupCoordinator.all_reduce``, distributed/parallel_state.py: ROCm, or a
  world of one).
- PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, the release line torch
  2.4-2.5 that 0.6.x pins, hipified as-is for ROCm): requests above 1 MiB go to the large
  pool rounded to 512 bytes; a free cached block is reused best-fit (the smallest one that
  is large enough) and split when more than 1 MiB would remain; a new segment is requested
  from the driver at the request rounded to 2 MiB (20 MiB below 10 MiB); freed blocks merge
  only with free neighbours of the same segment.

Scope: dense decoders whose every layer is full attention plus a gated MLP (the Llama path);
other layer kinds return ``None`` and keep the allocated-peak figure. Tensors of 1 MiB or less
(positions, masks, metadata) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscope.plan.config import Parallelism
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: The allocator's constants (CUDACachingAllocator.cpp): rounding, small-pool limit, the
#: smallest request that gets a segment of its own size, segment rounding, small-request segment.
MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
LARGE_BUFFER = 20 << 20
#: First release that charges the allocated peak instead of the free-memory drop (PR #9352).
ALLOCATED_PEAK_SINCE = (0, 6, 4)


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    free: bool = True


@dataclass
class CachingAllocator:
    """The large pool of torch's caching allocator on one stream: reserved and allocated bytes."""

    reserved: int = 0
    allocated: int = 0
    peak_allocated: int = 0
    _blocks: list[_Block] = field(default_factory=list)
    _next_segment: int = 0

    def malloc(self, nbytes: float) -> _Block | None:
        size = -(-int(nbytes) // MIN_BLOCK) * MIN_BLOCK
        if size <= SMALL_SIZE:
            return None  # the small pool, left out (module text)
        fits = sorted(
            (b for b in self._blocks if b.free and b.size >= size),
            key=lambda b: (b.size, b.segment, b.offset),
        )
        if fits:
            block = fits[0]
            if block.size - size > SMALL_SIZE:  # split, the remainder stays cached
                rest = _Block(block.segment, block.offset + size, block.size - size)
                self._blocks.insert(self._blocks.index(block) + 1, rest)
                block.size = size
        else:
            seg = LARGE_BUFFER if size < MIN_LARGE_ALLOC else -(-size // ROUND_LARGE) * ROUND_LARGE
            block = _Block(self._next_segment, 0, seg)
            self._next_segment += 1
            self.reserved += seg
            self._blocks.append(block)
            if seg - size > SMALL_SIZE:
                self._blocks.append(_Block(block.segment, size, seg - size))
                block.size = size
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: _Block | None) -> None:
        if block is None:
            return
        block.free = True
        self.allocated -= block.size
        i = self._blocks.index(block)
        nxt = i + 1
        if nxt < len(self._blocks):
            after = self._blocks[nxt]
            if after.free and after.segment == block.segment:
                block.size += after.size
                del self._blocks[nxt]
        if i > 0:
            before = self._blocks[i - 1]
            if before.free and before.segment == block.segment:
                before.size += block.size
                del self._blocks[i]


def _dense_llama(model: ModelSpec) -> bool:
    return all(
        layer.attention.kind == "full"
        and not layer.attention.output_gate
        and not layer.ffn.is_moe
        and layer.ffn.intermediate_size > 0
        for layer in model.layers
    )


@dataclass(frozen=True)
class CachedSegments:
    """The layer phase of V0's profiling pass through the allocator, bytes a GPU."""

    reserved: int
    peak_allocated: int


def v0_cached_segments(
    model: ModelSpec, par: Parallelism, tokens: int, layers: int = 3
) -> CachedSegments | None:
    """Reserved and allocated-peak bytes after the first ``layers`` decoder layers of the
    profiling pass at ``tokens`` batched tokens (the pattern repeats from the third layer on),
    or ``None`` outside the dense Llama path."""
    if not model.layers or not _dense_llama(model):
        return None
    b = element_bytes(model.dtype)
    tp = par.tp
    att = model.layers[0].attention
    heads = att.num_heads / tp
    kv_heads = max(1, att.num_kv_heads // tp)
    hidden = tokens * model.hidden_size * b
    qkv = tokens * (heads * att.head_dim + 2 * kv_heads * att.head_dim) * b
    out = tokens * heads * att.v_head_dim * b
    inter = model.layers[0].ffn.intermediate_size / tp
    gate_up, act = 2 * tokens * inter * b, tokens * inter * b

    pool = CachingAllocator()
    caller = pool.malloc(hidden)  # the embedding's output, all-reduced in place
    residual = caller
    for i in range(layers):
        normed = pool.malloc(hidden) if i == 0 else None  # layer 0: a new tensor
        q = pool.malloc(qkv)
        attn_out = pool.malloc(out)  # torch.empty_like(query)
        kernel = pool.malloc(out)  # the kernel's output, copied in and dropped
        pool.free(kernel)
        o_proj = pool.malloc(hidden)
        pool.free(q)
        pool.free(attn_out)
        pool.free(normed)
        gu = pool.malloc(gate_up)
        a = pool.malloc(act)
        down = pool.malloc(hidden)
        pool.free(gu)
        pool.free(a)
        pool.free(o_proj)
        if caller is not residual:
            pool.free(caller)  # the caller rebinds its hidden state
        caller = down
    return CachedSegments(pool.reserved, pool.peak_allocated)


def charged_reserved_bytes(
    model: ModelSpec, par: Parallelism, tokens: int, version: tuple[int, int, int]
) -> float:
    """Bytes V0 at ``version`` charges for the layer phase's cached segments (0 where the
    release charges the allocated peak, or outside the dense path)."""
    if version >= ALLOCATED_PEAK_SINCE:
        return 0.0
    seg = v0_cached_segments(model, par, tokens)
    return 0.0 if seg is None else float(seg.reserved)


__all__ = [
    "ALLOCATED_PEAK_SINCE",
    "CachedSegments",
    "CachingAllocator",
    "charged_reserved_bytes",
    "v0_cached_segments",
]
