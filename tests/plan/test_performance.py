"""The plan's roofline/comm/cost sections agree with the search and with their parts."""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.performance import performance
from kvscope.plan.search import search
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model


@pytest.mark.parametrize(
    "name,gpu,counts",
    [
        ("meta-llama/Llama-3.1-70B", "h100", (4, 8)),
        ("deepseek-ai/DeepSeek-V3", "h200", (8, 16)),
        ("mistralai/Mixtral-8x7B-v0.1", "l40s", (4,)),
    ],
)
def test_plan_and_search_price_a_configuration_the_same(
    name: str, gpu: str, counts: tuple[int]
) -> None:
    m, g = load_model(name), get_gpu(gpu)
    r = search(m, 8192, 64, gpus=[g], counts=counts, top=10)
    assert r.candidates
    for c in r.candidates:
        par = Parallelism(tp=c.tp, pp=c.pp, dp=c.dp, ep=c.ep)
        p = performance(m, g, par, batch=-(-64 // c.dp), context=8192, kv_dtype=c.kv_dtype)
        assert p.throughput.tokens_per_s == pytest.approx(c.tokens_per_s, rel=1e-9)
        assert p.cost.usd_per_million_tokens == pytest.approx(c.usd_per_million_tokens, rel=1e-9)
        assert p.cost.num_gpus == c.num_gpus


def test_single_gpu_throughput_is_the_roofline() -> None:
    m, g = load_model("meta-llama/Llama-3.1-8B"), get_gpu("h100")
    p = performance(m, g, Parallelism(), batch=32, context=4096)
    assert p.throughput.comm_share == 0
    assert p.throughput.tokens_per_s == pytest.approx(p.roofline.decode.tokens_per_s_per_replica)
    assert p.latency.batch == 1 and p.latency.step_s < p.roofline.decode.step_s


def test_zero_batch_says_what_to_do() -> None:
    m, g = load_model("meta-llama/Llama-3.1-8B"), get_gpu("h100")
    with pytest.raises(KvscopeError, match="at least 1"):
        performance(m, g, Parallelism(), batch=0, context=4096)
