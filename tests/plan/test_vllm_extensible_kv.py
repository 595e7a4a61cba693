"""vLLM 0.34's extensible KV cache (:mod:`kvscope.plan.vllm_extensible_kv`): each rule pinned to
the 0.34.0 wheel's code (file and function named per test), and the profiling path of 0.33
left as it was."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import KVLayout
from kvscope.plan.memory import plan_memory
from kvscope.plan.vllm_budget import resolve_defaults
from kvscope.plan.vllm_extensible_kv import (
    GRANULE_BYTES,
    MARGIN_FLOOR_BYTES,
    MARGIN_FRACTION,
    ExtensibleSizing,
    blocks_within,
    default_gpu_memory_utilization,
    extensible_on,
    measured_kv_bytes,
    path_note,
    size_rank,
)
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

LLAMA = load_model("meta-llama/Llama-3.1-8B")
H100 = get_gpu("H100")
MI300X = get_gpu("MI300X")


def vllm(version: str, **kw):  # type: ignore[no-untyped-def]
    return EngineConfig(engine="vllm", engine_version=version, **kw)


def plan(version: str, gpu=H100, **kw):  # type: ignore[no-untyped-def]
    return plan_memory(LLAMA, gpu, Parallelism(), vllm(version, **kw))


@pytest.mark.parametrize(
    ("version", "kw", "gmu"),
    # CacheConfig.resolved_gpu_memory_utilization (vllm/config/cache.py, 0.34.0): 1.0 with the
    # extensible cache, DEFAULT_GPU_MEMORY_UTILIZATION = 0.92 without; 0.9 up to 0.19.1.
    [
        ("0.19.1", {}, 0.9),
        ("0.20.0", {}, 0.92),
        ("0.33.0", {}, 0.92),
        ("0.34.0", {}, 1.0),
        ("0.34.0", {"enable_extensible_kv_cache": False}, 0.92),
        ("0.34.0", {"kv_cache_memory_bytes": 10 * GIB}, 0.92),
        ("0.34.0", {"num_gpu_blocks_override": 1000}, 0.92),
    ],
)
def test_gpu_memory_utilization_default_by_release(version: str, kw: dict, gmu: float) -> None:
    eng = vllm(version, **kw)
    assert default_gpu_memory_utilization(eng) == gmu
    assert resolve_defaults(LLAMA, H100, eng).gpu_memory_utilization == gmu


def test_flag_resolution_follows_resolve_extensible_kv_cache() -> None:
    """``VllmConfig._resolve_extensible_kv_cache`` (vllm/config/vllm.py, 0.34.0): unset = on
    for CUDA and ROCm unless kv_cache_memory_bytes or num_gpu_blocks_override is set; asking
    for it with either is a ValueError; the flag does not exist before 0.34.0 nor in SGLang."""
    assert extensible_on(vllm("0.34.0")) and extensible_on(vllm("0.35.1"))
    assert not extensible_on(vllm("0.33.0"))
    assert not extensible_on(vllm("0.34.0", kv_cache_memory_bytes=GIB))
    assert not extensible_on(vllm("0.34.0", enable_extensible_kv_cache=False))
    with pytest.raises(KvscopeError, match=r"new in vLLM 0\.34\.0"):
        vllm("0.33.0", enable_extensible_kv_cache=False)
    with pytest.raises(KvscopeError, match="refuses --enable-extensible-kv-cache"):
        vllm("0.34.0", enable_extensible_kv_cache=True, num_gpu_blocks_override=100)
    with pytest.raises(KvscopeError, match="SGLang has no such flag"):
        EngineConfig(engine="sglang", enable_extensible_kv_cache=True)


def test_margin_floor_and_fraction() -> None:
    """``KV_CACHE_MARGIN_FLOOR_BYTES`` = 1 GiB on CUDA, 3 GiB on ROCm, and
    ``KV_CACHE_MARGIN_FRACTION`` = 0.75 of the transient peak (extensible_kv_cache.py)."""
    layout = KVLayout(groups=(), block_size=16, block_bytes=2 << 20, bytes_per_token=131072)
    kw = {"requested": 80 * GIB, "used": 20 * GIB, "segments": 32, "capacity_blocks": 10**9}
    eng = vllm("0.34.0")
    small = size_rank(eng, H100, transient_peak=0.5 * GIB, layout=layout, **kw)
    big = size_rank(eng, H100, transient_peak=4 * GIB, layout=layout, **kw)
    amd = size_rank(eng, MI300X, transient_peak=0.5 * GIB, layout=layout, **kw)
    assert (small.margin, amd.margin, big.margin) == (GIB, 3 * GIB, 3 * GIB)
    # the headroom term binds at budget 80 GiB: free - resident - margin - peak
    assert small.kv_bytes == small.startup_free - 20 * GIB - GIB - 0.5 * GIB
    # on the 192 GiB MI300X the 80 GiB budget binds instead: budget - resident - peak
    assert amd.kv_bytes == 80 * GIB - 20 * GIB - 0.5 * GIB
    assert MARGIN_FLOOR_BYTES == {"nvidia": GIB, "amd": 3 * GIB} and MARGIN_FRACTION == 0.75


def test_an_explicit_budget_binds_without_the_margin() -> None:
    """``measure_kv_cache_bytes``: min(budget - resident, free headroom - margin) - peak; "the
    margin ... never reduces an explicit budget that already leaves that much free"."""
    assert measured_kv_bytes(40 * GIB, 79 * GIB, 20 * GIB, 2 * GIB, 1.5 * GIB) == 18 * GIB
    assert measured_kv_bytes(80 * GIB, 79 * GIB, 20 * GIB, 2 * GIB, 1.5 * GIB) == 55.5 * GIB
    assert measured_kv_bytes(10 * GIB, 79 * GIB, 20 * GIB, 2 * GIB, 1.5 * GIB) == 0.0


