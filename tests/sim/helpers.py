"""Small builders shared by the simulator tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvscope.sim.cost import CostCoefficients, CostModel, HardwareTerms
from kvscope.sim.engine import Engine, sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence
from kvscope.workload import Workload

#: A toy deployment: 1 GB of weights read per step on a 1 TB/s, 100 TFLOP/s GPU.
TOY_TERMS = HardwareTerms(
    dense_weight_bytes=1e9,
    expert_weight_bytes=0.0,
    num_experts=0,
    experts_per_token=0,
    active_params=1e9,
    kv_bytes_per_token=1e5,
    attn_flops_per_ctx_token=1e6,
    tp=1,
    peak_flops=1e14,
    hbm_bandwidth=1e12,
)


def toy_cost(overhead_s: float = 0.002) -> CostModel:
    return CostModel(TOY_TERMS, CostCoefficients(overhead_s=overhead_s, mfu=0.5, mbu=0.8))


def workload(
    arrivals: Any,
    prompts: Any,
    outputs: Any,
    hashes: list[list[int]] | None = None,
    hash_block_size: int = 16,
) -> Workload:
    off = vals = None
    if hashes is not None:
        off = np.zeros(len(hashes) + 1, dtype=np.int64)
        np.cumsum([len(h) for h in hashes], out=off[1:])
        vals = np.array([x for h in hashes for x in h], dtype=np.int64)
    return Workload.build(
        arrivals,
        prompts,
        outputs,
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=hash_block_size if hashes is not None else None,
    )


def run(
    w: Workload,
    *,
    num_blocks: int = 200,
    block_size: int = 16,
    caching: bool = True,
    mode: str = "span",
    layout: KVLayout | None = None,
    **sched: Any,
) -> tuple[list[Sequence], Engine]:
    lay = layout or KVLayout(block_size)
    pool = PagedPool(num_blocks, lay, enable_caching=caching)
    cfg = SchedulerConfig(**{"max_model_len": 65536, **sched})
    engine = Engine(Scheduler(cfg, pool), toy_cost(), mode=mode, sample_interval_s=0.0)  # type: ignore[arg-type]
    seqs = sequences_from(w, lay.block_size)
    engine.run(seqs)
    return seqs, engine


def outcome(seqs: list[Sequence]) -> list[tuple[Any, ...]]:
    return [
        (s.status, s.outputs, s.preemptions, s.cached_prompt_tokens, s.first_token_s, s.finish_s)
        for s in seqs
    ]
