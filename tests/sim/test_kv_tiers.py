"""KV offload tiers (kvscope.sim.kv_tiers): load arithmetic by hand, lookups across tiers,
store policies, the CPU tier as one case, bad specs as one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.sim import SimConfig, simulate
from kvscope.sim.kv_tiers import TierSpec, build_stack
from kvscope.sim.tier_spec import DEFAULTS, load_tiers, parse_offload, with_cpu_size
from kvscope.workload import Workload

GIB = 1 << 30


def _abc_workload() -> Workload:
    """A (10 shared blocks of 16 tokens + 1), then C (20 other blocks) that evicts A from a
    21-block pool, then B: A's prefix again, on an idle engine."""
    prompts = np.array([161, 321, 161])
    hashes = [list(range(1, 11)), list(range(101, 121)), list(range(1, 11))]
    off = np.cumsum([0] + [len(h) for h in hashes]).astype(np.int64)
    return Workload.build(
        np.array([0.0, 1.0, 2.0]),
        prompts,
        np.array([1, 1, 1]),
        hash_offsets=off,
        hash_values=np.array([v for h in hashes for v in h], dtype=np.int64),
        hash_block_size=16,
    )


CPU_32 = TierSpec("cpu", 64 * GIB, 32e9, 32e9, 50e-6, "per-gpu")


@pytest.mark.parametrize("store", ["write-through", "write-back"])
def test_loading_n_blocks_adds_bytes_over_bandwidth_plus_latency_to_that_prefill(
    store: str,
) -> None:
    # Llama-3.1-8B bf16 KV: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B/token;
    # a 16-token block is 2,097,152 B. 10 blocks at 32e9 B/s: 20,971,520 / 32e9 = 655.36 us,
    # plus 50 us latency = 705.36 us, added to B's one prefill step.
    w = _abc_workload()
    gpu_hit = simulate(w, SimConfig(block_size=16, num_gpu_blocks_override=1000))
    tiered = simulate(
        w,
        SimConfig(
            block_size=16,
            num_gpu_blocks_override=22,
            kv_offload=(CPU_32,),
            kv_offload_store=store,  # type: ignore[arg-type]
        ),
    )
    b_gpu = gpu_hit.requests.to_pylist()[2]
    b_tier = tiered.requests.to_pylist()[2]
    assert b_gpu["cached_prompt_tokens"] == b_tier["cached_prompt_tokens"] == 160
    assert b_tier["offload_hit_tokens"] == 160
    assert b_tier["offload_load_s"] == pytest.approx(705.36e-6, rel=1e-12)
    assert b_tier["ttft_s"] - b_gpu["ttft_s"] == pytest.approx(705.36e-6, rel=1e-9)
    assert tiered.figures["offload_cpu_load_bytes"] == 20_971_520
    assert tiered.figures["offload_cpu_hit_rate"] == pytest.approx(160 / (161 + 321 + 161))
    # A and C were never in a tier when they arrived: their TTFT is the GPU-only run's
    for i in (0, 1):
        assert tiered.requests.to_pylist()[i]["ttft_s"] == gpu_hit.requests.to_pylist()[i]["ttft_s"]


def test_a_prefix_spread_over_cpu_and_disk_pays_each_tier_once() -> None:
    # write-back: evicted k1..k5 enter the CPU tier (2 blocks); its LRU victims k1..k3 move
    # to disk. 1 MB blocks, one GPU: CPU 2 x 1e6 / 10e9 + 10 us = 210 us; disk 3 x 1e6 / 1e9
    # + 100 us = 3.1 ms; one load over both tiers = 3.31 ms.
    cpu = TierSpec("cpu", 2e6, 10e9, 10e9, 10e-6, "per-gpu")
    disk = TierSpec("disk", 10e6, 1e9, 1e9, 100e-6, "shared")
    stack = build_stack((cpu, disk), "write-back", 1e6, 1, 64e9)
    for k in ("k1", "k2", "k3", "k4", "k5"):
        stack.on_evicted(k)
    where = [stack.find(k) for k in ("k1", "k2", "k3", "k4", "k5")]
    assert where == [1, 1, 1, 0, 0]
    assert stack.find("k6") == -1
    seconds = stack.load(["k1", "k2", "k3", "k4", "k5"], where)
    assert seconds == pytest.approx(3.31e-3, rel=1e-12)
    assert stack.take_pending_s() == pytest.approx(3.31e-3, rel=1e-12)
    assert stack.take_pending_s() == 0.0


