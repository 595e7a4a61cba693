"""DeepSeek V4.1 in the simulator (kvscope.sim.layout.deepseek_v41_layout, the hybrid pool's
ring groups) against vLLM 0.31.0's own KV cache manager, the planner's pool and invariants.

The model is the real config of huggingface.co/deepseek-ai/DeepSeek-V4.1-Flash (revision
dba1be0a, tests/plan/data/configs/SOURCES.md). vLLM 0.31.0 gives it 9 KV-cache groups (the
0.31.1 start-up log prints their block sizes ``(32, 32, 32, 32, 32, 32, 32, 64, 8)``): seven
window groups (32-token blocks, window 128), one compressed + indexer group (64-token
blocks) and one compressor-ring group (one block per request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.plan.kv_layout import vllm_layout
from kvscope.sim.hybrid_pool import HybridPool
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import layout_for
from kvscope.sim.sequence import Sequence
from kvscope.specs.config_parse import parse_config
from kvscope.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "plan" / "data" / "configs" / "deepseek-v4.1-flash.json"
ORACLE = ROOT / "benchmarks" / "vllm_oracle_dsv41.py"


@pytest.fixture(scope="module")
def v41() -> ModelSpec:
    return parse_config(json.loads(CONFIG.read_text()), str(CONFIG))


def held(pool: HybridPool, seq: Sequence) -> dict[str, list[int]]:
    """Blocks ``seq`` holds per group kind, as vLLM counts them (null entries excluded)."""
    tabs = pool._tabs[seq.index]
    return {
        "mla": [sum(1 for b in tabs[0] if b is not None)],
        "swa": [sum(1 for b in t if b is not None) for t in tabs[1:]],
        "ring": [pool.layout.ring_groups],
    }


def test_v41_gets_its_own_layout_not_v4s(v41: ModelSpec) -> None:
    lay = layout_for(v41, 64)
    assert lay.name == "deepseek_v41"
    assert type(PagedPool(100, lay)) is HybridPool
    # the logged group block sizes: 7 x 32 (windows), 64 (compressed), 8 (ring)
    assert (lay.block_size, lay.ring_groups) == (64, 1)
    assert [(w.block_tokens, w.window_tokens) for w in lay.windows] == [(32, 128)] * 7
    # a window starting mid-block spans cdiv(127, 32) + 1 blocks
    assert [w.cap_blocks for w in lay.windows] == [5] * 7
    assert lay.fixed_blocks_per_request == 36
    with pytest.raises(Exception, match="block-size 64"):
        layout_for(v41, 256)


@pytest.mark.parametrize(
    ("tokens", "blocks"),
    # cdiv(L, 64) + 7 x min(cdiv(L, 32), 5) + 1 ring
    [(1, 1 + 7 + 1), (32, 1 + 7 + 1), (33, 1 + 14 + 1), (129, 3 + 35 + 1), (262144, 4096 + 36)],
)
def test_blocks_per_request_by_length(v41: ModelSpec, tokens: int, blocks: int) -> None:
    assert layout_for(v41).blocks(tokens) == blocks


def test_planner_and_simulator_share_the_pool(v41: ModelSpec) -> None:
    plan = vllm_layout(v41, tuple(range(v41.num_layers)), "fp8_ds_mla", 1, 64)
    sim = layout_for(v41, 64)
    kinds = [g.kind for g in plan.groups]
    assert kinds.count("dsv4_swa") == len(sim.windows)
    assert kinds.count("dsv41_ring") == sim.ring_groups
    assert plan.block_size == sim.block_size
    # a max_model_len request: the planner's reservation (vLLM max_memory_usage_bytes) is
    # what the simulator's full-sequence admission check asks for it
    for mml, batched in ((262144, 8192), (262144, 16384), (32768, 2048)):
        pool = PagedPool(10, sim)
        assert isinstance(pool, HybridPool)
        pool.configure(batched, mml)
        assert plan.blocks_per_request(mml, batched) == pool.admission_blocks(mml)
    # 262,144 tokens, two async batches of 8,192 in flight: 4,096 + 7 x 517 + 1
    assert plan.blocks_per_request(262144, 16384) == 4096 + 7 * 517 + 1


def _replay(v41: ModelSpec, sc: dict) -> dict:
    """The oracle scenario run through the simulator's hybrid pool."""
    lay = layout_for(v41, 64)
    pool = PagedPool(sc["num_blocks"], lay, enable_caching=False)
    assert isinstance(pool, HybridPool)
    pool.configure(sc["max_in_flight_tokens"], sc["max_model_len"])
    seqs: dict[str, Sequence] = {}
    steps = []
    for step in sc["steps"]:
        rows = {}
        for rid, chunk in step.items():
            seq = seqs.setdefault(rid, Sequence(len(seqs), rid, 0.0, sc["max_model_len"], 1))
            ok = pool.allocate(seq, seq.computed + chunk)
            if ok:
                seq.computed += chunk
            h = held(pool, seq) if seq.index in pool._tabs else {"mla": [0], "swa": [], "ring": []}
            rows[rid] = {"ok": ok, "computed": seq.computed, "held": h}
            pool.check()
        steps.append({"reqs": rows, "free": pool.capacity - pool.used})
    adm = [pool.admission_blocks(n) for n in sc["admission_lens"]]
    return {"steps": steps, "admission": adm}


