"""Statistics of a workload: what an operator needs before replaying or sizing for it.

Counts and rates (mean and peak per second and per minute, peak = busiest whole 1-s / 60-s bin
from the first arrival), inter-arrival CV (std/mean of gaps; 1 for Poisson), length
percentiles, offered tokens/s, prefix reuse from the stream's block hashes, the sizing rule
"P95 context + 15-20 % margin" (a practitioners' rule of thumb) as a suggested ``--max-model-len``,
and for text traces the hit rate prompt normalisation would add (:mod:`prompt_norm`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvscope.validate import count
from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.stream import Workload

PERCENTILES = (50, 90, 95, 99)
#: Margins of the pre-allocation rule of thumb "P95 of context + 15-20 %".
SIZING_MARGINS = (0.15, 0.20)
#: Round the suggested --max-model-len up to a multiple of this (vLLM's default block size).
SIZING_ROUND_TOKENS = 16


def _dist(x: NDArray[np.int64]) -> dict[str, float | int | None]:
    if len(x) == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}, "max": None}
    q = np.percentile(x, PERCENTILES)
    out: dict[str, float | int | None] = {"mean": float(x.mean())}
    out.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, q, strict=True)})
    out["max"] = int(x.max())
    return out


def _peak(t: NDArray[np.float64], width_s: float) -> int:
    if len(t) == 0:
        return 0
    # Counts per occupied bin, not a bincount over every bin: a trace spanning 1e300 s would
    # otherwise ask for an array of 1e300 bins.
    _, counts = np.unique(np.floor((t - t[0]) / width_s), return_counts=True)
    return int(counts.max())


def prefix_reuse(w: Workload, block_size: int | None = None) -> dict[str, Any] | None:
    """Share of prefix-block references that repeat an earlier block (in arrival order).

    ``block_reuse_share`` counts the stream's own hashed blocks. ``reusable_token_share`` is
    the share of prompt tokens in full ``block_size`` blocks whose prefix was seen before; it
    needs ``block_size`` to divide the stream's hash block size (a hashed block is then split
    into sub-blocks that repeat exactly when it does); tokens past the last hash count as new.
    """
    if w.hash_offsets is None or w.hash_values is None or not w.hash_block_size:
        return None
    vals, off, hbs = w.hash_values, w.hash_offsets, w.hash_block_size
    refs = len(vals)
    _, first, inverse = np.unique(vals, return_index=True, return_inverse=True)
    repeated = np.arange(refs) != first[inverse]
    out: dict[str, Any] = {
        "hash_block_size": hbs,
        "block_refs": refs,
        "repeated_block_refs": int(repeated.sum()),
        "block_reuse_share": float(repeated.mean()) if refs else 0.0,
    }
    bs = block_size or hbs
    out["block_size"] = bs
    if hbs % bs:
        out["reusable_token_share"] = None
        out["note"] = f"block size {bs} does not divide the trace's hash block size {hbs}"
        return out
    k = hbs // bs
    counts = np.diff(off)
    row = np.repeat(np.arange(len(w)), counts)
    pos = np.arange(refs) - off[row]  # block index within its request
    tail = w.prompt_tokens[row] - pos * hbs  # tokens from this block's start to prompt end
    subs = np.clip(tail // bs, 0, k)  # full sub-blocks of size bs inside this hashed block
    total_full = int((w.prompt_tokens // bs).sum())
    reused = int(subs[repeated].sum())
    out["reusable_token_share"] = reused / total_full if total_full else 0.0
    return out


def workload_stats(w: Workload, *, block_size: int | None = None) -> dict[str, Any]:
    """All statistics of ``w`` as a JSON-ready dict (units in the key names)."""
    if block_size is not None:
        count(block_size, "--block-size", low=1, high=MAX_TOKENS)
    n = len(w)
    t = w.arrival_s
    dur = w.duration_s
    gaps = np.diff(t)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None
    total = w.prompt_tokens + w.output_tokens
    rate = n / dur if dur > 0 else None
    out: dict[str, Any] = {
        "requests": n,
        "duration_s": dur,
        "mean_rate_per_s": rate,
        "mean_rate_per_min": None if rate is None else rate * 60,
        "peak_rate_per_s": _peak(t, 1.0) if dur > 0 else None,
        "peak_rate_per_min": _peak(t, 60.0) if dur > 0 else None,
        "interarrival_cv": cv,
        "prompt_tokens": _dist(w.prompt_tokens),
        "output_tokens": _dist(w.output_tokens),
        "total_tokens": _dist(total),
    }
    if dur > 0:
        out["offered_tokens_per_s"] = {
            "prompt": float(w.prompt_tokens.sum()) / dur,
            "output": float(w.output_tokens.sum()) / dur,
            "total": float(total.sum()) / dur,
        }
    else:
        out["offered_tokens_per_s"] = None
    if w.session_ids is not None:
        out["sessions"] = len(set(w.session_ids.tolist()))
    out["prefix"] = prefix_reuse(w, block_size)
    out["sizing"] = _sizing(total)
    if w.prompt_texts is not None:
        from kvscope.workload.prompt_norm import normalization_gain

        texts = [s for s in w.prompt_texts.tolist() if isinstance(s, str)]
        out["prompt_normalization"] = normalization_gain(texts, block_size or 16)
    spec = dict(w.spec)
    out["source"] = {
        k: spec[k]
        for k in (
            "source",
            "format",
            "path",
            "skipped_bad_rows",
            "failed_requests",
            "unanswered_turns",
            "token_counts",
            "closed_loop",
        )
        if k in spec
    }
    return out


def _sizing(total: NDArray[np.int64]) -> dict[str, Any] | None:
    if len(total) == 0:
        return None
    p95 = float(np.percentile(total, 95))
    lo, hi = (math.ceil(p95 * (1 + m)) for m in SIZING_MARGINS)
    suggested = -(-hi // SIZING_ROUND_TOKENS) * SIZING_ROUND_TOKENS
    return {
        "p95_context_tokens": p95,
        "range_tokens": [lo, hi],
        "suggested_max_model_len": suggested,
        "requests_over_suggested": int(np.count_nonzero(total > suggested)),
    }