def test_tensor_parallel_shares_per_gpu_links_and_totals_capacity() -> None:
    # TP8, 1 MB per GPU per block: the engine's block is 8 MB. 80 MB of CPU holds 10 blocks;
    # the CPU link is per GPU (1 MB each, in parallel), the disk carries all 8 MB.
    cpu = TierSpec("cpu", 80e6, 10e9, 10e9, 0.0, "per-gpu")
    disk = TierSpec("disk", 80e6, 1e9, 1e9, 0.0, "shared")
    stack = build_stack((cpu, disk), "write-through", 1e6, 8, 64e9)
    assert [t.capacity for t in stack.tiers] == [10, 10]
    assert stack.tiers[0].load_seconds(5) == pytest.approx(0.5e-3)  # 5 MB / 10 GB/s
    assert stack.tiers[1].load_seconds(5) == pytest.approx(40e-3)  # 40 MB / 1 GB/s


def test_write_through_stores_on_compute_and_write_back_on_eviction() -> None:
    w = _abc_workload()
    base = {"block_size": 16, "num_gpu_blocks_override": 1000, "kv_offload": (CPU_32,)}
    wt = simulate(w, SimConfig(**base))  # type: ignore[arg-type]
    wb = simulate(w, SimConfig(kv_offload_store="write-back", **base))  # type: ignore[arg-type]
    # write-through: every full block once computed (A's 10, C's 20, B re-touches A's);
    # write-back with a pool that never evicts stores nothing
    assert wt.pool_info["offload"]["cpu"]["stored_blocks"] == 30
    assert wt.figures["offload_cpu_written_bytes"] == 30 * 2_097_152
    assert wb.pool_info["offload"]["cpu"]["stored_blocks"] == 0


def test_cpu_offload_gib_is_the_cpu_tier_of_the_stack() -> None:
    disk = parse_offload("disk:1TiB")
    assert with_cpu_size(disk, None) == disk
    assert with_cpu_size(disk, 0) == disk
    both = with_cpu_size(disk, 64)
    assert [s.kind for s in both] == ["cpu", "disk"]
    assert both[0].capacity_bytes == 64 * GIB
    assert both[0].latency_s == DEFAULTS["cpu"].latency_s
    assert with_cpu_size(parse_offload("cpu:8GiB,disk:1TiB"), 0) == disk
    cfg = SimConfig(kv_offload=parse_offload("cpu:64GiB")).with_flag("cpu-offload-gib", "256")
    assert cfg.cpu_offload_gib == 256.0
    swept = SimConfig().with_flag("kv-offload", "cpu:64GiB+disk:2TiB")
    assert [(s.kind, s.capacity_bytes) for s in swept.kv_offload] == [
        ("cpu", 64 * GIB),
        ("disk", 2 * 2**40),
    ]


def test_tier_file_reads_terms_and_store(tmp_path: Path) -> None:
    f = tmp_path / "tiers.yaml"
    f.write_text(
        "store: write-back\ntiers:\n"
        "  - {kind: cpu, capacity_gib: 64, read_gb_per_s: 50, latency_us: 5}\n"
        "  - {kind: remote, capacity_gib: 1024}\n"
    )
    specs, store = load_tiers(f)
    assert store == "write-back"
    assert specs[0] == TierSpec("cpu", 64 * GIB, 50e9, 50e9, 5e-6, "per-gpu")
    assert specs[1] == TierSpec("remote", 1024 * GIB, 12.5e9, 12.5e9, 1e-3, "shared")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("cpu:-1GiB", "--kv-offload cpu must be >= 0"),
        ("gpu:1GiB", "unknown tier 'gpu'"),
        ("cpu:64XB", "'64XB' is not a size"),
        ("cpu:1GiB,cpu:2GiB", "tier 'cpu' is given twice"),
        ("cpu", "needs a size"),
    ],
)
def test_bad_offload_specs_name_the_field(text: str, needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle):
        parse_offload(text)


@pytest.mark.parametrize(
    ("tier", "needle"),
    [
        ("{kind: disk, capacity_gib: 10, read_gb_per_s: 0}", "tiers[0].read_gb_per_s must be > 0"),
        ("{kind: cpu, capacity_gib: -5}", "tiers[0].capacity_gib must be >= 0"),
        ("{kind: tape, capacity_gib: 5}", "tiers[0].kind: unknown tier 'tape'"),
        ("{kind: cpu, capacity_gib: 5, latency_us: .nan}", "tiers[0].latency_us must be a finite"),
        ("{kind: cpu, capacity_gib: 5, bandwidth: 3}", "unknown field 'bandwidth'"),
    ],
)
def test_bad_tier_files_name_the_field(tmp_path: Path, tier: str, needle: str) -> None:
    f = tmp_path / "tiers.yaml"
    f.write_text(f"tiers:\n  - {tier}\n")
    with pytest.raises(KvscopeError) as err:
        load_tiers(f)
    assert needle in str(err.value)


