"""A later pipeline stage's receive buffer (:mod:`kvscope.plan.pp_buffers`): its size, and the
releases and runners whose profiler subtracts it, against the unpacked wheels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.pp_buffers import intermediate_tensor_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import DATA

GIB = 1 << 30
#: Qwen/Qwen3-32B's architecture keys (see tests/plan/data/SOURCES.md).
QWEN32 = str(DATA / "configs" / "qwen3-32b.json")
WHEELS = ("/tmp/vllm0.22.0", "/tmp/vllm025", "/tmp/vllm0.27.0", "/tmp/vllm031")


@pytest.mark.parametrize("root", WHEELS)
def test_where_the_runners_make_it(root: str) -> None:
    """V1 makes the buffer in ``_dummy_run`` (inside the profiling pass), V2 in ``load_model``
    (before it), both sized ``max_num_tokens``; the decoders' factory takes two keys."""
    v1, v2 = (
        Path(root, "vllm/v1/worker/gpu_model_runner.py"),
        Path(root, "vllm/v1/worker/gpu/model_runner.py"),
    )
    if not v1.exists():
        pytest.skip(f"vLLM wheel not unpacked at {root}")
    for path, method in ((v1, "_dummy_run"), (v2, "load_model")):
        text = path.read_text()
        body = text[text.index(f"def {method}(") :]
        body = body[: body.index("\n    def ", 1)]
        assert re.search(
            r"make_empty_intermediate_tensors\(\s*batch_size=self\.max_num_tokens", body
        )
    llama = Path(root, "vllm/model_executor/models/llama.py").read_text()
    assert re.search(r'factory\(\s*\["hidden_states", "residual"\]', llama)


def test_size_and_counting_by_release() -> None:
    qwen, gpu = load_model(QWEN32), get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
    at27 = EngineConfig(engine_version="0.27.0")  # dense: V2 runner
    assert intermediate_tensor_bytes(qwen, at27, gpu, 8192, False) == 2 * 8192 * 5120 * 2
    assert intermediate_tensor_bytes(qwen, at27, gpu, 8192, True) == 0.0  # the first stage
    # V2 at 0.25 makes it before the pass, and the 0.25 profiler does not count it
    assert (
        intermediate_tensor_bytes(qwen, EngineConfig(engine_version="0.25.0"), gpu, 8192, False)
        == 0.0
    )
    moe = load_model("mistralai/Mixtral-8x7B-v0.1")  # MoE, V1 at 0.25: inside the pass
    assert (
        intermediate_tensor_bytes(moe, EngineConfig(engine_version="0.25.0"), gpu, 8192, False) > 0
    )
    assert (
        intermediate_tensor_bytes(moe, EngineConfig(engine_version="0.21.0"), gpu, 8192, False)
        == 0.0
    )


def test_the_last_stage_of_a_pp2_plan_pays_it() -> None:
    qwen, gpu = load_model(QWEN32), get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
    eng = EngineConfig(engine_version="0.27.0", gpu_memory_utilization=0.426, max_model_len=32768)
    first, last = plan_memory(qwen, gpu, Parallelism(pp=2), eng).ranks
    eng25 = EngineConfig(engine_version="0.25.0", gpu_memory_utilization=0.426, max_model_len=32768)
    first25, last25 = plan_memory(qwen, gpu, Parallelism(pp=2), eng25).ranks
    # 0.27 subtracts the buffer (0.156 GiB) and the sampler's tables (~0.63 GiB) on the last
    # stage; both stages trade the 0.25 GiB non-torch of 0.19 for 0.27's 0.13, and 0.27's
    # torch 2.13 gives Blackwell a 32 MiB cuBLAS workspace where 0.25's had 8.125 MiB
    # (kvscope.plan.cublas_workspace): 23.875 MiB more profiled on the first stage
    base = first.kv_cache_gib - first25.kv_cache_gib
    assert base == pytest.approx(0.12 - 23.875 / 1024, abs=0.001)
    assert last25.kv_cache_gib + base - last.kv_cache_gib == pytest.approx(0.156 + 0.633, abs=0.01)
