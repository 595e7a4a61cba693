"""DeepSeek V4.1's vLLM KV pool: per-layer pages, buckets and the packed groups of one GPU.

Units: bytes, tokens, layer counts. Paraphrase of vLLM v0.31.0 (the release between the two
builds of the public V4.1 logs, 0.30.1rc1.dev223 and 0.31.1rc1.dev260):

- Specs (``vllm/models/deepseek_v41/attention.py``, ``compressor.py``,
  ``vllm/v1/attention/backends/mla/sparse_swa.py``): every backbone layer has a
  ``SlidingWindowMLASpec`` of 32-token blocks (``DeepseekV4SWACache(block_size=32)``), window
  128, 584-byte records; each kv source an ``MLAAttentionSpec`` of cache-block tokens (64,
  "Setting kv cache block size to 64" in both logs) holding ``64 / ratio`` 584-byte states,
  an indexer-key ``MLAAttentionSpec`` of the same states (132 bytes, fp8) and, at ratio 2, a
  ``CircularBufferSpec`` ring of 8 rows x 2 x head_dim fp32 (one block per request). Pages
  round up to 576 bytes (``_apply_alignment_padding``; SM100 keeps other records and is not
  modelled).
- Groups (``_get_packed_kv_cache_groups``, ``vllm/v1/core/kv_cache_utils.py``): layers are
  bucketed by type (window, compressed, ring). No bucket mixes page sizes one-for-one, so
  there is no repeat pattern; the window and ring buckets are "state buckets", split so one
  group's pages fit the widest group of the other buckets (``anchor_bytes``): ``cdiv(layers,
  anchor // page)`` groups, layers dealt round-robin. The block stride is the widest group.
- A DSpark drafter (``vllm/models/deepseek_v41/nvidia/dspark.py`` at v0.31.0) builds its
  ``n_mtp_layers`` stages as ``DeepseekV4DecoderLayer``s numbered from ``num_hidden_layers``;
  their ``compress_ratios`` entries are 0, so each owns only its 32-token window cache, and
  ``get_draft_kv_cache_layer_names`` registers those caches with the target's: they join the
  window bucket (43 window layers on V4.1-Flash: 8 groups of at most 6, not 7). The DSpark
  launch of the same study logs kv_cache_max_concurrency 28.1592 with 231,835 blocks: 8,233
  blocks per 262,144-token request = 4,096 + 8 x 517 + 1.
- Checked by running that file of the v0.31.0 wheel on CPU on these specs: 9,178,471 and
  9,084,872 tokens for the logged 29.42 / 29.12 GiB against 9,179,728 and 9,085,076 logged; the
  0.31.1 log prints the group block sizes ``(32, 32, 32, 32, 32, 32, 32, 64, 8)``.
"""

from __future__ import annotations

from kvscope.plan.dsv4_pool import PoolGroup
from kvscope.specs.attention import DSV4_ENTRY, DSV41_RING_ROWS, AttentionLayer

ALIGN = 576
#: ``DeepseekV4SWACache(block_size=32)`` in vllm/models/deepseek_v41/attention.py (v0.31.0)
SWA_BLOCK = 32
#: the cache block size the V4.1 backends set ("Setting kv cache block size to 64")
CACHE_BLOCK = 64


#: one KV-cache group, as V4's (kinds here: dsv4_swa, dsv4_mla, dsv41_ring)
V41Group = PoolGroup


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def buckets(
    atts: list[AttentionLayer], indexer_entry: int, draft_window_layers: int = 0
) -> tuple[list[int], list[int], list[int], int]:
    """(window pages, compressed-bucket pages, ring pages, window) of one GPU's layers;
    ``draft_window_layers`` drafter stages add one window page each (see the module text)."""
    window = next((a.window for a in atts if a.window), 128)
    swa = [_align(SWA_BLOCK * DSV4_ENTRY)] * (len(atts) + draft_window_layers)
    mla: list[int] = []
    ring: list[int] = []
    for a in atts:
        if not (a.kv_source and a.compress_ratio):
            continue
        states = CACHE_BLOCK // a.compress_ratio
        mla.append(_align(states * DSV4_ENTRY))
        if a.index_source:
            mla.append(_align(states * indexer_entry))
        if a.compress_ratio > 1:
            ring.append(DSV41_RING_ROWS * 2 * a.head_dim * 4)
    return swa, mla, ring, window


def groups(
    atts: list[AttentionLayer], indexer_entry: int, draft_window_layers: int = 0
) -> tuple[tuple[V41Group, ...], int]:
    """The packed groups and the block stride (bytes) of one GPU (see the module text)."""
    swa, mla, ring, window = buckets(atts, indexer_entry, draft_window_layers)
    # the compressed bucket stays whole (one group); a state bucket can go down to one page
    anchor = max([sum(mla), *swa, *ring])
    out: list[V41Group] = []
    if mla:
        out.append(V41Group("dsv4_mla", len(mla), CACHE_BLOCK, None, sum(mla)))
    for kind, pages, block, win in (
        ("dsv4_swa", swa, SWA_BLOCK, window),
        ("dsv41_ring", ring, DSV41_RING_ROWS, None),
    ):
        if not pages:
            continue
        per_group = max(anchor // pages[0], 1)
        n = _cdiv(len(pages), per_group)
        for i in range(n):
            k = len(range(i, len(pages), n))
            out.append(V41Group(kind, k, block, win, k * pages[0]))
    stride = max(g.page_bytes for g in out)
    return tuple(out), stride
