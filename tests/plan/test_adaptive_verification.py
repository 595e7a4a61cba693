"""DSpark adaptive verification's profiling runs in vLLM 0.30-0.31's CUDA-graph estimate."""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.plan.adaptive_verification import eager_sizes, enabled
from kvscope.plan.config import EngineConfig
from kvscope.plan.speculative import parse_vllm
from kvscope.specs.hardware import GIB

from .log_cases import Case, load_cases

CASES = {c.id: c for c in load_cases()}
ADAPTIVE = '{"method": "dspark", "num_speculative_tokens": 5, "enable_adaptive_verification": true}'


def _eng(version: str, spec: str | None) -> EngineConfig:
    return EngineConfig(
        engine="vllm",
        engine_version=version,
        speculative=parse_vllm(spec) if spec else None,
    )


def test_eager_sizes_of_the_tant2tls_launches() -> None:
    # batches_to_profile (spec_decode/adaptive_verification.py, 0.30.0) with capture limit
    # 512 and 8192 batched tokens: 512 + 256, then 1024, 2048, 4096, 8192.
    assert eager_sizes(512, 8192) == (768, 1024, 2048, 4096, 8192)
    # a capture list that reaches the batch leaves nothing eager; none without graphs
    assert eager_sizes(8192, 8192) == ()
    assert eager_sizes(0, 8192) == ()


@given(st.integers(1, 4096), st.integers(1, 65536))
def test_eager_sizes_climb_to_the_batch(limit: int, tokens: int) -> None:
    sizes = eager_sizes(limit, tokens)
    assert list(sizes) == sorted(set(sizes))
    assert all(limit < s <= tokens for s in sizes)
    if tokens > limit:
        assert sizes[-1] == tokens
        assert sizes[0] == min(limit + limit // 2, tokens) or limit // 2 == 0
        # each size at most doubles the previous one
        assert all(b <= 2 * a for a, b in itertools.pairwise(sizes))
    else:
        assert sizes == ()


def test_only_dspark_with_adaptive_verification_at_030_to_032() -> None:
    assert enabled(_eng("0.30.1", ADAPTIVE))
    assert enabled(_eng("0.31.0", ADAPTIVE))
    # 0.33.0 runs them only in the real capture and empties the cache afterwards
    assert not enabled(_eng("0.33.0", ADAPTIVE))
    assert not enabled(_eng("0.27.0", ADAPTIVE))
    # the option is off by default (vllm/config/speculative.py, 0.30.0)
    assert not enabled(_eng("0.30.1", '{"method": "dspark", "num_speculative_tokens": 5}'))
    assert not enabled(_eng("0.30.1", None))


def _without_adaptive(case: Case) -> Case:
    spec = case.row["speculative_config"].replace(
        '"enable_adaptive_verification":true', '"enable_adaptive_verification":false'
    )
    assert spec != case.row["speculative_config"]
    return dataclasses.replace(case, row={**case.row, "speculative_config": spec})


def test_adaptive_arms_are_priced_below_what_their_pools_lost() -> None:
    # The launches' own scrapes (tant2tls/Deepseek-serving at ae9b27e): the adaptive arm's
    # num_gpu_blocks against the fixed arm's, same build and flags. The planned cache term is
    # a floor (the drafter's pass, the indexer's logits and the replays are not priced): it
    # must take most of what the start lost off the pool, and no more.
    for row, fixed_blocks, adaptive_blocks in (
        ("tant2tls-v41flash-h100-tp8-0.30-dspark5-adaptive", 231_835, 196_233),
        ("tant2tls-v4flash0731-h100-tp8-0.30-dspark5-adaptive", 45_821, 40_446),
    ):
        case = CASES[row]
        adaptive, fixed = case.plan(), _without_adaptive(case).plan()
        planned = (fixed.num_gpu_blocks - adaptive.num_gpu_blocks) * adaptive.block_bytes
        logged = (fixed_blocks - adaptive_blocks) * adaptive.block_bytes
        assert adaptive.cudagraph_gib > fixed.cudagraph_gib + 1.5
        assert 0.8 * logged < planned < logged, (row, planned / GIB, logged / GIB)


@pytest.mark.slow
def test_eager_sizes_match_vllm_0_31_batches_to_profile() -> None:
    """Differential: vLLM 0.31.0's own batches_to_profile, run on CPU in the oracle venv."""
    from tests.oracle import release_path, vllm_python

    python = vllm_python()
    path = release_path("0.31.0")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_oracle_adaptive.py"
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", PYTHONPATH=path)
    out = subprocess.run(
        [python, str(script)], capture_output=True, text=True, timeout=170, env=env, check=False
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("OK  vllm 0.31.0: 305 cases")
