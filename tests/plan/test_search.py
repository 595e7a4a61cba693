"""Deployment search: feasibility, ranking, agreement with the scalar roofline, speed."""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.comm import comm_volume
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.roofline import decode_bound
from kvscope.plan.search import Verdict, parallel_shapes, search
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

LLAMA70 = load_model("meta-llama/Llama-3.1-70B")


def test_candidates_are_ranked_cheapest_first_and_fit() -> None:
    r = search(LLAMA70, target_context=8192, target_concurrency=32, top=50)
    assert r.feasible >= len(r.candidates) > 0
    costs = [c.usd_per_million_tokens for c in r.candidates]
    assert costs == sorted(costs)
    for c in r.candidates:
        gpu = get_gpu(c.gpu)
        assert (c.weights_gib + c.kv_cache_gib) * GIB <= gpu.memory_bytes * 0.9
        assert c.num_gpus == c.tp * c.pp * c.dp
        # The engine's logged KV capacity per replica holds the target requests.
        assert c.kv_tokens >= c.kv_needed_tokens == 8192 * -(-32 // c.dp)


def test_every_candidate_passes_the_engine_budget() -> None:
    r = search(LLAMA70, 32768, 16, gpus=[get_gpu("h100"), get_gpu("l40s")], top=30)
    for c in r.candidates:
        par = Parallelism(tp=c.tp, pp=c.pp, dp=c.dp, ep=c.ep)
        cfg = EngineConfig(
            max_model_len=32768,
            kv_cache_dtype=c.kv_dtype,
            max_num_seqs=-(-16 // c.dp),
            gpu_memory_utilization=0.9,
        )
        plan = plan_memory(LLAMA70, get_gpu(c.gpu), par, cfg)
        assert plan.fits and plan.kv_tokens >= c.kv_needed_tokens
        assert plan.kv_tokens == c.kv_tokens
    assert r.engine_checked == len(r.candidates) + r.engine_rejected


def test_a_custom_check_replaces_the_engine_budget() -> None:
    def only_tp2(model, gpu, par, kv, ctx, reqs, util):  # type: ignore[no-untyped-def]
        return Verdict(1.0, 2.0, 3) if par.tp == 2 else None

    r = search(LLAMA70, 4096, 4, gpus=[get_gpu("h100")], counts=(2, 4, 8), check=only_tp2)
    assert r.candidates and {c.tp for c in r.candidates} == {2}
    assert r.engine_rejected > 0


def test_70b_bf16_never_fits_one_80gb_gpu() -> None:
    r = search(LLAMA70, 4096, 1, gpus=[get_gpu("h100")], counts=(1,), top=100)
    assert r.feasible == 0 and r.candidates == ()
    r2 = search(LLAMA70, 4096, 1, gpus=[get_gpu("h100")], counts=(2,), top=100)
    assert {c.tp * c.pp for c in r2.candidates} == {2}


def test_search_agrees_with_scalar_roofline_and_comm() -> None:
    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    r = search(m, 4096, 64, gpus=[get_gpu("h100"), get_gpu("l40s")], counts=(2, 4, 8), top=40)
    assert r.candidates
    for c in r.candidates:
        par = Parallelism(tp=c.tp, pp=c.pp, dp=c.dp, ep=c.ep)
        batch = -(-64 // c.dp)
        b = decode_bound(m, get_gpu(c.gpu), par, batch, 4096, c.kv_dtype)
        micro = -(-batch // c.pp)
        comm = comm_volume(m, get_gpu(c.gpu), par, micro)
        tpot = c.pp * (b.step_s + comm.total_s)
        assert c.tpot_s == pytest.approx(tpot, rel=1e-9)
        assert c.tokens_per_s == pytest.approx(c.dp * batch / tpot, rel=1e-9)


def test_fp8_kv_lets_more_context_fit() -> None:
    h100 = [get_gpu("h100")]
    # 4 x 128K tokens x 320 KiB = 160 GiB of bf16 KV: 40 GiB per GPU on top of 33 GiB of
    # weights exceeds 90 % of 79.2 GiB; fp8 halves it to 20 GiB and fits.
    bf16 = search(LLAMA70, 131072, 4, gpus=h100, counts=(4,), kv_dtypes=["bfloat16"])
    fp8 = search(LLAMA70, 131072, 4, gpus=h100, counts=(4,), kv_dtypes=["fp8"])
    assert bf16.feasible == 0 < fp8.feasible


def test_qwen_7b_never_gets_tp_that_does_not_divide_its_heads() -> None:
    m = load_model("Qwen/Qwen2.5-7B-Instruct")  # 28 heads, 4 KV heads
    tps = {s[0] for s in parallel_shapes((1, 2, 4, 8, 16), m)}
    assert tps == {1, 2, 4}


def test_expert_parallel_only_offered_for_moe() -> None:
    assert not any(s[3] for s in parallel_shapes((8,), LLAMA70))
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    assert any(s[3] for s in parallel_shapes((8,), v3))


def test_price_override_scales_cost() -> None:
    h100 = [get_gpu("h100")]
    a = search(LLAMA70, 8192, 16, gpus=h100, counts=(4,), gpu_hour_price=2.0)
    b = search(LLAMA70, 8192, 16, gpus=h100, counts=(4,), gpu_hour_price=4.0)
    assert b.candidates[0].usd_per_million_tokens == pytest.approx(
        2 * a.candidates[0].usd_per_million_tokens
    )


@pytest.mark.parametrize("ctx,conc", [(0, 1), (1, 0)])
def test_bad_targets_are_user_errors(ctx: int, conc: int) -> None:
    with pytest.raises(KvscopeError):
        search(LLAMA70, ctx, conc)


def test_searches_at_least_ten_thousand_configurations_per_second() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    search(m, 8192, 256, counts=(1, 2, 4, 8, 16, 32, 64))  # warm caches
    r = search(m, 8192, 256, counts=(1, 2, 4, 8, 16, 32, 64))
    assert r.evaluated > 5000
    assert r.configs_per_s >= 10_000


def test_the_quick_screen_reserves_what_the_release_grows_outside_torch() -> None:
    # The screen's per-GPU reserve follows vLLM's non-torch memory by GPU, TP and release
    # (kvscope.plan.vllm_collectives): 2.1 GiB on an NVSwitch TP group up to 0.25, one GPU's
    # figure from 0.26; SGLang keeps the 0.19-era constants.
    from kvscope.plan.config import EngineConfig
    from kvscope.plan.search import RESERVE_GIB_TP, quick_reserve
    from kvscope.specs.hardware import GIB, get_gpu

    pool = [get_gpu("H100"), get_gpu("RTX PRO 6000")]
    old = quick_reserve(pool, [1, 2], EngineConfig(engine_version="0.25.0")) / GIB
    new = quick_reserve(pool, [1, 2], EngineConfig(engine_version="0.31.0")) / GIB
    sgl = quick_reserve(pool, [1, 2], EngineConfig(engine="sglang")) / GIB
    assert old[0, 2] == pytest.approx(1.5 + 2.1) and new[0, 2] == pytest.approx(1.5 + 0.13)
    assert old[1, 2] == pytest.approx(1.5 + 0.25)  # PCIe: NCCL's figure in every release
    assert new[0, 1] == pytest.approx(new[0, 2])
    assert sgl[0, 2] == pytest.approx(RESERVE_GIB_TP)
