"""vLLM 0.33's own KV-cache sizing code as an oracle for kvscope's block arithmetic.

Runs inside a separate venv holding vllm==0.33.0 (CPU torch), never the project's:

    VLLM_TARGET_DEVICE=cpu ~/.cache/kvscope/vllm-oracle-0.33.0/bin/python benchmarks/vllm_oracle.py

For each model kind it builds the per-layer KV-cache specs vLLM's attention layers declare
(FullAttentionSpec for GQA, MLAAttentionSpec for MLA, SlidingWindowSpec for gpt-oss's
windowed layers; Gemma 4's from transformers' own per-layer config; ChunkedLocalAttentionSpec
for Llama 4's RoPE layers from transformers' ``no_rope_layers``), lets vLLM group them
and size the pool from an available-memory figure (``get_kv_cache_groups``,
``get_kv_cache_configs``, ``get_kv_cache_capacity``), and compares page sizes, group
counts, num_blocks and the logged token capacity with kvscope's. It needs no network: the
VllmConfig comes from a tiny local config.json written to a temp folder.
Prints one line per case and exits 1 on any mismatch.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

from kvscope.plan.config import EngineConfig, Parallelism  # noqa: E402
from kvscope.plan.memory import plan_memory  # noqa: E402
from kvscope.plan.speculative import parse_vllm  # noqa: E402
from kvscope.specs.hardware import get_gpu  # noqa: E402
from kvscope.specs.registry import load_model  # noqa: E402

GIB = 1 << 30
SCOUT = str(ROOT / "tests/specs/data/configs/meta-llama--Llama-4-Scout-17B-16E-Instruct.json")
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "bfloat16",
}


def vllm_config(max_model_len: int, block_size: int, tokens: int):  # type: ignore[no-untyped-def]
    folder = Path(tempfile.mkdtemp(prefix="kvscope-oracle-"))
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    args = EngineArgs(
        model=str(folder),
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        block_size=block_size,
        max_num_batched_tokens=tokens,
        enforce_eager=True,
        dtype="bfloat16",
    )
    cfg = args.create_engine_config()
    # The engine core resolves the physical layout from the attention backends; FlashAttention's
    # NHD order (LBNHC) is what a CUDA run of these models gets. It does not change sizes.
    object.__setattr__(cfg.cache_config, "kv_cache_layout", "LBNHC")
    # On a GPU, `vllm serve` turns async scheduling on unless something forbids it
    # (vllm/config/vllm.py at v0.33.0, VllmConfig.__post_init__): two batches in flight, so
    # window groups reserve for 2 x max_num_batched_tokens. This CPU build's executor leaves
    # it off; set it as a GPU start has it (kvscope plans the GPU start).
    cfg.scheduler_config.async_scheduling = True
    return cfg


def gemma4_specs(path: str, tp: int, dtype: torch.dtype, block: int) -> dict[str, object]:
    """Gemma 4's specs from transformers' own per-layer config (``per_layer_config``, which
    vLLM 0.33's ``Gemma4DecoderLayer`` reads for head size and KV heads), not kvscope's: the
    last ``num_kv_shared_layers`` layers declare none (``Gemma4Attention.is_kv_shared_layer``
    passes ``kv_sharing_target_layer_name``)."""
    from transformers import Gemma4TextConfig

    raw = json.loads(Path(path).read_text())["text_config"]
    cfg = Gemma4TextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    first_shared = cfg.num_hidden_layers - (cfg.num_kv_shared_layers or 0)
    out: dict[str, object] = {}
    for i, layer in enumerate(cfg.per_layer_config[:first_shared]):
        kw = {
            "block_size": block,
            "num_kv_heads": max(1, layer.num_key_value_heads // tp),
            "head_size": layer.head_dim,
            "dtype": dtype,
        }
        if cfg.layer_types[i] == "sliding_attention":
            out[f"model.layers.{i}.self_attn.attn"] = SlidingWindowSpec(
                **kw, sliding_window=cfg.sliding_window
            )
        else:
            out[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(**kw)
    return out


def llama4_specs(path: str, tp: int, dtype: torch.dtype, block: int) -> dict[str, object]:
    """Llama 4's specs as vLLM 0.33's ``Llama4Attention`` declares them: a RoPE layer
    (transformers' ``no_rope_layers[i]`` of 1) with ``attention_chunk_size`` is a
    ``ChunkedLocalAttention`` (``ChunkedLocalAttentionSpec``), a NoPE layer full attention."""
    from transformers import Llama4TextConfig

    raw = json.loads(Path(path).read_text())["text_config"]
    cfg = Llama4TextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    kw = {
        "block_size": block,
        "num_kv_heads": max(1, cfg.num_key_value_heads // tp),
        "head_size": cfg.head_dim,
        "dtype": dtype,
    }
    out: dict[str, object] = {}
    for i in range(cfg.num_hidden_layers):
        name = f"language_model.model.layers.{i}.self_attn.attn"
        if cfg.no_rope_layers[i] and cfg.attention_chunk_size:
            out[name] = ChunkedLocalAttentionSpec(
                **kw, attention_chunk_size=cfg.attention_chunk_size
            )
        else:
            out[name] = FullAttentionSpec(**kw)
    return out


def specs_for(model_name: str, tp: int, kv: str, block: int) -> dict[str, object]:
    dtype = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    if "gemma-4" in model_name:
        return gemma4_specs(model_name, tp, dtype, block)
    if "Llama-4" in model_name:
        return llama4_specs(model_name, tp, dtype, block)
    model = load_model(model_name)
    out: dict[str, object] = {}
    for i, layer in enumerate(model.layers):
        att = layer.attention
        if att.kind == "mla":
            spec = MLAAttentionSpec(
                block_size=block,
                num_kv_heads=1,
                head_size=att.kv_lora_rank + att.qk_rope_head_dim,
                dtype=dtype,
            )
        elif att.kind == "sliding":
            spec = SlidingWindowSpec(
                block_size=block,
                num_kv_heads=max(1, att.num_kv_heads // tp),
                head_size=att.head_dim,
                dtype=dtype,
                sliding_window=att.window,
            )
        else:
            spec = FullAttentionSpec(
                block_size=block,
                num_kv_heads=max(1, att.num_kv_heads // tp),
                head_size=att.head_dim,
                dtype=dtype,
            )
        out[f"model.layers.{i}.self_attn.attn"] = spec
    return out


CASES = [  # model, tp, kv dtype, block, max_model_len, batched tokens, available GiB
    ("meta-llama/Llama-3.1-8B", 1, "auto", 16, 8192, 8192, 58.11),
    ("meta-llama/Llama-3.1-70B", 4, "fp8", 16, 32768, 8192, 40.0),
    ("Qwen/Qwen3-235B-A22B", 8, "auto", 16, 32768, 8192, 20.0),
    ("deepseek-ai/DeepSeek-V2-Lite", 1, "auto", 16, 8192, 8192, 43.61),
    ("deepseek-ai/DeepSeek-R1", 8, "auto", 64, 163840, 8192, 20.0),
    ("openai/gpt-oss-120b", 1, "auto", 16, 131072, 8192, 12.0),
    ("openai/gpt-oss-20b", 2, "auto", 16, 131072, 2048, 30.0),
    (str(ROOT / "tests/plan/data/configs/gemma-2-9b.json"), 1, "auto", 16, 8192, 8192, 54.12),
    # Gemma 4: sliding pages twice the global ones (31B, 26B-A4B), global twice the sliding
    # (E2B, whose last 20 layers share KV); the smaller spec's block size doubles
    (str(ROOT / "tests/plan/data/configs/gemma-4-31b-it.json"), 1, "auto", 16, 262144, 8192, 50.0),
    (str(ROOT / "tests/plan/data/configs/gemma-4-31b-it.json"), 2, "fp8", 16, 65536, 2048, 20.0),
    (str(ROOT / "tests/plan/data/configs/gemma-4-26b-a4b.json"), 1, "auto", 16, 131072, 8192, 30.0),
    (str(ROOT / "tests/plan/data/configs/gemma-4-e2b-it.json"), 1, "auto", 16, 131072, 8192, 60.0),
    (str(ROOT / "tests/plan/data/configs/gemma-4-e4b-it.json"), 2, "fp8", 32, 32768, 2048, 12.0),
    # Llama 4 Scout: 36 chunked-local layers (8,192-token chunks) in three groups beside one
    # full group (hybrid KV cache manager on, the default from 0.14.0)
    (SCOUT, 4, "auto", 16, 8192, 8192, 40.0),
    (SCOUT, 4, "auto", 16, 131072, 8192, 40.0),
    (SCOUT, 8, "fp8", 16, 1048576, 4096, 40.0),
]


#: The shape of meta-llama/Llama-3.2-1B's config.json (16 layers of 8 KV heads of 64), a draft
#: model whose KV page differs from Llama-3.1-8B's (8 heads of 128).
LLAMA_1B = ROOT / "tests/plan/data/configs/llama-3.2-1b.json"
DRAFT_CASES = [  # target, draft config, tp, kv dtype, block, max_model_len, batched, GiB
    ("meta-llama/Llama-3.1-8B", LLAMA_1B, 1, "auto", 16, 8192, 8192, 40.0),
    ("meta-llama/Llama-3.1-70B", LLAMA_1B, 4, "fp8", 16, 32768, 8192, 30.0),
]


def compare(
    name: str, tp: int, kv: str, block: int, length: int, tokens: int, avail_gib: float,
    draft: Path | None = None,
) -> bool:  # fmt: skip
    """vLLM's own KV groups, blocks and tokens for one case beside the plan's; prints a line.
    With ``draft``, a draft model's layers (``method: draft_model``) sit beside the target's."""
    cfg = vllm_config(length, block, tokens)
    specs = specs_for(name, tp, kv, block)
    spec = None
    if draft is not None:
        specs.update(
            {f"draft_model.{k}": v for k, v in specs_for(str(draft), tp, kv, block).items()}
        )
        spec = parse_vllm(
            json.dumps({"method": "draft_model", "model": str(draft), "num_speculative_tokens": 4})
        )
    avail = int(avail_gib * GIB)
    groups = get_global_kv_cache_groups(cfg, [specs])
    conf = get_kv_cache_configs(cfg, [specs], [avail], groups)[0]
    v_tokens, v_conc = get_kv_cache_capacity(cfg, conf)
    page = conf.kv_cache_groups[0].kv_cache_spec.page_size_bytes
    eng = EngineConfig(
        engine_version="0.33.0",
        max_model_len=length,
        block_size=block,
        max_num_batched_tokens=tokens,
        kv_cache_dtype=kv,
        kv_cache_memory_bytes=avail,
        speculative=spec,
    )
    plan = plan_memory(load_model(name), get_gpu("H100"), Parallelism(tp=tp), eng)
    ok = (
        plan.num_gpu_blocks == conf.num_blocks
        and plan.num_kv_groups == len(conf.kv_cache_groups)
        and plan.kv_tokens == v_tokens
    )
    label = Path(name).stem if name.endswith(".json") else name
    if draft is not None:
        label += f" + draft model ({Path(draft).stem})"
    print(
        f"{'OK ' if ok else 'BAD'} {label} tp{tp} kv={kv} block={block} L={length}: "
        f"vLLM groups={len(conf.kv_cache_groups)} page={page} B "
        f"num_blocks={conf.num_blocks} tokens={v_tokens} conc={v_conc:.3f} | kvscope "
        f"groups={plan.num_kv_groups} block_bytes={plan.block_bytes} "
        f"num_blocks={plan.num_gpu_blocks} tokens={plan.kv_tokens} "
        f"conc={plan.max_concurrency:.3f}"
    )
    return ok


def main() -> int:
    bad = 0
    for name, draft, tp, kv, block, length, tokens, avail_gib in DRAFT_CASES:
        bad += not compare(name, tp, kv, block, length, tokens, avail_gib, draft=draft)
    for name, tp, kv, block, length, tokens, avail_gib in CASES:
        bad += not compare(name, tp, kv, block, length, tokens, avail_gib)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
