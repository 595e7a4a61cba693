"""vLLM's mamba cache mode for hybrids by release (kvscope.plan.vllm_mamba_mode).

The published figures: a vLLM 0.28.0 start of Qwen/Qwen3.5-0.8B on an A100 80GB PCIe logged
"Available KV cache memory: 67.08 GiB" and "GPU KV cache size: 5,788,118 tokens, Maximum
concurrency for 262,144 tokens per request: 22.08x" (row
``w1report-a100pcie-qwen35-08b-offline-0.28``). Those tokens are 488 blocks of 544 per
request, which is ``cdiv(262144, 544) = 482`` for the attention group plus two state blocks in
each of the three linear groups: the ``align`` mode the 0.28 default start runs.
"""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig
from kvscope.plan.vllm_mamba_mode import effective_mamba_cache_mode

from .log_cases import case_by_id, evaluate


@pytest.mark.parametrize(
    ("version", "prefix", "given", "runs"),
    [
        ("0.27.1", True, "none", "none"),  # 0.27: hybrids keep prefix caching opt-in
        ("0.28.0", True, "none", "align"),  # 0.28+: on by default, so align
        ("0.34.0", True, "none", "align"),
        ("0.28.0", False, "none", "none"),  # --no-enable-prefix-caching
        ("0.28.0", True, "all", "all"),
        ("0.24.0", True, "align", "align"),  # an explicit mode before 0.28 is kept
    ],
)
def test_mode_by_release(version: str, prefix: bool, given: str, runs: str) -> None:
    eng = EngineConfig(engine_version=version, enable_prefix_caching=prefix, mamba_cache_mode=given)
    assert effective_mamba_cache_mode(eng) == runs


def test_logged_concurrency_counts_two_state_blocks_per_linear_group() -> None:
    case = case_by_id("w1report-a100pcie-qwen35-08b-offline-0.28")
    from_logged = case.plan(kv_cache_memory_bytes=int(67.08 * 2**30))
    assert from_logged.block_size == 544
    assert from_logged.max_concurrency == pytest.approx(22.08, abs=0.005)
    assert evaluate(case).tokens_from_available_err is not None
    assert abs(from_logged.kv_tokens - 5_788_118) / 5_788_118 < 0.001
