"""P/D disaggregation (kvscope.fleet.disagg): transfer sized by the planner, prefill blocks
held until sent, decode admission after the transfer, TTFT including it."""

from __future__ import annotations

import numpy as np
import pytest

from kvscope.fleet.disagg import DisaggConfig, simulate_disagg
from kvscope.fleet.kv_transfer import KVLink
from kvscope.sim import SimConfig
from kvscope.workload import Workload


def _two_requests() -> Workload:
    return Workload.build(np.array([0.0, 0.001]), np.array([1000, 1000]), np.array([20, 20]))


def _run(bandwidth: float, prefill_blocks: int | None = None) -> dict[str, np.ndarray]:
    cfg = DisaggConfig(
        SimConfig(num_gpu_blocks_override=prefill_blocks),
        SimConfig(),
        KVLink("rdma", bandwidth, 10e-6),
    )
    return simulate_disagg(_two_requests(), cfg).columns


def test_transfer_is_the_prompts_kv_and_ttft_includes_it() -> None:
    # Llama-3.1-8B bf16, 1,000 tokens: 1,000 x 131,072 B = 131,072,000 B; at 1 GB/s that is
    # 131.072 ms + 10 us on the link
    c = _run(1e9)
    assert c["transfer_bytes_per_rank"].tolist() == [131_072_000, 131_072_000]
    dur = c["transfer_end_s"] - c["transfer_start_s"]
    assert dur == pytest.approx([0.131082, 0.131082], rel=1e-9)
    # decode admission waits for the KV: the first token comes after the transfer's end
    assert np.all(c["first_token_s"] > c["transfer_end_s"])
    assert np.all(c["ttft_s"] > 0.131082)
    # one prefill engine's transfers go one after another
    assert c["transfer_start_s"][1] == pytest.approx(c["transfer_end_s"][0])
    assert np.all(c["decoded_tokens"] == 20)


def test_prefill_blocks_are_held_until_the_kv_is_sent() -> None:
    # a prefill pool of 70 blocks holds one 1,000-token request (63 blocks of 16): the second
    # request's prefill can start only when the first one's KV has left
    slow = _run(1e9, prefill_blocks=71)
    assert slow["prefill_done_s"][1] > slow["transfer_end_s"][0]
    fast = _run(1e12, prefill_blocks=71)
    assert fast["prefill_done_s"][1] < slow["prefill_done_s"][1] - 0.1


def test_v4_flash_disaggregated_transfer_is_v4s_kv_for_the_prompt() -> None:
    # prefill 2 x 8 H200, decode 1 x 8 H200, NIXL over one 400 Gb/s NIC per GPU. Prompts
    # 128-aligned 2,560 tokens apart: the bytes grow by 2,560 x the planner's 3,850.25 B/token
    # (21 x (584 + 132) / 4 + 20 x 584 / 128, fp8_ds_mla records and fp8 indexer entries)
    v4 = {"model": "deepseek-ai/DeepSeek-V4-Flash", "gpu": "H200", "tp": 8}
    cfg = DisaggConfig(
        SimConfig(dp=2, **v4),  # type: ignore[arg-type]
        SimConfig(**v4),  # type: ignore[arg-type]
        KVLink("rdma", 50e9, 10e-6),
    )
    w = Workload.build(np.array([0.0, 0.5, 1.0]), np.array([4096, 6656, 9216]), np.full(3, 8))
    c = simulate_disagg(w, cfg).columns
    b = c["transfer_bytes_per_rank"]
    assert b[1] - b[0] == 2560 * 3850.25
    assert b[2] - b[1] == 2560 * 3850.25
    assert np.all(b > np.array([4096, 6656, 9216]) * 3850.25)  # plus the fixed window state
    assert c["transfer_end_s"] - c["transfer_start_s"] == pytest.approx(b / 50e9 + 10e-6)
    assert np.all(c["ttft_s"] > c["transfer_end_s"] - c["arrival_s"])
