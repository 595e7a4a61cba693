"""Communication volumes pinned to model shapes and to nccl-tests' bandwidth definitions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.comm import (
    FP8_DISPATCH_BYTES,
    LinkModel,
    alltoall_bytes,
    comm_volume,
    ring_allreduce_bytes,
)
from kvscope.plan.config import Parallelism
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

H100 = get_gpu("h100")
L40S = get_gpu("l40s")


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_allreduce_time_gives_nccl_tests_busbw_equal_to_the_link(n: int) -> None:
    # nccl-tests doc/PERFORMANCE.md: algbw = S / t; all-reduce busbw = algbw x 2(n-1)/n.
    link = LinkModel(alpha_s=0.0, beta_s_per_byte=1 / 450e9)
    size = 256 * 2**20
    t = link.time(ring_allreduce_bytes(size, n))
    assert size / t * 2 * (n - 1) / n == pytest.approx(450e9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_alltoall_time_gives_nccl_tests_busbw_equal_to_the_link(n: int) -> None:
    # nccl-tests: all-to-all busbw = algbw x (n-1)/n.
    link = LinkModel(alpha_s=0.0, beta_s_per_byte=1 / 300e9)
    size = 64 * 2**20
    t = link.time(alltoall_bytes(size, n))
    assert size / t * (n - 1) / n == pytest.approx(300e9)


def test_llama70b_tp8_decode_all_reduces_twice_per_layer() -> None:
    m = load_model("meta-llama/Llama-3.1-70B")
    c = comm_volume(m, H100, Parallelism(tp=8), tokens=1)
    assert c.tp_allreduce_count == 160  # 80 layers x (attention + MLP)
    # one token: 8192 x 2 B = 16 KiB per all-reduce, 2 x 7/8 of it sent per rank.
    assert c.tp_allreduce_bytes == 160 * 2 * 7 / 8 * 16384
    assert c.tp_link == "NVLink"
    # alpha dominates tiny decode messages: 160 x (10 us + 28.7 KB / 450 GB/s).
    assert c.tp_s == pytest.approx(160 * (10e-6 + 28672 / 450e9))


def test_pcie_gpus_all_reduce_over_pcie() -> None:
    m = load_model("meta-llama/Llama-3.1-70B")
    nv = comm_volume(m, H100, Parallelism(tp=4), tokens=2048, phase="prefill")
    pcie = comm_volume(m, L40S, Parallelism(tp=4), tokens=2048, phase="prefill")
    assert pcie.tp_link.startswith("PCIe")
    assert pcie.tp_allreduce_bytes == nv.tp_allreduce_bytes
    assert pcie.tp_s > 5 * nv.tp_s  # 32 vs 450 GB/s per direction


def test_deepseek_v3_ep_dispatches_fp8_and_combines_bf16() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    c = comm_volume(m, H100, Parallelism(tp=1, dp=8, ep=True), tokens=128)
    assert c.ep_alltoall_count == 2 * 58  # 61 layers, first 3 dense
    assert c.tp_allreduce_count == 0
    assert c.ep_dispatch_bytes / c.ep_combine_bytes == pytest.approx(FP8_DISPATCH_BYTES / 2)
    # combine: 128 tokens x top-8 x 7168 x 2 B x 7/8 off-rank, per MoE layer.
    assert c.ep_combine_bytes == pytest.approx(58 * 128 * 8 * 7168 * 2 * 7 / 8)


def test_ep_with_tp_keeps_attention_and_dense_layer_all_reduces() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    c = comm_volume(m, H100, Parallelism(tp=8, ep=True), tokens=8)
    assert c.tp_allreduce_count == 61 + 3  # attention in all layers + 3 dense FFNs


def test_pipeline_stage_sends_one_activation() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    c = comm_volume(m, H100, Parallelism(pp=2), tokens=512, phase="prefill")
    assert c.pp_sendrecv_bytes == 512 * 4096 * 2
    assert c.tp_allreduce_bytes == 0 and c.ep_dispatch_bytes == 0


def test_single_gpu_moves_nothing() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    c = comm_volume(m, H100, Parallelism(), tokens=64, step_s=0.01)
    assert c.total_bytes == 0 and c.total_s == 0 and c.share_of_step == 0


def test_bad_link_and_token_count_are_rejected() -> None:
    with pytest.raises(KvscopeError):
        LinkModel(alpha_s=-1.0, beta_s_per_byte=1e-9)
    with pytest.raises(KvscopeError):
        comm_volume(load_model("meta-llama/Llama-3.1-8B"), H100, Parallelism(tp=2), tokens=0)


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 8192), st.floats(1e-5, 1.0))
def test_more_tp_sends_more_per_token_and_share_stays_a_fraction(
    tp: int, tokens: int, step_s: float
) -> None:
    m = load_model("Qwen/Qwen2.5-72B-Instruct")
    a = comm_volume(m, H100, Parallelism(tp=tp), tokens, step_s=step_s)
    b = comm_volume(m, H100, Parallelism(tp=2 * tp), tokens, step_s=step_s)
    assert b.bytes_per_token >= a.bytes_per_token
    assert b.total_s >= a.total_s
    assert a.share_of_step is not None and 0.0 <= a.share_of_step < 1.0
