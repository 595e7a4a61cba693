"""The rejection-sampler pass of vLLM's V1 profiling run with speculative decoding.

Published figures: vLLM 0.20.0 starts of Qwen/Qwen3-8B (bf16, and its FP8-dynamic copy) on one
H100 at gpu_memory_utilization 0.92, 8,192 batched tokens and the default 1,024 sequences
(github.com/dishantghai/ai-perf-hw3-spec-decode-quant, logs/ at d1c3b59). Outside the weights,
the KV pool and the logged CUDA-graph estimate, the start without a drafter (c1_server.log:
15.27 + 54.63 + 0.50 GiB) keeps 2.33 GiB less than the EAGLE-3 k=2 start (c2_n2_server.log:
15.78 + 51.73 + 0.56 GiB); the FP8 pair (c3_server.log: 8.8 + 61.04 + 0.54; c4_n2_server.log:
9.32 + 58.19 + 0.56) 2.31 GiB; k = 1 (c4_n1_server.log: 9.32 + 58.18 + 0.58) 2.32 GiB.
"""

from __future__ import annotations

import json

import pytest

from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.rejection_profile import rejection_pass_bytes
from kvscope.plan.speculative import parse_vllm
from kvscope.plan.vllm_sampler import sampler_fp32_copies
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .test_drafter_lm_head import CONFIGS

GIB = 2**30
H100 = get_gpu("H100")
SEQS, TOKENS = 1024, 8192


def _eng(version: str, spec: dict[str, object] | None) -> EngineConfig:
    return EngineConfig(
        engine="vllm",
        engine_version=version,
        speculative=parse_vllm(json.dumps(spec)) if spec else None,
    )


def _qwen3():  # type: ignore[no-untyped-def]
    return load_model(str(CONFIGS / "qwen3-8b.json"))


def _eagle(k: int = 2, **extra: object) -> dict[str, object]:
    return {"method": "eagle3", "model": "h", "num_speculative_tokens": k, **extra}


def _extra_gib(version: str, spec: dict[str, object]) -> float:
    """What the rejection pass adds to the profiling peak over the plain sampler pass."""
    model, eng = _qwen3(), _eng(version, spec)
    act = activation_peak(model, Parallelism(tp=1), TOKENS, SEQS, True, sampler_fp32_copies(eng))
    return (rejection_pass_bytes(model, eng, H100, TOKENS, SEQS) - act.sampler) / GIB


@pytest.mark.parametrize(
    ("without", "with_drafter"),
    [
        (15.27 + 54.63 + 0.50, 15.78 + 51.73 + 0.56),  # c1 / c2_n2: Qwen3-8B
        (8.8 + 61.04 + 0.54, 9.32 + 58.19 + 0.56),  # c3 / c4_n2: the FP8 target
        (8.8 + 61.04 + 0.54, 9.32 + 58.18 + 0.58),  # c3 / c4_n1: k = 1
    ],
)
def test_the_logged_gap_between_starts_with_and_without_a_drafter(
    without: float, with_drafter: float
) -> None:
    # three figures rounded to 0.01 GiB on each side: +-0.03 GiB
    assert _extra_gib("0.20.0", _eagle()) == pytest.approx(without - with_drafter, abs=0.03)


def test_one_dummy_draft_token_a_request_whatever_k_and_method() -> None:
    model = _qwen3()
    sizes = {
        rejection_pass_bytes(model, _eng("0.20.0", spec), H100, TOKENS, SEQS)
        for spec in (
            _eagle(1),
            _eagle(4),
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
        )
    }
    assert len(sizes) == 1


def test_the_pass_grows_with_the_sequences_not_the_forward() -> None:
    model, eng = _qwen3(), _eng("0.20.0", _eagle())
    small = rejection_pass_bytes(model, eng, H100, TOKENS, 8)
    large = rejection_pass_bytes(model, eng, H100, TOKENS, SEQS)
    # only the hidden states of the pass (8,192 x 4,096 bf16) do not scale with the rows
    hidden = TOKENS * 4096 * 2
    assert (large - hidden) == pytest.approx((small - hidden) * SEQS / 8)


def test_no_pass_without_a_drafter_before_017_or_on_the_v2_runner() -> None:
    model = _qwen3()
    assert rejection_pass_bytes(model, _eng("0.20.0", None), H100, TOKENS, SEQS) == 0.0
    assert rejection_pass_bytes(model, _eng("0.16.0", _eagle()), H100, TOKENS, SEQS) == 0.0
    # Qwen3 with an EAGLE-3 drafter starts on the V2 runner at 0.24 (its own sampler)
    assert rejection_pass_bytes(model, _eng("0.24.0", _eagle()), H100, TOKENS, SEQS) == 0.0


def test_probabilistic_drafts_add_dummy_draft_probabilities_from_022() -> None:
    model = _qwen3()
    row = SEQS * model.vocab_size * 4
    plain = _eng("0.22.0", {"method": "ngram", "num_speculative_tokens": 2})
    probs = {"method": "ngram", "num_speculative_tokens": 2, "draft_sample_method": "probabilistic"}
    base = rejection_pass_bytes(model, plain, H100, TOKENS, SEQS)
    assert rejection_pass_bytes(model, _eng("0.22.0", probs), H100, TOKENS, SEQS) == base + row
    assert rejection_pass_bytes(model, _eng("0.20.0", probs), H100, TOKENS, SEQS) == base
