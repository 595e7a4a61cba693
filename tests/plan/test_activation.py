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


def test_w8a8_profile_holds_the_quantized_copy_of_the_activated_half() -> None:
    # vLLM 0.19 on one H100 logs 2.18 GiB of torch peak for RedHatAI's W8A8 (int8)
    # Mistral-Small-3.1-24B and 2.03 GiB for the bf16 checkpoint (llm-d-planner
    # results_raw.csv): the down projection quantizes its input to a one-byte copy
    # (scaled_int8_quant) while the gate+up and activated half are still live, which lifts
    # the MLP above the sampler's peak. The bf16 pass stays sampler-bound.
    from .log_cases import offline_hub

    with offline_hub():
        w8a8 = load_model("RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8")
        bf16 = load_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert w8a8.quantization.dense_activation_bytes == 1.0
    assert bf16.quantization.dense_activation_bytes == 0.0
    q = activation_peak(w8a8, Parallelism(), 8192, 1024).total_bytes / GIB
    b = activation_peak(bf16, Parallelism(), 8192, 1024).total_bytes / GIB
    assert q == pytest.approx(2.18, abs=0.1)
    assert b == pytest.approx(2.03, abs=0.1)
    assert q - b > 0.05


def test_weight_only_schemes_keep_activations_in_the_model_dtype() -> None:
    from kvscope.specs.quant import from_config, from_flag

    w8a16 = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}},
    }
    w8a8 = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "g": {
                "weights": {"num_bits": 8, "type": "int"},
                "input_activations": {"num_bits": 8, "type": "int", "dynamic": True},
            }
        },
    }
    assert from_config(w8a16).dense_activation_bytes == 0.0
    assert from_config(w8a8).dense_activation_bytes == 1.0
    assert from_config({"quant_method": "awq", "bits": 4}).dense_activation_bytes == 0.0
    assert from_flag("fp8", 2.0).dense_activation_bytes == 1.0
