"""hipBLASLt's libraries in vLLM's pool on AMD GPUs (:mod:`kvscope.plan.rocm_blas`).

Pinned to the published with/without pairs the figure comes from (Llama 2 7B on MI300X,
AUGMXNT's logs: TP1 20,186 vs 20,406 blocks of 8 MiB, TP8 167,700 vs 169,460 blocks of 1 MiB),
to the engines it does and does not touch, and to the one-line refusal on CUDA parts.
"""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import load_cases, offline_hub

CASES = {c.id: c for c in load_cases()}
with offline_hub():
    LLAMA2 = load_model("meta-llama/Llama-2-7b-chat-hf", "float16")
    QWEN = load_model("Qwen/Qwen3-8B")
MI300X = get_gpu("MI300X-192GB")


def _vllm(hipblaslt: bool, tp: int) -> int:
    eng = EngineConfig(
        engine="vllm", engine_version="0.6.3", gpu_memory_utilization=0.9, max_model_len=4096,
        hipblaslt=hipblaslt,
    )  # fmt: skip
    return plan_memory(LLAMA2, MI300X, Parallelism(tp=tp), eng).num_gpu_blocks


@pytest.mark.parametrize(
    ("tp", "with_lib", "without_lib"), [(1, 20186, 20406), (8, 167700, 169460)]
)
def test_the_pool_grows_by_the_logged_blocks_without_hipblaslt(
    tp: int, with_lib: int, without_lib: int
) -> None:
    # the same start logged with hipBLASLt and with TORCH_BLAS_PREFER_HIPBLASLT=0
    grown = _vllm(False, tp) - _vllm(True, tp)
    assert grown == pytest.approx(without_lib - with_lib, abs=2)


def test_the_rows_that_ran_rocblas_say_so_and_plan_without_the_library() -> None:
    case = CASES["vllm-mi300x-llama2-7b-tp8-nohipblaslt"]
    assert case.row["hipblaslt"] == "0"
    on = CASES["vllm-mi300x-llama2-7b-tp8"]  # the same start with hipBLASLt (build dev9)
    assert case.plan().num_gpu_blocks - on.plan().num_gpu_blocks == pytest.approx(1760, abs=2)


def test_sglang_sizes_its_pool_before_the_first_gemm() -> None:
    def kv(hipblaslt: bool) -> float:
        eng = EngineConfig(engine="sglang", mem_fraction_static=0.85, hipblaslt=hipblaslt)
        return plan_memory(QWEN, MI300X, Parallelism(), eng).kv_cache_gib

    assert kv(True) == kv(False)


def test_cuda_parts_refuse_no_hipblaslt() -> None:
    eng = EngineConfig(engine="vllm", hipblaslt=False)
    with pytest.raises(KvscopeError, match="ROCm setting"):
        plan_memory(LLAMA2, get_gpu("H100"), Parallelism(), eng)
    # and the default leaves a CUDA plan as it was: no library charged
    h100 = plan_memory(LLAMA2, get_gpu("H100"), Parallelism(), EngineConfig(engine="vllm"))
    assert h100.non_torch_gib * GIB < 0.5 * GIB
