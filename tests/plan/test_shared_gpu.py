"""GPU memory other processes hold at start (``--gpu-memory-in-use``), by engine and release
(:mod:`kvscope.plan.shared_gpu`), against the figures published logs and PRs print."""

from __future__ import annotations

from typing import Any

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.plan.shared_gpu import vllm_regime
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

from .log_cases import offline_hub

H100 = get_gpu("H100")
RTX3090 = get_gpu("RTX-3090")


def _model(name: str) -> ModelSpec:
    with offline_hub():
        return load_model(name)


def _vllm(model: str, version: str, in_use: float, **flags: Any) -> MemoryPlan:
    eng = EngineConfig(engine_version=version, gpu_memory_in_use_gib=in_use, **flags)
    return plan_memory(_model(model), H100, Parallelism(), eng)


def test_regimes_follow_the_releases_read() -> None:
    # worker.py at v0.6.3.post1 (drop from the worker's start), v0.6.4.post1 (non-torch =
    # total - free - torch), v0.6.5 / v0.7.2 (memory_profiling's baseline); V1 gpu_worker.py
    # at v0.8.0 and v0.9.0 (non-torch again), v0.9.1 (MemorySnapshot + the free-memory check)
    cases = {
        (0, 6, 3): "ignored",
        (0, 6, 4): "counted",
        (0, 6, 5): "baseline",
        (0, 7, 3): "baseline",
        (0, 8, 0): "counted",
        (0, 9, 0): "counted",
        (0, 9, 1): "checked",
        (0, 31, 0): "checked",
    }
    assert {v: vllm_regime(v) for v in cases} == cases


def test_sglang_m0_is_the_free_memory_the_docker_desktop_log_prints() -> None:
    # github.com/jerryzsj/my-deepseek-r1 README (SGLang 0.4.2 on an RTX 3090 under Docker
    # Desktop): "Load weight begin. avail mem=22.76 GB", "K size: 2.82 GB, V size: 2.82 GB",
    # max_total_num_tokens=105531, mem_fraction_static 0.88. Other processes held 0.55 GiB.
    model = _model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    flags: dict[str, Any] = dict(engine="sglang", engine_version="0.4.2", mem_fraction_static=0.88,
                 max_model_len=131072, max_num_batched_tokens=2048)  # fmt: skip
    bare = plan_memory(model, RTX3090, Parallelism(), EngineConfig(**flags))
    eng = EngineConfig(gpu_memory_in_use_gib=0.55, **flags)
    shared = plan_memory(model, RTX3090, Parallelism(), eng)
    assert shared.gpu_memory_gib - shared.non_torch_gib == pytest.approx(22.76, abs=0.01)
    assert shared.kv_cache_gib == pytest.approx(2 * 2.82, rel=0.02)
    assert shared.kv_tokens == pytest.approx(105_531, rel=0.02)
    # the pool loses mem_fraction_static x the memory held by others (the weights stay)
    lost = (bare.kv_tokens - shared.kv_tokens) * shared.kv_bytes_per_token
    assert lost == pytest.approx(0.88 * 0.55 * GIB, abs=shared.kv_bytes_per_token)
    assert shared.weights_gib == bare.weights_gib


def test_vllm_064_charges_others_memory_as_non_torch() -> None:
    # vllm PR #10927, the "Before" run (main of 2024-12-05, V0, one H100, fp16, eager, L 8192):
    # initial_memory_usage 34.44 GiB against 29.30 GiB of weights, non_torch_memory 5.21 GiB,
    # kv_cache_size 35.42 GiB, "# GPU blocks: 5373"; 4.63 GiB of it held by other processes.
    flags: dict[str, Any] = dict(max_model_len=8192, enforce_eager=True)
    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V2-Lite-Chat", "float16")
    eng = EngineConfig(engine_version="0.6.4", gpu_memory_in_use_gib=4.63, **flags)
    plan = plan_memory(model, H100, Parallelism(), eng)
    assert plan.non_torch_gib == pytest.approx(5.21, abs=0.4)
    assert plan.kv_cache_gib == pytest.approx(35.42, rel=0.02)
    assert plan.num_gpu_blocks == pytest.approx(5373, rel=0.02)
    bare = plan_memory(model, H100, Parallelism(), EngineConfig(engine_version="0.6.4", **flags))
    assert bare.kv_cache_gib - plan.kv_cache_gib == pytest.approx(4.63)


