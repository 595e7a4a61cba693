"""DeepSeek V4's layer in vLLM's profiling pass: the tensors alive at its peak on one GPU,
bytes: the mHC streams for vLLM 0.23.0-0.32.x, the attention layer's own tensors for 0.23.0-0.26.x
and 0.29.0-0.32.x, the MTP drafter's peak for 0.23.0-0.26.x (other releases keep the generic terms).

The generic rule (:mod:`kvscope.plan.activation`) prices a layer's attention at its local
heads and the residual stream at ``2 T h``. V4's layer (``DeepseekV4Attention``,
vllm/models/deepseek_v4/attention.py: the same forward in the 0.23.0, 0.24.0, 0.25.0 and
0.26.0 wheels) holds
more, and some of it at a padded head count that does not shrink with TP:

- the mHC residual stream ``(T, hc_mult, h)`` bf16 beside the layer input ``(T, h)`` and the
  float32 mixes ``(T, hc)`` and ``(T, hc, hc)`` (``DeepseekV4DecoderLayer.forward``,
  vllm/models/deepseek_v4/nvidia/model.py), twice: ``mhc_fused_post_pre_tilelang``
  (vllm/model_executor/kernels/mhc/tilelang.py) returns new tensors (``residual_cur =
  torch.empty_like(...)``) while ``DeepseekV4Model.forward``'s loop still holds the previous
  layer's outputs until the layer returns;
- ``o_padded`` ``(T, padded_heads, head_dim)`` bf16, allocated before the input GEMMs and
  alive until the output projection (``forward``);
- the fused ``wq_a``/``wkv`` output ``(T, q_lora_rank + head_dim)`` and its RMS-normed copy
  (``fused_q_kv_rmsnorm`` returns ``empty_like`` outputs, common/ops/fused_qk_rmsnorm.py),
  the compressor's float32 kv/gate scores ``(T, 2 coff head_dim)`` (``coff`` 2 on the
  overlapping ratio-4 layers, compressor.py) and, on indexer layers, the indexer
  compressor's ``(T, 4 index_head_dim)`` float32 scores and ``weights_proj``'s
  ``(T, index_n_heads)`` bf16, all held by ``forward`` until it returns;
- indexer layers run the indexer first, on an aux stream (``execute_in_parallel`` launches
  the aux callables before the default one, vllm/utils/multi_stream_utils.py, 0.23-0.26):
  its query quantised to fp8 ``(T, index_n_heads x index_head_dim)`` (MXFP4 with an fp4
  indexer cache: ``index_head_dim / 2`` bytes plus one scale byte a 32-block) with float32
  weights (``fused_indexer_q_rope_quant``, models/deepseek_v4/common/ops/fused_indexer_q.py)
  while the
  profiling branch of ``sparse_attn_indexer`` allocates ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB``;
- then ``wq_b`` gives the query ``(T, local_heads, head_dim)`` bf16, which the profiling
  branch of ``_fused_qnorm_rope_kv_insert`` pads to ``padded_heads`` with ``F.pad`` (a new
  tensor) when the rank has fewer heads.

``padded_heads``: FlashMLA (``DeepseekV4FlashMLAAttention.get_padded_num_q_heads``,
nvidia/flashmla.py) takes 64 up to 64 heads, else 128; from 0.24.0, on SM12x
``_select_dsv4_attn_cls`` (nvidia/model.py) picks ``DeepseekV4FlashInferSM120Attention``
without an explicit backend, which takes the next of 16, 32, 64, 128
(nvidia/flashinfer_sparse.py; 0.23.0 selects FlashMLA on every CUDA GPU). An explicit
``--attention-backend`` is not a planner input. CUDA only. 0.21 returns from the profiling
branch before padding the query (model_executor/layers/deepseek_v4_attention.py), 0.22 runs
the layer through an inner ``mla_attn`` module, and 0.27.0-0.28.x add an eager scratch pool
(models/deepseek_v4/eager_scratch.py: the padded query, the compressor scratch and the fp4
indexer query become model-wide buffers made at load); those keep the generic attention term.
The 0.29.0-0.32.0 wheels drop the pool and allocate ``o_padded`` and the ``F.pad`` copy per
call again (``_alloc_attn_out``, ``_fused_qnorm_rope_kv_insert``), so the term applies there
again (:data:`POOL_DROPPED_SINCE`). It waited until the TP group's 2.1 GiB of non-torch
memory was shown to end at 0.26.0 (:mod:`kvscope.plan.vllm_collectives`): with both, the
V4-Flash-0731 start on 8x H100 at 0.31 plans within 0.2 % of its logged pool, its own
"Actual usage" line splitting the same memory. Adaptive verification's profiling runs carry
attention metadata, so there the running layer is priced instead
(:func:`running_attention_bytes`, :mod:`kvscope.plan.adaptive_verification`).

The two-stream rule outlives the attention rule: the 0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0
and 0.32.0 wheels keep the same ``DeepseekV4Model.forward`` loop and decoder layer
(nvidia/model.py), V4 stays eager (``VLLM_USE_BREAKABLE_CUDAGRAPH`` sets compilation mode
NONE, vllm/config/vllm.py), and ``mhc_fused_post_pre_tilelang`` still returns a new residual
(``torch.empty_like``, or from 0.30 the fused kernel's ``residual_in.new_empty``,
model_executor/kernels/mhc/tilelang_kernels.py). DeepSeek V4.1 (models/deepseek_v41/nvidia/
model.py, 0.30.0-0.32.0) runs the same loop; its ``mhc_shifted_post_pre`` returns a new
residual too (``mhc_post_tilelang``, or ``new_residual`` on the DeepGEMM path) and one more
(T, hc) float32 pre-mix a stream, not counted (16 B a token). From 0.28.0 V4 runs on the V2
model runner, whose ``profile_run`` calls the same model forward.

With an MTP drafter the pass has a second peak. ``_dummy_run`` (vllm/v1/worker/
gpu_model_runner.py) keeps the target's output ``hidden_states`` ``(T, h)`` while it calls
``drafter.dummy_run`` at the same ``T`` (vllm/v1/spec_decode/llm_base_proposer.py), and V4's
MTP layer (``DeepSeekV4MultiTokenPredictorLayer``, vllm/models/deepseek_v4/nvidia/mtp.py, the
same forward in 0.23.0-0.26.0) is as wide as a target layer (0.27+ not modelled: its layer
draws on the eager scratch pool, and from 0.28.0 the V2 runner's speculator runs it): its
``mtp_block`` is a ``DeepseekV4DecoderLayer`` at ``compress_ratios[num_hidden_layers]`` (0,
window only, in V4-Flash and V4-Pro), run eagerly (V4 turns vLLM's torch.compile off,
vllm/config/vllm.py). While that block runs, the predictor's frame keeps the drafter's
embedding ``(T, h)`` and the layer's frame the ``fused_mtp_input_rmsnorm`` outputs
(``empty_like`` copies, ``(T, h)`` and ``(T, hc_mult, h)``,
common/ops/fused_mtp_input_rmsnorm.py), beside the block's own stream, one stream only: the
block is called without a residual and takes its input as the residual.

A DSpark drafter (vLLM 0.25.0-0.32.x, V2 runner) has the target capture the state after each
of its ``dspark_target_layer_ids`` (:func:`kvscope.plan.drafter.aux_capture_layers`):
``DeepseekV4Model.forward`` appends ``aux_recon.mean(dim=1)`` ``(T, h)`` to a list and keeps
the latest ``aux_recon`` ``(T, hc_mult, h)`` (``final_aux_recon``, from ``mhc_post_tilelang``)
until it returns (nvidia/model.py in the 0.25.0 and 0.27.0-0.32.0 wheels). Counted at
the last indexer layer, beside the captures made before it. V4.1's forward keeps only
``(T, h)`` means (models/deepseek_v41/nvidia/model.py), not modelled: V4.1-Flash captures at
layers 37-39, after its last index-source layer (36).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.plan.dsv4_workspace import MAX_LOGITS_BYTES, MXFP4_BLOCK
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Releases read: [since, until).
SINCE = (0, 23, 0)
#: First release with the SM12x FlashInfer attention class.
SM120_CLASS_SINCE = (0, 24, 0)
UNTIL = (0, 27, 0)
#: First release without the eager scratch pool (``eager_scratch.py`` absent from the 0.29.0
#: wheel; ``o_padded`` and the padded query allocated per call again, to 0.32.0).
POOL_DROPPED_SINCE = (0, 29, 0)
#: Releases whose profiling pass holds two mHC streams: [SINCE, STREAM_UNTIL) (wheels read
#: up to 0.32.0).
STREAM_UNTIL = (0, 33, 0)
#: First release whose V2 runner captures target states for a DSpark drafter.
AUX_SINCE = (0, 25, 0)
#: bf16 activations, float32 scores and mixes, fp8 indexer query.
BF16, FP32, FP8 = 2, 4, 1


@dataclass(frozen=True)
class Dsv4AttentionPeak:
    """V4's terms of the profiling pass's layer peak on one GPU, bytes."""

    #: residual stream, layer input and mHC mixes, alive through the layer
    stream: float
    #: the attention layer's own tensors at their peak (indexer logits included)
    layer: float
    #: what the MTP drafter's dummy run holds beyond ``stream`` at its peak (its one stream,
    #: inputs and window-only layer; 0 without an MTP drafter or below ``stream``)
    draft: float = 0.0
    #: a DSpark drafter's captured target states alive beside the last indexer layer
    aux: float = 0.0


def padded_q_heads(
    local_heads: int, gpu: GPUSpec, version: tuple[int, int, int] = SM120_CLASS_SINCE
) -> int:
    """Query heads the V4 layer's buffers are allocated at on ``gpu`` in ``version``."""
    if gpu.compute_capability.startswith("12") and version >= SM120_CLASS_SINCE:
        return next((p for p in (16, 32, 64, 128) if local_heads <= p), local_heads)
    return 64 if local_heads <= 64 else 128


