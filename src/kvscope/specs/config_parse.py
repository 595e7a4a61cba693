"""Parse a Hugging Face ``config.json`` into a :class:`~kvscope.specs.model.ModelSpec`.

Which keys mean what, by family (names as in the transformers configuration classes):
- Llama/Mistral/Qwen2/Qwen3: ``num_key_value_heads``, ``head_dim`` (else hidden/heads),
  ``sliding_window`` with ``layer_types`` or ``use_sliding_window``; Qwen2 has q/k/v biases,
  Qwen3 has per-head q/k RMSNorm.
- Mixtral / gpt-oss: ``num_local_experts`` with ``intermediate_size`` per expert; gpt-oss
  adds attention biases, per-head sinks, expert and router biases and alternating
  ``layer_types`` (sliding 128 / full).
- Qwen3-MoE: ``num_experts``, ``moe_intermediate_size``, ``decoder_sparse_step``,
  ``mlp_only_layers``.
- DeepSeek V2/V3/R1/Kimi-K2: MLA keys (``kv_lora_rank``, ``q_lora_rank``, ``qk_rope_head_dim``,
  ``qk_nope_head_dim``, ``v_head_dim``), MoE keys (``n_routed_experts``, ``n_shared_experts``,
  ``first_k_dense_replace``, ``moe_layer_freq``), ``num_nextn_predict_layers`` (MTP).
- DeepSeek-V3.2: the above plus ``index_n_heads``, ``index_head_dim``, ``index_topk``.
- DeepSeek V4: ``compress_ratios`` (0 / 4 / 128 per layer), ``o_groups``, ``o_lora_rank``,
  ``hc_mult`` (hyper-connections), ``expert_dtype`` (fp4 experts). V4.1 (``deepseek_v41``,
  ratios 0 / 1 / 2, KV and index sources, Engram): :mod:`config_dsv41`.
- Gemma 4 (per-type head sizes and KV heads, K reused as V, KV-shared layers, a MoE block
  beside the dense MLP, per-layer inputs): :mod:`config_gemma4`.
- Phi-3 (model-level ``sliding_window``), Gemma 2/3 (sliding/global patterns, four norms per
  layer, configuration-class defaults), GLM-4.5 (``use_qk_norm``, q/k/v-only biases, MTP
  layer left out), MiniMax-M2 (``qk_norm_type`` per_layer), Llama 4 (shared expert,
  ``interleave_moe_layer_step``; ``attention_chunk_size``, kept apart by vLLM's planner in
  :mod:`kvscope.plan.vllm_chunked`) and
  vision towers of ``text_config`` + ``vision_config`` wrappers: :mod:`families`.
- Kimi Linear / Kimi K3 (KDA + gated MLA hybrid): :mod:`config_kimi_linear`.
FFN keys are read in :mod:`config_ffn`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvscope.errors import ConfigError, KvscopeError, UnknownNameError
from kvscope.specs import families, quant
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.config_dsv41 import dsv4_attention, dsv41_layers
from kvscope.specs.config_ffn import ffn_layers
from kvscope.specs.config_gemma4 import (
    gemma4_embedding_extra,
    gemma4_ffns,
    gemma4_layer_extra,
    gemma4_layers,
)
from kvscope.specs.config_kimi_linear import (
    KIMI_LINEAR_TYPES,
    attention_residual_params,
    kimi_linear_layers,
)
from kvscope.specs.config_linear import HYBRID_LINEAR_TYPES, hybrid_layers
from kvscope.specs.config_vision import tower_output_of, vision_params, vision_shape
from kvscope.specs.dtypes import canonical_dtype, resolve_model_dtype
from kvscope.specs.model import LayerSpec, ModelSpec, Published
from kvscope.validate import count

#: Largest value an architecture size may hold (2^31 - 1): engines index these dimensions
#: with int32, and public models stay orders of magnitude below (vocabularies ~256K, hidden
#: sizes ~16K, context windows ~10M tokens). A bigger number is a typo or a damaged file.
MAX_SIZE = 2**31 - 1
#: Most decoder layers a config may declare. The largest public models have under 200
#: (Llama 3.1 405B: 126, DeepSeek-V3: 61); every layer is planned one by one, and 10,000 keep
#: a plan within about a second, where a million took minutes and a gigabyte.
MAX_LAYERS = 10_000

_QKV_BIAS = ("qwen2", "qwen2_moe")


class _Cfg:
    """Typed, validated access to config keys; errors name the field."""

    def __init__(self, raw: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.raw = raw
        self.source = source
        self.prefix = prefix  # "vision_config." for a nested block, so errors name the path

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def integer(
        self, key: str, default: int | None = None, minimum: int = 1, maximum: int = MAX_SIZE
    ) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ConfigError(self.source, self.prefix + key, "is missing")
            return default
        return self.check_int(key, value, minimum, maximum)

    def check_int(self, key: str, value: Any, minimum: int = 1, maximum: int = MAX_SIZE) -> int:
        """``value`` (read from ``key``) as an int in [minimum, maximum], else ConfigError."""
        name = self.prefix + key
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(self.source, name, f"must be an integer, got {_show(value)}")
        try:
            return count(value, key, low=minimum, high=maximum)
        except KvscopeError as err:
            problem = err.message.removeprefix(f"{key} ").rstrip(".")
            raise ConfigError(self.source, name, problem) from None

    def text(self, key: str) -> str:
        """A string field, ``""`` when absent; anything but a string is a ConfigError."""
        value = self.raw.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ConfigError(self.source, key, f"must be a string, got {_show(value)}")
        return value

    def opt_int(self, key: str, minimum: int = 1) -> int | None:
        return self.integer(key, minimum=minimum) if self.has(key) else None

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(self.source, key, f"must be true or false, got {value!r}")
        return value

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.source, key, problem)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _flatten(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal wrappers keep the language model under text_config; the checkpoint dtype
    # and quantization stay at the top level (google/gemma-3-27b-it, Llama 4).
    if "hidden_size" not in raw and isinstance(raw.get("text_config"), Mapping):
        merged = dict(raw["text_config"])
        if not merged.get("model_type") and isinstance(raw.get("model_type"), str):
            top = raw["model_type"]
            merged["model_type"] = families.TEXT_MODEL_TYPE.get(top, top)
        text_type = str(merged.get("model_type") or "")
        merged["model_type"] = families.TEXT_TYPE_ALIAS.get(text_type, text_type)
        # transformers keeps tie_word_embeddings on the wrapper (Qwen2_5_VLConfig >= 4.52)
        for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
            if merged.get(key) is None and raw.get(key) is not None:
                merged[key] = raw[key]
        return families.with_defaults(merged)
    flat = families.FLAT_WRAPPERS.get(str(raw.get("model_type") or ""))
    if flat is not None and "hidden_size" in raw:  # text keys at the top level (older files)
        return families.with_defaults({**raw, "model_type": flat})
    return families.with_defaults(raw)


def _is_mrope(cfg: Mapping[str, Any]) -> bool:
    """Whether the rotary parameters name M-RoPE sections (``mrope_section``), the key vLLM's
    ``get_rope`` builds an ``MRotaryEmbedding`` for (vllm/model_executor/layers/
    rotary_embedding/__init__.py at v0.13.0)."""
    return any(
        isinstance(cfg.get(key), Mapping) and "mrope_section" in cfg[key]
        for key in ("rope_scaling", "rope_parameters")
    )


def parse_config(
    raw: Mapping[str, Any],
    source: str = "config.json",
    name: str | None = None,
    dtype: str | None = None,
    quantization: str | None = None,
    published: Published | None = None,
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json mapping; ``dtype``/``quantization`` are
    the ``--dtype`` / ``--quantization`` overrides. Raises ConfigError naming the field."""
    c = _Cfg(_flatten(raw), source)
    model_type = _model_type(c)
    h = c.integer("hidden_size")
    n_layers = _num_layers(c)
    nh = c.integer("num_attention_heads")
    vocab = c.integer("vocab_size")
    max_pos = c.integer("max_position_embeddings", default=4096)
    tied = c.boolean("tie_word_embeddings", default=False)

    resolved_dtype = resolve_model_dtype(dtype, _config_dtype(c))
    gemma4 = model_type == "gemma4_text"
    attentions = _attention_layers(c, model_type, h, nh, n_layers, resolved_dtype)
    ffns = gemma4_ffns(c, h, n_layers) if gemma4 else ffn_layers(c, model_type, h, n_layers)

    hc = c.integer("hc_mult", default=0, minimum=0)
    # input and post-attention RMSNorm weights (Gemma 2/3: also pre/post feed-forward)
    per_layer_extra = families.NORMS_PER_LAYER.get(model_type, 2) * h
    if gemma4:
        per_layer_extra = gemma4_layer_extra(c, h)
    if c.boolean("use_qk_norm", False) and c.text("qk_norm_type") == "per_layer":
        att0 = attentions[0]  # MiniMax-M2: one norm over all q heads, one over all k heads
        per_layer_extra += (att0.num_heads + att0.num_kv_heads) * att0.head_dim
    final = h  # final norm
    res_layer, res_final = attention_residual_params(c, h)  # Kimi K3
    per_layer_extra += res_layer
    final += res_final
    if hc:
        # mHC: two mixers per layer, each fn (mix x hc*h) + base (mix) + scale (3),
        # mix = (2 + hc) * hc; one output-side collapse of hc x hc*h + hc + 1.
        mix = (2 + hc) * hc
        per_layer_extra += 2 * (mix * hc * h + mix + 3)
        final += hc * hc * h + hc + 1
    layers = tuple(LayerSpec(a, f, per_layer_extra) for a, f in zip(attentions, ffns, strict=True))
    q = _quantization(c, quantization, resolved_dtype, n_layers)
    vision = vision_params(raw, source, h)
    vision_layers, vision_width = vision_shape(raw) if vision else (0, 0)
    dspark_ids = c.raw.get("dspark_target_layer_ids") or []
    if not isinstance(dspark_ids, list):
        dspark_ids = []
    return ModelSpec(
        name=name or c.text("_name_or_path") or source,
        model_type=model_type,
        hidden_size=h,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        tie_word_embeddings=tied,
        layers=layers,
        dtype=resolved_dtype,
        quantization=q,
        final_params=final,
        num_mtp_layers=_mtp_layers(c),
        vision_params=vision,
        classifier_labels=families.classifier_labels(raw),
        embedding_extra_params=gemma4_embedding_extra(c, h, n_layers) if gemma4 else 0,
        vision_layers=vision_layers,
        vision_width=vision_width,
        vision_output=tower_output_of(raw, h) if vision else None,
        rope_cache_positions=families.rope_cache_positions(c.raw, model_type, max_pos),
        mrope=_is_mrope(c.raw),
        partial_rotary_factor=_rotary_fraction(c),
        hc_mult=hc,
        index_topk=c.integer("index_topk", default=0, minimum=0),
        dspark_stages=(c.integer("n_mtp_layers", default=3, minimum=1) if dspark_ids else 0),
        dspark_target_layers=len(dspark_ids),
        dspark_target_layer_ids=tuple(i for i in dspark_ids if isinstance(i, int)),
        dspark_markov_rank=(
            c.integer("dspark_markov_rank", default=0, minimum=0) if dspark_ids else 0
        ),
        dspark_routed_experts=(
            c.integer("dspark_n_routed_experts", default=0, minimum=0)
            if dspark_ids and model_type.startswith("deepseek_v41")
            else 0
        ),
        dspark_block_size=(
            c.integer("dspark_block_size", default=0, minimum=0) if dspark_ids else 0
        ),
        draft_vocab_size=c.integer("draft_vocab_size", default=0, minimum=0),
        speculators_version=str(c.raw.get("speculators_version") or ""),
        attention_chunk_size=c.integer("attention_chunk_size", 0, 0)
        if "llama4" in model_type
        else 0,
        source=source,
        published=published or Published(),
    )


