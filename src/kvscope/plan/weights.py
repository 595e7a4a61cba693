"""Weights held by each GPU of a deployment, by parallelism.

How the engines split a decoder (vLLM ``vllm/model_executor/layers/linear.py`` and
``vocab_parallel_embedding.py``; SGLang mirrors these layers):

- Tensor parallel (TP) shards attention heads (Q and O by ``num_heads / tp``; K and V by
  ``max(1, kv_heads // tp)`` heads per rank, so K/V are replicated once ``tp > kv_heads``)
  and FFN widths (gate/up column-parallel, down row-parallel). MLA's down-projections
  (``q_a_proj``, ``kv_a_proj_with_mqa``) and DeepSeek-V3.2's indexer are replicated; the
  up-projections (``q_b_proj``, ``kv_b_proj``) and ``o_proj`` are sharded.
- Without expert parallelism every rank holds every routed expert at ``1/tp`` of its width;
  with it (``--enable-expert-parallel``) experts are whole and spread over ``tp x dp`` ranks.
  Routers and norms are replicated.
- Embedding and LM head are vocab-parallel: the vocabulary is padded to a multiple of 64
  (vLLM ``DEFAULT_VOCAB_PADDING_SIZE``) and split over TP.
- Pipeline parallel (PP) gives each stage a contiguous slice of layers; when layers do not
  divide evenly the stages before the last take one extra each (vLLM
  ``vllm/distributed/utils.py::get_pp_indices``). The embedding lives on the first stage, the
  final norm and LM head on the last (tied embeddings: the last stage holds its own copy).
- Data parallel replicates everything.

MLA models also hold the absorbed up-projections beside ``kv_b_proj`` where the engine
makes them a separate tensor (:func:`mla_absorbed_bytes`, added per engine by
``plan.memory``). Units: bytes. The rotary cos/sin caches (``positions x rotary_dim`` in the
model dtype; positions from ``ModelSpec.rope_cache_positions``) are counted on every rank, as
vLLM builds them at load time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from kvscope.errors import KvscopeError
from kvscope.plan._cache import per_model_cache
from kvscope.plan.config import Parallelism
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.ffn import FFNLayer
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: vLLM pads the vocabulary to a multiple of this before splitting it over TP.
VOCAB_PADDING = 64


@dataclass(frozen=True)
class RankWeights:
    """Weights one GPU holds: bytes by component and the layers of its pipeline stage."""

    pp_rank: int
    layers: tuple[int, ...]
    by_component: dict[str, float]

    @cached_property
    def total_bytes(self) -> float:
        return math.fsum(self.by_component.values())


def with_component(w: RankWeights, name: str, nbytes: float) -> RankWeights:
    """``w`` with one more component (a new record: cached ones are shared); as is if 0."""
    if not nbytes:
        return w
    return RankWeights(w.pp_rank, w.layers, {**w.by_component, name: nbytes})


def pp_layer_split(
    num_layers: int, pp: int, remainder_last: bool = False
) -> tuple[tuple[int, ...], ...]:
    """Layer indices of each pipeline stage (extra layers go to the stages before the last).

    ``remainder_last``: vLLM before 0.8.0 gave every extra layer to the last stage instead
    (``get_pp_indices`` in vllm/distributed/utils.py of the 0.6.6 and 0.7.x wheels: "the last
    partition will have the remaining layers"; 0.8.0 spreads them over the stages before the
    last, :data:`PP_SPREAD_SINCE`).
    """
    if pp > num_layers:
        raise KvscopeError(
            f"--pipeline-parallel-size {pp} exceeds the model's {num_layers} layers.",
            f"Use at most {num_layers} stages.",
        )
    sizes = [num_layers // pp] * pp
    if remainder_last:
        sizes[-1] += num_layers % pp
    else:
        for i in range(2, num_layers % pp + 2):
            sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(tuple(range(start, start + size)))
        start += size
    return tuple(out)


#: first vLLM release spreading a layer count's remainder over the stages before the last
PP_SPREAD_SINCE = (0, 8, 0)


def vllm_remainder_last(engine: str, version: tuple[int, ...]) -> bool:
    """Whether this engine release puts the pipeline remainder on the last stage."""
    return engine == "vllm" and version < PP_SPREAD_SINCE


def check_divisibility(model: ModelSpec, par: Parallelism) -> None:
    """Raise the engine's own complaint when TP does not divide the attention heads."""
    att = model.first_attention
    if att.num_heads % par.tp:
        # Only divisors up to 2 x TP are offered, so only those are tried (heads may be huge).
        top = min(att.num_heads, 2 * par.tp)
        ok = [d for d in range(1, top + 1) if att.num_heads % d == 0][-2:]
        raise KvscopeError(
            f"--tensor-parallel-size {par.tp} does not divide the {att.num_heads} attention "
            f"heads of {model.name}.",
            f"Use a TP size that divides {att.num_heads}, e.g. {' or '.join(map(str, ok))}.",
        )
    moe = model.moe_layer
    if moe is not None and par.ep and moe.num_experts % par.ep_size:
        raise KvscopeError(
            f"expert parallelism over {par.ep_size} ranks does not divide the "
            f"{moe.num_experts} experts of {model.name}.",
            "Pick tp x dp dividing the expert count, or drop --enable-expert-parallel.",
        )


