"""vLLM 0.31.0's own KV cache manager on DeepSeek V4.1's groups: blocks per group, step by step.

Runs in the vLLM-on-CPU oracle interpreter (tests/oracle.py) with the Python sources of the
v0.31.0 wheel first on the path (the release with ``vllm/models/deepseek_v41``; 0.33.0's
venv lacks its spec fields), plus whatever packages that release imports beyond the venv:

    pip download --no-deps vllm==0.31.0 -d W && unzip -q W/vllm-0.31.0-*.whl 'vllm/*' -d T
    VLLM_TARGET_DEVICE=cpu PYTHONPATH=T ~/.cache/kvscope/vllm-oracle-0.33.0/bin/python \\
        benchmarks/vllm_oracle_dsv41.py SCENARIO.json

It declares the specs V4.1's layers declare at v0.31.0 (``vllm/models/deepseek_v41/
attention.py``, ``compressor.py``; SM90, ``fp8_ds_mla``): a ``SlidingWindowMLASpec`` window
cache per layer (32-token blocks, window 128), and on each kv source an ``MLAAttentionSpec``
of 64-token blocks, its indexer keys and, at ratio 2, a ``CircularBufferSpec`` ring. vLLM
groups them (``get_kv_cache_configs``), then a ``KVCacheManager`` of ``num_blocks`` blocks
(prefix caching off) runs the scenario: for each step, each request's ``allocate_slots`` for
its chunk; printed as JSON: per step and request the non-null blocks of each group (groups
named by kind: ``swa``, ``mla``, ``ring``), the free-block count, and the full-sequence
admission count (``apply_admission_cap``) of a fresh request at each of ``admission_lens``.

SCENARIO.json: ``{"compress_ratios": [...], "kv_source_layer_ids": [...], "num_layers": N,
"num_blocks": B, "max_model_len": M, "max_in_flight_tokens": F, "steps": [{"req": chunk}],
"admission_lens": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import dataclasses
from types import SimpleNamespace as NS

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core import kv_cache_utils as ku
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import CircularBufferSpec, MLAAttentionSpec, SlidingWindowMLASpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.request import Request

BLOCK = 64  # "Setting kv cache block size to 64" (both public V4.1 start-up logs)


def specs(sc: dict) -> dict[str, object]:
    out: dict[str, object] = {}
    for i in range(sc["num_layers"]):
        r = sc["compress_ratios"][i]
        out[f"layers.{i}.attn.swa_cache"] = SlidingWindowMLASpec(
            block_size=32,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=512,
            dtype=torch.uint8,
            sliding_window=128,
            cache_dtype_str="fp8_ds_mla",
            state_content_bytes=584,
            alignment=576,
            model_version="deepseek_v4",
        )
        if i in sc["kv_source_layer_ids"] and r:
            out[f"layers.{i}.attn"] = MLAAttentionSpec(
                block_size=BLOCK,
                num_kv_heads=1,
                head_size=512,
                dtype=torch.uint8,
                tokens_per_state=r,
                cache_dtype_str="fp8_ds_mla",
                alignment=576,
                model_version="deepseek_v4",
                state_content_bytes=584,
            )
            out[f"layers.{i}.attn.indexer.k_cache"] = MLAAttentionSpec(
                block_size=BLOCK,
                num_kv_heads=1,
                head_size=132,
                dtype=torch.uint8,
                tokens_per_state=r,
                alignment=576,
            )
            if r > 1:
                out[f"layers.{i}.attn.compressor.state_cache"] = CircularBufferSpec(
                    block_size=8,
                    num_kv_heads=1,
                    head_size=1024,
                    head_size_v=0,
                    dtype=torch.float32,
                )
    return out


class _Cfg:
    """Only the VllmConfig fields the grouping code reads; any other read fails loudly."""

    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"oracle config lacks {name}")


def kv_config(sc: dict) -> object:
    cache = _Cfg(
        block_size=BLOCK,
        num_gpu_blocks_override=sc["num_blocks"],
        enable_prefix_caching=False,
        prefix_match_unit=None,
        kv_cache_memory_bytes=None,
        mamba_cache_mode="none",
        cache_dtype="fp8_ds_mla",
        prefix_cache_retention_interval=0,
        get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC,
    )
    mml, mnbt = sc["max_model_len"], sc["max_in_flight_tokens"]
    hf = NS(model_type="deepseek_v41")
    vc = _Cfg(
        cache_config=cache,
        scheduler_config=_Cfg(
            disable_hybrid_kv_cache_manager=False,
            max_num_batched_tokens=mnbt,
            max_num_seqs=64,
            async_scheduling=False,
        ),
        model_config=_Cfg(
            max_model_len=mml,
            original_max_model_len=mml,
            hf_config=hf,
            use_mla=True,
            hf_text_config=hf,
        ),
        parallel_config=_Cfg(
            tensor_parallel_size=1,
            decode_context_parallel_size=1,
            pipeline_parallel_size=1,
            prefill_context_parallel_size=1,
            data_parallel_size=1,
        ),
        speculative_config=None,
        kv_transfer_config=None,
        num_prefill_lookahead_tokens=0,
        num_speculative_tokens=0,
        max_in_flight_tokens=mnbt,
        attention_config=NS(hisparse_config=None),
    )
    ku.KVCacheSpecRegistry.check_kv_cache_spec_registry = lambda *a, **kw: None  # type: ignore[method-assign]
    ku.get_hisparse_kv_cache_groups = lambda *a, **kw: None  # type: ignore[attr-defined]
    kc = ku.get_kv_cache_configs(vc, [specs(sc)], [1 << 50])[0]
    kc = ku.generate_scheduler_kv_cache_config([kc])  # the engine core's scheduler view
    return dataclasses.replace(kc, num_blocks=sc["num_blocks"])


def kind(group: object) -> str:
    inner = group.kv_cache_spec  # type: ignore[attr-defined]
    return {"SlidingWindowMLASpec": "swa", "MLAAttentionSpec": "mla"}.get(
        type(inner).__name__, "ring"
    )


def main() -> None:
    sc = json.loads(Path(sys.argv[1]).read_text())
    kc = kv_config(sc)
    kinds = [kind(g) for g in kc.kv_cache_groups]  # type: ignore[attr-defined]
    mgr = KVCacheManager(
        kc,
        max_model_len=sc["max_model_len"],
        scheduler_block_size=BLOCK,
        hash_block_size=BLOCK,
        max_in_flight_tokens=sc["max_in_flight_tokens"],
        enable_caching=False,
    )
    managers = mgr.coordinator.single_type_managers
    null = mgr.block_pool.null_block
    reqs: dict[str, Request] = {}
    out: dict[str, object] = {
        "kinds": kinds,
        "block_sizes": [g.kv_cache_spec.block_size for g in kc.kv_cache_groups],  # type: ignore[attr-defined]
        "free0": mgr.block_pool.get_num_free_blocks(),
        "steps": [],
    }
    steps: list[object] = []
    for step in sc["steps"]:
        rows = {}
        for rid, chunk in step.items():
            if rid not in reqs:
                reqs[rid] = Request(
                    rid, [1] * sc["max_model_len"], SamplingParams(max_tokens=1), None
                )
            req = reqs[rid]
            got = mgr.allocate_slots(req, chunk)
            if got is not None:
                req.num_computed_tokens += chunk
            held = [sum(1 for b in m.req_to_blocks.get(rid, []) if b is not null) for m in managers]
            rows[rid] = {"ok": got is not None, "computed": req.num_computed_tokens, "held": held}
        steps.append({"reqs": rows, "free": mgr.block_pool.get_num_free_blocks()})
    out["steps"] = steps
    adm = []
    for n in sc.get("admission_lens", []):
        adm.append(
            mgr.coordinator.get_num_blocks_to_allocate(
                request_id="fresh",
                num_tokens=n,
                new_computed_blocks=tuple([] for _ in kinds),
                num_encoder_tokens=0,
                total_computed_tokens=0,
                num_local_computed_tokens=0,
                num_tokens_main_model=n,
                apply_admission_cap=True,
            )
        )
    out["admission"] = adm
    print(json.dumps(out))


if __name__ == "__main__":
    main()