def _mtp_layers(c: _Cfg) -> int:
    """The checkpoint's multi-token-prediction layers: DeepSeek's ``num_nextn_predict_layers``,
    else Qwen3-Next / Qwen3.5's ``mtp_num_hidden_layers`` (vLLM ``qwen3_5_mtp.py`` /
    ``qwen3_next_mtp.py`` build that many full-attention decoder layers of the target's
    shape after its last layer, with ``fc`` 2h -> h and two input norms; v0.27-0.31 wheels)."""
    if c.raw.get("num_nextn_predict_layers") is not None:
        return c.integer("num_nextn_predict_layers", default=0, minimum=0)
    return c.integer("mtp_num_hidden_layers", default=0, minimum=0)


def _rotary_fraction(c: _Cfg) -> float:
    """``partial_rotary_factor``: the share of each head RoPE rotates, in (0, 1]."""
    value = c.raw.get("partial_rotary_factor")
    nested = c.raw.get("rope_parameters")  # transformers >= 4.57 (Qwen3.5)
    if value is None and isinstance(nested, Mapping):
        value = nested.get("partial_rotary_factor")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise c.fail("partial_rotary_factor", f"must be a number in (0, 1], got {_show(value)}")
    return float(value)


def _model_type(c: _Cfg) -> str:
    """The language model's ``model_type``, refused in one line unless its rules are known."""
    model_type = c.text("model_type")
    if not model_type:
        raise c.fail("model_type", "is missing; every transformers config.json names one")
    if model_type not in families.KNOWN_MODEL_TYPES and not model_type.startswith("deepseek_v4"):
        known = ", ".join(families.KNOWN_MODEL_TYPES)
        raise c.fail(
            "model_type",
            f"is {_show(model_type)}, an architecture kvscope has no rules for (known: {known})",
        )
    return model_type


