"""Weight quantization: bytes per parameter, scales included.

Read from ``quantization_config`` in config.json or from ``--quantization``. Each scheme says
which parameter classes it converts (linear layers, MoE experts) and which stay in the model
dtype (embeddings, lm_head, norms, routers, and whatever ``modules_to_not_convert`` names).

Bytes per parameter, with the scale overhead the checkpoint format carries:
- fp8 block (DeepSeek-V3 style, ``weight_block_size`` [128, 128]): 1 B + one fp32 scale per
  128x128 block = 1 + 4/16384 B. Source: DeepSeek-V3 config.json ``quantization_config``.
- fp8 per-tensor / per-channel (vLLM ``--quantization fp8``, compressed-tensors fp8): 1 B
  plus a negligible scale per tensor or output row (counted per row).
- mxfp4 (OCP Microscaling FP4): 4-bit E2M1 values + one 8-bit E8M0 scale per 32 = 0.5 + 1/32
  B. Source: OCP MX spec v1.0; gpt-oss model card (MoE weights in MXFP4).
- AWQ / GPTQ int4, group g: 0.5 B + (fp16 scale 2 B + packed 4-bit zero 0.5 B) per group.
  Source: AutoAWQ / GPTQ checkpoint layouts (qweight int32 packs 8, scales fp16, qzeros int32).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvscope.errors import ConfigError, KvscopeError, UnknownNameError

#: Values ``--quantization`` accepts (a subset of vLLM's ``QuantizationMethods`` that we model).
QUANT_METHODS = (
    "none", "fp8", "awq", "gptq", "compressed-tensors", "mxfp4", "bitsandbytes",
    "modelopt", "modelopt_fp4", "auto-round",
)  # fmt: skip


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint stores its weights.

    ``linear_bytes`` applies to attention and dense-FFN projections, ``expert_bytes`` to MoE
    expert projections; everything else (embeddings, lm_head, norms, routers) keeps the
    model dtype. ``None`` for either means "not converted".
    """

    method: str = "none"
    linear_bytes: float | None = None
    expert_bytes: float | None = None
    group_size: int | None = None
    block: tuple[int, int] | None = None
    description: str = "unquantized"
    #: Quantized at load time by ``--quantization`` (the launch command must repeat the flag).
    online: bool = False
    #: Linear components the checkpoint leaves in the model dtype (its ``ignore`` /
    #: ``exclude_modules`` / ``extra_config`` lists; see :mod:`quant_scope`).
    unconverted: tuple[str, ...] = ()
    #: Components stored at their own bytes per parameter (AutoRound ``extra_config`` layers
    #: at another bit width).
    overrides: tuple[tuple[str, float], ...] = ()
    #: Integer weights with unquantized activations (compressed-tensors ``type: int`` and no
    #: ``input_activations``: the W4A16 / W8A16 schemes engines run as "WNA16").
    weight_only_int: bool = False
    #: bitsandbytes 4-bit with ``bnb_4bit_use_double_quant``: the checkpoint stores its
    #: per-64 absmax as 8-bit values with a second-level fp32 scale per 256 of them (how long an
    #: engine keeps that form: :mod:`kvscope.plan.vllm_bnb`).
    double_quant: bool = False

    @property
    def is_quantized(self) -> bool:
        return self.method != "none"

    @property
    def dense_activation_bytes(self) -> float:
        """Bytes of the per-token quantized copy a dense projection makes of its input, 0 when
        activations stay in the model dtype: 8-bit weight-and-activation schemes (fp8, the
        compressed-tensors W8A8 int8/fp8 and ModelOpt fp8 checkpoints) quantize each Linear's
        input to one byte a value before the GEMM (vLLM ``scaled_int8_quant`` /
        ``scaled_fp8_quant``); weight-only and 4-bit schemes do not. Dense FFNs a checkpoint
        leaves unconverted keep theirs in the model dtype."""
        if self.weight_only_int or "dense_ffn" in self.unconverted:
            return 0.0
        eight_bit = self.method in ("fp8", "compressed-tensors", "modelopt")
        return (
            1.0 if eight_bit and self.linear_bytes is not None and self.linear_bytes < 1.01 else 0.0
        )

    def component_bytes(self, native: float) -> dict[str, float]:
        """Bytes per parameter of each weight component, ``native`` being the model dtype's."""
        linear = self.linear_bytes if self.linear_bytes is not None else native
        expert = self.expert_bytes if self.expert_bytes is not None else linear
        out = {
            "embedding": native,
            "attention": linear,
            "dense_ffn": linear,
            "routed_experts": expert,
            "shared_experts": linear,
            "router": native,
            "norms_other": native,
            "lm_head": native,
        }
        out.update(dict.fromkeys(self.unconverted, native))
        out.update(dict(self.overrides))
        return out


