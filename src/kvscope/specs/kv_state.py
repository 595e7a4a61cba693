"""The KV state an attention layer keeps per request, as a list of caches.

Every attention kind reduces to :class:`KVCache` entries: an entry size in bytes, how many
tokens one entry covers (compression ratio), and whether only the last ``window`` tokens are
kept. Full history grows with context; windowed caches and fixed state are bounded per
request. This one description serves GQA, MLA, DeepSeek-V3.2's indexer and DeepSeek V4's
five caches (window, CSA, HCA, indexer keys, compressor state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class KVCache:
    """One cache kept per layer per request.

    Attributes:
        name: what it holds (``kv``, ``latent``, ``indexer``, ``swa``, ``csa``, ``hca``,
            ``compressor_state``).
        entry_bytes: bytes per stored entry on one tensor-parallel rank.
        tokens_per_entry: compression ratio (1 = one entry per token; 4 = CSA; 128 = HCA).
        window_tokens: keep only the last N tokens (sliding window); None = full history.
        fixed_bytes: per-request bytes independent of length (compressor rings).
    """

    name: str
    entry_bytes: float
    tokens_per_entry: int = 1
    window_tokens: int | None = None
    fixed_bytes: int = 0

    @property
    def grows_with_context(self) -> bool:
        return self.window_tokens is None and self.entry_bytes > 0

    @property
    def bytes_per_token(self) -> float:
        """Amortised bytes per context token for full-history caches (0 if bounded)."""
        if not self.grows_with_context:
            return 0.0
        return self.entry_bytes / self.tokens_per_entry

    def bytes_for(self, context_tokens: int) -> float:
        """Bytes this cache holds for one request of ``context_tokens`` tokens."""
        tokens = context_tokens
        if self.window_tokens is not None:
            tokens = min(tokens, self.window_tokens)
        entries = tokens // self.tokens_per_entry if self.tokens_per_entry > 1 else tokens
        return entries * self.entry_bytes + self.fixed_bytes


def history_bytes_per_token(caches: tuple[KVCache, ...]) -> float:
    """Sum of amortised per-token bytes of the full-history caches."""
    return math.fsum(c.bytes_per_token for c in caches)


def bounded_bytes_per_request(caches: tuple[KVCache, ...]) -> float:
    """Bytes a long request holds in windowed caches and fixed state (does not grow)."""
    total = 0.0
    for c in caches:
        if c.window_tokens is not None:
            total += (c.window_tokens // c.tokens_per_entry) * c.entry_bytes
        total += c.fixed_bytes
    return total