def _config_dtype(c: _Cfg) -> str | None:
    """The checkpoint's ``torch_dtype`` (or ``dtype``), checked to be a dtype name."""
    key = "torch_dtype" if c.has("torch_dtype") else "dtype"
    value = c.text(key) or None
    if value is not None:
        try:
            canonical_dtype(value)
        except UnknownNameError as err:
            raise ConfigError(
                c.source, key, f"is {_show(value)}, not a known dtype", err.hint
            ) from None
    return value


def _num_layers(c: _Cfg) -> int:
    n = c.integer("num_hidden_layers", maximum=MAX_SIZE)
    if n > MAX_LAYERS:
        raise ConfigError(
            c.source,
            "num_hidden_layers",
            f"is {n:,}; kvscope plans at most {MAX_LAYERS:,} layers",
            "The largest public models have under 200 layers.",
        )
    return n


#: ``--quantization`` values that name a kernel for a checkpoint's method, which vLLM accepts on
#: that checkpoint: ``AWQMarlinConfig`` / ``GPTQMarlinConfig.override_quantization_method``
#: (``vllm/model_executor/layers/quantization/awq_marlin.py``, ``gptq_marlin.py``) log "The
#: model is convertible to awq_marlin during runtime" and run it, in public vLLM logs from
#: 0.5.4 to 0.29.0 started with ``--quantization awq_marlin``.
#: vLLM's INC config (``vllm/model_executor/layers/quantization/inc``, PR #40601) runs
#: AutoRound checkpoints under the method name ``inc``.
MARLIN_KERNEL_OF = {"awq_marlin": "awq", "gptq_marlin": "gptq", "inc": "auto-round"}


