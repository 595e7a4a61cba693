"""vLLM's block-FP8 weights on GPUs without FP8 tensor cores (kvscope.plan.vllm_fp8_marlin)."""

from __future__ import annotations

from kvscope.plan.vllm_fp8_marlin import fp8_marlin_model, uses_fp8_marlin
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import offline_hub


def _model():  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model("Qwen/Qwen3-30B-A3B-FP8", None, None)


def test_marlin_group_scales_before_sm89() -> None:
    model = _model()
    a100 = get_gpu("A100-SXM-40GB")
    assert uses_fp8_marlin(model, a100, "vllm")
    q = fp8_marlin_model(model, a100, "vllm").quantization
    # one bf16 scale per output channel and 128 input channels (marlin_utils_fp8.py)
    assert q.linear_bytes == q.expert_bytes == 1.0 + 2.0 / 128
    assert q.dense_activation_bytes == 0.0  # W8A16: no fp8 copy of the activations


def test_native_fp8_and_other_engines_keep_the_checkpoint() -> None:
    model = _model()
    for gpu, engine in (("H100", "vllm"), ("RTX-4090-24GB", "vllm"), ("A100-SXM-40GB", "sglang")):
        assert fp8_marlin_model(model, get_gpu(gpu), engine) is model
