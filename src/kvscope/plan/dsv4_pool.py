"""DeepSeek V4's vLLM KV pool by release: buckets, group split, block stride, group pages.

Units: bytes, tokens, layer counts. Paraphrase of ``vllm/v1/core/kv_cache_utils.py`` and
``vllm/v1/kv_cache_interface.py`` of the PyPI wheels 0.21.0-0.31.0 (read release by release;
the 0.25.0 code was also run on CPU on these specs and agrees, see benchmarks/RESULTS.md):

- Every V4 layer declares a 64-token sliding-window page (window 128); CSA / HCA layers add
  their compressed MLA pages (C4 KV + C4 indexer, C128 KV; 256-token logical block) and fp32
  compressor-state pages (C4: 4 rows, window 8, attention and indexer; C128: 8 rows, window
  128). A drafter's layers (the MTP layer, DSpark stages) are window-only and join the
  window bucket. Pages are 576-byte aligned (fp8_ds_mla).
- The window-type buckets are split into groups of about the same number of "layer tuples"
  (``_approximate_gcd``: the split that pads least, at least the MLA bucket's count up to
  0.28; from 0.29 ``_get_packed_kv_cache_groups`` over the balanced buckets, at least the C4
  state bucket's count). Up to 0.26 window pages are padded up to the nearest MLA page.
- Block stride: 0.21-0.22 the MLA pages' sum x the longest per-page layer list of any group
  (``_get_kv_cache_config_deepseek_v4``); 0.23-0.26 every padded page class x its most slots
  in one group (``_bucket_layers_by_page_size``); from 0.27 the widest group's pages
  (``_get_packed_kv_cache_layout``, then ``_get_kv_cache_bytes_per_block``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: First releases of each rule (see the module text).
BUCKET_STRIDE_SINCE = (0, 23, 0)
UNPADDED_DENSE_SINCE = (0, 27, 0)
PACKED_GROUPS_SINCE = (0, 29, 0)

ALIGN = 576
SWA_BLOCK = 64
SWA_WINDOW = 128


@dataclass(frozen=True)
class PoolGroup:
    """One KV-cache group: kind, layers, block tokens, window rows, bytes of one block."""

    kind: str  # dsv4_mla | dsv4_swa | dsv4_state
    num_layers: int
    block_size: int
    window: int | None
    page_bytes: int


@dataclass(frozen=True)
class Bucket:
    kind: str
    block_size: int
    window: int | None
    pages: tuple[tuple[int, int], ...]  # (page bytes, layers), one per page size


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM ``_approximate_gcd``: the chunk >= ``lower_bound`` padding ``values`` least
    (ties to the larger chunk)."""
    best_d, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def buckets(
    n_csa: int,
    n_hca: int,
    n_window: int,
    mla_pages: tuple[int, int, int],
    entry: int,
    head_dim: int,
    index_head_dim: int,
) -> tuple[Bucket, ...]:
    """The MLA bucket and the window-type buckets vLLM keys by (block size, window)."""
    c4, c4_idx, c128 = mla_pages
    state = 4  # fp32 bytes of one compressor-state element
    out = [Bucket("dsv4_mla", 256, None, _pages((c4, n_csa), (c4_idx, n_csa), (c128, n_hca)))]
    swa = _align(SWA_BLOCK * entry)
    out.append(Bucket("dsv4_swa", SWA_BLOCK, SWA_WINDOW, _pages((swa, n_window))))
    if n_csa:
        attn = _align(4 * 2 * 2 * head_dim * state)
        idx = _align(4 * 2 * 2 * index_head_dim * state)
        out.append(Bucket("dsv4_state", 4, 8, _pages((attn, n_csa), (idx, n_csa))))
    if n_hca:
        out.append(Bucket("dsv4_state", 8, 128, _pages((_align(8 * 2 * head_dim * state), n_hca))))
    return tuple(out)


