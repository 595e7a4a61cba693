"""Issue #20 for the planner's inputs: every bad parallel size or engine flag is one error.

The checks live in :mod:`kvscope.plan.config` (``resolve_parallel``, ``Parallelism``,
``EngineConfig``) and in :func:`kvscope.plan.memory.plan_memory`, so ``plan``, ``simulate``
and the search all refuse the same inputs the same way.
"""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import (
    MAX_GPUS,
    MAX_TOKENS,
    EngineConfig,
    Parallelism,
    parse_version,
    resolve_parallel,
)
from kvscope.plan.memory import plan_memory
from kvscope.plan.search import search
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

LLAMA8 = load_model("llama-3.1-8b")
H100 = get_gpu("H100")


@pytest.mark.parametrize(
    ("num_gpus", "tp", "pp", "dp", "flag"),
    [
        (None, None, 0, 1, "--pipeline-parallel-size"),  # was ZeroDivisionError
        (None, None, 1, 0, "--data-parallel-size"),  # was ZeroDivisionError
        (None, 0, 1, 1, "--tensor-parallel-size"),
        (0, None, 1, 1, "--num-gpus"),
        (-4, None, 1, 1, "--num-gpus"),
        (None, None, -3, 1, "--pipeline-parallel-size"),
        (None, None, 1, MAX_GPUS + 1, "--data-parallel-size"),
    ],
)
def test_parallel_sizes_are_checked_before_any_division(
    num_gpus: int | None, tp: int | None, pp: int, dp: int, flag: str
) -> None:
    with pytest.raises(KvscopeError) as err:
        resolve_parallel(num_gpus, tp, pp, dp, dp_attention=False)
    assert flag in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_parallelism_refuses_zero_and_huge_products() -> None:
    with pytest.raises(KvscopeError, match="--pipeline-parallel-size must be >= 1"):
        Parallelism(pp=0)
    with pytest.raises(KvscopeError, match="more than"):
        Parallelism(tp=2048, pp=1024)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("max_model_len", 0, "--max-model-len must be >= 1"),
        ("max_model_len", -5, "--max-model-len must be >= 1"),
        ("max_model_len", 10**12, "--max-model-len must be <="),  # simulate accepted this
        ("max_num_seqs", 0, "--max-num-seqs"),
        ("max_num_batched_tokens", 0, "--max-num-batched-tokens"),
        ("block_size", 0, "--block-size"),
        ("block_size", -3, "--block-size"),
        ("kv_cache_memory_bytes", 0, "--kv-cache-memory-bytes"),
        ("gpu_memory_utilization", float("nan"), "--gpu-memory-utilization"),
    ],
)
def test_engine_numbers_are_bounded(field: str, value: float, needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle):
        EngineConfig(**{field: value})  # type: ignore[arg-type]


def test_the_token_bound_is_int32() -> None:
    assert EngineConfig(max_model_len=MAX_TOKENS).max_model_len == MAX_TOKENS
    with pytest.raises(KvscopeError):
        EngineConfig(max_model_len=MAX_TOKENS + 1)


def test_each_engine_refuses_the_other_engines_memory_flag() -> None:
    with pytest.raises(KvscopeError, match="SGLang sizes its pool with --mem-fraction-static"):
        EngineConfig(engine="sglang", gpu_memory_utilization=0.8)
    with pytest.raises(KvscopeError, match="vLLM sizes its KV cache with --gpu-memory-util"):
        EngineConfig(engine="vllm", mem_fraction_static=0.8)
    with pytest.raises(KvscopeError, match="--kv-cache-memory-bytes is a vLLM setting"):
        EngineConfig(engine="sglang", kv_cache_memory_bytes=2**30)
    # Each engine's own flag still plans.
    assert EngineConfig(engine="sglang", mem_fraction_static=0.8).mem_fraction_static == 0.8


@pytest.mark.parametrize("block", [7, 12, 24, 100])
def test_vllm_block_size_must_be_a_power_of_two_or_a_multiple_of_16(block: int) -> None:
    with pytest.raises(KvscopeError, match="neither a power of two nor a multiple of 16"):
        EngineConfig(block_size=block)


