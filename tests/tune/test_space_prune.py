"""The tune space (defaults, space files, the cluster hook) and the planner's pruning."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model
from kvscope.tune.prune import prune
from kvscope.tune.space import Point, default_axes, expand, load_space

LLAMA = "meta-llama/Llama-3.1-8B"


def _axes(engine: str = "vllm", gpus: tuple[str, ...] = ("H100",), n: int = 8) -> dict:
    m = load_model(LLAMA)
    return default_axes(engine, gpus, n, m.is_moe, m.uses_mla)


def test_default_space_splits_every_power_of_two_within_the_gpus() -> None:
    points = expand(_axes(n=8), 8)
    layouts = {(p.tp, p.dp) for p in points}
    assert layouts == {(t, d) for t in (1, 2, 4, 8) for d in (1, 2, 4, 8) if t * d <= 8}
    assert max(p.num_gpus for p in points) == 8
    # the engine defaults are a point of the default space
    assert Point(gpu="H100", kv_cache_dtype="auto") in points


def test_space_file_overrides_axes(tmp_path: Path) -> None:
    f = tmp_path / "space.yaml"
    f.write_text(
        "tp: [1, 2]\ndp: 1\nkv_cache_dtype: [auto]\nmax_num_seqs: [null, 64]\n"
        "max_num_batched_tokens: [4096]\nenable_prefix_caching: [true, false]\n"
    )
    points = expand(load_space(f, _axes()), 8)
    assert len(points) == 2 * 2 * 2
    assert {p.max_num_seqs for p in points} == {None, 64}
    assert {p.enable_prefix_caching for p in points} == {True, False}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("tpp: [1]\n", "unknown axis 'tpp'"),
        ("tp: []\n", "lists no value"),
        ("tp: [one]\n", "whole numbers"),
        ("enable_prefix_caching: [maybe]\n", "true or false"),
        ("gpu_memory_utilization: [1.5]\n", "gpu_memory_utilization"),
        ("replicas: [0]\n", "replicas"),
        ("router: [least-busy]\n", "is not a router"),
        ("- tp\n", "mapping"),
    ],
)
def test_bad_space_files_are_one_line(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "space.yaml"
    f.write_text(text)
    with pytest.raises(KvscopeError, match=match) as err:
        load_space(f, _axes())
    assert "\n" not in err.value.one_line()


def test_a_fleet_space_puts_replicas_behind_routers_within_the_gpus(tmp_path: Path) -> None:
    f = tmp_path / "space.yaml"
    f.write_text("tp: [1, 2]\ndp: [1]\nreplicas: [1, 2, 4]\nrouter: [round-robin, prefix-aware]\n")
    points = expand(load_space(f, _axes()), 4)
    # one replica has no router (tp1, tp2); two replicas: both routers at tp1 and tp2; four
    # replicas only at tp1 (4 GPUs); the default space's other axes multiply each
    shapes = {(p.tp, p.replicas, p.router) for p in points}
    assert shapes == {
        (1, 1, None),
        (2, 1, None),
        (1, 2, "round-robin"),
        (1, 2, "prefix-aware"),
        (2, 2, "round-robin"),
        (2, 2, "prefix-aware"),
        (1, 4, "round-robin"),
        (1, 4, "prefix-aware"),
    }
    assert all(p.num_gpus == p.tp * p.replicas <= 4 for p in points)
    assert len(points) == len(set(points))
    p = next(p for p in points if p.replicas == 4)
    assert p.label().endswith(f"x4 {p.router}")


def test_a_space_with_no_point_within_the_gpus_is_refused() -> None:
    axes = {**_axes(), "tp": (16,)}
    with pytest.raises(KvscopeError, match="search space is empty"):
        expand(axes, 8)


def test_prune_reasons() -> None:
    m = load_model(LLAMA)
    pts = [
        Point(gpu="H100", tp=3),
        Point(gpu="L4"),  # 16 GB of weights + one 131,072-token request > 24 GB
        Point(gpu="H100", enable_dp_attention=True, dp=2),
        Point(gpu="H100", max_num_seqs=512, max_num_batched_tokens=256),
        Point(gpu="H100", enable_chunked_prefill=False, max_num_batched_tokens=8192),
        Point(gpu="H100", enable_expert_parallel=True, dp=2),
        Point(gpu="L4", tp=2),
    ]
    r = prune(pts, m, "vllm", m.max_position_embeddings)
    why = dict((p, w) for p, w in r.dropped)
    assert r.kept == (Point(gpu="L4", tp=2),)
    assert "does not divide" in why[pts[0]]
    assert "one request of 131,072 tokens" in why[pts[1]]
    assert "SGLang" in why[pts[2]]
    assert "below --max-num-seqs" in why[pts[3]]
    assert "without chunked prefill" in why[pts[4]]
    assert "MoE" in why[pts[5]]


@pytest.mark.parametrize("model", [LLAMA, "Qwen/Qwen3-30B-A3B"])
def test_prune_never_drops_a_point_the_engine_starts(model: str) -> None:
    """The quick memory check keeps a superset of what the engine's exact budget starts
    (plan_memory's verdict), so pruning never loses a deployment that would run (a point
    dropped by a rule, such as EP on one GPU, is a duplicate or one the engine refuses)."""
    m = load_model(model)
    axes = {
        **default_axes("vllm", ("L4", "A100-40GB", "H100"), 8, m.is_moe, m.uses_mla),
        "max_num_seqs": (None,),
        "max_num_batched_tokens": (None,),
    }
    points = expand(axes, 8)
    r = prune(points, m, "vllm", 32768)
    kept = set(r.kept)
    by_rule = {p for p, why in r.dropped if "fit" not in why}
    starts = 0
    for p in points:
        eng = EngineConfig(max_model_len=32768, kv_cache_dtype=p.kv_cache_dtype)
        par = Parallelism(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.enable_expert_parallel)
        try:
            fits = plan_memory(m, get_gpu(p.gpu), par, eng).fits
        except KvscopeError:
            fits = False
        starts += fits
        if fits and p not in by_rule:
            assert p in kept, p
    assert 0 < starts < len(points)  # some start, some do not: the check can fail


def test_expanding_and_pruning_ten_thousand_points_takes_under_a_second() -> None:
    m = load_model(LLAMA)
    axes = {
        **_axes(gpus=("H100", "A100-80GB", "L40S", "L4"), n=8),
        "max_num_seqs": (None, 16, 32, 64, 128, 256),
        "block_size": (16, 32),
        "enable_prefix_caching": (True, False),
        "max_num_batched_tokens": (None, 1024, 2048, 4096, 8192, 16384),
    }
    start = time.perf_counter()
    points = expand(axes, 8)
    r = prune(points, m, "vllm", m.max_position_embeddings)
    elapsed = time.perf_counter() - start
    assert len(points) >= 10_000
    assert 0 < len(r.kept) < len(points)
    assert elapsed < 1.0, elapsed


def test_point_label_and_fields() -> None:
    p = Point(gpu="H100", tp=2, kv_cache_dtype="fp8", max_num_batched_tokens=4096)
    assert p.label() == "H100x2 tp2 kv=fp8 mnbt=4096"
    assert replace(p, kv_cache_dtype="auto").sim_fields()["kv_cache_dtype"] is None
