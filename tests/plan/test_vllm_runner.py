"""Which model runner vLLM starts a model on, and what the V2 runner's profiling leaves out.

Engine facts: ``VllmConfig.use_v2_model_runner`` and ``_is_default_v2_model_runner_model``
(vllm/config/vllm.py of the 0.22.0-0.29.0 wheels) and the V2 runner's ``profile_cudagraph_memory``
/ ``_dummy_sampler_run`` (vllm/v1/worker/gpu/model_runner.py of 0.27.0). Published figures: the
vLLM 0.24.0 start of github.com/dcstang/eagle3-spec-dec (logs/run_all_20260701_134859.log:
"Using V2 Model Runner", no "Estimated CUDA graph memory" line) and a vLLM 0.27.1 start of
Qwen3-32B on two RTX PRO 6000 whose V2-runner line ("Model loading took 30.59 GiB and")
matches the 0.27.0 and 0.27.1 wheels' ``model_runner.py:329``.
"""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import SpeculativeDecoding, parse_vllm
from kvscope.plan.vllm_budget import sampler_fp32_copies
from kvscope.plan.vllm_runner import graphs_profiled, greedy_dummy_sampler, runs_v0, runs_v2
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import load_cases, offline_hub, rel_err

H100 = get_gpu("H100")
LLAMA = load_model("meta-llama/Llama-3.1-8B")
MIXTRAL = load_model("mistralai/Mixtral-8x7B-v0.1")
BASELINE = "eagle3lab-h100-qwen3-8b-0.24"
QWEN32_TP2 = "rtxpro6000-qwen3-32b-tp2-u0426-0.27"


def vllm(version: str, **kw):  # type: ignore[no-untyped-def]
    return EngineConfig(engine="vllm", engine_version=version, **kw)


@pytest.mark.parametrize(
    ("version", "llama", "mixtral"),
    [
        # 0.22.0 lists Qwen3 only; 0.23.0 adds Llama and Mistral (dense, unquantized)
        ("0.21.1", False, False),
        ("0.22.0", False, False),
        ("0.23.0", True, False),
        ("0.24.0", True, False),
        # 0.25.0-0.28.0: every non-MoE model, MoE ones only from the list
        ("0.26.0", True, False),
        ("0.28.0", True, False),
        # 0.29.0: no list
        ("0.29.0", True, True),
        ("0.33.0", True, True),
    ],
)
def test_default_runner_by_release(version: str, llama: bool, mixtral: bool) -> None:
    assert runs_v2(LLAMA, vllm(version), H100) is llama
    assert runs_v2(MIXTRAL, vllm(version), H100) is mixtral


def test_drafters_and_platforms_the_v2_runner_refuses() -> None:
    ngram = SpeculativeDecoding(method="ngram", num_speculative_tokens=3, verify_tokens=4)
    assert not runs_v2(LLAMA, vllm("0.27.0", speculative=ngram), H100)
    eagle3 = SpeculativeDecoding(method="eagle3", num_speculative_tokens=2, verify_tokens=3)
    assert runs_v2(LLAMA, vllm("0.27.0", speculative=eagle3), H100)
    # ROCm's lists are not read: the V1 runner is kept there
    assert not runs_v2(LLAMA, vllm("0.27.0"), get_gpu("MI300X"))


def test_v2_terms_hold_only_before_029() -> None:
    for version in ("0.24.0", "0.27.0", "0.28.0"):
        assert not graphs_profiled(LLAMA, vllm(version), H100)
        assert greedy_dummy_sampler(LLAMA, vllm(version), H100)
    assert graphs_profiled(MIXTRAL, vllm("0.27.0"), H100)
    assert graphs_profiled(LLAMA, vllm("0.29.0"), H100)
    assert not greedy_dummy_sampler(LLAMA, vllm("0.31.0"), H100)


