"""DeepSeek V4 tensors both engines hold wider than the generic weight rule counts, bytes.

The generic rule (:mod:`kvscope.plan.weights`) prices every attention linear at the
checkpoint's linear bytes, the layer norms and mixers at the model dtype, and one rotary
cache of ``positions x rope_dim`` in the model dtype. vLLM and SGLang build three V4 parts
wider than that, the same on every GPU (all are replicated):

- two float32 rotary tables (:func:`dsv4_rope_cache_bytes`);
- the compressors' fused kv/gate projections and the indexer's ``weights_proj``, built with
  ``quant_config=None`` so they stay in the model dtype in an FP8 or FP4 checkpoint;
- the mHC hyper-connection mixers (``hc_{attn,ffn}_{fn,base,scale}``, ``hc_head_*``), float32
  parameters (:func:`dsv4_wide_param_bytes` counts both).

Sources: vLLM ``vllm/models/deepseek_v4/compressor.py`` (``fused_wkv_wgate``),
``attention.py`` (``weights_proj``), ``nvidia/model.py`` (``hc_*``) at v0.31.0; SGLang
``srt/layers/attention/dsv4/compressor.py`` (``wkv_gate``, ``params_dtype=torch.bfloat16``),
``indexer.py`` (``weights_proj``), ``srt/models/deepseek_v4.py`` (``hc_*``, ``freqs_cis``) and
``srt/layers/deepseek_v4_rope.py`` at 0.5.12 and 0.5.14 (``sglang/kernels/ops/attention/
dsv4/rope.py`` at 0.5.23).
"""

from __future__ import annotations

from kvscope.specs.dtypes import element_bytes
from kvscope.specs.model import ModelSpec

#: Bytes per element of V4's rotary tables: vLLM's float32 ``cos_sin_cache`` (cos and sin,
#: ``rope_dim`` values a row) and SGLang's complex64 ``freqs_cis`` (``rope_dim / 2`` values of
#: 8 bytes a row) cost the same.
DSV4_ROPE_CACHE_BYTES = 4
#: The hyper-connection mixers' dtype (float32).
DSV4_HC_BYTES = 4


def dsv4_rope_cache_bytes(model: ModelSpec) -> float:
    """The DeepSeek V4 rotary tables on every GPU, vLLM and SGLang alike; 0 for other models.

    vLLM: ``build_deepseek_v4_rope`` (vllm/models/deepseek_v4/common/rope.py; the model files
    before it inline the same call) builds one embedding for the window-only layers
    (``rope_theta``) and one for the compressed layers (``compress_rope_theta``); ``get_rope``
    memoises on its arguments and the indexer reuses its layer's. Each keeps a float32
    ``cos_sin_cache`` of ``original_max_position_embeddings x factor`` rows (1,048,576 for
    V4-Flash/Pro, as many as ``max_position_embeddings``) of ``rope_dim`` values.
    SGLang: every attention layer registers ``freqs_cis`` from ``precompute_freqs_cis``, an
    ``lru_cache(2)`` function, so the window-only and the compressed layers share two complex64
    tables of ``max_position_embeddings x rope_dim / 2``, built on the GPU at model init
    (the compressor and indexer reuse their layer's). Either way 2 x 256 MiB on every rank,
    where the generic rule counts one cache in the model dtype.
    """
    ratios = {layer.attention.compress_ratio > 1 for layer in model.layers
              if layer.attention.kind.startswith("dsv4")}  # fmt: skip
    if not ratios:
        return 0.0
    rotary = model.first_attention.qk_rope_head_dim
    rows = model.max_position_embeddings
    return float(len(ratios) * rows * rotary * DSV4_ROPE_CACHE_BYTES)


def dsv4_wide_param_bytes(model: ModelSpec, layers: tuple[int, ...], last_stage: bool) -> float:
    """Bytes the V4 layers in ``layers`` hold beyond the generic rule's pricing; 0 elsewhere.

    Compressors (``2 x coff x head_dim`` outputs from the hidden size, ``coff`` 2 on the
    overlapping C4 layers and 1 on C128; the C4 indexer has its own at ``index_head_dim``)
    and the indexer's ``weights_proj`` (hidden x index heads) are in the model dtype where
    the generic rule priced them at the quantized linear bytes; the hyper-connection mixers,
    ``2 x ((2 + hc) x hc x (hc x hidden) + (2 + hc) x hc + 3)`` a layer plus the head's
    ``hc x hc x hidden + hc + 1`` on the last stage, are float32 where it priced the model
    dtype. V4-Flash in FP8/FP4: 0.288 GiB of projections and 0.063 GiB of mixers a rank.
    """
    if not model.is_deepseek_v4:
        return 0.0
    native = element_bytes(model.dtype)
    linear = model.quantization.linear_bytes
    widen = max(0.0, native - linear) if linear is not None else 0.0
    h, hc = model.hidden_size, model.hc_mult
    unquantized = 0.0
    for i in layers:
        att = model.layers[i].attention
        if att.kind == "dsv4_csa":
            unquantized += 2 * h * 2 * att.head_dim
            unquantized += 2 * h * 2 * att.index_head_dim + h * att.index_n_heads
        elif att.kind == "dsv4_hca":
            unquantized += 2 * h * att.head_dim
    mixers = 0.0
    if hc:
        mix = (2 + hc) * hc
        mixers = len(layers) * 2 * (mix * hc * h + mix + 3)
        mixers += (hc * hc * h + hc + 1) if last_stage else 0
    return unquantized * widen + mixers * max(0.0, DSV4_HC_BYTES - native)