def _scenario(v41: ModelSpec) -> dict:
    raw = json.loads(CONFIG.read_text())
    text = raw.get("text_config", raw)
    n = v41.num_layers
    # chunked prefills, decodes, a request joining mid-way; "c" first asks for 928 tokens:
    # 15 + 7 x 29 + 1 (ring) = 219 blocks with 218 free, refused by the ring's one block
    steps = [{"a": 512}, {"a": 512, "b": 100}, {"a": 1, "b": 412}, {"a": 1, "b": 1}]
    steps += [{"a": 200, "b": 37}, {"a": 1, "b": 1, "c": 928}, {"a": 1, "b": 1, "c": 1}]
    steps += [{"a": 1, "b": 127, "c": 500}, {"a": 64, "b": 1}] + [{"a": 1, "b": 1}] * 3
    return {
        "compress_ratios": text["compress_ratios"][:n],
        "kv_source_layer_ids": text["kv_source_layer_ids"],
        "num_layers": n,
        "num_blocks": 320,
        "max_model_len": 4096,
        "max_in_flight_tokens": 512,
        "steps": steps,
        "admission_lens": [1, 32, 33, 100, 128, 129, 640, 641, 1000, 4096],
    }


def _by_kind(kinds: list[str], counts: list[int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"mla": [], "swa": [], "ring": []}
    for k, c in zip(kinds, counts, strict=True):
        out[k].append(c)
    return out


@pytest.mark.slow
def test_blocks_per_group_match_vllm_0_31_kv_cache_manager(v41: ModelSpec) -> None:
    """Differential: vLLM 0.31.0's KVCacheManager (run on CPU) and the simulator's pool hold
    the same blocks per group after every allocation, refuse the same allocation and count
    the same full-sequence admission blocks."""
    from tests.oracle import release_path, vllm_python

    python = vllm_python()
    path = release_path("0.31.0")
    sc = _scenario(v41)
    scen = Path(os.environ.get("TMPDIR", "/tmp")) / f"kvscope-v41-{os.getpid()}.json"
    scen.write_text(json.dumps(sc))
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", PYTHONPATH=path)
    out = subprocess.run(
        [python, str(ORACLE), str(scen)],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
        check=False,
    )
    scen.unlink()
    assert out.returncode == 0, out.stderr[-2000:]
    want = json.loads(out.stdout.strip().splitlines()[-1])
    assert want["block_sizes"] == [32] * 7 + [64, 8]
    got = _replay(v41, sc)
    assert got["admission"] == want["admission"]
    refused = 0
    for mine, theirs in zip(got["steps"], want["steps"], strict=True):
        assert mine["free"] == theirs["free"]
        for rid, row in theirs["reqs"].items():
            m = mine["reqs"][rid]
            assert (m["ok"], m["computed"]) == (row["ok"], row["computed"]), rid
            refused += not row["ok"]
            if row["computed"]:
                assert m["held"] == _by_kind(want["kinds"], row["held"]), (rid, theirs)
    assert refused  # the scenario reaches a full pool


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 700)), min_size=1, max_size=30))
def test_pool_invariants_under_random_chunks(v41: ModelSpec, plan: list[tuple[int, int]]) -> None:
    lay = layout_for(v41, 64)
    pool = PagedPool(400, lay, enable_caching=False)
    assert isinstance(pool, HybridPool)
    pool.configure(512, 1 << 20)
    seqs = [Sequence(i, f"r{i}", 0.0, 1 << 20, 1) for i in range(3)]
    last = [0, 0, 0]  # each request's last allocated chunk
    for i, chunk in plan:
        seq = seqs[i]
        if pool.allocate(seq, seq.computed + chunk):
            seq.computed += chunk
            last[i] = chunk
        pool.check()
        if seq.index in pool._tabs:
            h = held(pool, seq)
            # the compressed group grows with the context; the windows keep at most the
            # last 127 processed tokens plus the chunk in flight; the ring is one block
            assert h["mla"] == [-(-seq.computed // 64)]
            assert all(w <= -(-(127 + last[i]) // 32) + 1 for w in h["swa"])
            assert h["ring"] == [1]
    for seq in seqs:
        pool.free(seq)
    pool.check()
    assert pool.used == 0


def test_simulate_v41_from_the_hub_cache_admits_by_its_layout(tmp_path: Path) -> None:
    """``kvscope simulate`` on the V4.1-Flash id (offline, the test hub cache): 64 requests
        of 4,096 + 64 tokens on a 3,000-block pool; each holds 65 + 35 + 1 = 101 blocks at its
        end, and a 4,096-token prefill step takes 64 + 7 x 128 + 1 = 961 until the next step frees
    its out-of-window blocks: the peak stays within one decoding request of the pool."""
    from tests.plan.log_cases import hub_cache

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT / "src")
    args = ["--model", "deepseek-ai/DeepSeek-V4.1-Flash", "--gpu", "H100", "--tp", "8"]
    args += ["--enable-expert-parallel", "--max-model-len", "262144", "--max-num-seqs", "64"]
    args += ["--arrival", "concurrency:n=64", "--num-requests", "64", "--prompt-len", "4096"]
    args += ["--output-len", "64", "--json"]
    cmd = [sys.executable, "-m", "kvscope.cli.main", "simulate", *args]
    full = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert full.returncode == 0, full.stderr
    res = json.loads(full.stdout)
    assert res["preemptions"] == 0
    assert res["kv_blocks_used_peak"] == 64 * 101  # the planned pool holds them all
    for model in ("bound", "exact"):  # the per-request bound and vLLM's block tables
        small = subprocess.run(
            [*cmd, "--num-gpu-blocks-override", "3000", "--window-model", model],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert small.returncode == 0, small.stderr
        res = json.loads(small.stdout)
        assert res["kv_blocks_capacity"] == 2999
        assert 2999 - 101 < res["kv_blocks_used_peak"] <= 2999, model


def test_simulate_v41_refuses_dcp_in_one_line(tmp_path: Path) -> None:
    from tests.plan.log_cases import hub_cache

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT / "src")
    args = ["--model", "deepseek-ai/DeepSeek-V4.1-Flash", "--gpu", "H100", "--tp", "8"]
    args += ["--enable-expert-parallel", "--max-model-len", "65536", "--dcp", "2"]
    cmd = [sys.executable, "-m", "kvscope.cli.main", "simulate", *args, "--num-requests", "4"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "decode-context-parallel-size" in lines[0], out.stderr
