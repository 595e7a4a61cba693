"""Speculative-decoding scenarios for the differential check against vLLM 0.33.0's scheduler.

``scenarios(shared)`` returns ``(name, Workload, settings)`` like ``sim_vs_vllm.scenarios``;
the settings carry ``"speculative": {"method", "num_speculative_tokens", "acceptance",
"seed", "accepted"}``. ``accepted`` holds kvscope's own acceptance decisions (by step, then
request id), drawn by a kvscope run of the scenario made here: the vLLM driver feeds exactly
those accepted drafts back, so both schedulers see identical acceptances and any difference
is the scheduler's. Covered: k = 1, 3, 5; acceptance 0, 0.7, 1; MTP, EAGLE (lookahead slots,
lookahead block hashes), n-gram (no lookahead), a draft model (one extra input slot per
request); pools small enough to preempt; prefix caching on and off; one-token prompts
(vLLM pads those admissions to 1 + k tokens); outputs that hit max_model_len.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.workload import Workload

HERE = Path(__file__).resolve().parent


def _spec(method: str, k: int, acceptance: float, seed: int) -> dict[str, Any]:
    return {
        "method": method,
        "num_speculative_tokens": k,
        "acceptance": acceptance,
        "seed": seed,
    }


def _tiny_prompts(seed: int, n: int) -> Workload:
    """Prompts of one or two tokens among ordinary ones: one-token admissions get padded."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 3, n)).astype(np.float64)
    prompts = np.where(rng.random(n) < 0.5, rng.integers(1, 3, n), rng.integers(3, 200, n))
    return Workload.build(steps, prompts, rng.integers(1, 60, n))


def _full_hits_beside_prefills(seed: int, n: int) -> Workload:
    """Block-aligned-plus-one prompts sharing all their blocks (a hit leaves one token, the
    padding case) among long unique prompts whose chunks run as prefills at the same time."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 3, n)).astype(np.float64)
    long = rng.random(n) < 0.4
    prompts = np.where(long, rng.integers(400, 700, n), 65)
    blocks = prompts // 16
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(blocks, out=off[1:])
    vals = np.concatenate(
        [
            rng.integers(100, 10**9, b) if lg else np.arange(4) + 7
            for b, lg in zip(blocks, long, strict=True)
        ]
    )
    return Workload.build(
        steps,
        prompts,
        rng.integers(5, 80, n),
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=16,
    )


def scenarios(shared: Path | None) -> list[tuple[str, Workload, dict[str, Any]]]:
    """The spec-decode scenarios, each with kvscope's acceptance decisions attached."""
    sys.path.insert(0, str(HERE))
    import sim_vs_vllm as diff

    base = {
        "block_size": 16,
        "max_model_len": 32768,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 256,
        "enable_prefix_caching": True,
    }
    cases: list[tuple[str, Workload, dict[str, Any]]] = [
        (
            "spec mtp k=3 a=0.7",
            diff.synthetic(21, 60, False, 300, 120),
            {**base, "num_blocks": 400, "speculative": _spec("mtp", 3, 0.7, 1)},
        ),
        (
            "spec mtp k=1 a=0.7, preempting",
            diff.synthetic(22, 60, False, 300, 300),
            {**base, "num_blocks": 90, "speculative": _spec("mtp", 1, 0.7, 2)},
        ),
        (
            "spec eagle k=5 a=1, shared prefixes",
            diff.synthetic(23, 60, True, 300, 150),
            {**base, "num_blocks": 150, "speculative": _spec("eagle", 5, 1.0, 3)},
        ),
        (
            "spec ngram k=3 a=0, no caching, preempting",
            diff.synthetic(24, 60, False, 300, 300),
            {
                **base,
                "num_blocks": 90,
                "enable_prefix_caching": False,
                "speculative": _spec("ngram", 3, 0.0, 4),
            },
        ),
        (
            "spec draft_model k=3 a=0.7, tiny pool",
            diff.synthetic(25, 60, True, 300, 200),
            {
                **base,
                "num_blocks": 70,
                "max_num_seqs": 8,
                "speculative": _spec("draft_model", 3, 0.7, 5),
            },
        ),
        (
            "spec mtp k=5 a=0.7, shared prefixes, preempting",
            diff.synthetic(26, 60, True, 300, 250),
            {**base, "num_blocks": 80, "speculative": _spec("mtp", 5, 0.7, 6)},
        ),
        (
            "spec mtp k=3 a=0.7, max_model_len reached",
            diff.synthetic(27, 40, False, 200, 400),
            {
                **base,
                "num_blocks": 300,
                "max_model_len": 256,
                "speculative": _spec("mtp", 3, 0.7, 7),
            },
        ),
        (
            "spec mtp k=3 a=0.7, one-token prompts",
            _tiny_prompts(28, 60),
            {
                **base,
                "num_blocks": 200,
                "enable_prefix_caching": False,
                "speculative": _spec("mtp", 3, 0.7, 8),
            },
        ),
        (
            "spec eagle3 k=3 a=0.7, one-token prompts, cached",
            _tiny_prompts(29, 60),
            {**base, "num_blocks": 120, "speculative": _spec("eagle3", 3, 0.7, 9)},
        ),
        (
            "spec ngram k=3 a=0.7, full-prefix hits beside chunked prefills",
            _full_hits_beside_prefills(30, 60),
            {**base, "num_blocks": 400, "speculative": _spec("ngram", 3, 0.7, 10)},
        ),
        (
            "spec draft_model k=1 a=0.7, full-prefix hits beside chunked prefills",
            _full_hits_beside_prefills(31, 60),
            {**base, "num_blocks": 120, "speculative": _spec("draft_model", 1, 0.7, 11)},
        ),
    ]
    for _name, w, s in cases:
        rows = diff.run_sim(w, s)
        s["speculative"]["accepted"] = {
            str(r["step"]): r["accepted"] for r in rows if r.get("accepted")
        }
    return cases
