"""vLLM's hardware-tiered `vllm serve` batch defaults by release (EngineArgs.get_batch_defaults)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.plan.config import EngineConfig
from kvscope.plan.memory import plan_memory
from kvscope.plan.vllm_batch_defaults import serve_batch_defaults
from kvscope.plan.vllm_budget import resolve_defaults
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

LLAMA = load_model("meta-llama/Llama-3.1-8B")


def vllm(version: str, **kw):  # type: ignore[no-untyped-def]
    return EngineConfig(engine="vllm", engine_version=version, **kw)


@pytest.mark.parametrize(
    ("gpu", "version", "tokens", "seqs"),
    # Each case is one branch of get_batch_defaults in the wheel of that release
    # (vllm/engine/arg_utils.py): the >= 160 GiB branch is absent from 0.27.0 and present in
    # 0.28.0. The GB10 is small in every release: to 0.32 NVML's memory query raises on it and
    # the branch's `except` reads 0 bytes (NvmlCudaPlatform.get_device_total_memory,
    # vllm/platforms/cuda.py of 0.27.1; vllm#57378 logs "API=2048" on a GB10), from 0.33 `is_gb10`.
    [
        ("B200", "0.27.1", 8192, 1024),
        ("B200", "0.28.0", 16384, 1024),
        ("MI300X", "0.31.1", 16384, 1024),
        ("MI300X", "0.26.0", 8192, 1024),
        ("GB200", "0.33.0", 16384, 1024),
        ("H200", "0.33.0", 8192, 1024),
        ("H100", "0.28.0", 8192, 1024),
        ("A100-80GB", "0.33.0", 2048, 256),
        ("RTX-PRO-6000", "0.33.0", 8192, 1024),
        ("L40S", "0.28.0", 2048, 256),
        ("GB10", "0.21.1", 2048, 256),
        ("GB10", "0.32.0", 2048, 256),
        ("GB10", "0.33.0", 2048, 256),
        ("GB10", "0.34.0", 2048, 256),
        # The tier before get_batch_defaults, read in each wheel's vllm/engine/arg_utils.py:
        # 0.8.0-0.8.4 pick it by the CUDA name ("h100" / "h200"), so a 96 GB H20 and a B200
        # are small and a GH200 large; 0.8.0-0.8.3 cap sequences at 1024 on every GPU; 0.8.5
        # picks by memory (an 80 GB A100 is large), 0.9.0 keeps the A100 small (PR #17885).
        ("H20", "0.8.2", 2048, 1024),
        ("B200", "0.8.3", 2048, 1024),
        ("H20", "0.8.4", 2048, 256),
        ("GH200", "0.8.4", 8192, 1024),
        ("H100", "0.8.0", 8192, 1024),
        ("H20", "0.8.5", 8192, 1024),
        ("A100-80GB", "0.8.5", 8192, 1024),
        ("A100-80GB", "0.9.0", 2048, 256),
    ],
)
def test_serve_defaults_follow_the_release_tiers(
    gpu: str, version: str, tokens: int, seqs: int
) -> None:
    d = resolve_defaults(LLAMA, get_gpu(gpu), vllm(version))
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (tokens, seqs)


def test_flags_given_override_the_tier() -> None:
    d = resolve_defaults(
        LLAMA, get_gpu("B200"), vllm("0.28.0", max_num_batched_tokens=4096, max_num_seqs=64)
    )
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (4096, 64)


def test_the_larger_budget_reaches_the_plan() -> None:
    """On a B200 the 0.28 serve default doubles the profiled token budget, which shows in the
    activation term of the plan (same model, same flags, one release apart)."""
    b200 = get_gpu("B200")
    old = plan_memory(LLAMA, b200, engine=vllm("0.27.1", max_model_len=8192))
    new = plan_memory(LLAMA, b200, engine=vllm("0.28.0", max_model_len=8192))
    assert new.activation_peak_gib > old.activation_peak_gib
    assert new.kv_cache_gib < old.kv_cache_gib and new.max_num_batched_tokens == 16384


@settings(max_examples=200, deadline=None)
@given(
    gib=st.floats(min_value=8, max_value=400),
    minor=st.integers(min_value=8, max_value=40),
)
def test_budget_never_shrinks_as_memory_grows(gib: float, minor: int) -> None:
    """Invariant of every release's table: more device memory never lowers either default
    (A100 and GB10 aside, which the engine names), and no release before 0.28 goes past 8192."""
    base = get_gpu("H100")
    small = dataclasses.replace(base, memory_bytes=int(gib * GIB))
    large = dataclasses.replace(base, memory_bytes=int((gib + 50) * GIB))
    v = (0, minor, 0)
    lo, hi = serve_batch_defaults(small, v), serve_batch_defaults(large, v)
    assert hi[0] >= lo[0] and hi[1] >= lo[1]
    if v < (0, 28, 0):
        assert hi[0] <= 8192


def test_a_release_past_034_is_newer_than_the_modelled_ones() -> None:
    """0.34.0's sizing path is modelled (:mod:`kvscope.plan.vllm_extensible_kv`), so it plans
    without a caveat; a later release is planned with 0.34.0's rules and says so."""
    assert vllm("0.34.0").version_warnings() == ()
    assert vllm("0.33.0").version_warnings() == ()
    (note,) = vllm("0.35.0").version_warnings()
    assert "newer than the newest release kvscope models (0.34.0)" in note
    (sglang_note,) = EngineConfig(engine="sglang", engine_version="0.9.0").version_warnings()
    assert "extensible" not in sglang_note


