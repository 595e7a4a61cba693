"""Reading ``--speculative-config`` (vLLM 0.33.0's keys and methods) and ``--spec-acceptance``.

The CLI boundary of :mod:`kvscope.sim.spec_decode`: the JSON is read by the one parser the
planner uses too (:func:`kvscope.plan.speculative.parse_vllm`: vLLM 0.33.0's fields and
methods, an unknown key or method one error line), and the acceptance rates come from a
constant, a comma list, a file of measured figures, or vLLM's own
``synthetic_acceptance_rates`` (unconditional, converted to conditional).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.plan.speculative import parse_vllm
from kvscope.sim.spec_decode import MAX_SPEC_TOKENS, SpecDecodeConfig
from kvscope.validate import read_text


def parse_spec_config(text: str, acceptance: str | None, seed: int = 0) -> SpecDecodeConfig:
    """``--speculative-config JSON`` (vLLM's spelling) and ``--spec-acceptance`` checked."""
    spec = parse_vllm(text)
    doc = spec.raw_dict()
    k = spec.num_speculative_tokens
    rates, source = _acceptance(doc, acceptance, min(k, MAX_SPEC_TOKENS))
    return SpecDecodeConfig(
        method=spec.method,
        num_speculative_tokens=k,
        acceptance=rates,
        seed=seed,
        model=spec.model if spec.method == "draft_model" else None,
        draft_tensor_parallel_size=spec.draft_tensor_parallel_size,
        parallel_drafting=spec.parallel_drafting,
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
