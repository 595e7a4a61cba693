"""vLLM's asynchronous scheduling in the plan: two batches in flight from 0.26, unless turned off.

vllm/config/vllm.py at v0.33.0: ``max_concurrent_batches`` is 2 under async scheduling (on by
default unless an n-gram / suffix drafter forbids it), ``pp + 1`` under it on the V2 runner,
else the pipeline depth; window groups reserve ``max_in_flight_tokens`` beyond their window.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import parse_vllm
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

V4 = "deepseek-ai/DeepSeek-V4-Flash"


def _plan(model: str, pp: int = 1, **eng: object) -> object:
    return plan_memory(
        load_model(model), get_gpu("H200"), Parallelism(tp=8, pp=pp), EngineConfig(**eng)
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("eng", "pp", "in_flight"),
    [
        ({}, 1, 16384),  # 0.33 default: async on, two 8,192-token batches
        ({"async_scheduling": False}, 1, 8192),
        ({"engine_version": "0.25.0"}, 1, 8192),  # before 0.26 one budget whatever the flag
        # PP: async stays on; V4 runs the V2 runner from 0.28, which keeps pp + 1 batches
        # in flight (max_concurrent_batches, vllm/config/vllm.py of 0.27.0 and 0.31.0), and
        # at 0.27 the V1 runner, which keeps the pipeline depth
        ({}, 2, 24576),
        ({"engine_version": "0.27.0"}, 2, 16384),
        ({"max_num_batched_tokens": 4096}, 1, 8192),
    ],
)
def test_in_flight_tokens_follow_the_engines_rule(eng: dict, pp: int, in_flight: int) -> None:
    p = _plan(V4, pp, kv_cache_dtype="fp8", **eng)
    assert p.in_flight_tokens == in_flight  # type: ignore[attr-defined]


def test_an_ngram_drafter_turns_async_off_and_eagle_keeps_it() -> None:
    ngram = parse_vllm('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')
    p = plan_memory(
        load_model("openai/gpt-oss-20b"), get_gpu("H100"), None, EngineConfig(speculative=ngram)
    )
    assert p.in_flight_tokens == 8192
    on = plan_memory(load_model("openai/gpt-oss-20b"), get_gpu("H100"))
    assert on.in_flight_tokens == 16384


def test_the_same_tokens_in_flight_give_the_same_capacity() -> None:
    # with the KV memory fixed, capacity depends only on the tokens each request reserves in
    # flight: async on at a 4,096 budget and async off at 8,192 both reserve 8,192
    kv = 100 * GIB
    on = _plan(V4, kv_cache_dtype="fp8", kv_cache_memory_bytes=kv, max_num_batched_tokens=4096)
    off = _plan(
        V4,
        kv_cache_dtype="fp8",
        kv_cache_memory_bytes=kv,
        max_num_batched_tokens=8192,
        async_scheduling=False,
    )
    both = _plan(V4, kv_cache_dtype="fp8", kv_cache_memory_bytes=kv, max_num_batched_tokens=8192)
    assert on.kv_tokens == off.kv_tokens > both.kv_tokens  # type: ignore[attr-defined]
    assert on.num_gpu_blocks == off.num_gpu_blocks == both.num_gpu_blocks  # type: ignore[attr-defined]


def test_sglang_has_no_async_switch() -> None:
    with pytest.raises(KvscopeError, match="vLLM's flags"):
        _plan(V4, engine="sglang", async_scheduling=False)
    out = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "plan", "--model", V4, "--gpu", "H200",
         "--tp", "8", "--engine", "sglang", "--no-async-scheduling"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