NONE = Quantization()


def _fp8_block(block: tuple[int, int]) -> float:
    return 1.0 + 4.0 / (block[0] * block[1])


def _int4_group(group: int) -> float:
    return 0.5 + 2.5 / group


MXFP4_BYTES = 0.5 + 1.0 / 32.0


def _int(
    qc: Mapping[str, Any],
    keys: tuple[str, ...],
    default: int,
    source: str,
    low: int = 1,
    prefix: str = "quantization_config",
) -> int:
    """The first of ``keys`` present in ``qc`` as an integer (>= ``low``), else ``default``."""
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        ok = not isinstance(value, bool) and isinstance(value, int | float) and value == int(value)
        if not ok or not low <= int(value) <= MAX_QUANT_INT:
            raise ConfigError(
                source,
                f"{prefix}.{key}",
                f"must be an integer from {low} to {MAX_QUANT_INT:,}, got {_show(value)}",
            )
        return int(value)
    return default


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: Bound on bit widths and group sizes read from a checkpoint (no format groups more).
MAX_QUANT_INT = 1 << 20


read_int = _int


def from_config(
    qc: Mapping[str, Any] | None, source: str = "config.json", num_layers: int | None = None
) -> Quantization:
    """Parse a Hugging Face ``quantization_config`` into a :class:`Quantization`.

    Every field read is type- and range-checked: a malformed one is a :class:`ConfigError`
    naming it (``quantization_config.bits``), never a traceback. ``num_layers`` (the decoder
    layers) tells module lists' MTP-layer entries from the decoder's (:mod:`quant_scope`).
    ModelOpt, compressed-tensors FP4 and AutoRound formats: :mod:`quant_formats`.
    """
    from kvscope.specs import quant_formats

    if not qc:
        return NONE
    method = str(qc.get("quant_method", "")).lower()
    if not method:
        raise ConfigError(source, "quantization_config.quant_method", "is missing")
    if method == "fp8":
        wbs = qc.get("weight_block_size")
        if wbs is not None:
            ok = isinstance(wbs, list | tuple) and len(wbs) == 2
            ok = ok and all(
                not isinstance(x, bool) and isinstance(x, int) and 0 < x <= MAX_QUANT_INT
                for x in wbs
            )
            if not ok:
                raise ConfigError(
                    source,
                    "quantization_config.weight_block_size",
                    f"must be two positive integers, got {_show(wbs)}",
                )
            block = (int(wbs[0]), int(wbs[1]))
            linear = _fp8_block(block)
            desc = f"fp8 e4m3, {block[0]}x{block[1]} block scales"
        else:
            block, linear, desc = None, 1.0, "fp8 e4m3, per-tensor scales"
        expert = linear
        # DeepSeek V4 ships MXFP4 experts inside an fp8 checkpoint (config key expert_dtype).
        if str(qc.get("expert_dtype", "")).lower() in ("fp4", "mxfp4"):
            expert = MXFP4_BYTES
            desc += ", MXFP4 experts"
        return Quantization("fp8", linear, expert, None, block, desc)
    if method in ("awq", "gptq"):
        bits = _int(qc, ("bits", "w_bit"), 4, source)
        group = _int(qc, ("group_size", "q_group_size"), 128, source, low=-1)
        if group <= 0:
            group = 4096  # per-channel (-1): one scale per output row; effectively no overhead
        per = bits / 8.0 + 2.5 / group
        return Quantization(method, per, per, group, None, f"{method} int{bits}, group {group}")
    if method == "mxfp4":
        # gpt-oss: only MoE experts are MXFP4; attention, router, embeddings stay bf16.
        return Quantization("mxfp4", None, MXFP4_BYTES, 32, None, "mxfp4 experts (e2m1 + e8m0/32)")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, source, num_layers)
    if method in ("modelopt", "modelopt_fp4"):
        return quant_formats.modelopt(qc, source, num_layers)
    if method in ("auto-round", "auto_round", "autoround"):
        return quant_formats.auto_round(qc, source, num_layers)
    if method == "bitsandbytes":
        bits = 4 if qc.get("load_in_4bit") else 8
        per = bits / 8.0 + (4.0 / 64 if bits == 4 else 0.0)  # nf4: fp32 absmax per 64
        nested = bits == 4 and bool(qc.get("bnb_4bit_use_double_quant"))
        return Quantization(
            "bitsandbytes", per, per, 64, None, f"bitsandbytes int{bits}", double_quant=nested
        )
    raise UnknownNameError("quantization method", method, QUANT_METHODS)