@pytest.mark.parametrize("version", ["0.6.3", "0.6.5", "0.7.3", "0.9.1", "0.19.0"])
def test_releases_with_a_baseline_leave_the_cache_as_on_a_bare_gpu(version: str) -> None:
    # a few GiB held by others: below 1 - gpu_memory_utilization of the GPU, nothing refuses
    shared = _vllm("meta-llama/Llama-3.1-8B", version, 3.0, max_model_len=8192)
    bare = _vllm("meta-llama/Llama-3.1-8B", version, 0.0, max_model_len=8192)
    assert shared.fits and shared.kv_cache_gib == bare.kv_cache_gib
    assert shared.num_gpu_blocks == bare.num_gpu_blocks


def test_v1_before_0_9_1_runs_out_where_later_releases_start() -> None:
    # vllm PR #14419 / #19312: another process holds 70 % of the GPU and vLLM starts with
    # --gpu-memory-utilization 0.2. V1 then counted the other process as non-torch memory:
    # "ValueError: No available memory for the cache blocks"; from 0.9.1 it starts.
    in_use = 0.7 * H100.memory_bytes / GIB
    flags: dict[str, Any] = dict(gpu_memory_utilization=0.2, max_model_len=8192)
    before = _vllm("meta-llama/Llama-3.2-3B", "0.8.0", in_use, **flags)
    after = _vllm("meta-llama/Llama-3.2-3B", "0.9.1", in_use, **flags)
    assert not before.fits and "no memory is left for the KV cache" in (before.problem or "")
    assert after.fits and after.kv_cache_gib > 5


def test_v1_refuses_when_free_memory_is_below_the_request() -> None:
    # ovg-project/kvcached#29 (vLLM 0.9.2, Llama-3.1-8B, one H100): "Free memory on device
    # (59.32/79.15 GiB) on startup is less than desired GPU memory utilization (0.9, 71.24
    # GiB)"; 79.15 - 59.32 = 19.83 GiB in use, of which the worker's own CUDA context ~0.51.
    plan = _vllm("meta-llama/Llama-3.1-8B", "0.9.2", 19.32)
    assert not plan.fits
    problem = plan.problem or ""
    assert "refuses to start" in problem and "less than desired GPU memory utilization" in problem
    assert "(59.36/79.19 GiB" in problem and "(0.90, 71.27 GiB)" in problem


@pytest.mark.parametrize("version", ["0.9.1", "0.19.0", "0.31.0"])
def test_v1_refusal_is_exactly_free_below_requested(version: str) -> None:
    # free = total - in use - context (0.51 GiB on Hopper) against total x gmu
    edge = H100.memory_bytes * (1 - 0.9) / GIB - 0.51
    flags: dict[str, Any] = dict(max_model_len=8192, gpu_memory_utilization=0.9)
    assert _vllm("meta-llama/Llama-3.1-8B", version, edge - 0.01, **flags).fits
    assert not _vllm("meta-llama/Llama-3.1-8B", version, edge + 0.01, **flags).fits


def test_v0_with_a_baseline_runs_out_of_memory_allocating_the_cache() -> None:
    plan = _vllm("meta-llama/Llama-3.1-8B", "0.6.5", 20.0, max_model_len=8192)
    assert not plan.fits and "the cache allocation runs out of memory" in (plan.problem or "")


def test_in_use_must_be_less_than_the_gpu() -> None:
    with pytest.raises(KvscopeError, match=r"not less than the 79\.19 GiB"):
        _vllm("meta-llama/Llama-3.1-8B", "0.19.0", 80.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(KvscopeError, match="--gpu-memory-in-use"):
            EngineConfig(gpu_memory_in_use_gib=bad)
