"""SGLang on ROCm keeps the WNA16 experts' index tensors (``CompressedTensorsWNA16TritonMoE``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.plan.log_cases import offline_hub

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_budget import rocm_wna16_index_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

K25 = "moonshotai/Kimi-K2.5"


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, ModelSpec]]:
    with offline_hub():
        yield {n: load_model(n) for n in (K25, "deepseek-ai/DeepSeek-V3")}


def _index(model: ModelSpec, gpu: str, version: str, par: Parallelism) -> float:
    eng = EngineConfig(engine="sglang", engine_version=version)
    return rocm_wna16_index_bytes(model, get_gpu(gpu), par, eng, tuple(range(model.num_layers)))


def test_index_tensors_follow_create_weights_shapes(models: dict[str, ModelSpec]) -> None:
    # Kimi K2.5 at TP8: 60 MoE layers x 384 experts x int32 x (2 x hidden 7168 for w13's
    # g_idx and sort indices + 2 x per-rank intermediate 2048 / 8 for w2's).
    got = _index(models[K25], "MI355X", "0.5.9", Parallelism(tp=8))
    assert got == 60 * 384 * 4 * 2 * (7168 + 256) == 1_368_391_680
    # Under expert parallelism each rank keeps 384 / 8 experts at full width.
    ep = _index(models[K25], "MI355X", "0.5.9", Parallelism(tp=8, ep=True))
    assert ep == 60 * 48 * 4 * 2 * (7168 + 2048)


@pytest.mark.parametrize(
    ("name", "gpu", "version"),
    [
        (K25, "H200", "0.5.9"),  # CUDA: the Marlin path swaps them for empty tensors
        (K25, "MI355X", "0.5.8"),  # before the ROCm Triton WNA16 MoE existed
        ("deepseek-ai/DeepSeek-V3", "MI300X", "0.5.9"),  # fp8 experts, no WNA16 scheme
    ],
)
def test_no_index_tensors_elsewhere(
    models: dict[str, ModelSpec], name: str, gpu: str, version: str
) -> None:
    assert _index(models[name], gpu, version, Parallelism(tp=8)) == 0.0


def test_mi355x_kimi_k25_weights_match_the_log(models: dict[str, ModelSpec]) -> None:
    # ajith-sirra-amd/Issues Kimi-K2.5-MI355X-SGLANG-ERROR.md: "Load weight end ... mem
    # usage=73.58 GB" per rank at TP8; without the index tensors the plan was 71.43 (-2.9 %).
    eng = EngineConfig(engine="sglang", engine_version="0.5.9")
    plan = plan_memory(models[K25], get_gpu("MI355X"), Parallelism(tp=8), eng)
    assert plan.weights_gib == pytest.approx(73.58, rel=0.015)
