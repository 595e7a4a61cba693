"""ZeroMQ subscriber for one engine's KV-event publisher: frames, sequence gaps, replay.

Wire contract (vllm/distributed/kv_events.py, ``ZmqEventPublisher`` at v0.33.0): the PUB
socket sends multipart ``(topic, seq, payload)`` with ``seq`` an 8-byte big-endian counter
starting at 0 per publisher process; the optional ROUTER replay socket takes
``(identity, b"", start_seq)`` and answers every buffered batch with ``seq >= start_seq`` as
``(b"", topic, seq, payload)`` then an end marker whose seq is -1 (signed). A seq that jumps
ahead is a gap: the missed range is asked of the replay socket, and whatever does not come
back is counted lost. A seq that goes back is a publisher restart (counted; numbering
starts again). A frame or payload that does not decode is counted and skipped, with one
warning per endpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq

from kvscope.telemetry.kv_events.schema import (
    AllBlocksCleared,
    BlockStored,
    EventBatch,
    decode_batch,
    hash_text,
)

END_SEQ = -1
#: Columns of one stored row (one per block; AllBlocksCleared has no hash).
COLUMNS = (
    "t_s",
    "endpoint",
    "seq",
    "kind",
    "block_hash",
    "parent_hash",
    "token_count",
    "block_size",
    "medium",
    "lora_id",
    "group_idx",
)
Rows = dict[str, list[Any]]


def empty_rows() -> Rows:
    return {c: [] for c in COLUMNS}


@dataclass
class SubscriberCounts:
    """What one endpoint's stream has delivered so far (events, not blocks)."""

    batches: int = 0
    events: int = 0
    blocks_stored: int = 0
    blocks_removed: int = 0
    cleared: int = 0
    gaps: int = 0
    lost: int = 0
    replayed: int = 0
    restarts: int = 0
    malformed: int = 0
    last_seq: int | None = None
    warnings: list[str] = field(default_factory=list)


def add_batch(rows: Rows, batch: EventBatch, endpoint: str, seq: int, c: SubscriberCounts) -> None:
    """Append one batch's blocks to ``rows`` and count it (the subscriber's hot path)."""
    c.batches += 1
    c.events += len(batch.events)
    t_col, ep_col, seq_col, kind_col = rows["t_s"], rows["endpoint"], rows["seq"], rows["kind"]
    h_col, p_col, tok_col, bs_col = (
        rows["block_hash"],
        rows["parent_hash"],
        rows["token_count"],
        rows["block_size"],
    )
    med_col, lora_col, grp_col = rows["medium"], rows["lora_id"], rows["group_idx"]
    ts = batch.ts
    for ev in batch.events:
        if type(ev) is BlockStored:
            hashes = [h.hex() if type(h) is bytes else str(h) for h in ev.block_hashes]
            n = len(hashes)
            if n == 0:
                continue
            parent = hash_text(ev.parent_block_hash)
            h_col.extend(hashes)
            p_col.append(parent)
            p_col.extend(hashes[:-1])
            kind = ["stored"] * n
            tok = len(ev.token_ids) // n
            tok_col.extend([tok] * n)
            bs_col.extend([ev.block_size] * n)
            med_col.extend([ev.medium] * n)
            lora_col.extend([ev.lora_id] * n)
            grp_col.extend([ev.group_idx] * n)
            c.blocks_stored += n
        elif type(ev) is AllBlocksCleared:
            n = 1
            kind = ["cleared"]
            for col in (h_col, p_col, tok_col, bs_col, med_col, lora_col, grp_col):
                col.append(None)
            c.cleared += 1
        else:
            hashes = [h.hex() if type(h) is bytes else str(h) for h in ev.block_hashes]  # type: ignore[union-attr]
            n = len(hashes)
            if n == 0:
                continue
            kind = ["removed"] * n
            h_col.extend(hashes)
            none = [None] * n
            for col in (p_col, tok_col, bs_col, lora_col):
                col.extend(none)
            med_col.extend([ev.medium] * n)  # type: ignore[union-attr]
            grp_col.extend([ev.group_idx] * n)  # type: ignore[union-attr]
            c.blocks_removed += n
        kind_col.extend(kind)
        t_col.extend([ts] * n)
        ep_col.extend([endpoint] * n)
        seq_col.extend([seq] * n)