def window_only_attention(att: AttentionLayer) -> AttentionLayer:
    """``att`` as DeepSeek V4's drafter layers build it (DSpark stages, MTP / NextN layers):
    window attention only, without the compressor, indexer or Engram block a compressed
    target layer of the same shape has.

    vLLM (``vllm/models/deepseek_v4/attention.py``, 0.25.0, 0.26.0, 0.27.1, 0.30.0 and 0.31.0
    wheels): a layer numbered from ``num_hidden_layers`` (the stages, ``layers.{43 + i}`` on
    V4-Flash-0731, ``nvidia/dspark.py``) gets ``compress_ratio = 1``, so neither
    ``DeepseekCompressor`` nor ``DeepseekV4Indexer`` is built. V4.1
    (``vllm/models/deepseek_v41/attention.py`` at 0.30.0 and 0.31.0): ``is_kv_source`` and
    ``is_index_source`` need ``layer_id < num_hidden_layers``, and ``nvidia/dspark.py`` passes
    no ``engram_layout``. SGLang (``srt/models/deepseek_v4_dspark.py``, 0.5.16-0.5.23):
    ``DSparkAttention`` is an ``MqaAttentionBase`` with ``compress_ratio=0`` (asserted); the
    compressor and ``C4Indexer`` live in ``MQALayer`` only (``srt/models/deepseek_v4.py``).
    MTP layers are numbered past ``num_hidden_layers`` too (``nvidia/mtp.py``), so
    ``nvidia/model.py`` of 0.22.0 already gives them ``compress_ratio = 1`` ("MTP layer is not
    included in the compress ratio list"); SGLang's NextN layer has compress ratio 0
    (``COMPRESS_RATIO_NEXTN_LAYER``). Other kinds pass through.
    """
    if att.kind in ("dsv4_csa", "dsv4_hca"):
        return replace(att, kind="dsv4_swa", compress_ratio=0, index_n_heads=0, index_head_dim=0)
    if att.kind == "dsv41":
        return replace(att, kv_source=False, index_source=False, engram_params=0)
    return att


