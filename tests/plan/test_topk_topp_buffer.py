"""The Triton top-k/top-p kernel's cached row buffer in vLLM's V1 profiling sampler pass
(kvscope.plan.topk_topp_buffer; vllm/v1/sample/ops/topk_topp_triton.py of 0.17.0-0.29.0)."""

from __future__ import annotations

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.topk_topp_buffer import triton_buffer_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

GIB = 2**30


def test_rows_follow_the_programs_and_the_compute_units() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    v = llama.vocab_size
    h100, t4 = get_gpu("H100"), get_gpu("T4")  # 132 and 40 SMs
    # min(next_power_of_2(min(num_sm, batch)), num_sm) rows of fp32
    assert triton_buffer_bytes(llama, h100, 1024) == 132 * v * 4
    assert triton_buffer_bytes(llama, h100, 100) == 128 * v * 4
    assert triton_buffer_bytes(llama, t4, 256) == 40 * v * 4
    assert triton_buffer_bytes(llama, t4, 24) == 32 * v * 4
    assert triton_buffer_bytes(llama, t4, 8) == 8 * v * 4
    assert triton_buffer_bytes(llama, t4, 7) == 0.0  # below 8 rows the sampler sorts
    assert 0.06 < triton_buffer_bytes(llama, h100, 1024) / GIB < 0.065


def _act(version: str, **kw: object) -> float:
    model = load_model("meta-llama/Llama-3.1-8B")
    eng = EngineConfig(
        engine="vllm", engine_version=version, max_model_len=8192, max_num_batched_tokens=2048, **kw
    )
    return plan_memory(model, get_gpu("H100"), Parallelism(), eng).activation_peak_gib


def test_only_the_v1_triton_path_holds_it() -> None:
    s, v = 1024, 128256  # the 0.19 default sequences on an H100, Llama 3's vocabulary
    buf = 132 * v * 4 / GIB
    # against FlashInfer's fused sampler (one fp32 copy, no Triton kernel): the Triton path
    # holds two more fp32 copies and the buffer
    triton = _act("0.19.0") - _act("0.19.0", flashinfer_sampler=True)
    assert abs(triton - (2 * s * v * 4 / GIB + buf)) < 1e-6
    # before 0.17 the sampler sorts the vocabulary (9 copies) and builds no buffer
    sort = _act("0.16.0") - _act("0.16.0", flashinfer_sampler=True)
    assert abs(sort - 8 * s * v * 4 / GIB) < 1e-6