class KvEventSubscriber(threading.Thread):
    """Subscribe to one endpoint until :meth:`close`; hands rows to ``sink`` as they come.

    ``sink(rows)`` is called from this thread with a batch of rows (at most every
    ``hand_s`` seconds, and at the end). ``on_warning`` gets one line per kind of trouble.
    """

    def __init__(
        self,
        endpoint: str,
        sink: Callable[[Rows], None],
        topic: str = "",
        replay_endpoint: str | None = None,
        on_warning: Callable[[str], None] | None = None,
        hand_s: float = 0.2,
        replay_timeout_s: float = 2.0,
    ) -> None:
        super().__init__(name=f"kv-events {endpoint}", daemon=True)
        self.endpoint = endpoint
        self.topic = topic
        self.replay_endpoint = replay_endpoint
        self.sink = sink
        self.on_warning = on_warning
        self.hand_s = hand_s
        self.replay_timeout_s = replay_timeout_s
        self.counts = SubscriberCounts()
        self.ready = threading.Event()
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._rows = empty_rows()
        self._ctx: Any = zmq.Context.instance()
        self._sub: Any = None
        self._connected = threading.Event()
        self._connected.set()
        self._changed = threading.Event()

    # --- control -------------------------------------------------------------------------
    def close(self, timeout_s: float = 5.0) -> None:
        self._halt.set()
        self._connected.set()
        self.join(timeout_s)

    def disconnect(self) -> None:
        """Close the SUB socket (what a network outage does); seq tracking stays."""
        self._connected.clear()
        self._changed.set()

    def connect(self) -> None:
        """Open the SUB socket again after :meth:`disconnect`; a gap is then asked of replay."""
        self._connected.set()
        self._changed.set()

    # --- loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self._open()
        last_hand = time.monotonic()
        self.ready.set()
        try:
            while not self._halt.is_set():
                if self._changed.is_set():
                    self._changed.clear()
                    assert self._sub is not None
                    self._sub.close(linger=0)
                    self._connected.wait()
                    self._open()
                assert self._sub is not None
                # A blocking receive with a timeout: one wake-up per message, none idle
                # (a poll-then-drain loop cost ~4x the CPU at 300 batches/s).
                try:
                    frames = self._sub.recv_multipart()
                except zmq.Again:
                    frames = None
                if frames is not None:
                    self._on_frames(frames)
                now = time.monotonic()
                if now - last_hand >= self.hand_s:
                    self._hand()
                    last_hand = now
        finally:
            self._hand()
            if self._sub is not None:
                self._sub.close(linger=0)

    def _open(self) -> None:
        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, 1_000_000)
        sub.setsockopt(zmq.RCVTIMEO, int(self.hand_s * 1000))
        sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        sub.connect(self.endpoint)
        self._sub = sub

    def _hand(self) -> None:
        rows, self._rows = self._rows, empty_rows()
        if rows["t_s"]:
            self.sink(rows)

    def _warn(self, key: str, line: str) -> None:
        if key in self.counts.warnings:
            return
        self.counts.warnings.append(key)
        if self.on_warning is not None:
            self.on_warning(f"kv-events {self.endpoint}: {line}")

    def _on_frames(self, frames: list[bytes]) -> None:
        c = self.counts
        if len(frames) != 3 or len(frames[1]) != 8:
            c.malformed += 1
            self._warn(
                "malformed",
                f"a message of {len(frames)} frames is not (topic, seq, "
                "payload); skipped (counted as malformed)",
            )
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        if c.last_seq is not None:
            if seq <= c.last_seq:
                c.restarts += 1
                self._warn(
                    "restart",
                    f"sequence went back from {c.last_seq} to {seq}: the "
                    "publisher restarted; numbering starts again",
                )
            elif seq > c.last_seq + 1:
                missing = seq - c.last_seq - 1
                c.gaps += 1
                got = self._replay(c.last_seq + 1, seq)
                c.replayed += got
                c.lost += missing - got
                if missing > got:
                    self._warn(
                        "gap",
                        f"sequence gap: {missing - got} batches lost before "
                        f"seq {seq} (counted in kv_events_lost_batches_total)",
                    )
        self._decode(frames[2], seq)
        c.last_seq = seq

    def _decode(self, payload: bytes, seq: int) -> None:
        try:
            batch = decode_batch(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.counts.malformed += 1
            self._warn(
                "malformed",
                f"a payload does not decode as vLLM's EventBatch "
                f"(malformed or unknown version: {str(e).splitlines()[0]}); skipped",
            )
            return
        add_batch(self._rows, batch, self.endpoint, seq, self.counts)

    def _replay(self, start: int, stop: int) -> int:
        """Ask the replay socket for ``[start, stop)``; returns how many came back."""
        if self.replay_endpoint is None:
            return 0
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoint)
        got = 0
        try:
            sock.send_multipart((b"", start.to_bytes(8, "big")))
            deadline = time.monotonic() + self.replay_timeout_s
            while time.monotonic() < deadline:
                if not sock.poll(int(max(1, (deadline - time.monotonic()) * 1000))):
                    break
                frames = sock.recv_multipart()
                if len(frames) != 4:
                    continue
                seq = int.from_bytes(frames[2], "big", signed=True)
                if seq == END_SEQ:
                    break
                if start <= seq < stop:
                    self._decode(frames[3], seq)
                    got += 1
        finally:
            sock.close(linger=0)
        return got
