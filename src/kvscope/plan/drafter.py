"""What a speculative-decoding drafter adds to one GPU: weights, KV layers, token slots.

Pinned to vLLM v0.33.0:

- MTP (``vllm/model_executor/models/deepseek_mtp.py``): ``num_nextn_predict_layers`` layers
  numbered after the target's, each a decoder layer of the target's shape plus
  ``enorm``/``hnorm`` and ``eh_proj`` (2h x h); the checkpoint's copies of the embedding and
  of ``shared_head.head`` are dropped for the target's
  (``vllm/v1/spec_decode/llm_base_proposer.py`` ``_maybe_share_embeddings`` /
  ``_maybe_share_lm_head``: "Detected MTP model. Sharing target model ..."), so only the
  layers count. ``num_speculative_tokens`` above the layer count reuses the same layers.
- EAGLE (``llama_eagle.py``): the draft checkpoint's decoder layers plus ``fc``
  (``ReplicatedLinear`` 2h -> h, whole on every rank); embedding and LM head shared.
- EAGLE-3 (``llama_eagle3.py``): the draft's layers, layer 0's ``qkv_proj`` taking 2h inputs,
  ``fc`` (3h -> h, three auxiliary hidden states, replicated), its own LM head of
  ``draft_vocab_size`` rows (``ParallelLMHead``; ``vocab_size`` when the config has none)
  and an int64 draft-to-target token map of as many entries; embedding shared.
- A draft model (``vllm/v1/spec_decode/draft_model.py``): the whole checkpoint at the
  target's tensor parallel size (``_raise_if_draft_tp_mismatch`` refuses another; every
  method with a model accepts only 1 or the target's, ``_verify_and_get_draft_tp`` in
  ``vllm/config/speculative.py``; both in the v0.25.0 and v0.31.0 wheels).
- DSpark on DeepSeek V4 (``vllm/models/deepseek_v4/nvidia/dspark.py`` at v0.31.0): the
  checkpoint's ``n_mtp_layers`` stages (3 when absent), each a ``DeepseekV4DecoderLayer`` of
  the target's shape numbered after its layers (no ``eh_proj``; window attention only, no
  compressor or indexer: ``compress_ratio = 1`` past ``num_hidden_layers`` in
  ``vllm/models/deepseek_v4/attention.py``, 0.25.0-0.31.0), plus ``main_proj``
  (``ReplicatedLinear``, h x len(``dspark_target_layer_ids``) -> h) and ``context_wkv_proj``
  (h -> head_dim per stage, ``disable_tp``), both whole on every rank at the checkpoint's
  linear precision, and the Markov head (``DSparkMarkovHead``,
  vllm/model_executor/models/qwen3_dspark.py: an ``nn.Embedding`` of vocab x
  ``dspark_markov_rank`` and a ``disable_tp`` head of draft vocab x rank, both bf16, whole on
  every rank); embedding and LM head aliased from the target. Its KV layers are the stages'
  SWA caches (``get_draft_kv_cache_layer_names``).
- DSpark on DeepSeek V4.1 (``vllm/models/deepseek_v41/nvidia/dspark.py`` at v0.31.0): the
  same (no compressor, indexer or Engram on a stage: ``is_kv_source`` / ``is_index_source``
  need ``layer_id < num_hidden_layers``), except that there is no ``context_wkv_proj`` (each
  stage projects its context KV with its own ``fused_wqa_wkv``) and each stage's MoE has
  ``dspark_n_routed_experts`` routed experts (``DeepseekV4MoE`` in
  ``models/deepseek_v41/nvidia/model.py``: layers numbered from ``num_hidden_layers``; 128
  on V4.1-Flash against the backbone's 384).
- n-gram / suffix: no network, nothing added.

KV: every drafter attention layer is registered with the target's
(``gpu_model_runner.get_kv_cache_spec`` walks the static forward context, draft included),
so a layer with the target's page joins the target's group and widens every block
(``vllm/v1/core/kv_cache_utils.py``); full-attention layers of another page beside an
all-full-attention target join the same single group too, each with its own page
(:func:`_join_kv`). Other mixes are said in the plan (:data:`NOT_MODELLED`).
Token slots: the scheduler books ``num_speculative_tokens`` lookahead slots per running
request (``num_lookahead_tokens``); vLLM's logged "Maximum concurrency" does not include them.
Activation: the drafter's dummy run follows the target's in ``profile_run``, at the same
token budget and a narrower network, so the target's profiled peak stays the peak; except
DeepSeek V4's MTP layer in vLLM 0.23-0.26, a full-width layer whose held inputs lift the
pass above the target's (:mod:`kvscope.plan.dsv4_activation`), and on DeepSeek V4 the
target states a DSpark drafter has captured (:func:`aux_capture_layers`), which the target's
forward holds while its last layers run (the same module). A full-width EAGLE-3 layer
(``Eagle3LlamaForCausalLM``, one decoder layer at the target's width) stays below the
target's pass in the starts read: ``profile_run`` samples after ``_dummy_run`` returns
(vllm/v1/worker/gpu_model_runner.py, 0.23.0 and 0.25.0 wheels), and that sampler pass
(``max_num_seqs`` rows of logits and their float32 copies beside the target's hidden states,
2.15 GiB for Qwen3-8B at 16,384 tokens and 1,024 sequences) is above the drafter's layer
(12,288-wide MLP, its 2h input and the target's output held: 1.9 GiB at most).

Units: bytes, tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.speculative import SpeculativeDecoding
from kvscope.plan.weights import VOCAB_PADDING, rank_weights
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.model import ModelSpec

#: What this module leaves out, said next to a plan that hits it.
NOT_MODELLED = {
    "kv": "the drafter's KV layers (not full attention beside an all-full-attention target)",
}
#: EAGLE-3 fuses this many target hidden states (``num_aux_hidden_states``, llama_eagle3.py).
EAGLE3_AUX_STATES = 3
#: DSpark's Markov head is built unquantized in bf16 (``DSparkMarkovHead``).
MARKOV_BYTES = 2
#: First speculators release whose EAGLE-3 heads keep the verifier's LM head frozen
#: (``DraftVocabMixin``, src/speculators/model.py at v0.5.0).
SPECULATORS_FROZEN_LM_HEAD = (0, 5)
#: One int64 entry of EAGLE-3's ``draft_id_to_target_id`` map per draft-vocabulary token.
TOKEN_MAP_BYTES = 8


@dataclass(frozen=True)
class Drafter:
    """The drafter's share of one GPU on the last pipeline stage."""

    method: str
    mtp_layers: int  # target-shaped MTP layers added to the stage's weights
    extra_weight_bytes: float  # EAGLE head / draft model weights on this GPU
    kv_layers: int  # drafter attention layers that join the target's KV group
    lookahead_tokens: int  # slots booked per running request beyond its tokens
    verify_tokens: int  # tokens per request in one verification pass
    note: str | None = None
    #: drafter layers of another page than the target's, full attention beside an all-full
    #: target: vLLM puts them in the target's one group (``UniformTypeKVCacheSpecs``), so
    #: their entries add to every block
    kv_attention: tuple[AttentionLayer, ...] = ()
    #: routed experts of each drafter layer (0: the target's) and whether each carries the
    #: MTP ``eh_proj`` and its two norms (DSpark stages do not)
    stage_experts: int = 0
    eh_proj: bool = True


