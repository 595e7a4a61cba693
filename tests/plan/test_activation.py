"""Profiling-pass activation peak, pinned to vLLM 0.19 "torch peak memory increase" lines."""

from __future__ import annotations

import pytest

from kvscope.plan.activation import activation_peak
from kvscope.plan.config import Parallelism
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import DATA

H100 = get_gpu("H100")
LLAMA = load_model("meta-llama/Llama-3.1-8B")


@pytest.mark.parametrize(
    ("model", "par", "tokens", "seqs", "logged"),
    # "torch peak memory increase" of vLLM 0.19 on H100 (llm-d-planner results_raw.csv).
    [
        ("meta-llama/Llama-3.1-8B", Parallelism(), 8192, 1024, 1.89),
        ("Qwen/Qwen2.5-7B-Instruct", Parallelism(), 8192, 1024, 2.21),
        ("mistralai/Mixtral-8x7B-v0.1", Parallelism(tp=2), 8192, 1024, 1.21),
        ("Qwen/Qwen3-30B-A3B", Parallelism(), 8192, 1024, 2.68),
        ("deepseek-ai/DeepSeek-V2-Lite", Parallelism(), 8192, 1024, 1.93),
    ],
)
def test_activation_peak_matches_profiled_figures(model, par, tokens, seqs, logged) -> None:  # type: ignore[no-untyped-def]
    peak = activation_peak(load_model(model), par, tokens, seqs).total_bytes / GIB
    assert peak == pytest.approx(logged, abs=0.1)


def test_first_pp_stage_runs_no_sampler() -> None:
    first = activation_peak(LLAMA, Parallelism(pp=2), 8192, 1024, last_stage=False)
    assert first.total_bytes / GIB == pytest.approx(1.10, abs=0.1)  # logged 1.10 GiB


def test_v0_full_prompt_profile_holds_the_down_projection_output() -> None:
    # vLLM 0.7.1 (V0, no chunked prefill) profiles one 10,000-token pass of Qwen2.5-32B at
    # TP2 on L40S and logs "PyTorch activation peak memory takes 1.26GiB" (vllm issue
    # #15815). The MLP's gate+up, activated half, down output and all-reduce output are live
    # together; without the last two the peak would be 1.08 GiB.
    qwen32 = load_model(str(DATA / "configs" / "qwen2.5-32b.json"))
    peak = activation_peak(qwen32, Parallelism(tp=2), 10_000, 256, sampler_fp32_copies=1)
    assert peak.total_bytes / GIB == pytest.approx(1.26, abs=0.05)
    assert peak.total_bytes / GIB > 1.2


@pytest.mark.parametrize(("tokens", "logged"), [(20_000, 17.06 - 14.99), (29_000, 17.98 - 14.99)])
def test_v0_profile_grows_with_max_model_len(tokens: int, logged: float) -> None:
    # vLLM V0 without chunked prefill (up to 32K context) profiles one max_model_len prompt:
    # on an RTX 3090 Llama-3.1-8B logs peak torch 17.06 / 17.98 GiB over 14.99 GiB of weights
    # at 20,000 / 29,000 tokens (vllm issue #10517).
    peak = activation_peak(LLAMA, Parallelism(), tokens, 256, sampler_fp32_copies=1)
    assert peak.total_bytes / GIB == pytest.approx(logged, abs=0.15)
