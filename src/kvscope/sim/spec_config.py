"""Reading ``--speculative-config`` (vLLM 0.33.0's keys and methods) and ``--spec-acceptance``.

The CLI boundary of :mod:`kvscope.sim.spec_decode`: the JSON is checked against the fields of
``vllm/config/speculative.py::SpeculativeConfig`` at 0.33.0 (an unknown key or method is one
error line), methods are normalised as its ``__post_init__`` does (every MTP model type is
``mtp``; no method with model ``ngram`` is ``ngram``, with another model ``draft_model``), and
the acceptance rates come from a constant, a comma list, a file of measured figures, or
vLLM's own ``synthetic_acceptance_rates`` (unconditional, converted to conditional).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.sim.spec_decode import MAX_SPEC_TOKENS, METHODS, SpecDecodeConfig
from kvscope.validate import read_text

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
