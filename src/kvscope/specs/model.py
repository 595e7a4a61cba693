"""Model architecture from a Hugging Face ``config.json``: :class:`ModelSpec`.

A ``ModelSpec`` knows, per layer, the attention kind and KV state it keeps and the FFN kind,
and derives parameter counts, weight bytes by component and KV bytes per token per layer
group. Parsing is in :mod:`kvscope.specs.config_parse`; presets in :mod:`kvscope.specs.presets`.

Units: parameters are counts, bytes are bytes, per-token figures are bytes per token.
Multi-token-prediction (MTP) layers are excluded from totals, as the model cards do
(DeepSeek-V3 README: "671B main model weights + 14B MTP module").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from kvscope.errors import KvscopeError
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.ffn import FFNLayer
from kvscope.specs.kv_state import KVCache, bounded_bytes_per_request, history_bytes_per_token
from kvscope.specs.quant import Quantization
from kvscope.specs.vision_output import VisionOutput

#: Component names used in parameter and weight breakdowns (plus ``vision_tower`` for
#: vision-language models only).
COMPONENTS = (
    "embedding",
    "attention",
    "dense_ffn",
    "routed_experts",
    "shared_experts",
    "router",
    "norms_other",
    "lm_head",
)


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: attention block and FFN block."""

    attention: AttentionLayer
    ffn: FFNLayer
    extra_params: int = 0  # norms and residual mixers (hyper-connections) of this layer


@dataclass(frozen=True)
class Published:
    """Totals as the model card states them, for checking our counts."""

    total_params: float | None = None
    active_params: float | None = None
    active_convention: str = "with_embeddings"
    source: str = ""


