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
  ``hc_mult`` (hyper-connections), ``expert_dtype`` (fp4 experts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvscope.errors import ConfigError, KvscopeError, UnknownNameError
from kvscope.specs import quant
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import canonical_dtype, resolve_model_dtype
from kvscope.specs.ffn import FFNLayer
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

_SLIDING_BY_DEFAULT = ("mistral", "mixtral")  # sliding_window applies to all layers if set
_QKV_BIAS = ("qwen2", "qwen2_moe")
_QK_NORM = ("qwen3", "qwen3_moe")


class _Cfg:
    """Typed, validated access to config keys; errors name the field."""

    def __init__(self, raw: Mapping[str, Any], source: str) -> None:
        self.raw = raw
        self.source = source

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def integer(
        self, key: str, default: int | None = None, minimum: int = 1, maximum: int = MAX_SIZE
    ) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ConfigError(self.source, key, "is missing")
            return default
        return self.check_int(key, value, minimum, maximum)

    def check_int(self, key: str, value: Any, minimum: int = 1, maximum: int = MAX_SIZE) -> int:
        """``value`` (read from ``key``) as an int in [minimum, maximum], else ConfigError."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(self.source, key, f"must be an integer, got {_show(value)}")
        try:
            return count(value, key, low=minimum, high=maximum)
        except KvscopeError as err:
            problem = err.message.removeprefix(f"{key} ").rstrip(".")
            raise ConfigError(self.source, key, problem) from None

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
    # Multimodal wrappers keep the language model under text_config.
    if "hidden_size" not in raw and isinstance(raw.get("text_config"), Mapping):
        merged = dict(raw["text_config"])
        merged.setdefault("quantization_config", raw.get("quantization_config"))
        return merged
    return raw


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
    model_type = c.text("model_type")
    h = c.integer("hidden_size")
    n_layers = _num_layers(c)
    nh = c.integer("num_attention_heads")
    vocab = c.integer("vocab_size")
    max_pos = c.integer("max_position_embeddings", default=4096)
    tied = c.boolean("tie_word_embeddings", default=False)

    attentions = _attention_layers(c, model_type, h, nh, n_layers)
    ffns = _ffn_layers(c, model_type, h, n_layers)

    hc = c.integer("hc_mult", default=0, minimum=0)
    per_layer_extra = 2 * h  # input and post-attention RMSNorm weights
    final = h  # final norm
    if hc:
        # mHC: two mixers per layer, each fn (mix x hc*h) + base (mix) + scale (3),
        # mix = (2 + hc) * hc; one output-side collapse of hc x hc*h + hc + 1.
        mix = (2 + hc) * hc
        per_layer_extra += 2 * (mix * hc * h + mix + 3)
        final += hc * hc * h + hc + 1
    layers = tuple(LayerSpec(a, f, per_layer_extra) for a, f in zip(attentions, ffns, strict=True))

    resolved_dtype = resolve_model_dtype(dtype, _config_dtype(c))
    q = _quantization(c, quantization, resolved_dtype)
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
        num_mtp_layers=c.integer("num_nextn_predict_layers", default=0, minimum=0),
        source=source,
        published=published or Published(),
    )


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


def _quantization(c: _Cfg, flag: str | None, dtype: str) -> quant.Quantization:
    qc = c.raw.get("quantization_config")
    if qc is not None and not isinstance(qc, Mapping):
        raise c.fail("quantization_config", "must be an object")
    if qc and c.raw.get("expert_dtype") and "expert_dtype" not in qc:
        qc = {**qc, "expert_dtype": c.raw["expert_dtype"]}
    from_ckpt = quant.from_config(qc, c.source)
    if flag is None or flag.lower() in ("", "auto"):
        return from_ckpt
    key = flag.strip().lower()
    if from_ckpt.is_quantized:
        if key != from_ckpt.method:
            raise c.fail(
                "quantization_config.quant_method",
                f"is '{from_ckpt.method}' but --quantization {flag} was given; "
                "an engine refuses this mix",
            )
        return from_ckpt
    return quant.from_flag(key, 2.0 if dtype != "float32" else 4.0)


# ---------------------------------------------------------------------- attention
def _attention_layers(
    c: _Cfg, model_type: str, h: int, nh: int, n_layers: int
) -> list[AttentionLayer]:
    if model_type.startswith("deepseek_v4") or c.has("compress_ratios"):
        return _dsv4_layers(c, h, nh, n_layers)
    if c.has("kv_lora_rank"):
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
    elif window is not None and (
        model_type in _SLIDING_BY_DEFAULT or c.boolean("use_sliding_window", False)
    ):
        sliding = [True] * n_layers
    else:
        sliding = [False] * n_layers
    bias = c.boolean("attention_bias", False)
    common: dict[str, Any] = {
        "hidden_size": h,
        "num_heads": nh,
        "num_kv_heads": nkv,
        "head_dim": head_dim,
        "v_head_dim": head_dim,
        "qkv_bias": bias or model_type in _QKV_BIAS,
        "o_bias": bias,
        "qk_norm": model_type in _QK_NORM,
        "sinks": model_type == "gpt_oss",
    }
    return [
        AttentionLayer("sliding" if s else "full", window=window if s else None, **common)
        for s in sliding
    ]


def _mla_layers(c: _Cfg, model_type: str, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    rope = c.integer("qk_rope_head_dim")
    nope = c.integer("qk_nope_head_dim")
    sparse = c.has("index_topk") or c.has("index_n_heads") or model_type == "deepseek_v32"
    layer = AttentionLayer(
        "mla_sparse" if sparse else "mla",
        hidden_size=h,
        num_heads=nh,
        num_kv_heads=1,
        head_dim=nope + rope,
        v_head_dim=c.integer("v_head_dim"),
        q_lora_rank=c.opt_int("q_lora_rank"),
        kv_lora_rank=c.integer("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        index_n_heads=c.integer("index_n_heads") if sparse else 0,
        index_head_dim=c.integer("index_head_dim") if sparse else 0,
    )
    return [layer] * n_layers


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
        out.append(
            AttentionLayer(
                _DSV4_KIND[int(r)],
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
                compress_ratio=int(r),
                o_groups=c.integer("o_groups"),
                o_lora_rank=c.integer("o_lora_rank"),
            )
        )
    return out


# ---------------------------------------------------------------------- FFN
def _ffn_layers(c: _Cfg, model_type: str, h: int, n_layers: int) -> list[FFNLayer]:
    n_exp = next(
        (
            c.integer(k)
            for k in ("n_routed_experts", "num_local_experts", "num_experts")
            if c.has(k)
        ),
        0,
    )
    dense_i = c.integer("intermediate_size", default=0, minimum=0)
    if not n_exp:
        if not dense_i:
            raise c.fail("intermediate_size", "is missing")
        return [FFNLayer("dense", h, intermediate_size=dense_i)] * n_layers
    k_key = "num_experts_per_tok" if c.has("num_experts_per_tok") else "experts_per_token"
    top_k = c.integer(k_key)
    if top_k > n_exp:
        raise c.fail(k_key, f"({top_k}) exceeds the number of experts ({n_exp})")
    expert_i = c.integer("moe_intermediate_size") if c.has("moe_intermediate_size") else dense_i
    if not expert_i:
        raise c.fail("moe_intermediate_size", "is missing")
    n_shared = c.integer("n_shared_experts", default=0, minimum=0)
    shared_i = n_shared * expert_i
    if c.has("shared_expert_intermediate_size"):
        shared_i = c.integer("shared_expert_intermediate_size", minimum=0)
        n_shared = 1 if shared_i else 0
    moe = FFNLayer(
        "moe",
        h,
        num_experts=n_exp,
        experts_per_token=top_k,
        expert_intermediate_size=expert_i,
        num_shared_experts=n_shared,
        shared_intermediate_size=shared_i,
        expert_bias=model_type == "gpt_oss",
    )
    dense = FFNLayer("dense", h, intermediate_size=dense_i)
    first_dense = c.integer("first_k_dense_replace", default=0, minimum=0)
    if first_dense > n_layers:
        raise c.fail("first_k_dense_replace", f"({first_dense}) exceeds num_hidden_layers")
    freq = c.integer("moe_layer_freq", default=1)
    step = c.integer("decoder_sparse_step", default=1)
    mlp_only = _layer_list(c, "mlp_only_layers")
    out = []
    for i in range(n_layers):
        is_moe = i >= first_dense and (i - first_dense) % freq == 0
        is_moe = is_moe and i not in mlp_only and (i + 1) % step == 0
        if not is_moe and not dense_i:
            raise c.fail("intermediate_size", f"is missing but layer {i} is dense")
        out.append(moe if is_moe else dense)
    return out


def _layer_list(c: _Cfg, key: str) -> set[int]:
    """A list of layer indices (``mlp_only_layers``), each a non-negative integer."""
    value = c.raw.get(key)
    if value is None:
        return set()
    if not isinstance(value, list):
        raise c.fail(key, f"must be a list of layer indices, got {_show(value)}")
    return {c.check_int(key, i, 0) for i in value}
