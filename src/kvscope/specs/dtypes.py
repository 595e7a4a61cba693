"""Data types: how many bytes a weight or KV-cache element takes.

Names follow the engines' flags: ``--dtype`` (model compute dtype: auto, bfloat16, float16,
float32) and ``--kv-cache-dtype`` (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, ...).
Sources: vLLM ``vllm/config/cache.py`` (CacheDType literal) and
``vllm/utils/torch_utils.py::kv_cache_dtype_str_to_dtype``; SGLang ``server_args.py``
(``--kv-cache-dtype`` choices).
"""

from __future__ import annotations

from kvscope.errors import UnknownNameError

#: Bytes per element of plain floating-point and integer types.
_ELEMENT_BYTES: dict[str, float] = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}

_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
    "fp8_e4m3fn": "fp8_e4m3",
}

#: Model compute dtypes accepted by ``--dtype`` (vLLM ``ModelConfig.dtype``).
MODEL_DTYPES = ("auto", "bfloat16", "float16", "float32")

#: KV-cache dtypes accepted by ``--kv-cache-dtype``. ``fp8_ds_mla`` is DeepSeek's packed MLA
#: record (vLLM ``CacheDType``); ``fp8_inc``/``nvfp4`` are left out until modelled.
KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "float32",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_ds_mla",
)


def canonical_dtype(name: str) -> str:
    """Normalise a dtype spelling (``bf16`` -> ``bfloat16``, ``torch.float16`` -> ``float16``)."""
    key = name.strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in _ELEMENT_BYTES and key not in ("auto", "fp8_ds_mla"):
        raise UnknownNameError("dtype", name, list(_ELEMENT_BYTES) + list(_ALIASES))
    return key


def element_bytes(name: str) -> float:
    """Bytes per element for a (canonical or aliased) dtype name."""
    key = canonical_dtype(name)
    if key in ("auto", "fp8_ds_mla"):
        raise UnknownNameError("concrete dtype", name, _ELEMENT_BYTES)
    return _ELEMENT_BYTES[key]


def resolve_model_dtype(flag: str | None, config_dtype: str | None) -> str:
    """The compute dtype an engine runs: ``--dtype`` if given, else the config's, else bf16.

    vLLM's ``auto`` takes ``torch_dtype`` from config.json but replaces float32 with bfloat16
    (``vllm/config/model.py::_get_and_verify_dtype``), which we follow.
    """
    if flag and canonical_dtype(flag) != "auto":
        key = canonical_dtype(flag)
        if key not in MODEL_DTYPES:
            raise UnknownNameError("model dtype", flag, MODEL_DTYPES)
        return key
    if config_dtype:
        key = canonical_dtype(config_dtype)
        if key == "float32":
            return "bfloat16"
        if key in MODEL_DTYPES:
            return key
    return "bfloat16"


def resolve_kv_dtype(flag: str | None, model_dtype: str) -> str:
    """The KV-cache dtype: ``--kv-cache-dtype`` if given (``auto`` means the model dtype)."""
    if flag is None:
        return model_dtype
    try:
        key = canonical_dtype(flag)
    except UnknownNameError:
        key = flag
    if key not in KV_CACHE_DTYPES:
        raise UnknownNameError("kv-cache dtype", flag, KV_CACHE_DTYPES)
    return model_dtype if key == "auto" else key


def is_fp8(name: str) -> bool:
    """True for any 8-bit float KV/weight format, including DeepSeek's packed MLA record."""
    return canonical_dtype(name).startswith("fp8")
