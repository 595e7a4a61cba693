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

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.validate import read_text

#: Drafters that read the target's hidden states (``SpeculativeConfig.use_eagle``) and need
#: the EAGLE trailing-block treatment; vLLM maps every ``*_mtp`` model type to ``mtp``.
EAGLE_METHODS = ("eagle", "eagle3", "mtp")
#: Drafters without a KV cache of their own (no lookahead slots).
KVLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
METHODS = (*EAGLE_METHODS, *KVLESS_METHODS, "draft_model")
#: Methods vLLM 0.33.0 accepts that kvscope does not model (one line says so).
UNMODELLED = ("dflash", "dspark", "custom_class", "extract_hidden_states")
#: ``SpeculativeMethod`` MTP model types of vLLM 0.33.0, all normalised to ``mtp``.
MTP_ALIASES = [
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen4_exp_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "step5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
]
#: Every field of vLLM 0.33.0's ``SpeculativeConfig`` a user may set (others are refused).
KNOWN_KEYS = frozenset(
    [
        "enforce_eager",
        "num_speculative_tokens",
        "model",
        "method",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",
        "quantization",
        "moe_backend",
        "attention_backend",
        "kv_cache_dtype",
        "max_model_len",
        "revision",
        "code_revision",
        "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch",
        "disable_eagle_block_drop",
        "disable_lookahead_block_hashes",
        "draft_lm_head_quantization",
        "use_local_argmax_reduction",
        "use_heterogeneous_vocab",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "parallel_drafting",
        "num_speculative_tokens_per_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        "draft_sample_method",
        "dspark_draft_topk",
        "xpress_topc",
        "fly_window_size",
        "fly_entropy_threshold",
        "fly_entropy_top_k",
    ]
)
#: Most draft tokens per step kvscope accepts (vLLM sets no bound; this catches typos).
MAX_SPEC_TOKENS = 64
_M64 = (1 << 64) - 1


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
        base = _mix(_mix(_mix(self.seed & _M64) ^ index) ^ step)
        while n < drafts:
            a = rates[n]
            if a < 1.0 and (a <= 0.0 or _mix(base ^ n) >> 11 >= a * 2.0**53):
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
    decodes and no running prefill chunk were scheduled, or it has a prefix hit, and the
    positions fit ``max_len``. Returns the tokens to schedule; 0 when 1 + k exceeds the
    budget (vLLM then stops admitting rather than schedule it unpadded)."""
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


# ---------------------------------------------------------------------- parsing (CLI boundary)
def parse_spec_config(text: str, acceptance: str | None, seed: int = 0) -> SpecDecodeConfig:
    """``--speculative-config JSON`` (vLLM's spelling) and ``--spec-acceptance`` checked."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise KvscopeError(f"--speculative-config is not JSON: {err.msg}.") from None
    if not isinstance(doc, dict):
        raise KvscopeError("--speculative-config must be a JSON object.")
    unknown = sorted(set(doc) - KNOWN_KEYS)
    if unknown:
        raise KvscopeError(
            f"--speculative-config: unknown key(s) {', '.join(unknown)} "
            "(vLLM 0.33.0 SpeculativeConfig fields only)."
        )
    method = doc.get("method")
    if method is None:  # vLLM infers it from model: "ngram", else a draft model
        model = doc.get("model")
        if model is None:
            raise KvscopeError("--speculative-config needs a method (or a model).")
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method in MTP_ALIASES:
        method = "mtp"
    if method == "[ngram]":
        method = "ngram"
    if method in UNMODELLED:
        raise KvscopeError(f"--speculative-config: method '{method}' is not modelled by kvscope.")
    if method not in METHODS:
        raise KvscopeError(
            f"--speculative-config: unknown method {method!r}; "
            f"known: {', '.join(sorted({*METHODS, *UNMODELLED}))} or an MTP model type."
        )
    for key in ("disable_lookahead_block_hashes", "num_speculative_tokens_per_batch_size"):
        if doc.get(key):
            raise KvscopeError(f"--speculative-config: {key} is not modelled by kvscope.")
    if method == "draft_model" and not doc.get("model"):
        raise KvscopeError("--speculative-config: method draft_model needs a model.")
    k = doc.get("num_speculative_tokens")
    if k is None:
        raise KvscopeError("--speculative-config: num_speculative_tokens is required.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise KvscopeError(f"--speculative-config: num_speculative_tokens must be >= 1, not {k!r}.")
    tp = doc.get("draft_tensor_parallel_size")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise KvscopeError(
            f"--speculative-config: draft_tensor_parallel_size must be >= 1, not {tp!r}."
        )
    rates, source = _acceptance(doc, acceptance, min(k, MAX_SPEC_TOKENS))
    return SpecDecodeConfig(
        method=method,
        num_speculative_tokens=k,
        acceptance=rates,
        seed=seed,
        model=doc.get("model") if method == "draft_model" else None,
        draft_tensor_parallel_size=tp,
        parallel_drafting=bool(doc.get("parallel_drafting", False)),
        acceptance_source=source,
    )


def _acceptance(doc: dict[str, Any], given: str | None, k: int) -> tuple[tuple[float, ...], str]:
    """Conditional per-position rates from --spec-acceptance, else vLLM's synthetic rates."""
    if given is not None:
        return parse_acceptance(given, k), given
    synth = doc.get("synthetic_acceptance_rates")
    if doc.get("rejection_sample_method") == "synthetic" and isinstance(synth, list):
        # vLLM's are unconditional (P(first i+1 accepted)); ours are conditional
        rates = _rates(synth, "synthetic_acceptance_rates", k)
        return _conditional(rates), "synthetic_acceptance_rates"
    raise KvscopeError("--speculative-config needs --spec-acceptance (a rate, a list or a file).")


def parse_acceptance(text: str, k: int) -> tuple[float, ...]:
    """A constant, a comma list of k conditional rates, or a file (see :func:`load_rates`)."""
    text = text.strip()
    if Path(text).is_file():
        return load_rates(text, k)
    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise KvscopeError(
            f"--spec-acceptance: '{text}' is not a rate, a comma list of rates or a file."
        ) from None
    if len(values) == 1:
        values = values * k
    return _rates(values, "--spec-acceptance", k)


def load_rates(path: str | Path, k: int) -> tuple[float, ...]:
    """Per-position conditional rates from a file of measured figures.

    Formats: a JSON list of conditional rates; a JSON object ``{"num_drafts": N,
    "num_accepted_tokens_per_pos": [c_0, c_1, ...]}`` (vLLM's counters
    ``vllm:spec_decode_num_drafts`` and ``vllm:spec_decode_num_accepted_tokens_per_pos``);
    or a Prometheus text page holding those two counters (``/metrics`` saved to a file).
    Counters give conditional rates ``c_i / c_{i-1}`` (``c_{-1} = N``). The first k positions
    are used; fewer than k is an error.
    """
    text = read_text(path, "--spec-acceptance file")
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError:
        doc = _prometheus(text, path)
    if isinstance(doc, dict):
        n = doc.get("num_drafts")
        per_pos = doc.get("num_accepted_tokens_per_pos")
        if not isinstance(n, int | float) or not isinstance(per_pos, list) or n <= 0:
            raise KvscopeError(
                f"{path}: expected num_drafts > 0 and a num_accepted_tokens_per_pos list."
            )
        counts = [float(n), *(float(c) for c in per_pos[:k])]
        doc = [b / a if a > 0 else 0.0 for a, b in itertools.pairwise(counts)]
    if not isinstance(doc, list):
        raise KvscopeError(f"{path}: expected a JSON list of rates or vLLM's counters.")
    return _rates(doc[:k], f"{path}", k)


def _prometheus(text: str, path: str | Path) -> dict[str, Any]:
    drafts = re.search(r"^vllm:spec_decode_num_drafts(?:_total)?(?:\{[^}]*\})?\s+(\S+)", text, re.M)
    per_pos: dict[int, float] = {}
    pat = r"^vllm:spec_decode_num_accepted_tokens_per_pos(?:_total)?\{([^}]*)\}\s+(\S+)"
    for labels, value in re.findall(pat, text, re.M):
        m = re.search(r'position="(\d+)"', labels)
        if m:
            per_pos[int(m.group(1))] = per_pos.get(int(m.group(1)), 0.0) + float(value)
    if drafts is None or not per_pos:
        raise KvscopeError(f"{path}: neither JSON nor vLLM spec-decode counters.")
    return {
        "num_drafts": float(drafts.group(1)),
        "num_accepted_tokens_per_pos": [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)],
    }


def _rates(values: list[Any], what: str, k: int) -> tuple[float, ...]:
    if len(values) != k:
        raise KvscopeError(f"{what}: {len(values)} rates for {k} draft positions.")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise KvscopeError(f"{what}: rates must be numbers in [0, 1], got {v!r}.")
        if not 0.0 <= v <= 1.0:
            raise KvscopeError(f"{what}: rates must be in [0, 1], got {v!r}.")
        out.append(float(v))
    return tuple(out)


def _conditional(unconditional: tuple[float, ...]) -> tuple[float, ...]:
    out, prev = [], 1.0
    for u in unconditional:
        out.append(min(u / prev, 1.0) if prev > 0 else 0.0)
        prev = u
    return tuple(out)