def _attention_params_per_rank(att: AttentionLayer, tp: int) -> tuple[float, float]:
    """(sharded parameters on one rank, replicated parameters) of one attention block."""
    total = att.num_params()
    h, nh = att.hidden_size, att.num_heads
    if att.kind in ("full", "sliding"):
        kv_heads_rank = max(1, att.num_kv_heads // tp)
        kv = 2 * h * att.num_kv_heads * att.head_dim
        kv += 2 * att.num_kv_heads * att.head_dim if att.qkv_bias else 0
        kv_rank = kv * kv_heads_rank / att.num_kv_heads
        norms = 2 * att.head_dim if att.qk_norm else 0
        o_bias = h if att.o_bias else 0
        sharded = total - kv - norms - o_bias
        return sharded / tp + kv_rank, float(norms + o_bias)
    if att.kind in ("mla", "mla_sparse"):
        replicated = h * (att.kv_lora_rank + att.qk_rope_head_dim) + att.kv_lora_rank
        if att.q_lora_rank:
            replicated += h * att.q_lora_rank + att.q_lora_rank
        if att.kind == "mla_sparse":
            q_in = att.q_lora_rank or h
            replicated += q_in * att.index_n_heads * att.index_head_dim
            replicated += h * att.index_head_dim + 2 * att.index_head_dim
            replicated += h * att.index_n_heads
        return (total - replicated) / tp, float(replicated)
    if att.kind == "gdn":
        # Gated DeltaNet: projections, conv and per-head scalars split by heads; the gated
        # RMSNorm over one value head is replicated (vLLM qwen3_next.py); KDA also keeps its
        # f_a projection whole (ReplicatedLinear in vLLM's KimiDeltaAttention).
        whole = att.kda_replicated_params() if att.lin_variant == "kda" else att.lin_v_dim
        return (total - whole) / tp, float(whole)
    # DeepSeek V4: per-head query up-projection and the grouped output projection are
    # sharded by heads; the shared K=V head, compressors and indexer are replicated.
    ql = att.q_lora_rank or h
    sharded = ql * nh * att.head_dim + att.o_lora_rank * nh * att.head_dim
    sharded += att.o_groups * att.o_lora_rank * h
    return sharded / tp, float(total - sharded)


def _ffn_params_per_rank(
    ffn: FFNLayer, par: Parallelism, expert_pad: int, hidden_pad: int, hidden: int
) -> dict[str, float]:
    tp = par.tp
    if not ffn.is_moe:
        return {"dense_ffn": ffn.dense_params() / tp}
    routed = ffn.routed_expert_params() / (par.ep_size if par.ep else tp)
    if expert_pad > 1:
        # Kernel layouts that pad each expert's per-rank intermediate width.
        width = ffn.expert_intermediate_size / (1 if par.ep else tp)
        routed *= math.ceil(width / expert_pad) * expert_pad / width
    if hidden_pad > 1:
        # ... and, for some kernels, the hidden side of every expert matrix too.
        routed *= math.ceil(hidden / hidden_pad) * hidden_pad / hidden
    return {
        "routed_experts": routed,
        "shared_experts": ffn.shared_expert_params() / tp,
        "router": float(ffn.router_params()),
    }


def _bytes_per_param(model: ModelSpec) -> dict[str, float]:
    native = element_bytes(model.dtype)
    return {**model.quantization.component_bytes(native), "rope_cache": native}


@per_model_cache()
def rank_weights(
    model: ModelSpec,
    par: Parallelism,
    pp_rank: int = 0,
    draft_layers: int = 0,
    expert_pad: int = 1,
    hidden_pad: int = 1,
    expert_bytes: float = 0.0,
    draft_experts: int = 0,
    draft_eh_proj: bool = True,
    remainder_last: bool = False,
) -> RankWeights:
    """Weights on one GPU of pipeline stage ``pp_rank`` (all TP ranks of a stage are equal).

    ``draft_layers`` MTP layers (speculative decoding with the model's own next-token
    modules) sit on the last stage; each is shaped like the last decoder layer plus its
    ``eh_proj`` (2h x h) and two norms (DeepSeek-V3 report §2.2), sharing embedding and head.
    ``expert_pad`` rounds each routed expert's per-rank intermediate width up to a multiple
    (vLLM's Marlin MXFP4 path rounds it to 128). ``hidden_pad`` pads the hidden side of every expert
    matrix and ``expert_bytes`` (when > 0) replaces the routed experts' bytes per parameter:
    both for kernels that repack the checkpoint's experts (see :func:`expert_layout`).
    ``draft_experts`` (> 0) gives each drafter layer that many routed experts and
    ``draft_eh_proj`` False leaves out the MTP ``eh_proj`` and norms (DSpark stages have
    neither: :mod:`kvscope.plan.drafter`). On DeepSeek V4 each drafter layer's attention is
    :func:`window_only_attention` of the last layer's (DSpark stages, MTP / NextN layers).
    """
    stages = pp_layer_split(model.num_layers, par.pp, remainder_last)
    layers = stages[pp_rank]
    params: dict[str, float] = dict.fromkeys(_bytes_per_param(model), 0.0)
    on_stage = list(layers)
    if pp_rank == par.pp - 1 and draft_layers:
        on_stage += [-1] * draft_layers
        if draft_eh_proj:
            params["attention"] += draft_layers * 2.0 * model.hidden_size * model.hidden_size
            params["norms_other"] += draft_layers * 2.0 * model.hidden_size
    for i in on_stage:
        layer = model.layers[i]
        ffn = layer.ffn
        if i < 0 and draft_experts and ffn.is_moe:
            ffn = replace(ffn, num_experts=draft_experts)
        att = layer.attention
        if i < 0 and model.is_deepseek_v4:
            att = window_only_attention(att)
        sharded, replicated = _attention_params_per_rank(att, par.attn_tp)
        params["attention"] += sharded + replicated
        ffn_params = _ffn_params_per_rank(ffn, par, expert_pad, hidden_pad, model.hidden_size)
        for key, value in ffn_params.items():
            params[key] += value
        params["norms_other"] += layer.extra_params
    vocab_rank = math.ceil(model.vocab_size / (VOCAB_PADDING * par.tp)) * VOCAB_PADDING
    if pp_rank == 0:
        # SGLang's DP attention builds the input embedding unsharded on every GPU
        # (``VocabParallelEmbedding(..., enable_tp=not is_dp_attention_enabled())`` in its
        # model files); the LM head stays sharded over the whole TP group by default.
        vocab_embed = (
            math.ceil(model.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
            if par.dp_attention
            else vocab_rank
        )
        params["embedding"] = vocab_embed * model.hidden_size
        # Gemma 4's per-layer-input table and projection (VocabParallelEmbedding /
        # ColumnParallelLinear in vLLM gemma4.py): split over TP like the token embedding
        params["embedding"] += model.embedding_extra_params / par.tp
        if model.vision_params:
            # A vision-language wrapper's encoder and projector are built on the first stage
            # from tensor-parallel linears (QKVParallelLinear / RowParallelLinear in
            # vllm/model_executor/models/siglip.py, v0.11), so each TP rank holds its share.
            params["vision_tower"] = model.vision_params / par.tp
    if pp_rank == par.pp - 1:
        params["norms_other"] += model.final_params
        tied_here = model.tie_word_embeddings and par.pp == 1
        params["lm_head"] = 0.0 if tied_here else vocab_rank * model.hidden_size
        if model.classifier_labels:  # a score head instead (replicated: a few rows)
            params["lm_head"] = float(model.classifier_labels * model.hidden_size)
    params["rope_cache"] = rope_cache_elements(model)
    per = _bytes_per_param(model)
    per["vision_tower"] = element_bytes(model.dtype)  # encoders stay unquantized
    if expert_bytes > 0:
        per["routed_experts"] = expert_bytes
    return RankWeights(pp_rank, layers, {k: v * per[k] for k, v in params.items()})


def encoder_replica_bytes(model: ModelSpec, par: Parallelism) -> float:
    """Bytes the first stage's GPUs hold beyond their share of the vision encoder when vLLM
    runs it data-parallel (``--mm-encoder-tp-mode data``).

    With that mode vLLM builds the encoder's linears with ``disable_tp`` (``ColumnParallelLinear``
    / ``QKVParallelLinear`` / ``RowParallelLinear`` in ``vllm/model_executor/models/
    kimi_k25_vit.py``, ``use_data_parallel = is_vit_use_data_parallel(...)``), so every TP rank
    keeps the whole tower and projector, unquantized, where :func:`rank_weights` counts a
    1/TP share: the other (TP - 1)/TP is added here. Kimi-K2.5 on 8x H100 (vLLM 0.15.0, TP8,
    data mode) logged 72.02 GiB per GPU; the sharded count is 0.77 GiB short of it.
    """
    if not model.vision_params or par.tp == 1:
        return 0.0
    return model.vision_params * (1.0 - 1.0 / par.tp) * element_bytes(model.dtype)


def mla_absorbed_bytes(
    model: ModelSpec, par: Parallelism, layers: tuple[int, ...], engine: str
) -> float:
    """Bytes of the absorbed MLA up-projections one GPU keeps beside ``kv_b_proj``.

    Decode runs MLA in the absorbed form, with ``kv_b_proj`` split per head into a key part
    (``qk_nope_head_dim`` rows) and a value part (``v_head_dim`` rows), in the activation
    dtype; ``kv_b_proj`` itself stays for the prefill path.

    - vLLM (``MLAAttention.process_weights_after_loading`` and ``split_kv_b_proj``,
      vllm/model_executor/layers/attention/mla_attention.py, 0.33.0): ``W_UK_T`` and ``W_UV``
      are views of ``kv_b_proj`` converted to the activation dtype: a new tensor when the
      checkpoint quantizes it (fp8 DeepSeek V3/R1/V3.2), the weight itself when it does not.
    - SGLang (``post_load_weights`` of its DeepSeek model): ``w_kc`` and ``w_vc`` are made
      contiguous, so a copy is always held; under DP attention each GPU has every head.
    """
    native = element_bytes(model.dtype)
    # the attention's own bytes: NVFP4 checkpoints often leave self_attn unquantized
    linear = model.quantization.component_bytes(native)["attention"]
    if engine == "vllm" and linear == native:
        return 0.0
    elements = 0
    for i in layers:
        att = model.layers[i].attention
        if att.kind in ("mla", "mla_sparse"):
            heads = att.num_heads // par.attn_tp
            elements += heads * (att.qk_nope_head_dim + att.v_head_dim) * att.kv_lora_rank
    return float(elements * native)


@dataclass(frozen=True)
class ExpertLayout:
    """How an engine's MoE kernel stores the routed experts (pads, bytes per parameter)."""

    inter_pad: int = 1
    hidden_pad: int = 1
    bytes: float = 0.0  # 0: the checkpoint's own


def rope_cache_elements(model: ModelSpec) -> float:
    """Elements of one rotary cos/sin cache: positions (``ModelSpec.rope_cache_positions``, else
    ``max_position_embeddings``) x the rotary width of the first attention layer."""
    att = model.first_attention
    rotary = att.qk_rope_head_dim or int(att.head_dim * model.partial_rotary_factor)
    return float((model.rope_cache_positions or model.max_position_embeddings) * rotary)


def all_stage_weights(
    model: ModelSpec,
    par: Parallelism,
    draft_layers: int = 0,
    layout: ExpertLayout | None = None,
    draft_experts: int = 0,
    draft_eh_proj: bool = True,
    remainder_last: bool = False,
) -> tuple[RankWeights, ...]:
    """Per-GPU weights of every pipeline stage, first stage first (drafter layers and
    ``remainder_last``: see :func:`rank_weights` and :func:`pp_layer_split`)."""
    check_divisibility(model, par)
    lay = layout or ExpertLayout()
    return tuple(
        rank_weights(
            model,
            par,
            r,
            draft_layers,
            lay.inter_pad,
            lay.hidden_pad,
            lay.bytes,
            draft_experts,
            draft_eh_proj,
            remainder_last,
        )
        for r in range(par.pp)
    )


def expert_layout(model: ModelSpec, gpu: GPUSpec, engine: str) -> ExpertLayout:
    """vLLM's MXFP4 expert layout on this GPU (``Mxfp4MoEMethod`` in
    vllm/model_executor/layers/quantization/mxfp4.py, 0.10.1.1 and 0.19).

    Before Hopper (compute capability < 9.0) vLLM runs MXFP4 experts through Marlin
    (``_should_use_marlin``): per-rank intermediate width rounded up to 128 and hidden size
    to 256 (``create_weights``); the repacked weights and scales keep their widths
    (``prepare_moe_fp4_layer_for_marlin``: 4-bit values, one-byte scales after
    ``mxfp4_marlin_process_scales``). gpt-oss-120b at TP4 on A100 logs 17.22 GiB per rank:
    17.17 with both pads, 16.16 with neither.
    Hopper at the releases whose wheels bundle ``triton_kernels`` (0.12-0.31) takes the
    Triton layout of :func:`kvscope.plan.vllm_mxfp4.vllm_expert_layout`, which falls back to
    this function otherwise. Elsewhere on Hopper and newer the per-rank width is padded to 256
    (not read in the engine: kept from an earlier fit to the H100 start at 0.19, which the
    Triton layout now explains); ROCm rounds it up to 128. Other formats: the checkpoint as
    it is. SGLang's runners: :func:`kvscope.plan.sglang_moe_runner.sglang_expert_layout`.
    """
    if engine != "vllm" or model.quantization.method != "mxfp4":
        return ExpertLayout()
    if gpu.vendor.lower() == "amd":
        return ExpertLayout(128)
    cc = gpu.compute_capability
    major = int(cc.split(".")[0]) if cc else 9
    if major < 9:
        return ExpertLayout(128, 256)
    return ExpertLayout(256)
