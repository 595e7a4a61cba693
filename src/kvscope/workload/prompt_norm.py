"""Prompt normalisation and the prefix-cache hit rate it would add, for text traces.

Prefix caching only reuses KV for identical prefixes (vLLM hashes each full block's tokens
together with the hash of the block before it: vLLM's design note on automatic prefix
caching, docs/design/prefix_caching.md): a trailing
space or a per-request token (request id, timestamp, UUID) at the end of a message breaks the
hash chain for everything after it. This module measures, on prompt *text*, the share of prompt
blocks whose whole prefix was already seen, before and after normalising each message by

1. trimming trailing whitespace (at line ends and at the end of the message), and
2. removing request-unique suffixes at the end of a message: UUIDs, ISO-8601 date-times,
   hex ids of 16+ digits, 10-13 digit epoch stamps, optionally keyed (``request_id=...``,
   ``time: ...``).

Blocks are ``block_tokens * 4`` bytes of UTF-8, the same ~4 bytes/token estimate the text
loader uses; a block counts as a hit when the running hash of the prompt up to its end was
seen in an earlier request, which is exactly the chained-hash rule of a prefix cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from kvscope.workload.traces.sharegpt import BYTES_PER_TOKEN

_MARK = re.compile(r"(<\|(?:user|assistant|system)\|>\n)")
_SEP = r"[\s\-|:;,()\[\]#]*"
_KEYED = (
    r"(?:(?:request|req|trace|session|correlation|message|msg)[ _-]?id"
    r"|timestamp|current (?:date|time)|date|time)"
)
_TOKEN = (
    r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|[0-9a-f]{16,}|\d{10,13})"
)
_UNIQUE_SUFFIX = re.compile(rf"{_SEP}(?:{_KEYED}\s*[:=]?\s*)?{_TOKEN}[\s\]).]*$", re.IGNORECASE)
_TRAILING_WS = re.compile(r"[ \t\r\f\v]+$", re.MULTILINE)


def normalize_message(text: str) -> str:
    """One message with trailing whitespace and request-unique suffixes removed."""
    out = _TRAILING_WS.sub("", text).rstrip()
    while True:
        cut = _UNIQUE_SUFFIX.sub("", out).rstrip()
        if cut == out:
            return out
        out = cut


def normalize_prompt(prompt: str) -> str:
    """Normalise every message of a rendered prompt (``<|role|>`` markers kept)."""
    parts = _MARK.split(prompt)
    out = []
    for p in parts:
        if _MARK.fullmatch(p) or not p:
            out.append(p)
        else:
            out.append(normalize_message(p) + ("\n" if p.endswith("\n") else ""))
    return "".join(out)


def _hit_counts(prompts: Iterable[str], block_bytes: int) -> tuple[int, int, int, int]:
    """(blocks, hit blocks, prompts, exact repeats) over prompts in arrival order."""
    seen: set[bytes] = set()
    seen_exact: set[bytes] = set()
    blocks = hits = n = exact = 0
    for text in prompts:
        data = text.encode("utf-8")
        n += 1
        full = hashlib.blake2b(data, digest_size=16).digest()
        exact += full in seen_exact
        seen_exact.add(full)
        h = hashlib.blake2b(digest_size=16)
        for i in range(len(data) // block_bytes):
            h.update(data[i * block_bytes : (i + 1) * block_bytes])
            d = h.copy().digest()
            blocks += 1
            if d in seen:
                hits += 1
            else:
                seen.add(d)
    return blocks, hits, n, exact


def normalization_gain(prompts: list[str], block_tokens: int) -> dict[str, Any]:
    """Prefix-block hit share of the raw and the normalised prompts, and the difference."""
    bb = block_tokens * BYTES_PER_TOKEN
    b0, h0, n, e0 = _hit_counts(prompts, bb)
    b1, h1, _, e1 = _hit_counts((normalize_prompt(p) for p in prompts), bb)
    raw = h0 / b0 if b0 else 0.0
    norm = h1 / b1 if b1 else 0.0
    return {
        "block_bytes": bb,
        "prefix_hit_share_raw": raw,
        "prefix_hit_share_normalized": norm,
        "extra_hit_share": norm - raw,
        "exact_repeat_share_raw": e0 / n if n else 0.0,
        "exact_repeat_share_normalized": e1 / n if n else 0.0,
        "prompts_changed_by_normalization": sum(normalize_prompt(p) != p for p in prompts),
    }