def aux_capture_layers(model: ModelSpec, spec: SpeculativeDecoding | None) -> tuple[int, ...]:
    """The target layers whose output a DSpark drafter has vLLM capture, as the model's
    ``aux_hidden_state_layers``: ``i`` captures the state after layer ``i - 1``.

    ``get_eagle3_aux_layers_from_config`` (vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py,
    0.25.0 and 0.27.0-0.32.0 wheels) maps ``dspark_target_layer_ids`` to ``i + 1`` on DeepSeek
    V4 and keeps them on V4.1 (``deepseek_v41``, whose forward captures a layer's entry
    stream); the V2 runner sets them for ``dspark`` (``use_aux_hidden_state_outputs``). Other
    methods: () (EAGLE-3 captures are not modelled).
    """
    if spec is None or spec.method != "dspark" or not model.dspark_target_layer_ids:
        return ()
    shift = 0 if model.model_type.startswith("deepseek_v41") else 1
    return tuple(sorted({i + shift for i in model.dspark_target_layer_ids}))


def mtp_layer_count(model: ModelSpec) -> int:
    """The MTP layers vLLM builds for ``model`` (one line when it has none)."""
    if model.num_mtp_layers < 1:
        raise KvscopeError(
            f"--speculative-config method mtp needs MTP layers, but {model.name} has "
            "num_nextn_predict_layers = 0.",
            "Use eagle / eagle3 with a draft head, ngram, or draft_model.",
        )
    return model.num_mtp_layers


