"""DeepSeek V4.1 attention layers from ``config.json``: compress ratios, KV and index sources.

Units: parameter counts, layer indices. Rules follow vLLM's DeepSeek V4.1 model at v0.31.0
(``vllm/models/deepseek_v41/attention.py``, ``compressor.py``, ``common/engram.py``):

- ``compress_ratios`` has one entry per layer, 0 (window only), 1 (one compressed entry per
  token) or 2 (one per two tokens); entries past ``num_hidden_layers`` are the DSpark stages,
  which the target model does not build (a DSpark drafter does).
- Only ``kv_source_layer_ids`` own a compressor and a compressed cache; a compressed layer
  that is not a source reads the latest source at or below it, so one must exist.
- Indexers exist on ``index_source_layer_ids`` only; their key cache lives on the kv source.
- Engram layers (``engram_layer_ids``) add ``wkv`` ((max n-gram - 1) x heads x head dim ->
  hidden x (hc + 1)) and two ``hc x hidden`` gate vectors on the GPU; the hash tables
  themselves are held in pinned host memory by default (``EngramConfig.cpu_offload = True``,
  ``vllm/config/engram.py`` at v0.31.0; the logs print "Engram table offloaded to pinned host
  memory"), so they are not planned as GPU weights.
"""

from __future__ import annotations

from typing import Any, Protocol

from kvscope.errors import ConfigError
from kvscope.specs.attention import AttentionLayer

#: The compress ratios vLLM's V4.1 attention accepts (``DeepseekV4Attention.__init__``).
RATIOS = (0, 1, 2)


class _Reader(Protocol):
    raw: Any

    def integer(self, key: str, default: int | None = None, minimum: int = 1) -> int: ...
    def fail(self, key: str, problem: str) -> ConfigError: ...


def _ids(c: _Reader, key: str, n_layers: int, required: bool = True) -> list[int]:
    value = c.raw.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise c.fail(key, "must list layer indices (DeepSeek V4.1 needs it)")
    bad = [v for v in value if not 0 <= v < n_layers]
    if bad:
        raise c.fail(key, f"has layer {bad[0]}, outside 0..{n_layers - 1}")
    return list(value)


def dsv41_layers(c: _Reader, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    """One :class:`AttentionLayer` of kind ``dsv41`` per backbone layer."""
    ratios = c.raw.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n_layers:
        raise c.fail("compress_ratios", f"must list at least {n_layers} ratios (one per layer)")
    kv_src = _ids(c, "kv_source_layer_ids", n_layers)
    idx_src = _ids(c, "index_source_layer_ids", n_layers)
    engram = _ids(c, "engram_layer_ids", n_layers, required=False)
    hc = c.integer("hc_mult", default=0, minimum=0)
    engram_params = 0
    if engram:
        cols = (c.integer("engram_max_ngram_size") - 1) * c.integer("engram_n_heads")
        engram_params = cols * c.integer("engram_head_dim") * h * (hc + 1) + 2 * hc * h
    out = []
    for i, r in enumerate(ratios[:n_layers]):
        if isinstance(r, bool) or r not in RATIOS:
            raise c.fail("compress_ratios", f"has {r!r} at layer {i}; expected 0, 1 or 2")
        if r and not any(s <= i for s in kv_src):
            raise c.fail("kv_source_layer_ids", f"has no source at or below layer {i}")
        out.append(
            dsv4_attention(
                c,
                "dsv41",
                int(r),
                h,
                nh,
                kv_source=i in kv_src and r > 0,
                index_source=i in idx_src,
                engram_params=engram_params if i in engram else 0,
            )
        )
    return out


def dsv4_attention(
    c: _Reader, kind: str, ratio: int, h: int, nh: int, **extra: Any
) -> AttentionLayer:
    """One DeepSeek V4-family attention layer (V4 and V4.1 share every config key but the
    ratio's meaning): ``kind`` and ``ratio`` from ``compress_ratios``, ``extra`` the
    layer's V4.1 roles (KV / index source, Engram weights)."""
    return AttentionLayer(
        kind,
        hidden_size=h,
        num_heads=nh,
        num_kv_heads=c.integer("num_key_value_heads", default=1),
        head_dim=c.integer("head_dim"),
        v_head_dim=c.integer("head_dim"),
        window=c.integer("sliding_window"),
        q_lora_rank=c.integer("q_lora_rank"),
        qk_rope_head_dim=c.integer("qk_rope_head_dim"),
        index_n_heads=c.integer("index_n_heads"),
        index_head_dim=c.integer("index_head_dim"),
        compress_ratio=ratio,
        o_groups=c.integer("o_groups"),
        o_lora_rank=c.integer("o_lora_rank"),
        **extra,
    )
