"""vLLM 0.8-0.10.1 fall back to the V0 engine below compute capability 8.0 (vllm_v0_fallback)."""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig
from kvscope.plan.memory import plan_memory
from kvscope.plan.parallelism import Parallelism
from kvscope.plan.vllm_budget import resolve_defaults
from kvscope.plan.vllm_v0_fallback import runs_v0
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

LLAMA = load_model("meta-llama/Llama-3.1-8B")


@pytest.mark.parametrize(
    ("gpu", "version", "v0"),
    # the "Compute Capability < 8.0" branch of _is_v1_supported_oracle is in the 0.8.2,
    # 0.9.2, 0.10.0 and 0.10.1.1 wheels (vllm/engine/arg_utils.py) and not in 0.10.2's
    [
        ("T4", "0.7.3", True),
        ("A100-80GB", "0.7.3", True),
        ("T4", "0.8.2", True),
        ("V100-SXM2-32GB", "0.9.2", True),
        ("RTX-2080-Ti", "0.10.1.1", True),
        ("T4", "0.10.2", False),
        ("V100-SXM2-32GB", "0.15.1", False),
        ("A10", "0.8.2", False),
        ("L4", "0.9.2", False),
        ("MI300X", "0.9.2", False),
    ],
)
def test_v0_by_release_and_compute_capability(gpu: str, version: str, v0: bool) -> None:
    eng = EngineConfig(engine="vllm", engine_version=version)
    assert runs_v0(eng.version, get_gpu(gpu)) is v0


def test_a_v0_start_takes_v0_defaults() -> None:
    """On a T4 under 0.9.2 the serve defaults are V0's: 256 sequences and one full-length
    prompt profiled (8,192 tokens at an 8K context), not V1's 2,048-token chunks."""
    eng = EngineConfig(engine="vllm", engine_version="0.9.2", max_model_len=8192)
    d = resolve_defaults(LLAMA, get_gpu("T4"), eng)
    assert (d.v0, d.max_num_seqs, d.max_num_batched_tokens) == (True, 256, 8192)
    d1 = resolve_defaults(LLAMA, get_gpu("A10"), eng)
    assert (d1.v0, d1.max_num_batched_tokens) == (False, 2048)


def test_the_sorting_sampler_sits_in_the_v0_profile() -> None:
    """The same start on a T4 plans a larger profiling peak at 0.9.2 (V0, sorting sampler:
    9 fp32 vocabulary widths per sequence) than at 0.10.2 (V1, FlashInfer's one): nearly 7
    more widths of 256 x 128,256 x 4 B (the V1 start is bound by its layers, with the fitted
    0.12 GiB). The V0 peak is the sampler phase's: the logits and 9 widths, the pass's hidden
    state and torch's 8.125 MiB cuBLAS workspace on a T4 (kvscope.plan.sampler_phase)."""
    eng = dict(engine="vllm", max_model_len=2048, max_num_batched_tokens=2048, max_num_seqs=256)
    t4 = get_gpu("T4")
    v0 = plan_memory(LLAMA, t4, Parallelism(), EngineConfig(engine_version="0.9.2", **eng))
    v1 = plan_memory(LLAMA, t4, Parallelism(), EngineConfig(engine_version="0.10.2", **eng))
    widths = 256 * 128_256 * 4 / GIB
    sampler = 256 * 128_256 * (2 + 9 * 4) + 2048 * 4096 * 2 + 8.125 * 2**20
    assert v0.activation_peak_gib == pytest.approx(sampler / GIB, abs=1e-9)
    assert 6.5 * widths <= v0.activation_peak_gib - v1.activation_peak_gib <= 8 * widths
    assert v0.kv_tokens % v0.block_size == 0


def test_the_colab_t4_start_of_0_8_2() -> None:
    """huggingface/cookbook's Synthetic Data Kit notebook: Llama-3.2-3B-Instruct in float16 on
    a Colab T4 under vLLM 0.8.2 ('Falling back to V0') logs 3,637 blocks, 58,192 tokens, and a
    0.90 GiB activation peak at 192 sequences (row vold-t4-llama32-3b-sdk-0.8.2)."""
    case = case_by_id("vold-t4-llama32-3b-sdk-0.8.2")
    plan = case.plan()
    assert abs(plan.kv_tokens - 58_192) / 58_192 <= 0.05
    assert plan.activation_peak_gib == pytest.approx(0.90, rel=0.15)


@pytest.mark.parametrize(
    ("version", "gpu", "tp", "gib"),
    # V0 from 0.6.5 charges only the growth since its baseline snapshot (vllm PR #10511):
    # the TP1 logs print 0.01-0.13 GiB; 0.6.4 charged it all (0.35 GiB, vllm#10517)
    [
        ("0.7.2", "T4", 1, 0.08),
        ("0.9.2", "V100-SXM2-32GB", 1, 0.08),
        ("0.6.4", "RTX-3090", 1, 0.25),
        ("0.7.2", "A100-80GB", 2, 0.25),
        # V1 from 0.9.1 measures the same growth; below SM 9.0 it is the same 0.08 GiB
        # (kvscope.plan.vllm_collectives), on Hopper the 0.25 read on H100s
        ("0.9.2", "A100-80GB", 1, 0.08),
        ("0.9.2", "H100", 1, 0.25),
        # V1 0.8.0-0.9.0 charges the whole non-torch footprint, CUDA context included
        ("0.9.0", "A100-80GB", 1, 0.25),
    ],
)
def test_v0_non_torch_since_the_baseline(version: str, gpu: str, tp: int, gib: float) -> None:
    eng = EngineConfig(engine="vllm", engine_version=version, max_model_len=2048)
    plan = plan_memory(LLAMA, get_gpu(gpu), Parallelism(tp=tp), eng)
    assert plan.non_torch_gib == pytest.approx(gib)


def test_the_colab_t4_grpo_start_of_0_7_2() -> None:
    """Qwen2.5-1.5B-Instruct in float16 on a Colab T4 (14.56 GiB) under 0.7.2 at 0.5 of the
    GPU: 0.01 GiB of non-torch memory, 2.02 GiB of activation, 5,519 blocks (88,304 tokens)."""
    case = case_by_id("vold-t4-qwen25-15b-grpo-0.7.2")
    plan = case.plan()
    assert plan.activation_peak_gib == pytest.approx(2.02, rel=0.05)
    assert abs(plan.kv_tokens - 88_304) / 88_304 <= 0.05