def _same_method(flag: str, method: str) -> bool:
    """Whether vLLM runs a checkpoint quantized with ``method`` under ``--quantization flag``.

    ModelOpt checkpoints (FP8, NVFP4, MXFP8, mixed precision) name their kernel through
    ``override_quantization_method`` of ``ModelOptFp8Config`` / ``ModelOptNvFp4Config`` /
    ``ModelOptMixedPrecisionConfig``, which read only the checkpoint's ``quant_algo`` and then
    replace the flag (``ModelConfig._verify_quantization``, vllm/config/model.py of 0.27.1): a
    ``--quantization modelopt`` start of an NVFP4 or mixed-precision checkpoint runs it.
    """
    if flag.startswith("modelopt") and method.startswith("modelopt"):
        return True
    return MARLIN_KERNEL_OF.get(flag, flag) == method


def _quantization(c: _Cfg, flag: str | None, dtype: str, n_layers: int) -> quant.Quantization:
    qc = c.raw.get("quantization_config")
    if qc is not None and not isinstance(qc, Mapping):
        raise c.fail("quantization_config", "must be an object")
    if qc and c.raw.get("expert_dtype") and "expert_dtype" not in qc:
        qc = {**qc, "expert_dtype": c.raw["expert_dtype"]}
    from_ckpt = quant.from_config(qc, c.source, n_layers)
    if flag is None or flag.lower() in ("", "auto"):
        return from_ckpt
    key = flag.strip().lower()
    if from_ckpt.is_quantized:
        if not _same_method(key, from_ckpt.method):
            raise c.fail(
                "quantization_config.quant_method",
                f"is '{from_ckpt.method}' but --quantization {flag} was given; "
                "an engine refuses this mix",
            )
        return from_ckpt
    return quant.from_flag(key, 2.0 if dtype != "float32" else 4.0)


# ---------------------------------------------------------------------- attention
def _attention_layers(
    c: _Cfg, model_type: str, h: int, nh: int, n_layers: int, dtype: str
) -> list[AttentionLayer]:
    if model_type in HYBRID_LINEAR_TYPES:
        return hybrid_layers(c, h, nh, n_layers, dtype)
    if model_type in KIMI_LINEAR_TYPES:
        return kimi_linear_layers(c, h, nh, n_layers, dtype)
    if model_type == "gemma4_text":
        return gemma4_layers(c, h, nh, n_layers)
    if model_type.startswith("deepseek_v41"):
        return dsv41_layers(c, h, nh, n_layers)
    if model_type.startswith("deepseek_v4") or c.has("compress_ratios"):
        return _dsv4_layers(c, h, nh, n_layers)
    if c.has("kv_lora_rank") or model_type in families.MLA_TYPES:
        return _mla_layers(c, model_type, h, nh, n_layers)
    return _gqa_layers(c, model_type, h, nh, n_layers)


