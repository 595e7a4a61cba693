"""vLLM 0.34's own KDA state, MLA page and hybrid grouping as an oracle for Kimi K3 / Kimi Linear.

Runs inside the vLLM oracle venv with the unpacked vllm 0.34.0 wheel first on the path
(tests/oracle.py ``release_path``), never the project's venv:

    VLLM_TARGET_DEVICE=cpu PYTHONPATH=<vllm-src-0.34.0> \
        ~/.cache/kvscope/vllm-oracle-0.33.0/bin/python benchmarks/vllm_oracle_kda.py

For each case it asks vLLM for a KDA layer's state (``MambaStateShapeCalculator.
kda_state_shape`` and ``MambaStateDtypeCalculator.kda_state_dtype`` into a ``MambaSpec``) and
an MLA layer's page (``MLAAttentionSpec``), then builds the model's per-layer specs at the
block size kvscope chose (the MLA layers' page; the KDA pages padded to it, as
``Platform._align_hybrid_block_size`` pads them) and lets vLLM group them and size the pool
(``get_global_kv_cache_groups``, ``get_kv_cache_configs``, ``get_kv_cache_capacity``) from an
available-memory figure, with ``mamba_cache_mode`` none and align. Prints one line per case
and exits 1 on any mismatch with kvscope's state bytes, page, groups, blocks and tokens.
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
from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: E402
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.platforms import current_platform  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity  # noqa: E402
from vllm.v1.kv_cache_interface import MambaSpec, MLAAttentionSpec  # noqa: E402

from kvscope.plan.config import EngineConfig, Parallelism  # noqa: E402
from kvscope.plan.memory import plan_memory  # noqa: E402
from kvscope.specs.config_parse import parse_config  # noqa: E402
from kvscope.specs.hardware import get_gpu  # noqa: E402

GIB = 1 << 30
CONFIGS = ROOT / "tests" / "plan" / "data" / "configs"
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 1 << 21,
    "torch_dtype": "bfloat16",
}
CASES = [  # config, tp, kv dtype, mamba cache mode, max_model_len, available GiB
    ("kimi-k3.json", 8, "auto", "none", 262_144, 54.0),
    ("kimi-k3.json", 8, "auto", "align", 262_144, 54.0),
    ("kimi-k3.json", 16, "auto", "align", 1_048_576, 120.0),
    ("kimi-k3.json", 4, "fp8", "align", 131_072, 20.0),
    ("kimi-linear-48b-a3b.json", 1, "auto", "align", 131_072, 30.0),
    ("kimi-linear-48b-a3b.json", 2, "auto", "none", 65_536, 2.3),
    ("kimi-linear-48b-a3b.json", 4, "fp8", "align", 1_048_576, 60.0),
]


def vllm_config(max_model_len: int, block_size: int, mode: str):  # type: ignore[no-untyped-def]
    folder = Path(tempfile.mkdtemp(prefix="kvscope-oracle-kda-"))
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    args = EngineArgs(
        model=str(folder),
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        block_size=block_size,
        max_num_batched_tokens=8192,
        enforce_eager=True,
        dtype="bfloat16",
    )
    # 0.34's CPU platform refuses to configure without triton-cpu; its checks touch nothing
    # the KV sizing reads (block size, max_model_len, mamba_cache_mode), so skip them.
    platform = type(current_platform)
    saved = platform.__dict__["check_and_update_config"]
    platform.check_and_update_config = classmethod(lambda cls, config: None)  # type: ignore[assignment]
    try:
        cfg = args.create_engine_config()
    finally:
        platform.check_and_update_config = saved  # type: ignore[method-assign]
    cfg.cache_config.mamba_cache_mode = mode
    # what the engine core resolves from the backends on a GPU; it changes no size
    object.__setattr__(cfg.cache_config, "kv_cache_layout", "LBNHC")
    return cfg


def compare(name: str, tp: int, kv: str, mode: str, length: int, avail_gib: float) -> bool:
    path = CONFIGS / name
    model = parse_config(json.loads(path.read_text()), str(path))
    avail = int(avail_gib * GIB)
    eng = EngineConfig(
        engine_version="0.34.0",
        max_model_len=length,
        kv_cache_dtype=kv,
        kv_cache_memory_bytes=avail,
        mamba_cache_mode=mode,
        enable_prefix_caching=mode == "align",
    )
    plan = plan_memory(model, get_gpu("B200"), Parallelism(tp=tp), eng)
    block = plan.block_size
    kv_torch = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    kda = next(layer.attention for layer in model.layers if layer.attention.kind == "gdn")
    mla = next(layer.attention for layer in model.layers if layer.attention.kind == "mla")
    shapes = MambaStateShapeCalculator.kda_state_shape(
        tp, kda.lin_v_heads, kda.lin_v_dim, conv_kernel_size=kda.conv_kernel
    )
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", "auto")
    state = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=block).page_size_bytes
    latent = mla.kv_lora_rank + mla.qk_rope_head_dim
    page_1 = MLAAttentionSpec(
        block_size=1, num_kv_heads=1, head_size=latent, dtype=kv_torch
    ).page_size_bytes
    specs: dict[str, object] = {}
    for i, layer in enumerate(model.layers):
        if layer.attention.kind == "gdn":
            specs[f"model.layers.{i}.self_attn"] = MambaSpec(
                shapes=shapes,
                dtypes=dtypes,
                block_size=block,
                page_size_padded=block * page_1,
            )
        else:
            specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, head_size=latent, dtype=kv_torch
            )
    cfg = vllm_config(length, block, mode)
    groups = get_global_kv_cache_groups(cfg, [specs])
    conf = get_kv_cache_configs(cfg, [specs], [avail], groups)[0]
    tokens, conc = get_kv_cache_capacity(cfg, conf)
    ours_state = kda.gdn_state_bytes(tp)
    ours_page = sum(c.entry_bytes for c in mla.kv_caches("fp8" if kv == "fp8" else "bfloat16"))
    ok = (
        state == ours_state
        and page_1 == ours_page
        and state <= block * page_1 < state + 128 * page_1
        and plan.num_kv_groups == len(conf.kv_cache_groups)
        and plan.num_gpu_blocks == conf.num_blocks
        and plan.kv_tokens == tokens
    )
    print(
        f"{'OK ' if ok else 'BAD'} {path.stem} tp{tp} kv={kv} mode={mode} L={length}: "
        f"vLLM state={state} B page/token={page_1} B groups={len(conf.kv_cache_groups)} "
        f"num_blocks={conf.num_blocks} tokens={tokens} conc={conc:.3f} | kvscope "
        f"state={ours_state} page/token={ours_page:g} block={block} groups={plan.num_kv_groups} "
        f"num_blocks={plan.num_gpu_blocks} tokens={plan.kv_tokens} conc={plan.max_concurrency:.3f}"
    )
    return ok


def main() -> int:
    bad = sum(not compare(*case) for case in CASES)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
