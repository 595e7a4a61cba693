"""Multi-turn sessions, shared system prompts and prefix groups, with chained block hashes.

A session is a conversation: turn ``k``'s prompt is the system prompt, every earlier user
message and answer, then the new user message, so the context grows turn by turn. The next
turn arrives ``think`` seconds (exponential, mean ``think_time_s``) after the previous one.
Sessions draw one of ``system_prompts`` shared system prompts of ``system_prompt_tokens``
tokens; with one turn per session this is the "prefix group" workload (N groups of requests
that share a common prefix and differ in the suffix).

Prefix hashes cover *full* blocks of ``block_size`` tokens and are chained: a block's hash is
computed from its parent's hash and its own token content, as vLLM's automatic prefix caching
keys blocks (``hash_block_tokens(parent_block_hash, curr_block_token_ids, ...)`` in
vllm/v1/core/kv_cache_utils.py). Token content is modelled by identity, not by token ids: each
segment (a system prompt, one user message, one answer) has a unique key, and a block's content
is the list of segment pieces it covers. Two requests therefore share a block hash exactly when
they share the whole prefix up to the end of that block, so the prefix-cache hit potential
computed from these hashes is exact for the modelled conversations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.validate import machine_memory_bytes
from kvscope.workload.lengths import Fixed, LengthDist
from kvscope.workload.limits import check_request_count
from kvscope.workload.stream import Workload

#: vLLM's default KV block size on GPUs (``--block-size`` default 16, vllm/config/cache.py).
DEFAULT_BLOCK_SIZE = 16
_MASK63 = (1 << 63) - 1
#: Memory of one prefix hash while sessions are built (a Python int in a list).
_BYTES_PER_HASH = 40


def chain_hash(parent: int, content: bytes) -> int:
    """Hash of one block from its parent's hash and its content (63-bit, non-negative)."""
    h = hashlib.blake2b(parent.to_bytes(8, "little") + content, digest_size=8)
    return int.from_bytes(h.digest(), "little") & _MASK63


@dataclass(frozen=True)
class SessionSpec:
    """How sessions look: turns per session, think time, shared system prompts, block size."""

    turns: LengthDist = field(default_factory=lambda: Fixed(1))
    think_time_s: float = 0.0
    system_prompt_tokens: int = 0
    system_prompts: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.system_prompts < 1 or self.system_prompt_tokens < 0:
            raise KvscopeError(
                "sessions: block_size and system_prompts must be >= 1, system_prompt_tokens >= 0."
            )
        if self.think_time_s < 0:
            raise KvscopeError("sessions: think_time_s must be >= 0.")


class _Prefix:
    """Incrementally hashed token sequence made of keyed segments."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.keys: list[str] = []
        self.ends: list[int] = []  # cumulative end position of each segment
        self.hashes: list[int] = []

    @property
    def length(self) -> int:
        return self.ends[-1] if self.ends else 0

    def append(self, key: str, tokens: int) -> None:
        if tokens > 0:
            self.keys.append(key)
            self.ends.append(self.length + tokens)

    def block_hashes(self, upto_tokens: int) -> list[int]:
        """Hashes of the full blocks within the first ``upto_tokens`` tokens."""
        b = self.block_size
        full = upto_tokens // b
        ends = np.asarray(self.ends, dtype=np.int64)
        while len(self.hashes) < full:
            i = len(self.hashes)
            lo, hi = i * b, (i + 1) * b
            s = int(np.searchsorted(ends, lo, side="right"))
            pieces = []
            while lo < hi:
                start = 0 if s == 0 else int(ends[s - 1])
                end = min(int(ends[s]), hi)
                pieces.append(f"{self.keys[s]}:{lo - start}:{end - start}")
                lo = end
                s += 1
            parent = self.hashes[-1] if self.hashes else 0
            self.hashes.append(chain_hash(parent, ";".join(pieces).encode()))
        return self.hashes[:full]


def generate_sessions(
    spec: SessionSpec,
    starts_s: NDArray[np.float64],
    user_len: LengthDist,
    output_len: LengthDist,
    seed: int,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    max_model_len: int | None = None,
) -> Workload:
    """Expand session start times into a request stream with growing, hashed prompts."""
    rng = np.random.default_rng(seed)
    r_turns, r_sys, r_think, r_user, r_out = rng.spawn(5)
    n_sess = len(starts_s)
    turns = np.maximum(spec.turns.sample(r_turns, n_sess), 1)
    sys_of = r_sys.integers(0, spec.system_prompts, size=n_sess)
    arr: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    sess_ids: list[str] = []
    turn_ix: list[int] = []
    offsets = [0]
    values: list[int] = []
    ended_early = 0
    total = int(turns.sum())
    check_request_count(total, "the sessions' turns")
    # Prompts grow turn by turn, so hashes grow with the square of the turns: bounded as built.
    hash_limit = machine_memory_bytes() // 2 // _BYTES_PER_HASH
    users = user_len.sample(r_user, total)
    outs = output_len.sample(r_out, total)
    thinks = r_think.exponential(spec.think_time_s, size=total) if spec.think_time_s else None
    k = 0
    for s in range(n_sess):
        pre = _Prefix(spec.block_size)
        pre.append(f"sys{sys_of[s]}", spec.system_prompt_tokens)
        t = float(starts_s[s])
        for j in range(int(turns[s])):
            u, o = int(users[k]), int(outs[k])
            if j > 0 and thinks is not None:
                t += float(thinks[k])
            k += 1
            if duration_s is not None and t >= duration_s:
                break
            if max_model_len is not None and pre.length + u + o > max_model_len:
                if j > 0:
                    ended_early += 1
                    break
                u = max(1, max_model_len - pre.length - o)
                o = max(1, min(o, max_model_len - pre.length - u))
            pre.append(f"u{s}.{j}", u)
            hashes = pre.block_hashes(pre.length)
            arr.append(t)
            prompt.append(pre.length)
            output.append(o)
            sess_ids.append(f"s{s}")
            turn_ix.append(j)
            values.extend(hashes)
            offsets.append(len(values))
            pre.append(f"a{s}.{j}", o)
        if len(values) > hash_limit:
            raise KvscopeError(
                "sessions: the prefix hashes of these conversations would need more than half "
                "of this machine's memory.",
                hint="Use fewer turns or requests, shorter prompts, or a larger block_size.",
            )
    w = Workload.build(
        arr,
        prompt,
        output,
        request_ids=[f"{sid}.{j}" for sid, j in zip(sess_ids, turn_ix, strict=True)],
        session_ids=sess_ids,
        turns=turn_ix,
        hash_offsets=np.asarray(offsets, dtype=np.int64),
        hash_values=np.asarray(values, dtype=np.int64),
        hash_block_size=spec.block_size,
    )
    if num_requests is not None:
        w = w.take(np.arange(min(num_requests, len(w))))
    return w.replace(spec={"sessions_ended_at_max_model_len": ended_early})
