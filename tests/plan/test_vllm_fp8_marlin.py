"""vLLM's block-FP8 weights on GPUs without FP8 tensor cores (kvscope.plan.vllm_fp8_marlin)."""

from __future__ import annotations

import pytest

from kvscope.plan.vllm_fp8_marlin import fp8_marlin_model, runs_fp8_marlin, uses_fp8_marlin
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, evaluate, offline_hub


def _model():  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model("Qwen/Qwen3-30B-A3B-FP8", None, None)


def test_marlin_group_scales_before_sm89() -> None:
    model = _model()
    a100 = get_gpu("A100-SXM-40GB")
    assert uses_fp8_marlin(model, a100, "vllm", (0, 20, 0))
    q = fp8_marlin_model(model, a100, "vllm", (0, 20, 0)).quantization
    # one bf16 scale per output channel and 128 input channels (marlin_utils_fp8.py)
    assert q.linear_bytes == q.expert_bytes == 1.0 + 2.0 / 128
    assert q.dense_activation_bytes == 0.0  # W8A16: no fp8 copy of the activations


def test_native_fp8_and_other_engines_keep_the_checkpoint() -> None:
    model = _model()
    for gpu, engine in (("H100", "vllm"), ("RTX-4090-24GB", "vllm"), ("A100-SXM-40GB", "sglang")):
        assert fp8_marlin_model(model, get_gpu(gpu), engine, (0, 20, 0)) is model


@pytest.mark.parametrize(
    ("gpu", "version", "marlin"),
    [
        ("RTX-3090-24GB", (0, 27, 1), True),
        ("A100-SXM-80GB", (0, 9, 2), True),
        ("RTX-2080-Ti-11GB", (0, 24, 0), True),  # 7.5 joins with the scaled-mm registry
        ("RTX-2080-Ti-11GB", (0, 9, 2), False),  # is_fp8_marlin_supported: 8.0 and up
        ("RTX-3090-24GB", (0, 8, 5), False),  # before the first release read
        ("L40S-48GB", (0, 27, 1), False),  # 8.9: native FP8
        ("H100", (0, 27, 1), False),
        ("MI300X-192GB", (0, 27, 1), False),  # ROCm: no Marlin
    ],
)
def test_which_gpus_run_fp8_marlin(gpu: str, version: tuple[int, int, int], marlin: bool) -> None:
    assert runs_fp8_marlin(get_gpu(gpu), version) is marlin


def test_block_fp8_on_ampere_loads_the_logged_weights() -> None:
    # Qwen3.8-27B-FP8 at TP2 on two RTX 3090, vLLM 0.27.1: "Weights : 14.46 GiB/GPU"; the block
    # layout alone is 14.17 (2.0 % short), the Marlin group scales add 0.17 and M-RoPE's three
    # extra rotary folds 0.09 (kvscope.plan.mrope_buffers).
    case = case_by_id("talos-2x3090-qwen38-27b-fp8-262k-seqs3-0.27.1")
    result = evaluate(case)
    assert result.weights_err is not None and result.weights_err < 0.01
    assert result.predicted_weights_gib == pytest.approx(14.44, abs=0.01)