def test_blocks_round_each_segment_to_granules() -> None:
    """``ExtensibleKVCache.blocks_within`` / ``physical_bytes_for``: every segment (one per
    layer) is mapped in 2 MiB granules (``granule_size``, vllm/utils/extensible_tensor.py)."""
    assert GRANULE_BYTES == 2 << 20
    # 32 layers of 64 KiB a block: 100.5 MiB a segment maps 100 MiB, 1600 blocks (not 1608)
    assert blocks_within(32 * 100.5 * 2**20, 2 << 20, 32) == 1600
    assert blocks_within(32 * 100 * 2**20, 2 << 20, 32) == 1600
    assert blocks_within(32 * 99.99 * 2**20, 2 << 20, 32) == 1568
    assert (
        ExtensibleSizing(0, 0, 0, 0, 0, measured_blocks=900, capacity_blocks=800).num_blocks == 800
    )


def test_the_default_path_gains_the_headroom_the_estimate_kept() -> None:
    """Llama-3.1-8B on one H100: 0.34's default (budget 1.0, sized after capture) holds more KV
    than 0.34 with the flag off, which plans exactly as 0.33 does (0.33's path unchanged)."""
    new, off, old = (
        plan("0.34.0"),
        plan("0.34.0", enable_extensible_kv_cache=False),
        plan("0.33.0"),
    )
    assert (off.num_gpu_blocks, off.kv_tokens) == (old.num_gpu_blocks, old.kv_tokens)
    assert off.budget_fraction == old.budget_fraction == 0.92
    assert new.budget_fraction == 1.0 and new.num_gpu_blocks > off.num_gpu_blocks
    # the gain is bounded by the 8 % of 79.19 GiB the profiling budget withheld
    gained = (new.kv_cache_gib - off.kv_cache_gib) * GIB
    assert 0 < gained < 0.08 * H100.memory_bytes
    assert any("extensible KV cache" in w for w in new.notes)
    assert not any("extensible" in w for w in old.notes)


