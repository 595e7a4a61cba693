"""Checkpoint formats of 2026: NVIDIA ModelOpt (NVFP4, FP8), compressed-tensors FP4, AutoRound.

Bytes per parameter, scales included, and where each format's numbers come from:

- NVFP4 (ModelOpt ``quant_algo`` ``NVFP4``; compressed-tensors ``nvfp4-pack-quantized``):
  4-bit E2M1 values, one FP8 E4M3 scale per 16 values and one FP32 scale per tensor:
  0.5 + 1/16 = 0.5625 B. vLLM ``ModelOptNvFp4LinearMethod.create_weights``
  (``vllm/model_executor/layers/quantization/modelopt.py``, v0.11.0): ``weight`` uint8
  ``[out, in/2]``, ``weight_scale`` float8_e4m3fn ``[out, in/group_size]``,
  ``weight_scale_2`` and ``input_scale`` fp32 scalars; ``group_size`` 16 in every NVIDIA
  checkpoint (``hf_quant_config.json`` ``quantization.group_size``).
- MXFP4 (compressed-tensors ``mxfp4-pack-quantized``): E2M1 + one E8M0 scale per 32.
- ModelOpt FP8 (``quant_algo`` ``FP8``): 1 B plus per-tensor scales; ``MIXED_PRECISION``:
  one of these per module (``quantized_layers``).
- AutoRound (``quant_method`` ``auto-round``): integer ``bits`` with ``group_size`` in the
  GPTQ or AWQ packing (``packing_format`` ``auto_round:auto_gptq`` / ``auto_round:auto_awq``):
  ``bits/8`` per weight, and per group an fp16 scale (2 B) and a packed zero point (``bits/8``
  B), which vLLM's GPTQ/AWQ Marlin layers load even for symmetric checkpoints (``qzeros``);
  vLLM ``AutoRoundConfig`` (``vllm/model_executor/layers/quantization/auto_round.py``,
  v0.11.0) reads ``bits``, ``group_size``, ``sym``, ``packing_format``, ``data_type``,
  ``block_name_to_quantize`` and ``extra_config`` (per-module bits; 16 = left in float).

Which components stay in the model dtype comes from the module lists (:mod:`quant_scope`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvscope.errors import ConfigError
from kvscope.specs.quant_scope import unconverted_components

if TYPE_CHECKING:
    from kvscope.specs.quant import Quantization

NVFP4_BYTES = 0.5 + 1.0 / 16.0
MXFP4_GROUP_BYTES = 0.5 + 1.0 / 32.0
#: ModelOpt ``quant_algo`` values kvscope plans, with their bytes per converted weight.
MODELOPT_ALGOS = {"NVFP4": NVFP4_BYTES, "W4A16_NVFP4": NVFP4_BYTES, "FP8": 1.0}


def _patterns(qc: Mapping[str, Any], key: str, source: str, where: str) -> list[Any]:
    value = qc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(source, f"{where}.{key}", "must be a list of module names")
    return value


def modelopt(qc: Mapping[str, Any], source: str, num_layers: int | None) -> Quantization:
    """ModelOpt's ``hf_quant_config.json`` (``quantization`` block) or its inline
    ``quantization_config`` (``quant_method`` ``modelopt``, ``quant_algo``, ``ignore``)."""
    from kvscope.specs.quant import Quantization

    inner = qc.get("quantization")
    block: Mapping[str, Any] = inner if isinstance(inner, Mapping) else qc
    where = "quantization_config" + (".quantization" if block is not qc else "")
    algo = block.get("quant_algo")
    if algo is None:
        raise ConfigError(source, f"{where}.quant_algo", "is missing")
    key = str(algo).upper()
    if key == "MIXED_PRECISION":
        return _modelopt_mixed(qc, block, source, where, num_layers)
    if key not in MODELOPT_ALGOS:
        known = ", ".join(MODELOPT_ALGOS)
        raise ConfigError(
            source,
            f"{where}.quant_algo",
            f"is {str(algo)[:40]!r}, a ModelOpt scheme kvscope does not plan (known: {known})",
        )
    per = MODELOPT_ALGOS[key]
    patterns = _patterns(block, "exclude_modules", source, where)
    patterns += _patterns(qc, "ignore", source, "quantization_config")
    kept = unconverted_components(patterns, num_layers)
    if key == "FP8":
        desc = "modelopt fp8 e4m3, per-tensor scales"
        return Quantization("modelopt", per, per, None, None, desc, unconverted=kept)
    desc = "nvfp4 (e2m1 + e4m3 scale per 16)" + _kept_text(kept)
    return Quantization("modelopt_fp4", per, per, 16, None, desc, unconverted=kept)


def _modelopt_mixed(
    qc: Mapping[str, Any],
    block: Mapping[str, Any],
    source: str,
    where: str,
    num_layers: int | None,
) -> Quantization:
    """ModelOpt ``MIXED_PRECISION``: ``quantized_layers`` maps each quantized module to its own
    ``quant_algo`` (nvidia/Qwen3.6-27B-NVFP4: FP8 attention and Gated DeltaNet projections,
    W4A16_NVFP4 MLPs and LM head). Each component takes the scheme most of its modules use; a
    component no module of which is listed stays in the model dtype."""
    from kvscope.specs.quant import Quantization
    from kvscope.specs.quant_scope import PROBES, components_of

    layers = block.get("quantized_layers", qc.get("quantized_layers"))
    if not isinstance(layers, Mapping) or not layers:
        raise ConfigError(
            source, f"{where}.quantized_layers", "must map module names to their quant_algo"
        )
    votes: dict[str, Counter[float]] = {}
    for name, spec in layers.items():
        algo = spec.get("quant_algo") if isinstance(spec, Mapping) else None
        per = MODELOPT_ALGOS.get(str(algo).upper())
        if per is None:
            raise ConfigError(
                source,
                f"{where}.quantized_layers.{str(name)[:60]}.quant_algo",
                f"is {str(algo)[:40]!r}; kvscope plans {', '.join(MODELOPT_ALGOS)}",
            )
        for component in components_of(str(name), num_layers):
            votes.setdefault(component, Counter())[per] += 1
    chosen = {c: v.most_common(1)[0][0] for c, v in votes.items()}
    kept = tuple(c for c in PROBES if c not in chosen)
    overrides = tuple(chosen.items())
    shown = ", ".join(f"{c} {'nvfp4' if b < 1 else 'fp8'}" for c, b in overrides)
    desc = f"modelopt mixed precision ({shown}; the rest unquantized)"
    return Quantization(
        "modelopt_mixed", None, None, 16, None, desc, unconverted=kept, overrides=overrides
    )


def compressed_fp4(
    weights: Mapping[str, Any], fmt: str, ignore: list[Any], num_layers: int | None
) -> Quantization | None:
    """A compressed-tensors 4-bit float group (NVFP4 or MXFP4), else None."""
    from kvscope.specs.quant import Quantization

    if str(weights.get("type", "")) != "float" or weights.get("num_bits") != 4:
        return None
    kept = unconverted_components(ignore, num_layers)
    group = weights.get("group_size")
    if "mxfp4" in fmt or group == 32:
        desc = "compressed-tensors mxfp4 (e2m1 + e8m0 scale per 32)" + _kept_text(kept)
        return Quantization(
            "compressed-tensors", MXFP4_GROUP_BYTES, MXFP4_GROUP_BYTES, 32, None, desc,
            unconverted=kept,
        )  # fmt: skip
    desc = "compressed-tensors nvfp4 (e2m1 + e4m3 scale per 16)" + _kept_text(kept)
    return Quantization(
        "compressed-tensors", NVFP4_BYTES, NVFP4_BYTES, 16, None, desc, unconverted=kept
    )


def _int_bytes(bits: int, group: int) -> float:
    """Packed integer weights with an fp16 scale and a packed zero point per group."""
    return bits / 8.0 + (2.0 + bits / 8.0) / group


def auto_round(qc: Mapping[str, Any], source: str, num_layers: int | None) -> Quantization:
    """An AutoRound ``quantization_config`` (see the module docstring)."""
    from kvscope.specs.quant import Quantization, read_int

    bits = read_int(qc, ("bits",), 4, source)
    group = read_int(qc, ("group_size",), 128, source, low=-1)
    group = 4096 if group <= 0 else group  # per channel: one scale per output row
    data_type = str(qc.get("data_type") or "int").lower()
    if data_type.startswith("nv_fp") and bits == 4:
        per, desc = NVFP4_BYTES, "auto-round nvfp4"
    elif data_type.startswith("mx_fp") and bits == 4:
        per, desc = MXFP4_GROUP_BYTES, "auto-round mxfp4"
    elif data_type == "int" and bits < 16:
        per, desc = _int_bytes(bits, group), f"auto-round int{bits}, group {group}"
    else:
        raise ConfigError(
            source,
            "quantization_config.data_type",
            f"is {data_type[:20]!r} with bits {bits}; kvscope plans int 2-8, nv_fp4 and mx_fp4",
        )
    extra = qc.get("extra_config") or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(source, "quantization_config.extra_config", "must be an object")
    floats: list[str] = []
    by_bits: dict[str, float] = {}
    for key, spec in extra.items():
        # keys are module names or, as vLLM's INC config reads them, regular expressions
        name = "re:" + key if any(ch in key for ch in "\\*+[(") else key
        if not isinstance(spec, Mapping):
            where = f"quantization_config.extra_config.{key[:60]}"
            raise ConfigError(source, where, "must be an object")
        b = read_int(spec, ("bits",), bits, source, prefix="quantization_config.extra_config")
        if b >= 16:
            floats.append(name)
        elif b != bits:
            g = read_int(spec, ("group_size",), group, source, low=-1)
            by_bits[name] = _int_bytes(b, 4096 if g <= 0 else g)
    kept = unconverted_components(floats, num_layers)
    overrides = []
    for name, value in by_bits.items():
        for component in unconverted_components([name], num_layers):
            if component not in kept:
                overrides.append((component, value))
    return Quantization(
        "auto-round", per, per, group, None, desc + _kept_text(kept),
        unconverted=kept, overrides=tuple(dict(overrides).items()),
    )  # fmt: skip


def _kept_text(kept: tuple[str, ...]) -> str:
    return f"; {', '.join(kept)} unquantized" if kept else ""