@dataclass(frozen=True)
class KVGroup:
    """Layers that keep identical KV state (a KV-cache group in vLLM's terms)."""

    kind: str
    layers: tuple[int, ...]
    caches: tuple[KVCache, ...]

    @property
    def bytes_per_token_per_layer(self) -> float:
        """Amortised full-history bytes per token in one layer of this group."""
        return history_bytes_per_token(self.caches)

    @property
    def bytes_per_token(self) -> float:
        return self.bytes_per_token_per_layer * len(self.layers)

    @property
    def bounded_bytes_per_request(self) -> float:
        """Window and fixed state one request holds in this group (all its layers)."""
        return bounded_bytes_per_request(self.caches) * len(self.layers)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only LLM, with dtype and weight quantization resolved."""

    name: str
    model_type: str
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    layers: tuple[LayerSpec, ...]
    dtype: str
    quantization: Quantization
    final_params: int = 0  # final norm and output-side mixers outside the layers
    num_mtp_layers: int = 0
    vision_params: int = 0  # vision tower and projector of a vision-language wrapper
    #: labels of a ``*ForSequenceClassification`` checkpoint's score head, which replaces the
    #: LM head (``num_labels``, else the size of ``id2label``; 0: a causal LM). SGLang
    #: ``models/llama_classification.py`` builds ``nn.Linear(hidden_size, num_labels)`` and no
    #: ``lm_head``; vLLM's ``as_seq_cls_model`` likewise swaps in a ``score`` layer.
    classifier_labels: int = 0
    #: embedding tables beside the token embedding (Gemma 4's per-layer inputs), counted in
    #: the ``embedding`` component
    embedding_extra_params: int = 0
    #: the vision tower's depth and width as ``vision_config`` states them (``num_hidden_layers``,
    #: ``hidden_size``; Kimi K2.5's MoonViT: ``vt_num_hidden_layers``, ``vt_hidden_size``, the
    #: values SGLang's ``KimiK25VisionConfig`` defaults to); 0 where the key is absent or the
    #: model has no tower. SGLang scales its default ``mem_fraction_static`` by them.
    vision_layers: int = 0
    vision_width: int = 0
    #: a Qwen3-VL-style tower's patching and the width of each token it returns, where
    #: ``vision_config`` states ``out_hidden_size`` (None otherwise); see :class:`VisionOutput`
    vision_output: VisionOutput | None = None
    #: positions of every distinct rotary cos/sin cache the engine builds (0: one cache of
    #: ``max_position_embeddings``); see ``families.rope_cache_positions``
    rope_cache_positions: int = 0
    #: the text model's rotary embedding is M-RoPE (``mrope_section`` under ``rope_scaling`` or
    #: ``rope_parameters``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 / 3.6), whose cache vLLM
    #: builds over four times the positions (:mod:`kvscope.plan.mrope_buffers`)
    mrope: bool = False
    #: share of the head rotated by RoPE (``partial_rotary_factor``; Qwen3-Next 0.25)
    partial_rotary_factor: float = 1.0
    #: mHC hyper-connection streams (DeepSeek V4 ``hc_mult``; 0 without), and the sparse
    #: indexer's top-k (``index_topk``; 0 without): both size engine buffers per token
    hc_mult: int = 0
    index_topk: int = 0
    #: DSpark drafter stages the checkpoint ships (DeepSeek V4-Flash-0731 / V4.1: ``n_mtp_layers``,
    #: 3 when absent, vLLM ``models/deepseek_v4/nvidia/dspark.py`` at v0.31.0) and the target
    #: layers whose hidden states its ``main_proj`` fuses (``dspark_target_layer_ids``); 0 without
    dspark_stages: int = 0
    dspark_target_layers: int = 0
    #: the ``dspark_target_layer_ids`` themselves (zero-based target layers; () without)
    dspark_target_layer_ids: tuple[int, ...] = ()
    #: rank of the DSpark Markov head (``dspark_markov_rank``; 0 without), and the routed
    #: experts of each DSpark stage where the model's vLLM code reads ``dspark_n_routed_experts``
    #: (DeepSeek V4.1's ``DeepseekV4MoE``, vllm/models/deepseek_v41/nvidia/model.py at v0.31.0;
    #: 0: the target's count)
    dspark_markov_rank: int = 0
    dspark_routed_experts: int = 0
    #: DSpark draft tokens a step (``dspark_block_size``; 0 without), SGLang's default gamma
    #: (``read_draft_checkpoint_gamma``, speculative_hook.py of 0.5.16)
    dspark_block_size: int = 0
    #: rows of an EAGLE-3 head's own LM head (``draft_vocab_size``; 0: the config has none,
    #: vLLM ``llama_eagle3.py`` then takes ``vocab_size``)
    draft_vocab_size: int = 0
    #: the ``speculators_version`` a speculators-format draft head's config.json states
    #: ("" for other checkpoints); see :func:`kvscope.plan.drafter.lm_head_is_verifier_copy`
    speculators_version: str = ""
    #: Mistral's own checkpoint files found beside config.json (``params.json``,
    #: ``consolidated.safetensors`` for any ``consolidated*.safetensors``); vLLM's
    #: ``--config-format auto`` loads that format when they are there (kvscope.plan.config_format)
    mistral_files: tuple[str, ...] = ()
    #: Llama 4's chunked local attention span (``attention_chunk_size``; 0 elsewhere): vLLM's
    #: chunked KV groups (kvscope.plan.vllm_chunked), SGLang's SWA window (plan.sglang_swa)
    attention_chunk_size: int = 0
    source: str = ""
    published: Published = field(default_factory=Published)

    # ------------------------------------------------------------------ shape
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def is_moe(self) -> bool:
        return any(layer.ffn.is_moe for layer in self.layers)

    @property
    def attention_kinds(self) -> dict[str, int]:
        """How many layers of each attention kind."""
        return dict(Counter(layer.attention.kind for layer in self.layers))

    @property
    def is_deepseek_v4(self) -> bool:
        """DeepSeek V4's compressed attention (sliding, C4 and C128 layers) in any layer."""
        return any(layer.attention.kind.startswith("dsv4") for layer in self.layers)

    @property
    def uses_mla(self) -> bool:
        return any(layer.attention.is_mla_family for layer in self.layers)

    @property
    def first_attention(self) -> AttentionLayer:
        """The first softmax-attention layer (heads, head size); linear-attention layers of a
        hybrid (kind ``gdn``) are skipped."""
        for layer in self.layers:
            if layer.attention.kind != "gdn":
                return layer.attention
        return self.layers[0].attention

    @property
    def moe_layer(self) -> FFNLayer | None:
        """A representative MoE block (all MoE layers share one shape), or None."""
        return next((layer.ffn for layer in self.layers if layer.ffn.is_moe), None)

    # ------------------------------------------------------------------ parameters
    @cached_property
    def params(self) -> dict[str, int]:
        """Parameter count by component (see :data:`COMPONENTS`)."""
        out = dict.fromkeys(COMPONENTS, 0)
        out["embedding"] = self.vocab_size * self.hidden_size + self.embedding_extra_params
        out["lm_head"] = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        if self.classifier_labels:
            out["lm_head"] = self.classifier_labels * self.hidden_size
        for layer in self.layers:
            out["attention"] += layer.attention.num_params()
            out["dense_ffn"] += layer.ffn.dense_params()
            out["routed_experts"] += layer.ffn.routed_expert_params()
            out["shared_experts"] += layer.ffn.shared_expert_params()
            out["router"] += layer.ffn.router_params()
            out["norms_other"] += layer.extra_params
        out["norms_other"] += self.final_params
        if self.vision_params:  # only listed for vision-language models
            out["vision_tower"] = self.vision_params
        return out

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    @cached_property
    def active_params(self) -> int:
        """Parameters touched per text token: routed experts count only the top-k, and a
        vision tower (which runs on images only) not at all."""
        p = self.params
        active_routed = sum(layer.ffn.active_routed_params() for layer in self.layers)
        return self.total_params - p["routed_experts"] + active_routed - self.vision_params

    @property
    def active_params_excl_embedding(self) -> int:
        """Active parameters without the input embedding (a lookup, not a matmul)."""
        return self.active_params - self.params["embedding"]

    def active_params_by(self, convention: str) -> int:
        """Active parameters counted the way a publisher counts them.

        ``with_embeddings`` (Qwen, Mistral, OpenAI cards), ``without_input_embedding``
        (DeepSeek cards, whose activated figures leave out the embedding lookup) or
        ``without_embeddings`` (neither the embedding nor the output head: the count that
        reproduces GLM-4.5's 32B, 33.6B less 2 x 0.78B of vocabulary matrices).
        """
        if convention == "without_input_embedding":
            return self.active_params_excl_embedding
        if convention == "without_embeddings":
            return self.active_params_excl_embedding - self.params["lm_head"]
        return self.active_params

    # ------------------------------------------------------------------ weight bytes
    @cached_property
    def weight_bytes(self) -> dict[str, float]:
        """Bytes of weights by component, as the checkpoint stores them (scales included)."""
        p = self.params
        native = element_bytes(self.dtype)
        per = self.quantization.component_bytes(native)
        out = {k: p[k] * per[k] for k in COMPONENTS}
        if "vision_tower" in p:
            # counted at the model dtype: weight quantization is not applied to the tower
            out["vision_tower"] = p["vision_tower"] * native
        return out

    @property
    def total_weight_bytes(self) -> float:
        return sum(self.weight_bytes.values())

    # ------------------------------------------------------------------ KV cache
    def check_kv_dtype(self, kv_dtype: str) -> None:
        """Refuse a KV-cache dtype this model cannot store (one line, naming the model)."""
        if kv_dtype == "fp8_ds_mla" and not self.uses_mla:
            raise KvscopeError(
                f"--kv-cache-dtype fp8_ds_mla is DeepSeek's packed MLA record, but {self.name} "
                "has no MLA layers.",
                "Use --kv-cache-dtype fp8.",
            )

    def kv_groups(
        self, kv_dtype: str | None = None, tp: int = 1, indexer_dtype: str = "fp8"
    ) -> tuple[KVGroup, ...]:
        """Layers grouped by identical KV state, in first-layer order."""
        kv = kv_dtype or self.dtype
        groups: dict[tuple[str, tuple[KVCache, ...]], list[int]] = {}
        for i, layer in enumerate(self.layers):
            caches = layer.attention.kv_caches(kv, tp, indexer_dtype)
            groups.setdefault((layer.attention.kind, caches), []).append(i)
        return tuple(KVGroup(kind, tuple(idx), caches) for (kind, caches), idx in groups.items())

    def kv_bytes_per_token(
        self, kv_dtype: str | None = None, tp: int = 1, indexer_dtype: str = "fp8"
    ) -> float:
        """Full-history KV bytes per token on one TP rank, all layers (window state excluded)."""
        return sum(g.bytes_per_token for g in self.kv_groups(kv_dtype, tp, indexer_dtype))

    def kv_bytes_for_request(
        self,
        context_tokens: int,
        kv_dtype: str | None = None,
        tp: int = 1,
        indexer_dtype: str = "fp8",
    ) -> float:
        """Exact bytes one request of ``context_tokens`` holds on one TP rank, all layers."""
        total = 0.0
        for g in self.kv_groups(kv_dtype, tp, indexer_dtype):
            total += sum(c.bytes_for(context_tokens) for c in g.caches) * len(g.layers)
        return total
