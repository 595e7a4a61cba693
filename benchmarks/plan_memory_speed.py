"""Throughput of `plan_memory` over a sweep of configurations (what a search calls).

Run: PYTHONPATH=src python benchmarks/plan_memory_speed.py
Sweeps 3 models x 4 GPUs x TP {1,2,4,8} x 2 KV dtypes x 2 engines, timing one cold pass
(memo empty) and one warm pass.
"""

from __future__ import annotations

import contextlib
import itertools
import time

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import GPUSpec, get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

MODELS = ["meta-llama/Llama-3.1-70B", "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V4-Flash"]
GPUS = ["H100", "H200", "B200", "A100-80GB"]


def sweep(models: list[ModelSpec], gpus: list[GPUSpec]) -> tuple[int, float]:
    n, start = 0, time.perf_counter()
    for model, gpu, tp, kv, engine in itertools.product(
        models, gpus, (1, 2, 4, 8), ("auto", "fp8"), ("vllm", "sglang")
    ):
        with contextlib.suppress(KvscopeError):
            plan_memory(
                model,
                gpu,
                Parallelism(tp=tp, ep=model.is_moe),
                EngineConfig(engine=engine, kv_cache_dtype=kv, max_model_len=32768),
            )
        n += 1
    return n, time.perf_counter() - start


def main() -> None:
    models = [load_model(m) for m in MODELS]
    gpus = [get_gpu(g) for g in GPUS]
    for label in ("cold", "warm"):
        n, secs = sweep(models, gpus)
        print(f"{label}: {n} plans in {secs * 1e3:.1f} ms = {n / secs:,.0f} plans/s")


if __name__ == "__main__":
    main()