def plan_drafter(
    model: ModelSpec,
    spec: SpeculativeDecoding,
    par: Parallelism,
    load: Callable[[str], ModelSpec] | None = None,
) -> Drafter:
    """The drafter ``spec`` loads beside ``model`` under ``par`` (vLLM 0.33.0's rules)."""

    def made(mtp: int, extra: float, kv: int, note: str | None = None) -> Drafter:
        k = spec.num_speculative_tokens
        return Drafter(spec.method, mtp, extra, kv, k, spec.verify_tokens, note)

    if not spec.has_drafter:
        return made(0, 0.0, 0)
    if spec.method == "mtp":
        n = mtp_layer_count(model)
        return made(n, 0.0, n)
    if spec.method == "dspark":
        return _dspark(model, spec, made)
    if spec.model is None:
        raise KvscopeError(
            f"--speculative-config method {spec.method} needs a model (the draft checkpoint)."
        )
    if load is None:
        from kvscope.specs.registry import load_model

        load = load_model
    tp = spec.draft_tensor_parallel_size or par.tp
    if tp not in (1, par.tp) or (spec.method == "draft_model" and tp != par.tp):
        allowed = f"{par.tp}" if spec.method == "draft_model" else f"1 or {par.tp}"
        raise KvscopeError(
            f"--speculative-config: draft_tensor_parallel_size {tp} is refused by vLLM with "
            f"tensor parallel size {par.tp} for method {spec.method} (allowed: {allowed}).",
            "Leave draft_tensor_parallel_size out to use the target's.",
        )
    draft = load(spec.model)
    w = rank_weights(draft, Parallelism(tp=tp)).by_component
    if spec.method == "draft_model":
        return _join_kv(model, draft, made(0, math.fsum(w.values()), 0))
    native = 2.0 if draft.dtype in ("bfloat16", "float16") else 4.0
    h = model.hidden_size
    body = math.fsum(v for k, v in w.items() if k not in ("embedding", "lm_head"))
    if spec.method == "eagle":
        extra = body + 2.0 * h * draft.hidden_size * native
    else:  # eagle3
        att = draft.layers[0].attention
        q_kv = (att.num_heads + 2 * att.num_kv_heads) * att.head_dim / tp
        extra = (
            body
            + draft.hidden_size * q_kv * native  # layer 0 reads [embeds, hidden]: 2h inputs
            + EAGLE3_AUX_STATES * h * draft.hidden_size * native
            + (
                0.0
                if lm_head_is_verifier_copy(draft, model)
                else _eagle3_head_bytes(draft, w.get("lm_head", 0.0), tp)
            )
        )
    return _join_kv(model, draft, made(0, extra, 0))


def _join_kv(model: ModelSpec, draft: ModelSpec, d: Drafter) -> Drafter:
    """Where the drafter's attention layers go in vLLM's KV cache.

    Every drafter attention layer is registered beside the target's. Layers with the
    target's page join its group as more layers (``kv_layers``). Layers of another page
    (another head count or size, as a small draft model of the family often has) still
    share the target's one group when every layer is full attention: ``get_kv_cache_groups``
    (vllm/v1/core/kv_cache_utils.py, v0.25.0 and v0.33.0) then builds one
    ``UniformTypeKVCacheSpecs`` whose page is the sum of each layer's page. Beside a target
    with sliding-window, linear or latent layers the grouping differs and is not modelled.
    """
    own = tuple(layer.attention for layer in draft.layers)
    if all(_same_page(model, a) for a in own):
        return replace(d, kv_layers=len(own))
    target_full = all(layer.attention.kind == "full" for layer in model.layers)
    if target_full and all(a.kind == "full" for a in own):
        return replace(d, kv_attention=own)
    return replace(d, note=NOT_MODELLED["kv"])


def _eagle3_head_bytes(draft: ModelSpec, full_head: float, tp: int) -> float:
    """An EAGLE-3 head's own LM head and token map on one GPU, bytes.

    ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py in the v0.25.0 and
    v0.31.0 wheels) builds ``ParallelLMHead(draft_vocab_size, hidden)``, ``vocab_size`` rows
    when the config has no ``draft_vocab_size``, and for a trimmed vocabulary an int64
    ``draft_id_to_target_id`` parameter of ``draft_vocab_size`` entries on every rank
    (0.25.0 also keeps it, 1.2 MB for Qwen3's vocabulary, at full width). ``full_head`` is
    the head at ``vocab_size``. vLLM also drops a head whose weights equal the target's
    (``_maybe_share_lm_head``, torch.equal); which heads those are is decided by
    :func:`lm_head_is_verifier_copy`, and any other full-vocabulary head stays counted.
    """
    rows = draft.draft_vocab_size or draft.vocab_size
    if rows >= draft.vocab_size:
        return full_head

    def per_rank(vocab: int) -> int:
        return math.ceil(vocab / (VOCAB_PADDING * tp)) * VOCAB_PADDING

    return full_head * per_rank(rows) / per_rank(draft.vocab_size) + TOKEN_MAP_BYTES * rows