def test_cli_bad_tier_is_one_line_and_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "tiers.yaml"
    f.write_text("tiers:\n  - {kind: disk, capacity_gib: 10, write_gb_per_s: 0}\n")
    for flags, needle in (
        (("--kv-tiers", str(f)), "tiers[0].write_gb_per_s must be > 0"),
        (("--kv-offload", "nvme:1TiB"), "unknown tier 'nvme'"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "kvscope.cli.main", "simulate", *flags, "--num-requests", "5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_lookup_spans_gpu_cpu_and_disk() -> None:
    from kvscope.sim.kv_pool import PagedPool
    from kvscope.sim.layout import KVLayout
    from kvscope.sim.sequence import Sequence

    def seq(i: int, prompt: int, hashes: list[int]) -> Sequence:
        s = Sequence(i, f"r{i}", 0.0, prompt, 4)
        s.trace_hashes = np.array(hashes, dtype=np.int64)
        s.hash_block_size = 4
        s.n_shareable = len(hashes)
        return s

    def admit(pool: PagedPool, s: Sequence) -> None:
        assert pool.allocate(s, s.num_tokens, pool.lookup(s))
        s.computed = s.num_tokens
        pool.cache(s, s.num_tokens)

    cpu = TierSpec("cpu", 2e6, 10e9, 10e9, 10e-6, "per-gpu")
    disk = TierSpec("disk", 10e6, 1e9, 1e9, 100e-6, "shared")
    pool = PagedPool(9, KVLayout(4), tiers=build_stack((cpu, disk), "write-back", 1e6, 1, 64e9))
    a = seq(0, 21, [1, 2, 3, 4, 5])
    admit(pool, a)
    pool.free(a)  # 5 cached blocks, tail first in the eviction order
    x = seq(1, 24, [50, 51, 52, 53, 54, 55])
    admit(pool, x)  # 3 never-hashed blocks, then evicts a's blocks 5, 4, 3
    pool.free(x)
    b = seq(2, 21, [1, 2, 3, 4, 5])
    hit = pool.lookup(b)
    # blocks 1-2 still on the GPU; 3 and 4 in the CPU tier (2 blocks); 5 pushed on to disk
    assert len(hit.blocks) == 2 and hit.tokens == 20
    assert hit.tier_of == (0, 0, 1)
    admit(pool, b)
    # CPU: 2 x 1e6 / 10e9 + 10 us = 210 us; disk: 1e6 / 1e9 + 100 us = 1.1 ms
    assert b.tier_hit_tokens == 12
    assert b.tier_load_s == pytest.approx(1.31e-3, rel=1e-12)
    assert pool.take_overhead_s(0.0) == pytest.approx(1.31e-3, rel=1e-12)
    pool.check()


def test_tiers_need_the_bound_window_model_on_window_layouts() -> None:
    cfg = SimConfig(
        model="deepseek-ai/DeepSeek-V4-Flash",
        gpu="H200",
        tp=8,
        window_model="exact",
        kv_offload=parse_offload("cpu:64GiB"),
    )
    with pytest.raises(KvscopeError, match="--window-model bound"):
        simulate(Workload.build(np.zeros(1), np.array([300]), np.array([2])), cfg)


def test_tier_blocks_carry_the_planners_bytes() -> None:
    from kvscope.sim.run import build_pool

    # DeepSeek-V4-Flash, TP8 on H200: 256-token blocks of 3,850.25 B/token per GPU (21 CSA
    # layers x (584 + 132) / 4 + 20 HCA layers x 584 / 128) = 985,664 B per GPU, 7,885,312 B
    # for the engine; 64 GiB of host memory holds 68,719,476,736 // 7,885,312 = 8,714 blocks.
    v4 = SimConfig(
        model="deepseek-ai/DeepSeek-V4-Flash",
        gpu="H200",
        tp=8,
        kv_offload=parse_offload("cpu:64GiB,disk:1TiB"),
    )
    cpu, disk = build_pool(v4)[3]["offload_tiers"]
    assert cpu["link_bytes_per_block"] == 985_664  # each GPU's own PCIe link
    assert disk["link_bytes_per_block"] == 7_885_312  # one NVMe for all eight shares
    assert cpu["capacity_blocks"] == 8_714
    assert cpu["read_bw"] == 64e9  # H200's PCIe Gen5 x16, from the GPU catalogue
    # Llama-3.1-8B with an fp8 KV cache: 16 tokens x 65,536 B = 1,048,576 B per block
    fp8 = SimConfig(kv_cache_dtype="fp8", kv_offload=parse_offload("cpu:16GiB"))
    (tier,) = build_pool(fp8)[3]["offload_tiers"]
    assert tier["link_bytes_per_block"] == 1_048_576
    assert tier["capacity_blocks"] == 16_384
