"""KV transfer sizing for P/D disaggregation (kvscope.fleet.kv_transfer), pinned by hand."""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.fleet.kv_transfer import KVLink, default_link, kv_transfer
from kvscope.plan.config import Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model


def test_v4_flash_transfer_grows_by_the_planners_bytes_per_token() -> None:
    # DeepSeek-V4-Flash: 21 CSA layers keep one 584 B fp8_ds_mla record and one 132 B fp8
    # indexer entry per 4 tokens, 20 HCA layers one 584 B record per 128 tokens:
    # 21 x (584 + 132) / 4 + 20 x 584 / 128 = 3,759 + 91.25 = 3,850.25 B per token per rank
    # (vLLM's padded block stride, 1,002,240 B / 256 = 3,915 B, adds the 576 B alignment).
    model = load_model("deepseek-ai/DeepSeek-V4-Flash")
    h200 = get_gpu("H200")
    plan = plan_memory(model, h200, Parallelism(tp=8))
    assert plan.kv_bytes_per_token == 3850.25
    link = default_link("rdma", h200)
    a = kv_transfer(model, 8192, link, tp=8)
    b = kv_transfer(model, 8192 + 2560, link, tp=8)
    assert b.bytes_per_rank - a.bytes_per_rank == 2560 * 3850.25
    assert b.bytes_per_rank - a.bytes_per_rank == 2560 * plan.kv_bytes_per_token
    # the window state (SWA, compressor states) is a fixed part, never more than the history
    fixed = a.bytes_per_rank - 8192 * 3850.25
    assert 0 < fixed == b.bytes_per_rank - (8192 + 2560) * 3850.25
    assert a.ranks == 8 and a.total_bytes == 8 * a.bytes_per_rank
    assert a.seconds == pytest.approx(a.bytes_per_rank / 50e9 + 10e-6, rel=1e-12)


def test_llama_transfer_is_prompt_times_bytes_per_token_over_the_link() -> None:
    # Llama-3.1-8B bf16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B/token;
    # 1,000 tokens = 131,072,000 B; one 400 Gb/s NIC: 131,072,000 / 50e9 = 2.62144 ms + 10 us.
    model = load_model("meta-llama/Llama-3.1-8B")
    t = kv_transfer(model, 1000, default_link("rdma", get_gpu("H100")))
    assert t.bytes_per_rank == 131_072_000
    assert t.seconds == pytest.approx(2.63144e-3, rel=1e-12)
    fp8 = kv_transfer(model, 1000, default_link("rdma", get_gpu("H100")), kv_dtype="fp8")
    assert fp8.bytes_per_rank == 65_536_000
    # TP2 splits the 8 KV heads: each rank receives half, in parallel
    tp2 = kv_transfer(model, 1000, default_link("nvlink", get_gpu("H100")), tp=2)
    assert tp2.bytes_per_rank == 65_536_000
    assert tp2.seconds == pytest.approx(65_536_000 / 450e9 + 5e-6, rel=1e-12)


def test_bad_links_are_one_line() -> None:
    with pytest.raises(KvscopeError, match="bandwidth must be > 0"):
        KVLink("rdma", 0.0, 1e-5)
    with pytest.raises(KvscopeError, match="unknown kind 'ib'"):
        default_link("ib", get_gpu("H100"))


def test_a_measured_alpha_beta_fit_is_a_link() -> None:
    from kvscope.fleet.kv_transfer import measured_link
    from kvscope.plan.comm import LinkModel

    link = measured_link(LinkModel(20e-6, 1 / 25e9, "sendrecv"))
    assert link.bandwidth == pytest.approx(25e9) and link.latency_s == 20e-6
    # 1 GB at 25 GB/s + 20 us
    assert link.seconds(1e9) == pytest.approx(0.04002)