@pytest.mark.parametrize("block", [1, 8, 16, 32, 48, 64, 128, 256])
def test_vllm_block_sizes_it_accepts(block: int) -> None:
    plan = plan_memory(LLAMA8, H100, engine=EngineConfig(block_size=block, max_model_len=8192))
    assert plan.block_size == block


def test_sglang_page_size_is_any_positive_int() -> None:
    plan = plan_memory(
        LLAMA8, H100, engine=EngineConfig(engine="sglang", block_size=7, max_model_len=8192)
    )
    assert plan.block_size == 7 and plan.kv_tokens % 7 == 0


@pytest.mark.parametrize("text", ["abc", "1..2", "", "1.2.", "0.x", "99999999999999999999"])
def test_garbage_versions_are_refused(text: str) -> None:
    with pytest.raises(KvscopeError, match="not a version number"):
        parse_version(text)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("0.19.1rc2.dev5", (0, 19, 1)),
        ("0.10.1.1", (0, 10, 1)),
        ("v0.5.3", (0, 5, 3)),
        ("0.6.3.post1", (0, 6, 3)),
        ("0.11.0+cu128", (0, 11, 0)),
        ("0.19", (0, 19, 0)),
    ],
)
def test_released_version_forms_parse(text: str, version: tuple[int, int, int]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize(
    ("engine", "version", "newest"),
    [("vllm", "9.9.9", "0.34.0"), ("vllm", "0.99.0", "0.34.0"), ("sglang", "0.9.0", "0.5.23")],
)
def test_future_release_plans_with_a_warning_naming_the_rules_used(
    engine: str, version: str, newest: str
) -> None:
    plan = plan_memory(
        LLAMA8, H100, engine=EngineConfig(engine=engine, engine_version=version, max_model_len=8192)
    )
    assert plan.fits
    assert len(plan.warnings) == 1
    # vLLM past 0.34 also notes which KV sizing path it plans (kvscope.plan.vllm_extensible_kv):
    # information in ``notes``, not a second warning
    assert len(plan.notes) == (1 if engine == "vllm" else 0)
    assert version in plan.warnings[0] and f"rules of {newest}" in plan.warnings[0]


def test_a_modelled_release_has_no_warning() -> None:
    plan = plan_memory(LLAMA8, H100, engine=EngineConfig(engine_version="0.19.0"))
    assert plan.warnings == ()


def test_kv_cache_memory_bytes_larger_than_the_gpu_is_refused() -> None:
    eng = EngineConfig(kv_cache_memory_bytes=93 * 2**30, max_model_len=8192)
    with pytest.raises(KvscopeError, match=r"more than the 79\.19 GiB of memory"):
        plan_memory(LLAMA8, H100, engine=eng)


def test_kv_cache_memory_bytes_beyond_what_the_weights_leave_does_not_fit() -> None:
    # 70 GiB fits in the 79 GiB card but not beside 15 GiB of weights.
    plan = plan_memory(LLAMA8, H100, engine=EngineConfig(kv_cache_memory_bytes=70 * 2**30))
    assert not plan.fits
    assert plan.problem is not None and plan.problem.startswith("--kv-cache-memory-bytes")
    ok = plan_memory(
        LLAMA8, H100, engine=EngineConfig(kv_cache_memory_bytes=40 * 2**30, max_model_len=8192)
    )
    assert ok.fits and ok.kv_cache_gib == pytest.approx(40.0)


def test_fp8_ds_mla_needs_an_mla_model() -> None:
    with pytest.raises(KvscopeError, match="no MLA layers"):
        plan_memory(LLAMA8, H100, engine=EngineConfig(kv_cache_dtype="fp8_ds_mla"))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"target_context": 10**12, "target_concurrency": 1}, "--target-context"),
        ({"target_context": 1000, "target_concurrency": -1}, "--target-concurrency"),
        ({"target_context": 1000, "target_concurrency": 1, "counts": (0,)}, "--num-gpus"),
        (
            {"target_context": 1000, "target_concurrency": 1, "gpu_hour_price": 1e308},
            "--gpu-hour-price",
        ),
    ],
)
def test_search_bounds_its_targets(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle):
        search(LLAMA8, gpus=[H100], **kwargs)  # type: ignore[arg-type]
