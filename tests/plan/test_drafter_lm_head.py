"""An EAGLE-3 head whose LM head is a frozen copy of its verifier's: vLLM drops the copy.

Published figures: vLLM 0.20.0 starts of Qwen/Qwen3-8B with speculators-trained EAGLE-3 heads
on one H100 (github.com/dishantghai/ai-perf-hw3-spec-decode-quant, logs/ at d1c3b59):
"Model loading took 15.27 GiB" without a head (c1_server.log), 15.78 GiB with the
full-vocabulary head (c2_n2_server.log, "Detected EAGLE model with lm_head identical to the
target model") and 16.02 GiB with the 32,000-token head (h9_c2_compressed_server.log).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvscope.plan.config import Parallelism
from kvscope.plan.drafter import lm_head_is_verifier_copy, plan_drafter
from kvscope.plan.speculative import parse_vllm
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).parent / "data" / "configs"
GIB = 2**30
TARGET_GIB = 15.27  # c1_server.log: Qwen3-8B alone


def _head_gib(config: str, version: str | None = None) -> float:
    target = load_model(str(CONFIGS / "qwen3-8b.json"))
    draft = load_model(str(CONFIGS / config))
    if version is not None:
        draft = replace(draft, speculators_version=version)
    spec = parse_vllm(json.dumps({"method": "eagle3", "model": "h", "num_speculative_tokens": 2}))
    d = plan_drafter(target, spec, Parallelism(tp=1), load=lambda _name: draft)
    return d.extra_weight_bytes / GIB


def test_full_vocabulary_speculators_head_loads_without_its_lm_head() -> None:
    # 15.78 - 15.27 = 0.51 GiB logged (rounded to 0.01 GiB on both sides)
    assert _head_gib("qwen3-8b-eagle3-llama-speculators.json") == pytest.approx(
        15.78 - TARGET_GIB, abs=0.015
    )


def test_trimmed_vocabulary_head_keeps_its_own_rows() -> None:
    # 16.02 - 15.27 = 0.75 GiB: the layer, fc and a 32,000-row LM head with its token map
    assert _head_gib("qwen3-8b-eagle3-llama-speculators-32k.json") == pytest.approx(
        16.02 - TARGET_GIB, abs=0.015
    )


@pytest.mark.parametrize("version", ["", "0.4.0", "0.3.0"])
def test_heads_before_speculators_050_keep_their_trained_lm_head(version: str) -> None:
    # speculators v0.4.0 froze only verifier_lm_head: the trained lm_head differs from the
    # target's, so vLLM's torch.equal check keeps it (1.16 GiB for Qwen3's 151,936 rows).
    kept = _head_gib("qwen3-8b-eagle3-llama-speculators.json", version)
    shared = _head_gib("qwen3-8b-eagle3-llama-speculators.json")
    assert kept - shared == pytest.approx(151_936 * 4096 * 2 / GIB, rel=0.01)


def test_copy_needs_the_verifier_vocabulary() -> None:
    target = load_model(str(CONFIGS / "qwen3-8b.json"))
    head = load_model(str(CONFIGS / "qwen3-8b-eagle3-llama-speculators.json"))
    assert lm_head_is_verifier_copy(head, target)
    assert not lm_head_is_verifier_copy(replace(head, draft_vocab_size=32_000), target)
    other = replace(target, vocab_size=128_256)
    assert not lm_head_is_verifier_copy(head, other)