def test_an_explicit_budget_plans_as_the_profiling_path() -> None:
    """With gpu_memory_utilization given, budget - resident - peak binds in both paths, and the
    captured graphs the extensible path measures are what the profiling path estimates: the
    same blocks up to one granule a layer."""
    ext = plan("0.34.0", gpu_memory_utilization=0.9)
    prof = plan("0.34.0", gpu_memory_utilization=0.9, enable_extensible_kv_cache=False)
    slack = LLAMA.num_layers * GRANULE_BYTES // ext.block_bytes
    assert 0 <= prof.num_gpu_blocks - ext.num_gpu_blocks <= slack


def test_others_memory_comes_out_of_the_measured_cache() -> None:
    """``request_memory`` (vllm/v1/worker/utils.py, 0.34.0) skips the start-up refusal under the
    extensible cache ("the budget is only a cap"): 10 GiB held by another process is 10 GiB
    less KV (the free memory measured after capture), where the profiling path refuses."""
    alone = plan("0.34.0")
    shared = plan("0.34.0", gpu_memory_in_use_gib=10.0)
    assert shared.fits
    assert alone.kv_cache_gib - shared.kv_cache_gib == pytest.approx(10.0, abs=1e-6)
    refused = plan("0.34.0", gpu_memory_in_use_gib=10.0, enable_extensible_kv_cache=False)
    assert not refused.fits and "refuses to start" in (refused.problem or "")


def test_path_note() -> None:
    assert path_note(vllm("0.33.0")) == ()
    (on,) = path_note(vllm("0.34.0"))
    (off,) = path_note(vllm("0.34.0", enable_extensible_kv_cache=False))
    assert "after warmup and CUDA-graph capture" in on and "extensible KV cache off" in off


_WHEEL = Path(os.environ.get("KVSCOPE_VLLM034_SRC", "/tmp/v034/x"))
_EXT = _WHEEL / "vllm/v1/worker/extensible_kv_cache.py"


def _wheel_namespace() -> dict:
    """The wheel's margin constants and ``measure_kv_cache_bytes``, executed on CUDA."""
    tree = ast.parse(_EXT.read_text())
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.Assign) and node.targets[0].id.startswith("KV_CACHE_"))  # type: ignore[attr-defined]
        or (isinstance(node, ast.FunctionDef) and node.name == "measure_kv_cache_bytes")
    ]
    ns: dict = {"current_platform": SimpleNamespace(is_rocm=lambda: False)}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(_EXT), "exec"), ns)
    return ns


@pytest.mark.skipif(
    not _EXT.exists(), reason="vllm 0.34.0 wheel not unpacked (KVSCOPE_VLLM034_SRC)"
)
@settings(max_examples=60, deadline=None)
@given(
    requested=st.integers(1, 200),
    used=st.integers(0, 120),
    peak=st.integers(0, 16),
    free=st.integers(1, 200),
)
def test_differential_against_the_wheels_measure_kv_cache_bytes(
    requested: int, used: int, peak: int, free: int
) -> None:
    ns = _wheel_namespace()
    assert ns["KV_CACHE_MARGIN_FLOOR_BYTES"] == MARGIN_FLOOR_BYTES["nvidia"]
    assert ns["KV_CACHE_MARGIN_FRACTION"] == MARGIN_FRACTION
    gib = 1 << 30
    want = ns["measure_kv_cache_bytes"](
        init_free_memory=free * gib,
        free_memory=free * gib - used * gib,
        committed_bytes=0,
        requested_memory=requested * gib,
        transient_peak_bytes=peak * gib,
    )
    margin = max(MARGIN_FLOOR_BYTES["nvidia"], MARGIN_FRACTION * peak * gib)
    got = measured_kv_bytes(requested * gib, free * gib, used * gib, peak * gib, margin)
    assert got == pytest.approx(want, abs=1)
