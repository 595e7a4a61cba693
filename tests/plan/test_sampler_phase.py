"""The sampler phase's shape-free bytes read from the code (kvscope.plan.sampler_phase): torch's
cuBLAS workspace, the V1 runner's two S h b copies and the Triton top-k/top-p row buffer, in
place of the fitted 0.12 GiB that the layer phase keeps (kvscope.plan.activation)."""

from __future__ import annotations

import pytest

from kvscope.plan.activation import RUNTIME_BYTES, ActivationPeak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.cublas_workspace import cublas_workspace_bytes
from kvscope.plan.memory import plan_memory
from kvscope.plan.sampler_phase import triton_buffer_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

GIB = 2**30
MIB = 2**20


def test_cublas_workspace_by_compute_capability() -> None:
    # parseChosenWorkspaceSize (pytorch aten/src/ATen/cuda/CublasHandlePool.cpp)
    assert cublas_workspace_bytes(get_gpu("H100"), (0, 19, 0)) == 32 * MIB
    assert cublas_workspace_bytes(get_gpu("A100-SXM-80GB"), (0, 19, 0)) == 8.125 * MIB
    assert cublas_workspace_bytes(get_gpu("T4"), (0, 6, 6)) == 8.125 * MIB
    # Blackwell: 32 MiB under the torch 2.13 that 0.27 pins (pytorch PR #175344)
    assert cublas_workspace_bytes(get_gpu("B200"), (0, 26, 0)) == 8.125 * MIB
    assert cublas_workspace_bytes(get_gpu("B200"), (0, 27, 0)) == 32 * MIB


def test_triton_rows_follow_the_programs_and_the_compute_units() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    v = llama.vocab_size
    h100, t4 = get_gpu("H100"), get_gpu("T4")  # 132 and 40 SMs
    # min(next_power_of_2(min(num_sm, batch)), num_sm) rows of fp32
    assert triton_buffer_bytes(llama, h100, 1024) == 132 * v * 4
    assert triton_buffer_bytes(llama, h100, 100) == 128 * v * 4
    assert triton_buffer_bytes(llama, t4, 256) == 40 * v * 4
    assert triton_buffer_bytes(llama, t4, 24) == 32 * v * 4
    assert triton_buffer_bytes(llama, t4, 7) == 0.0  # below 8 rows the sampler sorts


def _act(version: str, gpu: str = "H100", **kw: object) -> float:
    model = load_model("meta-llama/Llama-3.1-8B")
    eng = EngineConfig(
        engine="vllm", engine_version=version, max_model_len=8192, max_num_batched_tokens=2048, **kw
    )
    return plan_memory(model, get_gpu(gpu), Parallelism(), eng).activation_peak_gib


def test_only_the_native_triton_path_holds_the_buffer() -> None:
    s, v = 1024, 128_256  # the 0.19 default sequences on an H100, Llama 3's vocabulary
    buf = 132 * v * 4 / GIB
    # against FlashInfer's fused sampler (one fp32 copy, no Triton kernel): the Triton path
    # holds two more fp32 copies and the buffer
    triton = _act("0.19.0") - _act("0.19.0", flashinfer_sampler=True)
    assert triton == pytest.approx(2 * s * v * 4 / GIB + buf, abs=1e-9)
    # before 0.17 the sampler sorts the vocabulary (9 copies) and builds no buffer
    sort = _act("0.16.0") - _act("0.16.0", flashinfer_sampler=True)
    assert sort == pytest.approx(8 * s * v * 4 / GIB, abs=1e-9)


def test_the_layer_phase_keeps_the_fitted_constant() -> None:
    act = ActivationPeak(8192, 1.0 * GIB, 0.5 * GIB, 0.2 * GIB, 0.0, 0.3 * GIB)
    assert act.total_bytes == 1.5 * GIB + RUNTIME_BYTES
    code = ActivationPeak(8192, 1.0 * GIB, 0.5 * GIB, 0.2 * GIB, 0.0, 0.3 * GIB, sampler_extra=0)
    assert code.total_bytes == act.total_bytes  # layer-bound: unchanged
    # sampler-bound: the code's bytes replace the constant there; held buffers stay in both
    small = (8192, 0.1 * GIB, 0.1 * GIB, 0.1 * GIB, 0.0, 2.0 * GIB)
    assert ActivationPeak(*small).total_bytes == 2.0 * GIB + RUNTIME_BYTES
    extra, held = 0.05 * GIB, 0.2 * GIB
    read = ActivationPeak(*small, sampler_extra=extra, held=held)
    assert read.total_bytes == pytest.approx(2.0 * GIB + extra + held)


@pytest.mark.parametrize(
    ("case_id", "logged"),
    [
        # jgchn/llm-d-planner accuracy/results/v0.19.0/results_raw.csv (commit 30ec05f):
        # Llama-3.1-8B-Instruct on one H100 at 8,192 tokens, 1,024 sequences, "torch peak
        # memory increase" 1.89 GiB: the sampler phase with the Triton buffer (0.061 GiB),
        # 32 MiB of cuBLAS workspace and 2 x 1,024 x 4,096 x 2 B of hidden rows
        ("llmd-llama8b", 1.89),
        # V0 0.6.6.post1 on a Colab T4 (the row's notes: "activation peak 1.44"): the sorting
        # sampler over 256 rows of Qwen's 151,936 vocabulary plus the T4's 8.125 MiB workspace
        ("vllm-t4-qwen25-05b-llm-defaults", 1.44),
    ],
)
def test_logged_sampler_bound_peaks(case_id: str, logged: float) -> None:
    case = case_by_id(case_id)
    assert abs(case.plan().activation_peak_logged_gib - logged) < 0.01
