"""The fleet layer: one replica is the single engine, routing, draining and autoscaling."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tests.sim.helpers import run, workload

from kvscope.fleet import FleetConfig, PoolConfig, simulate_fleet, single_pool
from kvscope.fleet.routers import ROUTERS
from kvscope.sim import SimConfig, simulate
from kvscope.sim.engine import sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
from kvscope.workload import Workload
from kvscope.workload.stats import prefix_reuse


def conversations(n_conv: int = 12, turns: int = 5, gap_s: float = 0.4, seed: int = 1) -> Workload:
    """Multi-turn chats: turn k's prompt is turn k-1's prompt plus two new 16-token blocks
    (block ids unique per conversation), with the conversation's id as the session."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_conv):
        start = float(rng.uniform(0, 3))
        for k in range(turns):
            blocks = [c * 1000 + j for j in range(4 + 2 * k)]
            rows.append(
                (start + k * gap_s, len(blocks) * 16 + 5, int(rng.integers(8, 40)), blocks, c)
            )
    rows.sort(key=lambda r: r[0])
    off = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r[3]) for r in rows], out=off[1:])
    return Workload.build(
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        session_ids=[f"s{r[4]}" for r in rows],
        hash_offsets=off,
        hash_values=np.array([b for r in rows for b in r[3]], dtype=np.int64),
        hash_block_size=16,
    )


SMALL = SimConfig(num_gpu_blocks_override=60, max_num_seqs=8, sample_interval_s=0.05)


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.column_names == b.column_names
    for name in a.column_names:
        x, y = a[name].to_numpy(zero_copy_only=False), b[name].to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y)  # NaN where NaN, every float bit-equal
        else:
            assert list(x) == list(y), name


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_one_replica_behind_any_router_is_the_single_engine_run(router: str) -> None:
    w = conversations()
    one = simulate(w, SMALL)
    fleet = simulate_fleet(w, single_pool(SMALL, 1, router=router))
    assert one.figures["preemptions"] > 0 and one.figures["prefix_hit_rate"] > 0.2  # not idle
    _same(one.requests, fleet.requests.drop(["replica"]))
    _same(one.steps, fleet.steps.drop(["replica"]))
    assert fleet.requests["replica"].to_pylist() == [0] * len(w)
    for key in ("prefix_hit_rate", "ttft_p99_s", "tpot_p50_s", "kv_blocks_used_peak"):
        assert fleet.figures[key] == one.figures[key]


def test_prefix_aware_keeps_conversations_together() -> None:
    w = conversations(n_conv=16)
    cfg = SimConfig(num_gpu_blocks_override=400)
    hit = {
        r: simulate_fleet(w, single_pool(cfg, 4, router=r)).figures["prefix_hit_rate"]
        for r in ("round-robin", "prefix-aware", "prefix-load", "session-affinity")
    }
    bound = prefix_reuse(w, 16)["reusable_token_share"]  # type: ignore[index]
    assert hit["round-robin"] < 0.6 * bound
    # a chat's first turn has nothing cached anywhere; every later turn finds its prefix
    for r in ("prefix-aware", "prefix-load", "session-affinity"):
        assert hit["round-robin"] < hit[r] <= bound + 1e-9
    # and as much as one engine with room for everything (the single-pool figure)
    one = simulate(w, SimConfig(num_gpu_blocks_override=20_000)).figures["prefix_hit_rate"]
    assert hit["prefix-aware"] == pytest.approx(one, abs=1e-9)


def test_every_request_of_a_session_on_one_replica() -> None:
    w = conversations()
    res = simulate_fleet(w, single_pool(SimConfig(), 3, router="session-affinity"))
    t = res.requests.append_column("session", pa.array(w.session_ids.tolist()))  # type: ignore[union-attr]
    by_session: dict[str, set[int]] = {}
    for s, r in zip(t["session"].to_pylist(), t["replica"].to_pylist(), strict=True):
        by_session.setdefault(s, set()).add(r)
    assert all(len(v) == 1 for v in by_session.values())
    assert len({r for v in by_session.values() for r in v}) > 1


def test_cached_prefix_blocks_agrees_with_lookup_and_changes_nothing() -> None:
    w = workload(
        [0.0, 0.1, 0.2],
        [16 * 6 + 3, 16 * 9 + 1, 16 * 4],
        [4, 4, 4],
        [[1, 2, 3, 4, 5, 6], [1, 2, 3, 7, 8, 9, 10, 11, 12], [9, 9, 9, 9]],
    )
    _seqs, engine = run(w, num_blocks=64)
    pool = engine.pool
    assert isinstance(pool, PagedPool)
    fresh = sequences_from(w, 16)
    version = pool._version
    got = [pool.cached_prefix_blocks(s) for s in fresh]
    assert pool._version == version and all(s.hit_memo is None for s in fresh)
    assert got == [len(pool.lookup(s).blocks) for s in fresh]
    assert got == [6, 9, 3]  # the full blocks before each prompt's last token
    # a pool of another block size counts its own blocks
    big = PagedPool(64, KVLayout(32))
    assert big.cached_prefix_blocks(fresh[0]) == 0


def test_a_removed_replica_drains_and_nothing_is_dropped() -> None:
    w = conversations(n_conv=20, turns=4, gap_s=1.0)
    fleet = single_pool(SimConfig(), 4, router="round-robin", autoscale="schedule:0=4,2=1")
    res = simulate_fleet(w, fleet)
    t = res.requests
    assert res.figures["completed"] == len(w)
    late = [
        r
        for a, r in zip(t["arrival_s"].to_pylist(), t["replica"].to_pylist(), strict=True)
        if a >= 2
    ]
    early = {
        r
        for a, r in zip(t["arrival_s"].to_pylist(), t["replica"].to_pylist(), strict=True)
        if a < 2
    }
    assert late and set(late) == {0} and early == {0, 1, 2, 3}
    auto = res.figures["autoscale"]
    assert auto["timeline"] == [
        {"t_s": 0.0, "replicas": 4},
        {"t_s": auto["timeline"][1]["t_s"], "replicas": 1},
    ]
    # replicas 1..3 count until their last request finished, past the drain
    assert auto["replica_seconds"] > auto["timeline"][1]["t_s"] * 4


