"""Llama 4's chunked groups in the simulator: kept as full history (kvscope.sim.layout).

vLLM 0.19 keeps Scout's 36 chunked layers in three groups beside one full group, so its pool
counts 12-layer blocks; the simulator's full-history view draws 48-layer blocks, a quarter as
many, and their tokens are the "GPU KV cache size" 0.19 logs (``num_blocks // groups x
block_size``, vllm/v1/core/kv_cache_utils.py ``_report_kv_cache_config``).
"""

from __future__ import annotations

from tests.plan.vl_configs import SCOUT

from kvscope.sim.deployment import build_pool
from kvscope.sim.run import SimConfig


def test_full_history_view_of_the_chunked_pool() -> None:
    cfg = SimConfig(model=str(SCOUT), tp=4, engine_version="0.19.0", max_model_len=131072)
    pool, layout, _terms, info = build_pool(cfg)
    assert layout.name == "full" and not layout.windows
    # 70,388 planned blocks of 12 layers in four groups (the plan of
    # tests/plan/test_vllm_chunked.py at 131,072 tokens, with the sampler phase read from the
    # code: kvscope.plan.sampler_phase)
    assert info["num_gpu_blocks"] == 70_388 // 4
    assert info["num_gpu_blocks"] * 16 == info["kv_tokens"] == 281_552
    assert pool.capacity == info["num_gpu_blocks"] - 1  # vLLM's null block
