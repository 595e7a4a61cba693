"""Speculative decoding as vLLM 0.33.0 schedules it: draft tokens, acceptance, lookahead slots.

Units are tokens; acceptance rates are probabilities in [0, 1]. The engine facts come from
vLLM 0.33.0: ``vllm/config/speculative.py::SpeculativeConfig`` (methods, keys,
``max_num_new_slots_for_drafting``, ``needs_eagle_block_drop``), ``vllm/config/vllm.py::
VllmConfig`` (``num_lookahead_tokens``: k KV slots past the scheduled tokens for drafters with
their own KV, EAGLE/MTP/draft model; ``num_hash_lookahead_tokens``: a prefix-cache block hash
also covers the next token for EAGLE/MTP) and ``vllm/v1/core/sched/scheduler.py::Scheduler``
(the drafts are scheduled, verified and rolled back; see :mod:`kvscope.sim.scheduler`).

Acceptance is kvscope's model (vLLM's config has no such field): per-position *conditional*
rates ``a_1..a_k``: draft ``i`` is accepted only if draft ``i - 1`` was, with probability
``a_i``. The expected number of accepted drafts per verification is
``E = sum_{i=1..k} prod_{j<=i} a_j`` (``sum a^i`` for a constant rate), so a decoding request
advances ``1 + E`` tokens per step. Draws are deterministic: a SplitMix64 hash of (seed,
request index, engine step, position), no global generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError

#: Drafters that read the target's hidden states (``SpeculativeConfig.use_eagle``) and need
#: the EAGLE trailing-block treatment; vLLM maps every ``*_mtp`` model type to ``mtp``.
EAGLE_METHODS = ("eagle", "eagle3", "mtp")
#: Drafters without a KV cache of their own (no lookahead slots).
KVLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
METHODS = (*EAGLE_METHODS, *KVLESS_METHODS, "draft_model")
#: Most draft tokens per step kvscope accepts (vLLM sets no bound; this catches typos).
MAX_SPEC_TOKENS = 64
_M64 = (1 << 64) - 1
_K1, _K2 = 0xD1B54A32D192ED03, 0x9E3779B97F4A7C15  # odd 64-bit multipliers (Weyl steps)


@dataclass(frozen=True)
class SpecDecodeConfig:
    """One ``--speculative-config`` plus kvscope's acceptance model (validated)."""

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]  # conditional rate per draft position, length k
    seed: int = 0
    model: str | None = None  # the draft model (method draft_model)
    draft_tensor_parallel_size: int | None = None
    parallel_drafting: bool = False
    acceptance_source: str = "constant"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise KvscopeError(f"--speculative-config: method '{self.method}' is not modelled.")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPEC_TOKENS:
            raise KvscopeError(
                f"--speculative-config: num_speculative_tokens must be an integer in "
                f"1..{MAX_SPEC_TOKENS}, got {k!r}."
            )
        if len(self.acceptance) != k:
            raise KvscopeError(
                f"--spec-acceptance: {len(self.acceptance)} rates for {k} draft positions."
            )
        for a in self.acceptance:
            if not (isinstance(a, float) and 0.0 <= a <= 1.0):
                raise KvscopeError(f"--spec-acceptance: rates must be in [0, 1], got {a!r}.")

    # ------------------------------------------------------------------ engine facts
    @property
    def lookahead_tokens(self) -> int:
        """KV slots past the scheduled tokens (vLLM ``VllmConfig.num_lookahead_tokens``)."""
        return self.num_speculative_tokens if self.method not in KVLESS_METHODS else 0

    @property
    def draft_slots(self) -> int:
        """Extra input rows per request (``SpeculativeConfig.max_num_new_slots_for_drafting``)."""
        k = self.num_speculative_tokens
        if self.parallel_drafting and self.method in (*EAGLE_METHODS, "draft_model"):
            return k if self.method == "draft_model" else k - 1
        return 1 if self.method == "draft_model" else 0

    def hash_lookahead(self, prefix_caching: bool) -> int:
        """Tokens after a block its prefix-cache hash covers (``num_hash_lookahead_tokens``):
        the EAGLE/MTP drafter's KV at a block's last position depends on the next token."""
        return 1 if prefix_caching and self.method in EAGLE_METHODS else 0

    # ------------------------------------------------------------------ acceptance
    def expected_accepted(self) -> float:
        """Mean accepted drafts per verification of all k drafts: sum_i prod_{j<=i} a_j."""
        total, p = 0.0, 1.0
        for a in self.acceptance:
            p *= a
            total += p
        return total

    def accepted(self, index: int, step: int, drafts: int) -> int:
        """Accepted drafts of request ``index`` verifying ``drafts`` drafts at ``step``."""
        rates = self.acceptance
        n = 0
        # one stream per (seed, request, step): Weyl-spaced keys, each position one mix
        base = _mix((self.seed * _K1 + index * _K2 + step) & _M64)
        while n < drafts:
            a = rates[n]
            if a < 1.0 and (a <= 0.0 or _mix(base + n) >> 11 >= a * 2.0**53):
                break
            n += 1
        return n

    def summary(self) -> dict[str, Any]:
        k = self.num_speculative_tokens
        return {
            "method": self.method,
            "num_speculative_tokens": k,
            "acceptance": list(self.acceptance),
            "acceptance_source": self.acceptance_source,
            "expected_accepted_tokens": self.expected_accepted(),
            "expected_tokens_per_step": 1.0 + self.expected_accepted(),
        }