def test_threshold_policy_provisions_after_its_delay() -> None:
    n = 400
    w = workload(np.linspace(0, 20, n), [2000] * n, [300] * n)
    fleet = single_pool(
        SimConfig(max_num_seqs=4),
        4,
        router="least-outstanding",
        autoscale="queue:up=2,down=0,min=1,interval=2,delay=5",
    )
    res = simulate_fleet(w, fleet)
    steps = res.figures["autoscale"]["timeline"]
    assert [s["replicas"] for s in steps] == [1, 2, 3, 4]
    first_up = steps[1]["t_s"]
    t = res.requests
    arr, rep = t["arrival_s"].to_pylist(), t["replica"].to_pylist()
    assert min(a for a, r in zip(arr, rep, strict=True) if r == 1) >= first_up + 5
    assert all(r == 0 for a, r in zip(arr, rep, strict=True) if a < first_up + 5)
    assert res.figures["completed"] == n


def test_heterogeneous_pools_serve_with_their_own_block_sizes() -> None:
    w = conversations(n_conv=10)
    pools = (
        PoolConfig("h100", 2, SimConfig(gpu="H100")),
        PoolConfig("a100", 1, SimConfig(gpu="A100-80GB", block_size=32)),
    )
    res = simulate_fleet(w, FleetConfig(pools, router="prefix-aware"))
    reps = res.figures["replicas"]
    assert [r["pool"] for r in reps] == ["h100", "h100", "a100"]
    assert sum(r["requests"] for r in reps) == len(w) and res.figures["completed"] == len(w)
    assert reps[2]["requests"] > 0 and reps[2]["prefix_hit_rate"] > 0
    assert set(res.steps["replica"].to_pylist()) == {0, 1, 2}
    assert res.pool_info["capacity"] == sum(r["kv_blocks_capacity"] for r in reps)


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("router", "nearest", "--router must be one of"),
        ("autoscale", "queue:up=1", "'down' is required"),
        ("autoscale", "schedule:5=2", "must start at 0"),
        ("autoscale", "kv:up=2,down=0", "--autoscale up must be <= 1"),
        ("router-weights", "prefix=0,queue=0,kv=0", "at least one weight"),
        ("router-weights", "prefix=nan", "--router-weights prefix"),
        ("replicas", "0", "replicas must be >= 1"),
    ],
)
def test_bad_fleet_fields_are_one_line_naming_them(flag: str, value: str, needle: str) -> None:
    from kvscope.errors import KvscopeError

    with pytest.raises(KvscopeError, match=None) as err:
        single_pool(SimConfig(), 2).with_flag(flag, value)
    assert needle in err.value.one_line() and "\n" not in err.value.one_line()


def test_prefix_aware_beats_round_robin_on_a_mooncake_slice(traces_dir: Path) -> None:
    w = Workload.from_file(traces_dir / "mooncake_fast25" / "conversation_trace.jsonl")
    w = w.shift_to_zero().limit(500)
    hit = {
        r: simulate_fleet(w, single_pool(SimConfig(), 4, router=r)).figures["prefix_hit_rate"]
        for r in ("round-robin", "prefix-aware")
    }
    bound = prefix_reuse(w, 16)["reusable_token_share"]  # type: ignore[index]
    assert hit["round-robin"] < hit["prefix-aware"] <= bound + 1e-9
    assert not math.isnan(hit["prefix-aware"])


def test_a_pool_of_llama_servers() -> None:
    # llama-server is one engine per process: a fleet of them is planned server by server
    w = conversations(n_conv=6)
    cfg = SimConfig(engine="llama.cpp", ctx_size=8192)
    res = simulate_fleet(w, single_pool(cfg, 3, router="least-outstanding"))
    assert res.figures["completed"] == len(w)
    assert [r["requests"] > 0 for r in res.figures["replicas"]] == [True] * 3


@pytest.mark.parametrize(
    ("router", "autoscale"),
    [("round-robin", None), ("random", None), ("session-affinity", "schedule:0=3,1.5=1,3=2")],
)
def test_routers_that_read_no_state_may_leave_replicas_unadvanced(
    router: str, autoscale: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvscope.fleet import routers

    w = conversations(n_conv=16)
    fleet = single_pool(SMALL, 3, router=router, autoscale=autoscale)
    lazy = simulate_fleet(w, fleet)
    cls = {"round-robin": routers.RoundRobin, "random": routers.Random}.get(
        router, routers.SessionAffinity
    )
    monkeypatch.setattr(cls, "reads_state", True)  # the driver now advances every arrival
    eager = simulate_fleet(w, fleet)
    _same(lazy.requests, eager.requests)
    # samples are taken at other moments (an undisturbed engine samples per decode span), but
    # every step and token is counted once either way
    for name in ("steps", "batch_tokens", "prefill_tokens", "decode_tokens", "preemptions"):
        a, b = lazy.steps[name].to_numpy(), eager.steps[name].to_numpy()
        assert a.sum() == b.sum() > 0 or name == "preemptions", name
    for key in ("kv_blocks_used_peak", "prefix_hit_rate", "prefix_lookup_tokens"):
        assert lazy.figures[key] == eager.figures[key], key
    assert len(set(lazy.requests["replica"].to_pylist())) >= 2