def _compressed_tensors(
    qc: Mapping[str, Any], source: str, num_layers: int | None = None
) -> Quantization:
    from kvscope.specs import quant_formats
    from kvscope.specs.quant_scope import unconverted_components

    groups = qc.get("config_groups") or {}
    if not groups:
        raise ConfigError(source, "quantization_config.config_groups", "is missing")
    if not isinstance(groups, Mapping):
        raise ConfigError(source, "quantization_config.config_groups", "must be an object")
    first = next(iter(groups.values()))
    if not isinstance(first, Mapping):
        raise ConfigError(source, "quantization_config.config_groups", "must map to objects")
    w = first.get("weights")
    if w is not None and not isinstance(w, Mapping):
        raise ConfigError(source, "quantization_config.config_groups.weights", "must be an object")
    w = w or {}
    where = "quantization_config.config_groups.weights"
    ignore = qc.get("ignore") or []
    if not isinstance(ignore, list):
        raise ConfigError(source, "quantization_config.ignore", "must be a list of module names")
    fmt = str(first.get("format") or qc.get("format") or "")
    fp4 = quant_formats.compressed_fp4(w, fmt, ignore, num_layers)
    if fp4 is not None:
        return fp4
    # the ignore list: Kimi K2.5/K2-Thinking keep attention, shared experts and dense MLPs
    # in bf16 (re:.*self_attn.*, ...), only the routed experts are int4
    kept = unconverted_components(ignore, num_layers)
    shown = f"; {', '.join(kept)} unquantized" if kept else ""
    bits = _int(w, ("num_bits",), 8, source, prefix=where)
    kind = str(w.get("type", "float"))
    wna16 = kind == "int" and first.get("input_activations") is None
    if bits == 8:
        per = 1.0
        desc = f"compressed-tensors {kind}8 ({w.get('strategy', 'channel')})" + shown
        return Quantization(
            "compressed-tensors",
            per,
            per,
            None,
            None,
            desc,
            unconverted=kept,
            weight_only_int=wna16,
        )
    g = _int(w, ("group_size",), 128, source, low=0, prefix=where) or 128
    per = bits / 8.0 + 2.0 / g  # fp16 scale per group, symmetric (no zero point)
    desc = f"compressed-tensors {kind}{bits}, group {g}" + shown
    return Quantization(
        "compressed-tensors", per, per, g, None, desc, unconverted=kept, weight_only_int=wna16
    )


def from_flag(method: str, model_dtype_bytes: float) -> Quantization:
    """``--quantization X`` on an unquantized checkpoint (online quantization in vLLM)."""
    key = method.strip().lower()
    if key in ("none", ""):
        return NONE
    if key == "fp8":
        # vLLM online fp8: per-tensor weight scales for every Linear (fp8.py Fp8LinearMethod).
        return Quantization(
            "fp8", 1.0, 1.0, None, None, "fp8 e4m3 online, per-tensor scales", online=True
        )
    if key == "mxfp4":
        return Quantization("mxfp4", None, MXFP4_BYTES, 32, None, "mxfp4 experts", online=True)
    if key in QUANT_METHODS:
        raise KvscopeError(
            f"--quantization {key} needs a pre-quantized checkpoint whose config.json "
            "carries quantization_config.",
            "Point --model at that checkpoint, or use --quantization fp8 (online).",
        )
    raise UnknownNameError("quantization method", method, QUANT_METHODS)