def _gqa_layers(c: _Cfg, model_type: str, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    nkv = c.integer("num_key_value_heads", default=nh)
    if nh % nkv:
        raise c.fail("num_key_value_heads", f"({nkv}) must divide num_attention_heads ({nh})")
    if c.has("head_dim"):
        head_dim = c.integer("head_dim")
    elif h % nh:
        raise c.fail(
            "head_dim",
            f"is missing and hidden_size ({h}) is not a multiple of num_attention_heads ({nh})",
        )
    else:
        head_dim = h // nh
    window = c.opt_int("sliding_window")
    types = c.raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            raise c.fail("layer_types", f"must list {n_layers} entries (num_hidden_layers)")
        if not all(isinstance(t, str) for t in types):
            raise c.fail("layer_types", "must list strings (full_attention, sliding_attention)")
        sliding = [t.startswith("sliding") for t in types]
        if any(sliding) and window is None:
            raise c.fail("sliding_window", "is missing but layer_types has sliding layers")
    elif model_type in families.SLIDING_PERIOD or model_type in families.PATTERN_KEY:
        if window is None:
            raise c.fail("sliding_window", f"is missing; {model_type} has sliding layers")
        period = families.SLIDING_PERIOD.get(model_type) or c.integer(
            families.PATTERN_KEY[model_type]
        )
        sliding = families.sliding_pattern(period, n_layers)
    elif window is not None and (
        model_type in families.SLIDING_ALL_LAYERS or c.boolean("use_sliding_window", False)
    ):
        sliding = [True] * n_layers
    else:
        sliding = [False] * n_layers
    bias = c.boolean("attention_bias", False)
    qk_norm = model_type in families.QK_NORM_ALWAYS or (
        c.boolean("use_qk_norm", False)
        and model_type not in families.QK_NORM_WEIGHTLESS
        and c.text("qk_norm_type") != "per_layer"  # counted with the layer's norms
    )
    common: dict[str, Any] = {
        "hidden_size": h,
        "num_heads": nh,
        "num_kv_heads": nkv,
        "head_dim": head_dim,
        "v_head_dim": head_dim,
        "qkv_bias": bias or model_type in _QKV_BIAS,
        "o_bias": c.boolean("attention_out_bias", bias)
        and model_type not in families.QKV_BIAS_ONLY,
        "qk_norm": qk_norm,
        "sinks": model_type == "gpt_oss",
    }
    return [
        AttentionLayer("sliding" if s else "full", window=window if s else None, **common)
        for s in sliding
    ]


def mla_layer(c: _Cfg, h: int, nh: int, kind: str = "mla", **extra: Any) -> AttentionLayer:
    """One MLA layer from the config's latent and head keys (``extra``: further fields)."""
    rope = c.integer("qk_rope_head_dim")
    nope = c.integer("qk_nope_head_dim")
    return AttentionLayer(
        kind,
        hidden_size=h,
        num_heads=nh,
        num_kv_heads=1,
        head_dim=nope + rope,
        v_head_dim=c.integer("v_head_dim"),
        q_lora_rank=c.opt_int("q_lora_rank"),
        kv_lora_rank=c.integer("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        **extra,
    )


def _mla_layers(c: _Cfg, model_type: str, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    # DSA: DeepSeek-V3.2 and GLM-5 (glm_moe_dsa); vLLM's deepseek_v2.py takes the sparse path
    # when the config has index_topk
    sparse = c.has("index_topk") or c.has("index_n_heads") or model_type == "deepseek_v32"
    if not sparse:
        return [mla_layer(c, h, nh)] * n_layers
    index = {
        "index_n_heads": c.integer("index_n_heads"),
        "index_head_dim": c.integer("index_head_dim"),
    }
    return [mla_layer(c, h, nh, "mla_sparse", **index)] * n_layers


_DSV4_KIND = {0: "dsv4_swa", 4: "dsv4_csa", 128: "dsv4_hca"}


def _dsv4_layers(c: _Cfg, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    ratios = c.raw.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n_layers:
        raise c.fail(
            "compress_ratios",
            f"must list at least {n_layers} ratios "
            "(one per layer; trailing entries are MTP layers)",
        )
    out = []
    for i, r in enumerate(ratios[:n_layers]):
        if isinstance(r, bool) or not isinstance(r, int | float) or r not in _DSV4_KIND:
            raise c.fail("compress_ratios", f"has {_show(r)} at layer {i}; expected 0, 4 or 128")
        out.append(dsv4_attention(c, _DSV4_KIND[int(r)], int(r), h, nh))
    return out
