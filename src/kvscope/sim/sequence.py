"""The simulator's mutable view of one request while it is being served.

``Sequence`` carries exactly the counters vLLM's ``Request`` keeps for scheduling
(``vllm/v1/request.py``): prompt and output token counts, computed tokens, the KV blocks it
holds, how many of them are hashed into the prefix cache, preemptions and timestamps. Token
*ids* are never materialised: prefix identity comes from the workload's chained block
hashes, turned into one key per simulator block by :meth:`Sequence.block_key`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

NAN = math.nan


@dataclass(eq=False, slots=True)
class Sequence:
    """One request in the engine (mutable on purpose: it is the scheduler's working state).

    Block table: ``shared`` holds block objects for indices below ``n_shareable`` (blocks whose
    tokens are covered by the workload's prefix hashes, the only ones another request can
    hit); ``own`` counts the request's private full-group blocks after them; ``win`` counts
    blocks in window groups. ``hashed`` is vLLM's ``num_cached_block``.
    """

    index: int
    request_id: str
    arrival_s: float
    prompt: int
    max_tokens: int
    priority: int = 0
    trace_hashes: Any = None  # chained workload block hashes (sequence of int), or None
    hash_block_size: int = 0
    n_shareable: int = 0
    outputs: int = 0
    computed: int = 0
    slots: int = 0  # token slots allocated in the full-history group
    room: int = 0  # most slots the blocks held can take before another block is needed
    shared: list[Any] = field(default_factory=list)
    own: int = 0
    win: int = 0
    hashed: int = 0
    swapped: int = 0  # tokens whose KV waits in host memory (swap preemption)
    hit_memo: Any = None  # (pool version, num_tokens, Hit) of the last prefix lookup
    status: str = "waiting"  # waiting | running | preempted | finished | rejected
    preemptions: int = 0
    cached_prompt_tokens: int = -1  # prefix hit at first admission (-1 = not admitted yet)
    first_scheduled_s: float = NAN
    first_token_s: float = NAN
    finish_s: float = NAN
    error: str = ""
    # decode-cohort bookkeeping (see cohort.py): while ``in_cohort`` the true counts are
    # ``computed = base_c + clock`` and ``outputs = base_o + clock``
    in_cohort: bool = False
    base_c: int = 0
    base_o: int = 0
    epoch: int = 0
    admit_no: int = 0  # admission order = position order in the running list
    # speculative decoding (see spec_decode.py): drafts proposed for the next step, drafts
    # scheduled this step (placeholders when ``spec_pad``), totals for the outputs
    drafts: int = 0
    step_drafts: int = 0
    spec_pad: bool = False
    partial: bool = False  # vLLM ``Request.is_prefill_chunk`` (set by spec-mode schedule)
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_verifies: int = 0
    hash_shift: int = 0  # tokens after a block its prefix-cache key covers (EAGLE/MTP)
    # offload tiers (kv_tiers.py), summed over admissions: prefix tokens loaded, seconds
    tier_hit_tokens: int = 0
    tier_load_s: float = 0.0

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (vLLM ``Request.num_tokens``)."""
        return self.prompt + self.outputs

    @property
    def held_full(self) -> int:
        return len(self.shared) + self.own

    @property
    def held(self) -> int:
        return len(self.shared) + self.own + self.win

    def block_key(self, j: int, block_size: int) -> tuple[int, int]:
        """Prefix-cache key of simulator block ``j`` (must be below ``n_shareable``).

        The key is (chained hash of the workload block holding the block's last token, end
        token): equal keys mean equal token prefixes, the property vLLM's chained block
        hashes have (``vllm/v1/core/kv_cache_utils.py::hash_block_tokens``). With
        ``hash_shift`` the key also covers the next tokens, as vLLM 0.33.0's lookahead block
        hashes do (``kv_cache_utils.py::get_request_block_hasher``).
        """
        end = (j + 1) * block_size
        return self.trace_hashes[(end - 1 + self.hash_shift) // self.hash_block_size], end