# ---------------------------------------------------------------------- scheduler hooks
def pad_admission(
    spec: SpecDecodeConfig,
    seq: Any,
    hit_tokens: int,
    n: int,
    budget: int,
    after_decodes: bool,
    max_len: int,
) -> int:
    """vLLM's ``pad_spec_decode`` (``Scheduler.schedule``, waiting loop): a one-token
    admission runs as ``1 + k`` tokens with placeholder drafts (never accepted) when running
    requests were scheduled or it has a prefix hit, and the positions fit ``max_len`` (the
    caller checks that no running prefill chunk was scheduled). Returns the tokens to
    schedule; 0 when 1 + k exceeds the budget (vLLM then stops admitting rather than schedule
    it unpadded)."""
    k = spec.num_speculative_tokens
    seq.spec_pad = False
    if n == 1 and (after_decodes or hit_tokens > 0) and hit_tokens + k + 2 <= max_len:
        if k + 1 > budget:
            return 0
        seq.spec_pad = True
        return k + 1
    return n


def verify(spec: SpecDecodeConfig, seq: Any, step: int) -> int:
    """After a step that samples ``seq``: roll ``computed`` back by the rejected drafts
    (``update_from_output``), append the accepted drafts plus one token, stopping at
    ``max_tokens`` as ``check_stop`` does (tokens past it dropped, ``computed`` with them).
    Returns the accepted drafts, or -1 when no drafts were verified."""
    d = seq.step_drafts
    a = -1
    if d:
        a = 0 if seq.spec_pad else spec.accepted(seq.index, step, d)
        seq.computed -= d - a
        seq.spec_drafted += d
        seq.spec_accepted += a
        seq.spec_verifies += 1
    new = 1 + max(a, 0)
    room = seq.max_tokens - seq.outputs
    if new > room:
        seq.computed -= new - room
        new = room
    seq.outputs += new
    seq.step_drafts = 0
    seq.spec_pad = False
    return a


def apply_hash_lookahead(seqs: list[Any], block_size: int, shift: int) -> None:
    """Make prefix-cache keys cover ``shift`` tokens after each block (vLLM's lookahead block
    hashes): a block is shareable only if the token after it lies in the hashed prefix too."""
    if shift <= 0:
        return
    for seq in seqs:
        seq.hash_shift = shift
        if seq.trace_hashes is not None:
            hashed = len(seq.trace_hashes) * seq.hash_block_size
            seq.n_shareable = max(0, min(seq.n_shareable, (hashed - shift) // block_size))


def _mix(x: int) -> int:
    """SplitMix64 finaliser: a fixed, platform-independent 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)
