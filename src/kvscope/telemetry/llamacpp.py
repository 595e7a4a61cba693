"""KV-cache occupancy of a llama.cpp server from its ``/slots`` endpoint.

Current llama.cpp builds export no KV-usage gauge on ``/metrics`` (``llamacpp:kv_cache_usage_ratio``
and ``llamacpp:kv_cache_tokens`` were dropped when the KV cache was unified; see
ggml-org/llama.cpp ``tools/server/README.md``). ``/slots``
(on by default) lists each slot's context size ``n_ctx`` and, for a slot that is processing,
its prompt length ``n_prompt_tokens`` and ``next_token[0].n_decoded``.

Occupancy here = tokens held by *running* sequences / total slot context. An idle slot's
cached prompt is reusable but evictable, so it counts as free -- the same convention as
vLLM's ``kv_cache_usage_perc``, where cached-but-unreferenced blocks are free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError


@dataclass(frozen=True, slots=True)
class SlotsUsage:
    """Tokens in running sequences, total context capacity, and busy slots."""

    used_tokens: int
    capacity_tokens: int
    busy_slots: int
    slots: int

    @property
    def usage_ratio(self) -> float:
        return self.used_tokens / self.capacity_tokens if self.capacity_tokens else 0.0


def slots_usage(body: str) -> SlotsUsage:
    """Parse a ``/slots`` JSON body (raises KvscopeError when it is not a slot list)."""
    try:
        slots: Any = json.loads(body)
    except json.JSONDecodeError as err:
        raise KvscopeError(f"/slots is not JSON: {err}") from err
    if not isinstance(slots, list):
        raise KvscopeError("/slots did not return a list of slots.")
    used = cap = busy = 0
    for slot in slots:
        if not isinstance(slot, dict) or "n_ctx" not in slot:
            raise KvscopeError("/slots entry without n_ctx.")
        cap += int(slot["n_ctx"])
        if slot.get("is_processing"):
            busy += 1
            nxt = slot.get("next_token") or [{}]
            decoded = int(nxt[0].get("n_decoded", 0)) if isinstance(nxt, list) else 0
            used += min(int(slot.get("n_prompt_tokens", 0)) + decoded, int(slot["n_ctx"]))
    return SlotsUsage(used, cap, busy, len(slots))