def _pages(*pairs: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    merged: Counter[int] = Counter()
    for page, n in pairs:
        if n:
            merged[page] += n
    return tuple(merged.items())


def pool(
    release: tuple[int, int, int], bks: tuple[Bucket, ...]
) -> tuple[tuple[PoolGroup, ...], int, int]:
    """The groups (MLA first), the block stride and the bytes per block of the start-up
    admission check of release ``release``."""
    mla, windows = bks[0], bks[1:]
    mla_pages = sorted(p for p, _ in mla.pages)
    padded = release < UNPADDED_DENSE_SINCE
    groups: list[tuple[Bucket, dict[int, int]]] = [(mla, dict(mla.pages))]
    padded_pages = [_padded(b, mla_pages) if padded else dict(b.pages) for b in windows]
    if release >= PACKED_GROUPS_SINCE:
        splits = _packed_splits(bks)
    else:
        # tuples counted before padding; split by the (equal) per-size counts after it
        lead = max(n for _, n in mla.pages)
        d = approximate_gcd([lead, *(max(n for _, n in b.pages) for b in windows)], lead)
        splits = [-(-max(pages.values()) // d) for pages in padded_pages]
    for b, pages, k in zip(windows, padded_pages, splits, strict=True):
        for i in range(k):
            groups.append((b, {p: len(range(i, n, k)) for p, n in pages.items()}))
    out = tuple(
        PoolGroup(b.kind, sum(c.values()), b.block_size, b.window, sum(p * n for p, n in c.items()))
        for b, c in groups
    )
    counts = [c for _, c in groups]
    stride = _stride(release, counts, mla_pages)
    return out, stride, _admission_bytes(release, counts, mla_pages, stride)


def _admission_bytes(
    release: tuple[int, int, int], groups: list[dict[int, int]], mla_pages: list[int], stride: int
) -> int:
    """Bytes per block of the "KV cache is needed" check (``_max_memory_usage_bytes_from_
    groups``): up to 0.28 the MLA pages' sum x the most layer tuples of any group, from 0.29
    the pool's own bytes per block."""
    if release >= PACKED_GROUPS_SINCE:
        return stride
    return sum(set(mla_pages)) * max(max(g.values()) for g in groups)


def _padded(b: Bucket, mla_pages: list[int]) -> dict[int, int]:
    """Window pages padded up to the nearest MLA page (``_get_kv_cache_groups_uniform_groups``
    up to 0.26)."""
    pages: Counter[int] = Counter()
    for page, n in b.pages:
        pages[min((p for p in mla_pages if p >= page), default=page)] += n
    return dict(pages)


def _packed_splits(bks: tuple[Bucket, ...]) -> list[int]:
    """Groups per window bucket, ``_get_packed_kv_cache_groups`` (0.29+)."""
    balanced = [len({n for _, n in b.pages}) == 1 for b in bks]
    floor = max(
        (
            max(n for _, n in b.pages)
            for b, ok in zip(bks, balanced, strict=True)
            if ok and len(b.pages) > 1
        ),
        default=0,
    )
    if not floor:
        return [1] * (len(bks) - 1)
    tops = [max(n for _, n in b.pages) for b, ok in zip(bks, balanced, strict=True) if ok]
    d = approximate_gcd(tops, floor)
    return [
        -(-max(n for _, n in b.pages) // d) if ok else 1
        for b, ok in zip(bks[1:], balanced[1:], strict=True)
    ]


def _stride(
    release: tuple[int, int, int], groups: list[dict[int, int]], mla_pages: list[int]
) -> int:
    if release < BUCKET_STRIDE_SINCE:
        return sum(set(mla_pages)) * max(n for g in groups for n in g.values())
    if release < UNPADDED_DENSE_SINCE:
        slots: dict[int, int] = {}
        for g in groups:
            for p, n in g.items():
                slots[p] = max(slots.get(p, 0), n)
        return sum(p * n for p, n in slots.items())
    return max(sum(p * n for p, n in g.items()) for g in groups)
