"""A vLLM release's own DeepSeek V4 KV grouping and report code against kvscope.plan.dsv4_pool.

Runs in the vLLM-on-CPU oracle venv (tests/oracle.py) with the Python sources of the release
under test put first on the path (unpack ``vllm/*.py`` of its PyPI wheel; the venv's own
0.33.0 package supplies nothing then):

    pip download --no-deps vllm==0.25.0 -d W && unzip -q W/vllm-0.25.0-*.whl 'vllm/*.py' -d T
    VLLM_TARGET_DEVICE=cpu PYTHONPATH=T ~/.cache/kvscope/vllm-oracle-0.33.0/bin/python \\
        benchmarks/vllm_oracle_dsv4.py

Checked with the 0.22.0, 0.23.0, 0.25.0, 0.26.0, 0.27.0 and 0.31.0 wheels (0.22 and 0.23 import the
``gguf`` package at start-up; the venv lacks it, so give them a stub ``gguf`` package on the
path; 0.33 moved the grouping to ``kv_cache_planning``, which this script does not call).
The script declares the KV specs V4-Flash's layers declare in that release (window cache per
layer, C4 / C128 MLA pages, indexer pages, fp32 compressor states; ``fp8_ds_mla``) plus 0, 1
(MTP) or 3 (DSpark) window-only drafter layers (one case with the MXFP4 indexer cache), lets
vLLM group them (``get_kv_cache_groups``), size the pool (``get_kv_cache_config_from_groups``)
and compute the concurrency (``get_max_concurrency_for_kv_cache_config``), and compares group
sizes, block count and the logged token figure with kvscope's. The VllmConfig is a namespace
carrying only the fields these functions read. Prints one line per case and exits 1 on any
mismatch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace as NS

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

import torch
import vllm
from vllm.v1.core import kv_cache_utils as ku
from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec

from kvscope.plan.kv_layout import vllm_layout
from kvscope.plan.vllm_budget import REPORT_COUNTS_BLOCKS_SINCE
from kvscope.specs.registry import load_model

GIB = 1 << 30
FLASH = load_model("deepseek-ai/DeepSeek-V4-Flash")
RATIOS = [FLASH.layers[i].attention.compress_ratio for i in range(FLASH.num_layers)]
RELEASE = tuple(int(x) for x in vllm.__version__.split("+")[0].split(".")[:3])
NEW_API = "tokens_per_state" in MLAAttentionSpec.__dataclass_fields__


def _mla(head: int, ratio: int, dtype_str: str | None) -> MLAAttentionSpec:
    kw: dict[str, object] = {"block_size": 256, "num_kv_heads": 1, "head_size": head}
    kw |= {"dtype": torch.uint8, "alignment": 576}
    if dtype_str:
        kw |= {"cache_dtype_str": dtype_str, "model_version": "deepseek_v4"}
    if NEW_API:
        kw |= {"tokens_per_state": ratio, "max_tp_shards": 1}
        if dtype_str:
            kw["state_content_bytes"] = 584
    else:
        kw["compress_ratio"] = ratio
    return MLAAttentionSpec(**kw)  # type: ignore[arg-type]


def _window(block: int, head: int, window: int, dtype: torch.dtype, swa: bool):  # type: ignore[no-untyped-def]
    kw: dict[str, object] = {"block_size": block, "num_kv_heads": 1, "head_size": head}
    kw |= {"dtype": dtype, "sliding_window": window, "alignment": 576}
    if swa:
        kw |= {"cache_dtype_str": "fp8_ds_mla", "model_version": "deepseek_v4"}
        if NEW_API:
            kw["state_content_bytes"] = 584
    if NEW_API:
        kw["max_tp_shards"] = 1
    return SlidingWindowMLASpec(**kw)  # type: ignore[arg-type]


def _index_head(indexer: str) -> int:
    """Bytes a token of the C4 indexer cache the release's V4 layer declares: 132 (fp8 keys
    and scales); an MXFP4 cache 68 from 0.27.0, fp8's 132 before (``k_cache_head_dim`` in
    vllm/models/deepseek_v4/attention.py)."""
    return 68 if indexer == "fp4" and RELEASE >= (0, 27, 0) else 132


def specs(drafter_layers: int, indexer: str = "fp8") -> dict[str, object]:
    out: dict[str, object] = {}
    for i, r in enumerate(RATIOS + [0] * drafter_layers):
        p = f"layers.{i}"
        out[p + ".swa"] = _window(64, 512, 128, torch.uint8, swa=True)
        if r > 1:
            coff = 1 + (r == 4)
            out[p + ".attn"] = _mla(512, r, "fp8_ds_mla")
            state = _window(4 if r == 4 else 8, 2 * coff * 512, coff * r, torch.float32, False)
            out[p + ".state"] = state
            if r == 4:
                out[p + ".idx"] = _mla(_index_head(indexer), 4, None)
                out[p + ".idx_state"] = _window(4, 2 * 2 * 128, 8, torch.float32, swa=False)
    return out


def config(length: int, in_flight: int):  # type: ignore[no-untyped-def]
    from vllm.v1.kv_cache_layout import KVCacheLayout  # 0.29+

    layout = KVCacheLayout.BLHNC
    return NS(
        model_config=NS(max_model_len=length),
        scheduler_config=NS(
            max_num_batched_tokens=in_flight, disable_hybrid_kv_cache_manager=False
        ),
        cache_config=NS(
            num_gpu_blocks_override=None,
            get_resolved_kv_cache_layout=lambda: layout,
            kv_cache_layout=None,
            prefix_cache_retention_interval=None,
        ),
        speculative_config=None,
        max_in_flight_tokens=in_flight,
        kv_transfer_config=None,
        attention_config=NS(hisparse_config=None),
        parallel_config=NS(decode_context_parallel_size=1, prefill_context_parallel_size=1),
    )


def engine(
    drafter_layers: int, avail: int, length: int, in_flight: int, indexer: str = "fp8"
) -> tuple[list[int], int, int]:
    try:
        cfg = config(length, in_flight)
    except ImportError:  # releases before the KV-cache layout enum (0.29)
        cfg = _plain(length, in_flight)
    groups = ku.get_kv_cache_groups(cfg, specs(drafter_layers, indexer))
    kc = ku.get_kv_cache_config_from_groups(cfg, groups, avail)
    conc = ku.get_max_concurrency_for_kv_cache_config(cfg, kc)
    return sorted(len(g.layer_names) for g in groups), kc.num_blocks, int(conc * length)


def _plain(length: int, in_flight: int) -> NS:
    return NS(
        model_config=NS(max_model_len=length),
        scheduler_config=NS(
            max_num_batched_tokens=in_flight, disable_hybrid_kv_cache_manager=False
        ),
        cache_config=NS(num_gpu_blocks_override=None),
        speculative_config=None,
        max_in_flight_tokens=in_flight,
        kv_transfer_config=None,
        parallel_config=NS(decode_context_parallel_size=1, prefill_context_parallel_size=1),
    )


def planner(
    drafter_layers: int, avail: int, length: int, in_flight: int, indexer: str = "fp8"
) -> tuple[list[int], int, int]:
    lay = vllm_layout(
        FLASH,
        tuple(range(FLASH.num_layers)),
        "fp8",
        2,
        256,
        indexer,
        release=RELEASE,
        draft_window_layers=drafter_layers,
    )
    blocks = avail // lay.block_bytes
    need = lay.reported_blocks_per_request(length, in_flight, RELEASE < REPORT_COUNTS_BLOCKS_SINCE)
    return sorted(g.num_layers for g in lay.groups), blocks, int(blocks / need * length)


CASES: list[tuple[int, int, int, int] | tuple[int, int, int, int, str]] = [
    # (drafter layers, available bytes, max_model_len, tokens in flight[, indexer cache])
    (0, int(10.29 * GIB), 1 << 20, 4096),
    (1, int(10.29 * GIB), 1 << 20, 4096),
    (3, int(47.43 * GIB), 262_144, 16_384),
    (1, int(7.71 * GIB), 121_344, 16_384),
    # vllm#51041's preview start: 7,236 blocks (7.0065 GiB, the logged 7.01) at 912,128 with
    # one batch of 8,192 in flight; logged 1,009,661 tokens
    (1, 7236 * 1_039_680, 912_128, 8192),
    (1, int(18.65 * GIB), 200_000, 8192),
    # one B300, DSpark k=7, MXFP4 indexer cache, 0.26.0: "Available KV cache memory: 86.74
    # GiB", "GPU KV cache size: 913,657 tokens" (blog "Getting stable with DeepSeek-V4-Flash-
    # 0731 on a single Nvidia B300", 2026-08-04)
    (3, int(86.74 * GIB), 65_536, 16_384, "fp4"),
]


def main() -> int:
    bad = 0
    for case in CASES:
        got, want = planner(*case), engine(*case)
        ok = got == want
        bad += not ok
        print(
            f"{'OK ' if ok else 'BAD'} vllm {vllm.__version__} {case}: engine {want} kvscope {got}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
