"""The engine's KV-cache event wire schema, pinned per vLLM release; decoded with msgspec.

Source: vllm/distributed/kv_events.py at v0.33.0 (``EventBatch`` is ``array_like`` —
``[ts, events, data_parallel_rank]``; each event is a map tagged ``"type"`` with its class
name: ``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``). Block hashes are
``bytes | int`` (``ExternalBlockHash``: bytes by default, a 64-bit int when
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` is set). Fields added after the first releases
(``medium``, ``lora_name``, ``extra_keys``, ``group_idx``, ``locality``, ``ownership``,
``session_id``, ``lookahead_token_ids``) default to None, so an older publisher's events —
the same tags with fewer keys — decode with the same structs, and unknown keys from a newer
one are ignored. A payload whose types do not fit is an unknown version: counted, skipped.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: The vLLM releases whose kv_events.py these structs were checked against.
PINNED_RELEASES = ("0.33.0",)
#: Medium names vLLM publishes (MEDIUM_GPU / MEDIUM_CPU / MEDIUM_STORAGE at v0.33.0).
MEDIA = ("GPU", "CPU", "STORAGE")

BlockHash = bytes | int


class KVCacheEvent(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Base of the three tagged event kinds."""


class BlockStored(KVCacheEvent):
    """Full blocks entered the prefix cache (one event, a contiguous run of blocks)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    """Blocks left the cache (evicted or replaced)."""

    block_hashes: list[BlockHash]
    medium: str | None = None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    """The whole prefix cache was reset."""


Event = BlockStored | BlockRemoved | AllBlocksCleared


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One publish: wall time (Unix seconds), events, data-parallel rank."""

    ts: float
    events: list[Event]
    data_parallel_rank: int | None = None


_DECODER = msgspec.msgpack.Decoder(EventBatch)
_ENCODER = msgspec.msgpack.Encoder()


def decode_batch(payload: bytes) -> EventBatch:
    """Decode one payload; raises msgspec.DecodeError or ValidationError if it does not fit."""
    return _DECODER.decode(payload)


def encode_batch(batch: EventBatch) -> bytes:
    """Encode as the publisher does (used by captures and tests)."""
    return _ENCODER.encode(batch)


def hash_text(h: BlockHash | None) -> str | None:
    """A block hash as stored: hex for bytes, decimal for an int."""
    if h is None:
        return None
    return h.hex() if isinstance(h, bytes) else str(h)