@pytest.mark.parametrize(
    ("gpu", "version", "tokens", "seqs"),
    # UsageContext.LLM_CLASS, the offline LLM() class: 16384 where the server takes 8192 or
    # 16384, 8192 where it takes 2048; the same sequence cap (0.8.4, 0.9.0, 0.19.0, 0.28.0,
    # 0.33.0 wheels)
    [
        ("H100", "0.19.0", 16384, 1024),
        ("L40S", "0.19.0", 8192, 256),
        ("A100-80GB", "0.28.0", 8192, 256),
        ("B200", "0.28.0", 16384, 1024),
        ("B200", "0.27.1", 16384, 1024),
        ("H20", "0.8.4", 8192, 256),
        ("GB10", "0.33.0", 8192, 256),
    ],
)
def test_offline_llm_class_defaults(gpu: str, version: str, tokens: int, seqs: int) -> None:
    d = resolve_defaults(LLAMA, get_gpu(gpu), vllm(version, entrypoint="offline"))
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (tokens, seqs)
    serve = resolve_defaults(LLAMA, get_gpu(gpu), vllm(version))
    assert serve.max_num_seqs == seqs and serve.max_num_batched_tokens <= tokens


def test_defaulted_budgets_are_capped_from_012() -> None:
    # _set_default_max_num_seqs_and_batched_tokens_args (arg_utils.py, 0.12.0 on): a token
    # budget not given is at most max_num_seqs x max_model_len; a sequence cap not given is
    # at most the token budget. 0.11.0 has neither.
    h100 = get_gpu("H100")
    one = vllm("0.19.0", max_num_seqs=1, max_model_len=4096)
    assert resolve_defaults(LLAMA, h100, one).max_num_batched_tokens == 4096
    old = vllm("0.11.0", max_num_seqs=1, max_model_len=4096)
    assert resolve_defaults(LLAMA, h100, old).max_num_batched_tokens == 8192
    small = resolve_defaults(LLAMA, h100, vllm("0.19.0", max_num_batched_tokens=512))
    assert (small.max_num_batched_tokens, small.max_num_seqs) == (512, 512)
    assert (
        resolve_defaults(LLAMA, h100, vllm("0.11.0", max_num_batched_tokens=512)).max_num_seqs
        == 1024
    )


def test_offline_rows_reproduce_their_logged_budget() -> None:
    """Start-up logs of LLM() runs carry no batch flag; the rule gives the budget they log:
    LMCache's H200 probe at 0.35 x 141 GB logs 16384, its 2,048-token control with
    max_num_seqs=6 logs 12288 (= 6 x 2048, the 0.12+ cap), the L20 start 8192."""
    for row_id, logged in (
        ("lmcache-h200-qwen3-0.6b-probe-0.25.0", 16384),
        ("lmcache-h200-qwen2-vl-2b-2k-0.23.0", 12288),
        ("l20-qwen35-4b-llm-0.22", 8192),
        ("hsc-4x3090-qwen25-7b-tp1-0.8.4", 8192),
    ):
        case = case_by_id(row_id)
        assert case.row["entrypoint"] == "offline" and not case.row["max_num_batched_tokens"]
        assert case.plan().max_num_batched_tokens == logged, row_id
