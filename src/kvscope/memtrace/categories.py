"""A guess of what each allocation is: weights, KV cache, activations, communication buffers.

Rules, first match wins, on the allocation's whole stack (file and function names):

1. *communication*: ``distributed``, ``all_reduce``, ``all_gather``, ``all_to_all``,
   ``reduce_scatter``, ``nccl``, ``ProcessGroup`` (torch.distributed / NCCL call paths);
2. *kv_cache*: ``kv_cache``, ``cache_engine``, ``_allocate_kv_cache``, ``kv_caches``,
   ``memory_pool`` (vLLM ``vllm/worker/cache_engine.py`` ``_allocate_kv_cache``, SGLang
   ``mem_cache/memory_pool.py``);
3. *weights*: ``load_weights``, ``weight_loader``, ``load_state_dict``, ``model_loader``,
   ``load_model`` (vLLM ``model_executor/model_loader``, PyTorch ``Module.load_state_dict``);
4. otherwise by lifetime: still live at the end and allocated in the first
   ``EARLY_FRAC`` of the trace: *weights* when under ``KV_MIN_BYTES``, else *kv_cache*
   (one big early block is how engines pre-allocate their KV pool); freed inside the trace:
   *activations*; anything else: *other*.

It is a guess: the reason is reported with each category so a reader can judge it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.columns import SnapshotColumns

EARLY_FRAC = 0.1
KV_MIN_BYTES = 1 << 30  # 1 GiB: a single early block this big is a pre-allocated KV pool
CATEGORIES = ("weights", "kv_cache", "activations", "communication", "other")
_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "communication",
        (
            "distributed",
            "all_reduce",
            "all_gather",
            "all_to_all",
            "reduce_scatter",
            "nccl",
            "processgroup",
        ),
    ),
    ("kv_cache", ("kv_cache", "cache_engine", "kv_caches", "memory_pool")),
    ("weights", ("load_weights", "weight_loader", "load_state_dict", "model_loader", "load_model")),
)


def stack_keyword_category(cols: SnapshotColumns) -> npt.NDArray[np.int8]:
    """Per interned stack: the keyword category code, or -1 when no keyword matches."""
    fr = cols.frames
    out = np.full(len(fr.stacks), -1, np.int8)
    for s, stack in enumerate(fr.stacks):
        text = " ".join(f"{fr.frames[f][0]} {fr.frames[f][2]}" for f in stack).lower()
        for name, words in _KEYWORDS:
            if any(w in text for w in words):
                out[s] = CATEGORIES.index(name)
                break
    return out


@dataclass(frozen=True)
class CategoryStat:
    """Allocations guessed to be of one category, inside the window."""

    category: str
    count: int
    bytes: int
    live_at_end_bytes: int
    by_keyword: int
    by_lifetime: int


def categorize(
    cols: SnapshotColumns,
    entries: npt.NDArray[np.int64],
    live_at_end: npt.NDArray[np.bool_],
    t_frac: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.int8], list[CategoryStat]]:
    """Category code per ``alloc`` entry (``t_frac``: its time as a fraction of the trace)
    and totals per category."""
    tr = cols.trace
    kw = stack_keyword_category(cols)
    st = tr.stack[entries]
    cat = np.where(st >= 0, kw[np.clip(st, 0, None)] if kw.size else -1, -1).astype(np.int8)
    by_kw = cat >= 0
    size = tr.size[entries]
    early_live = live_at_end & (t_frac <= EARLY_FRAC)
    guess = np.where(
        early_live,
        np.where(size >= KV_MIN_BYTES, CATEGORIES.index("kv_cache"), CATEGORIES.index("weights")),
        np.where(live_at_end, CATEGORIES.index("other"), CATEGORIES.index("activations")),
    ).astype(np.int8)
    cat = np.where(by_kw, cat, guess).astype(np.int8)
    stats = []
    for c, name in enumerate(CATEGORIES):
        m = cat == c
        if not m.any():
            continue
        stats.append(
            CategoryStat(
                category=name,
                count=int(m.sum()),
                bytes=int(size[m].sum()),
                live_at_end_bytes=int(size[m & live_at_end].sum()),
                by_keyword=int((m & by_kw).sum()),
                by_lifetime=int((m & ~by_kw).sum()),
            )
        )
    return cat, stats
