"""vLLM budget rules by release: defaults, CUDA graphs, block counts and logged capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.vllm_budget import moe_scratch_persists
from kvscope.plan.vllm_sampler import sampler_fp32_copies
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import Case, load_cases, offline_hub

H100 = get_gpu("H100")
LLAMA = load_model("meta-llama/Llama-3.1-8B")


def vllm(version: str = "0.19.0", **kw):  # type: ignore[no-untyped-def]
    return EngineConfig(engine="vllm", engine_version=version, **kw)


@pytest.mark.parametrize(
    ("model", "kv", "avail_gib", "tokens"),
    # "Available KV cache memory" -> "GPU KV cache size" pairs from vLLM 0.19 logs.
    [
        ("meta-llama/Llama-3.1-8B", "auto", 58.11, 476_016),
        ("meta-llama/Llama-3.1-8B", "fp8", 58.11, 952_032),
        ("deepseek-ai/DeepSeek-V2-Lite", "auto", 43.61, 1_505_552),
        ("Qwen/Qwen2.5-7B-Instruct", "auto", 58.53, 1_096_000),
    ],
)
def test_tokens_from_available_memory(model: str, kv: str, avail_gib: float, tokens: int) -> None:
    eng = vllm(kv_cache_dtype=kv, max_model_len=8192, kv_cache_memory_bytes=int(avail_gib * GIB))
    plan = plan_memory(load_model(model), H100, Parallelism(), eng)
    # The log rounds the GiB figure to 0.01, i.e. +-0.005 GiB of blocks.
    assert plan.kv_tokens == pytest.approx(tokens, rel=0.0002)


def test_budget_is_a_fraction_of_total_memory() -> None:
    plan = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=0.95))
    assert plan.budget_gib == pytest.approx(75.23, abs=0.01)  # logged "requested memory"


def test_cudagraph_estimate_subtracted_from_020() -> None:
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to "0" in 0.19.1 and "1" in 0.20.0.
    util = {"gpu_memory_utilization": 0.9}
    old = plan_memory(LLAMA, H100, Parallelism(), vllm("0.19.1", **util))
    new = plan_memory(LLAMA, H100, Parallelism(), vllm("0.20.0", **util))
    forced = plan_memory(LLAMA, H100, Parallelism(), vllm("0.20.0", cudagraph_memory=False, **util))
    assert not old.cudagraph_subtracted and new.cudagraph_subtracted
    assert new.kv_cache_gib < old.kv_cache_gib
    assert forced.kv_cache_gib == pytest.approx(old.kv_cache_gib, abs=1e-6)


def test_default_utilization_rises_to_092_in_020() -> None:
    # CacheConfig.gpu_memory_utilization: 0.9 in 0.19.1, 0.92 in 0.20.0 (and 0.31's logs).
    assert plan_memory(LLAMA, H100, Parallelism(), vllm("0.19.1")).budget_fraction == 0.9
    assert plan_memory(LLAMA, H100, Parallelism(), vllm("0.20.0")).budget_fraction == 0.92


@pytest.mark.parametrize(
    ("version", "flashinfer", "copies"),
    [
        ("0.7.1", None, 9),  # V0 sorts too (``_apply_top_k_top_p``) unless FlashInfer is set
        ("0.7.2", True, 3),  # V0 with FlashInfer: fp32 logits, probabilities, log-probs
        ("0.10.1", None, 1),  # V1 uses FlashInfer when installed until 0.11
        ("0.10.2", False, 9),  # ... else sorts the vocabulary (PyTorch's segmented sort)
        ("0.11.0", None, 1),
        ("0.11.1", None, 9),  # FlashInfer opt-in from 0.11.1 (PR #26859): the sort again
        ("0.11.1", True, 1),
        ("0.16.0", None, 9),
        ("0.17.0", None, 3),  # the Triton top-k/top-p kernel (PR #33538) replaces the sort
        ("0.19.0", None, 3),
        ("0.19.0", True, 1),
    ],
)
def test_sampler_widths_follow_release_and_flashinfer(
    version: str, flashinfer: bool | None, copies: int
) -> None:
    eng = vllm(version, flashinfer_sampler=flashinfer)
    assert sampler_fp32_copies(eng) == copies


def test_v0_driver_alone_samples_so_its_blocks_set_the_count() -> None:
    # vllm#13061 (0.7.2 by its log lines model_runner.py:1115, multiproc_worker_utils.py:124;
    # V0, TP2 on RTX 4090, chunked prefill at 2048 tokens, 256 sequences): a worker logs 0.19 GiB of
    # activation and 8.69 GiB for the KV cache, yet the executor keeps 81,536 tokens
    # (5,096 blocks of 1.5 MiB, 7.46 GiB): the other rank, the driver, peaked 1.22 GiB
    # higher. Only the driver runs the sampler, whose 256 x 152,064 sort that difference is.
    case = {c.id: c for c in load_cases()}["gh13061-4090-tp2"]
    with offline_hub():
        model = load_model(case.row["model"])
    peak = activation_peak(model, Parallelism(tp=2), 2048, 256, sampler_fp32_copies=9)
    logged_gap = 8.69 - 81_536 * 98_304 / GIB
    assert (peak.sampler - peak.layer_peak) / GIB == pytest.approx(logged_gap, abs=0.05)
    assert case.plan().kv_tokens == pytest.approx(81_536, rel=0.05)


@pytest.mark.parametrize(("row", "logged_gib"), [("0.15", 5.64), ("0.16", 5.64), ("0.17", 2.23)])
def test_qwen3_14b_profiling_peak_follows_the_sort_then_the_triton_kernel(
    row: str, logged_gib: float
) -> None:
    # jgchn/llm-d-planner version sweep, Qwen3-14B on one H100 with the same flags: the run
    # records log a 5.64 GiB profiling peak on 0.15/0.16 (1,024 x 151,936 logits sorted)
    # and 2.23 GiB on 0.17 (Triton masking); the sort's 9 fp32 widths are 3.48 GiB of it.
    case = {c.id: c for c in load_cases()}[f"llmd-qwen3-14b-{row}"]
    assert case.plan().activation_peak_logged_gib == pytest.approx(logged_gib, abs=0.1)


@pytest.mark.parametrize(
    ("model", "gpu", "version", "persists"),
    [
        ("Qwen/Qwen3-30B-A3B", "H100", "0.19.0", True),  # modular kernel, WorkspaceManager
        ("Qwen/Qwen3-30B-A3B", "H100", "0.11.1", False),  # fused_experts called directly
        ("deepseek-ai/DeepSeek-V3", "H100", "0.11.1", True),  # block fp8: DeepGEMM's kernel
        ("deepseek-ai/DeepSeek-V3", "L40S", "0.11.1", False),
        ("moonshotai/Kimi-K2.5", "H100", "0.20.0", False),  # WNA16: fused_marlin_moe direct
        ("meta-llama/Llama-3.1-8B", "H100", "0.11.1", True),  # no MoE
        # MXFP4 on Hopper's Triton path: triton_kernel_moe_forward allocates per call
        ("openai/gpt-oss-20b", "H100", "0.19.0", False),
        ("openai/gpt-oss-20b", "H100", "0.14.0", False),
        ("openai/gpt-oss-20b", "A100-SXM-80GB", "0.19.0", True),  # Marlin, modular
    ],
)
def test_moe_scratch_persists_by_release_and_kernel(
    model: str, gpu: str, version: str, persists: bool
) -> None:
    with offline_hub():
        spec = load_model(model)
    assert moe_scratch_persists(spec, vllm(version), get_gpu(gpu)) is persists


def test_gpt_oss_logged_peak_is_the_sampler_pass_on_hopper() -> None:
    # jgchn/llm-d-planner accuracy/results/v0.19.0/results_raw.csv: gpt-oss-20b on H100 logs
    # 2.87 GiB at TP1 and TP2 (the sampler pass over 1,024 x 201,088 with the Triton buffer);
    # with data parallelism the monolithic class declines and the modular workspace persists
    cases = {c.id: c for c in load_cases()}
    for row in ("llmd-gptoss20b", "llmd-gptoss20b-tp2"):
        assert abs(cases[row].plan().activation_peak_logged_gib - 2.87) < 0.01
    with offline_hub():
        spec = load_model("openai/gpt-oss-20b")
    assert moe_scratch_persists(spec, vllm("0.19.0"), get_gpu("H100"), dp=2)


@pytest.mark.parametrize(
    ("row", "logged_gib"),
    # the profiling peak each vLLM 0.10.2 start logged; the MoE scratch held under the
    # sampler's sort would add 0.39 and 0.21 GiB
    [("h200-qwen3-next-80b-tp2-0.10.2", 5.58), ("vllm-l40s-qwen3-235b-fp8-tp8", 1.40)],
)
def test_direct_fused_moe_scratch_is_gone_by_the_sampler(row: str, logged_gib: float) -> None:
    case = {c.id: c for c in load_cases()}[row]
    assert case.plan().activation_peak_gib == pytest.approx(logged_gib, abs=0.15)


def test_kimi_k25_marlin_experts_on_h20_under_vllm_019() -> None:
    # pegainfer's Kimi-K2.5 fixture (vLLM 0.19.0 LLM(), 8x H20-3e, eager): 770,416 tokens.
    # The WNA16 experts' Marlin scratch is freed before the sampler runs; held, it would
    # cost 0.94 GiB a rank (4.4 % of the pool).
    case = {c.id: c for c in load_cases()}["pegainfer-kimi-k25-h20-141gb-tp8-llm-eager"]
    assert case.plan().kv_tokens == pytest.approx(770_416, rel=0.015)


def test_kimi_k2_thinking_recipe_on_vllm_0111_sorts_the_vocabulary() -> None:
    # vllm-project/recipes moonshotai/Kimi-K2-Think.md (#115), 8x H200 TP8, a 0.11.1-line
    # nightly of 2025-11-06 at its defaults: "Available KV cache memory: 46.80 GiB". From
    # 0.11.1 the profiling sampler sorts 1,024 x 163,840 fp32 logits unless FlashInfer is
    # opted in (topk_topp_sampler.py of the 0.11.1 wheel); planning FlashInfer's single copy
    # leaves 3.8 GiB too much for KV.
    case = {c.id: c for c in load_cases()}["recipes-kimi-k2-thinking-h200-tp8"]
    assert case.plan().kv_cache_gib == pytest.approx(46.80, rel=0.01)
    flashinfer = Case({**case.row, "flashinfer_sampler": "1"}).plan().kv_cache_gib
    assert flashinfer > 46.80 * 1.07


def test_minimax_m25_fp8_tp4_on_vllm_0151_sorts_the_vocabulary() -> None:
    # voipmonitor/rtx6kpro models/minimax-m25.md, 4x RTX PRO 6000 at vLLM's defaults:
    # "Available KV cache memory: 23.62 GiB", 399,424 tokens. The start is of 2026-02-13 from
    # `uv pip install vllm`, PyPI's 0.15.1: its profiling sampler sorts 1,024 x 200,064 fp32
    # logits (topk_topp_sampler.py of the 0.15.1 wheel), 7.3 GiB a rank. The Triton top-k /
    # top-p kernel of 0.17 would leave 4.6 GiB too much for KV (+19.6 % tokens).
    case = {c.id: c for c in load_cases()}["rtx6kpro-minimax-m25-fp8-tp4"]
    assert case.row["version"] == "0.15.1"
    plan = case.plan()
    # 1.5 %: the MoE scratch at the engine's buffer shapes (a rank's 384-wide expert slice
    # padded to the 3,072 hidden size, kvscope.plan.activation.moe_scratch_width) plans
    # 0.24 GiB more than the (2 I + h) rule did; the sort it pins is 4.6 GiB
    assert plan.kv_cache_gib == pytest.approx(23.62, rel=0.015)
    assert plan.kv_tokens == pytest.approx(399_424, rel=0.015)
    triton = Case({**case.row, "version": "0.17.0"}).plan()
    assert triton.kv_cache_gib > 23.62 + 4.0


def test_logged_tokens_rule_by_version() -> None:
    # Not block-aligned max_model_len: >= 0.21 logs int(concurrency x L), earlier blocks x 16.
    old = plan_memory(LLAMA, H100, Parallelism(), vllm("0.19.0", max_model_len=10_001))
    new = plan_memory(
        LLAMA, H100, Parallelism(), vllm("0.33.0", max_model_len=10_001, cudagraph_memory=False)
    )
    assert old.kv_tokens == old.num_gpu_blocks * 16
    assert new.kv_tokens == int(new.num_gpu_blocks / 626 * 10_001)
    assert new.kv_tokens < new.num_gpu_blocks * 16


def test_pipeline_stages_take_the_minimum_block_count() -> None:
    plan = plan_memory(LLAMA, H100, Parallelism(pp=4), vllm())
    assert plan.num_gpu_blocks == min(r.num_gpu_blocks for r in plan.ranks)
    assert len(plan.ranks) == 4


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 0.99), st.floats(0.5, 0.99))
def test_more_memory_never_means_fewer_tokens(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    p_lo = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=lo))
    p_hi = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=hi))
    assert p_hi.kv_tokens >= p_lo.kv_tokens
    assert p_hi.num_gpu_blocks * p_hi.block_bytes <= p_hi.kv_cache_gib * GIB + 1


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]))
def test_mla_latent_is_not_split_by_tp(tp: int) -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    plan = plan_memory(v3, get_gpu("H200"), Parallelism(tp=max(tp, 8)), vllm())
    assert plan.kv_bytes_per_token == 61 * 576 * 2


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(
        ["meta-llama/Llama-3.1-70B", "Qwen/Qwen2.5-72B-Instruct", "mistralai/Mixtral-8x7B-v0.1"]
    ),
    st.sampled_from([(2, 4), (4, 8), (2, 8)]),
)
def test_more_tp_never_shrinks_the_per_gpu_pool(name: str, tps: tuple[int, int]) -> None:
    # Weights and (while kv_heads >= tp) the KV heads both split, so tokens per GPU grow.
    model = load_model(name)
    eng = vllm(max_model_len=8192)
    small, large = (plan_memory(model, H100, Parallelism(tp=t), eng) for t in tps)
    assert large.kv_tokens >= small.kv_tokens


@settings(max_examples=20, deadline=None)
@given(st.integers(1000, 200_000))
def test_021_token_figure_is_concurrency_times_length(length: int) -> None:
    plan = plan_memory(LLAMA, H100, Parallelism(), vllm("0.33.0", max_model_len=length))
    assert plan.kv_tokens == int(plan.max_concurrency * length)
    assert plan.kv_tokens <= plan.num_gpu_blocks * plan.block_size


def test_logged_activation_holds_the_graph_estimate_from_027() -> None:
    # vLLM 0.27+ prints "peak activation" = transient peak + applied CUDA-graph estimate:
    # Llama-3.1-8B on an A100 80GB PCIe, 0.31.0 defaults, logs 1.44 GiB (RESULTS.md row
    # vllm-a100pcie-llama8b-0.31); before 0.27 the figure is the profiling pass alone.
    a100 = get_gpu("A100-PCIe-80GB")
    new = plan_memory(LLAMA, a100, Parallelism(), vllm("0.31.0"))
    assert new.activation_peak_logged_gib == pytest.approx(1.44, abs=0.15)
    assert new.activation_peak_logged_gib == pytest.approx(
        new.activation_peak_gib + new.cudagraph_gib
    )
    old = plan_memory(LLAMA, a100, Parallelism(), vllm("0.26.0"))
    assert old.activation_peak_logged_gib == old.activation_peak_gib


@pytest.mark.parametrize("version", ["0.11.1", "0.33.0"])
def test_decode_context_parallelism_multiplies_the_logged_capacity(version: str) -> None:
    # vLLM keeps the available memory and the blocks, and logs DCP times the tokens: the
    # Kimi-K2-Thinking recipe's TP8 and TP8+DCP8 starts on H200 both log 46.80 GiB and
    # 715,072 / 5,721,088 tokens (vllm-project/recipes moonshotai/Kimi-K2-Think.md).
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    h200, par = get_gpu("H200"), Parallelism(tp=8)
    one, eight = (
        plan_memory(v3, h200, par, vllm(version, decode_context_parallel_size=d)) for d in (1, 8)
    )
    assert eight.kv_cache_gib == one.kv_cache_gib
    assert eight.num_gpu_blocks == one.num_gpu_blocks
    assert eight.max_concurrency == pytest.approx(8 * one.max_concurrency)
    assert abs(eight.kv_tokens - 8 * one.kv_tokens) <= 8


def test_decode_context_parallelism_is_checked() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    with pytest.raises(KvscopeError, match="must divide --tensor-parallel-size 8"):
        plan_memory(v3, get_gpu("H200"), Parallelism(tp=8), vllm(decode_context_parallel_size=3))
    with pytest.raises(KvscopeError, match="vLLM's flag"):
        EngineConfig(engine="sglang", decode_context_parallel_size=2)
    with pytest.raises(KvscopeError):
        vllm(decode_context_parallel_size=0)