def lm_head_is_verifier_copy(draft: ModelSpec, model: ModelSpec) -> bool:
    """Whether an EAGLE-3 head's LM head is a frozen copy of its verifier's, so vLLM drops it.

    speculators writes the head's ``lm_head`` as the verifier's rows (``t2d``-masked for a
    trimmed vocabulary) and freezes it from v0.5.0 (``DraftVocabMixin._init_vocab`` sets
    ``lm_head.weight.requires_grad = False`` and ``load_verifier_weights`` copies the
    verifier's ``lm_head.weight``: src/speculators/model.py at v0.5.0, v0.6.0, v0.7.0; v0.4.0
    froze only ``verifier_lm_head``). At the full vocabulary the trained head therefore keeps
    the target's LM head bit for bit, and vLLM's ``_maybe_share_lm_head`` (torch.equal of the
    two weights: vllm/v1/spec_decode/eagle.py in the 0.14.1 and 0.19.0 wheels,
    llm_base_proposer.py in 0.22.0, 0.25.0 and 0.31.0) deletes the head's copy after loading,
    so "Model loading took" holds the layer, ``fc`` and norms only (vLLM 0.20.0: "Detected
    EAGLE model with lm_head identical to the target model", 15.78 GiB for Qwen3-8B + head
    against 15.27 without). A head served with another target than its verifier (a re-quantized
    LM head) would keep its copy; a config.json does not say which, so the verifier is taken
    as the target. vLLM 0.11.0 shared any full-vocabulary EAGLE-3 head by shape alone.
    """
    m = re.match(r"(\d+)\.(\d+)", draft.speculators_version)
    if m is None or (int(m.group(1)), int(m.group(2))) < SPECULATORS_FROZEN_LM_HEAD:
        return False
    rows = draft.draft_vocab_size or draft.vocab_size
    return rows == draft.vocab_size == model.vocab_size


def _same_page(model: ModelSpec, b: AttentionLayer) -> bool:
    a = model.layers[-1].attention
    return (a.kind, a.num_kv_heads, a.head_dim) == (b.kind, b.num_kv_heads, b.head_dim)


def _dspark(model: ModelSpec, spec: SpeculativeDecoding, made: Callable[..., Drafter]) -> Drafter:
    """DSpark stages of a V4-Flash-0731 / V4.1 checkpoint (see the module docstring)."""
    if spec.model is not None and spec.model != model.name:
        raise KvscopeError(
            f"--speculative-config: a separate DSpark draft checkpoint ({spec.model}) is not "
            "modelled by kvscope; only the stages a DeepSeek V4 checkpoint ships are.",
            'Leave out "model" to draft with the target\'s own DSpark stages.',
        )
    n = model.dspark_stages
    if n < 1:
        raise KvscopeError(
            f"--speculative-config method dspark needs DSpark stages, but {model.name} has no "
            "dspark_target_layer_ids in its config.json.",
            "Use a checkpoint that ships them (DeepSeek-V4-Flash-0731, V4.1) or method mtp.",
        )
    h = model.hidden_size
    extra = h * model.dspark_target_layers * h * _linear_bytes(model)
    extra += dspark_context_wkv_bytes(model)
    markov_rows = model.vocab_size + (model.draft_vocab_size or model.vocab_size)
    extra += markov_rows * model.dspark_markov_rank * MARKOV_BYTES
    return replace(
        made(n, extra, n, "DSpark stages' SWA caches share the target's window groups"),
        stage_experts=model.dspark_routed_experts,
        eh_proj=False,
    )


def _linear_bytes(model: ModelSpec) -> float:
    """Bytes per parameter of the checkpoint's Linear layers (the DSpark projections')."""
    q = model.quantization
    if q.linear_bytes is not None:
        return q.linear_bytes
    return 2.0 if model.dtype in ("bfloat16", "float16") else 4.0


def dspark_context_wkv_bytes(model: ModelSpec) -> float:
    """Bytes of vLLM's DSpark ``context_wkv_proj`` (h -> head_dim per stage, whole on every
    rank at the checkpoint's linear precision); V4.1's stages project their own context KV."""
    if model.model_type.startswith("deepseek_v41"):
        return 0.0
    head_dim = model.layers[-1].attention.head_dim
    return model.hidden_size * head_dim * model.dspark_stages * _linear_bytes(model)