def _layer_bytes(
    att: AttentionLayer,
    gpu: GPUSpec,
    tp: int,
    t: int,
    version: tuple[int, int, int],
    indexer_fp4: bool,
    window_only: bool = False,
    logits: float = MAX_LOGITS_BYTES,
) -> float:
    """One V4 attention layer's tensors at their peak for ``t`` tokens (``window_only``: the
    layer as a ratio-0 window layer, the MTP block's; ``logits``: the indexer's logits
    block, the profiling branch's by default)."""
    ratio = 0 if window_only else att.compress_ratio
    local = max(1, att.num_heads // tp)
    padded = padded_q_heads(local, gpu, version)
    held = padded * att.head_dim * BF16  # o_padded
    held += 2 * ((att.q_lora_rank or 0) + att.head_dim) * BF16  # qr_kv and normed copy
    if ratio > 1:
        coff = 2 if ratio == 4 else 1
        held += 2 * coff * att.head_dim * FP32  # compressor kv/gate scores
    indexer = 0.0
    if not window_only and att.kind == "dsv4_csa" and att.index_n_heads:
        held += 4 * att.index_head_dim * FP32 + att.index_n_heads * BF16
        hd = att.index_head_dim
        q_bytes = hd // 2 + hd // MXFP4_BLOCK if indexer_fp4 else hd * FP8
        q_idx = att.index_n_heads * (q_bytes + FP32)
        indexer = t * (held + q_idx) + logits
    query = local * att.head_dim * BF16
    pad = padded * att.head_dim * BF16 if padded > local else 0
    return float(max(indexer, t * (held + query + pad)))


def dsv4_attention_peak(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    tokens: int,
    version: tuple[int, int, int],
    indexer_fp4: bool = False,
    mtp_drafter: bool = False,
    aux_layers: tuple[int, ...] = (),
) -> Dsv4AttentionPeak | None:
    """The V4 layer terms for ``tokens`` batched tokens (None outside the releases read, for
    other models and off CUDA; from 0.27.0 the streams and captures only); ``mtp_drafter``: an
    MTP drafter runs in the pass (last stage); ``aux_layers``: the model's
    ``aux_hidden_state_layers`` (:func:`kvscope.plan.drafter.aux_capture_layers`)."""
    if not model.is_deepseek_v4 or not SINCE <= version < STREAM_UNTIL or gpu.vendor != "nvidia":
        return None
    t, h, hc = tokens, model.hidden_size, model.hc_mult
    one = t * ((hc * h + h) * BF16 + (hc + hc * hc) * FP32)
    # DeepseekV4Model.forward's loop keeps the previous layer's outputs while the next layer
    # runs, and mhc_fused_post_pre_tilelang returns new tensors: two streams alive
    stream = 2 * one
    aux = _aux_bytes(model, t, aux_layers) if version >= AUX_SINCE else 0.0
    layers = _dsv4_layers(model)
    if UNTIL <= version < POOL_DROPPED_SINCE:  # the eager scratch pool: generic attention term
        return Dsv4AttentionPeak(float(stream), 0.0, 0.0, aux)
    layer = _widest_layer(layers, gpu, tp, t, version, indexer_fp4)
    if version >= UNTIL:  # 0.29+: the layer again; the MTP drafter's pass is not modelled
        return Dsv4AttentionPeak(float(stream), layer, 0.0, aux)
    draft = 0.0
    if mtp_drafter and layers and model.num_mtp_layers:
        # target output + drafter embedding + enorm output (T, h) and hnorm output (T, hc, h)
        inputs = t * (3 * h + hc * h) * BF16
        peak = one + inputs + _layer_bytes(layers[0], gpu, tp, t, version, indexer_fp4, True)
        draft = max(0.0, peak - stream)
    return Dsv4AttentionPeak(float(stream), layer, float(draft), aux)


def _aux_bytes(model: ModelSpec, t: int, aux_layers: tuple[int, ...]) -> float:
    """Captured target states alive while V4's last indexer layer runs, bytes: a ``(T, h)``
    mean per capture made before it and the latest ``(T, hc_mult, h)`` ``aux_recon``."""
    if model.model_type.startswith("deepseek_v41"):
        return 0.0
    csa = [i for i, ly in enumerate(model.layers) if ly.attention.kind == "dsv4_csa"]
    # layer index + 1 == a captures after layer a - 1: alive from layer a on
    n = sum(1 for a in aux_layers if csa and a <= csa[-1])
    h = model.hidden_size
    return float(t * (n + model.hc_mult) * h * BF16) if n else 0.0


def running_attention_bytes(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    tokens: int,
    version: tuple[int, int, int],
    indexer_fp4: bool = False,
) -> float:
    """V4's widest attention layer's tensors on one GPU when it runs attention on ``tokens``
    tokens, bytes (0 for other models and off CUDA): the 0.29.0-0.32.0 wheels allocate
    ``o_padded`` per call (``DeepseekV4Attention.forward``) and the fused q-norm/RoPE insert
    kernel returns the query padded to the attention class's head count
    (``_fused_qnorm_rope_kv_insert``, vllm/models/deepseek_v4/attention.py and
    deepseek_v41/attention.py of 0.30.0), beside the input GEMM outputs and scores listed in
    the module text. The indexer's logits over a dummy run's context are left out (one
    8,192-token context: under 0.1 GiB at 8,192 tokens)."""
    if not model.is_deepseek_v4 or gpu.vendor != "nvidia":
        return 0.0
    return _widest_layer(_dsv4_layers(model), gpu, tp, tokens, version, indexer_fp4, logits=0.0)


def _dsv4_layers(model: ModelSpec) -> list[AttentionLayer]:
    return [ly.attention for ly in model.layers if ly.attention.kind.startswith("dsv4")]


def _widest_layer(
    layers: list[AttentionLayer],
    gpu: GPUSpec,
    tp: int,
    tokens: int,
    version: tuple[int, int, int],
    indexer_fp4: bool,
    logits: float = MAX_LOGITS_BYTES,
) -> float:
    """The largest of :func:`_layer_bytes` over V4's attention layers (0 without any)."""
    each = (_layer_bytes(a, gpu, tp, tokens, version, indexer_fp4, logits=logits) for a in layers)
    return max(each, default=0.0)