def test_the_v2_profile_leaves_the_graphs_and_the_fp32_sampler_out() -> None:
    """Same model and flags on the V1 (0.22, Qwen3 only) and V2 (0.24) runner: the
    V2 plan takes no graph estimate and a smaller sampler peak, so more KV."""
    v1 = plan_memory(LLAMA, H100, Parallelism(), vllm("0.22.0"))
    v2 = plan_memory(LLAMA, H100, Parallelism(), vllm("0.24.0"))
    assert v1.cudagraph_gib > 0.5 and v2.cudagraph_gib == 0.0
    assert v2.activation_peak_gib < v1.activation_peak_gib
    assert v2.kv_cache_gib > v1.kv_cache_gib


def test_published_v2_starts_land_within_five_percent() -> None:
    with offline_hub():
        cases = {c.id: c for c in load_cases()}
        baseline = cases[BASELINE]
        plan = baseline.plan()
        logged = baseline.num("kv_tokens")
        assert logged is not None
        assert plan.cudagraph_gib == 0.0
        assert rel_err(plan.kv_tokens, logged) < 0.01
        # two PCIe GPUs with custom all-reduce: NCCL's figure, not the NVLink 2.1 GiB, beside
        # the V2 sampler's tables (kvscope.plan.v2_sampler_buffers: 1,024 rows, ~0.63 GiB)
        tp2 = cases[QWEN32_TP2].plan()
        assert 0.25 + 0.6 < tp2.non_torch_gib < 0.25 + 0.65
        assert tp2.cudagraph_gib == 0.0


def test_034_has_only_the_v2_runner() -> None:
    # the 0.34.0 wheel holds no vllm/v1/worker/gpu_model_runner.py: n-gram drafters and ROCm
    # starts, which 0.33 sends back to V1, run the V2 runner too
    ngram = parse_vllm('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')
    assert not runs_v2(LLAMA, vllm("0.33.0", speculative=ngram), H100)
    assert runs_v2(LLAMA, vllm("0.34.0", speculative=ngram), H100)
    assert not runs_v2(LLAMA, vllm("0.33.0"), get_gpu("MI300X"))
    assert runs_v2(LLAMA, vllm("0.34.0"), get_gpu("MI300X"))


@pytest.mark.parametrize(
    ("version", "gpu", "v0"),
    [
        ("0.7.2", "H100", True),  # every start before 0.8 is V0
        ("0.8.2", "T4", True),  # "Compute Capability < 8.0 ... Falling back to V0" (0.8.2)
        ("0.9.2", "V100", True),  # the same oracle in the 0.9.2 wheel
        ("0.8.2", "A100", False),  # Ampere runs V1
        ("0.9.2", "RTX-4090", False),
        ("0.10.2", "T4", False),
        ("0.20.0", "T4", False),
    ],
)
def test_pre_ampere_starts_of_08_and_09_fall_back_to_v0(version: str, gpu: str, v0: bool) -> None:
    assert runs_v0(vllm(version), get_gpu(gpu)) is v0
    # the V0 fallback profiles with V0's sorting sampler (9 fp32 widths); V1 before 0.11.1
    # samples through FlashInfer by default (1), 0.20 through the Triton kernel (3)
    copies = sampler_fp32_copies(vllm(version), get_gpu(gpu))
    assert copies == (9 if v0 else 3 if version == "0.20.0" else 1)


def test_v0_fallback_on_a_colab_t4_sizes_the_logged_pool() -> None:
    # The Hugging Face cookbook's unsloth start of Llama-3.2-3B on a T4 (vLLM 0.8.2, V0 by the
    # compute-capability oracle) logs 1.09 GiB of non-KV memory beside the 6.02 GiB of weights
    # (0.90 activation peak, 0.05 non-torch) and 3,637 blocks; the V1 sampler width (FlashInfer,
    # one fp32 copy) plans 0.52 GiB and 6.9 % too many tokens, V0's sort within 5 %.
    case = {c.id: c for c in load_cases()}["hfcookbook-t4-unsloth-llama32-3b-v0-0.8.2"]
    plan = case.plan()
    assert plan.activation_peak_gib == pytest.approx(1.0, abs=0.05)
    assert rel_err(plan.kv_tokens, 3637 * 16) <= 0.05
