"""What a vision-language wrapper's ``vision_config`` adds to a parsed config: the tower's and
projector's weights (parameters, counted per family in :mod:`families`), its (layers, width)
as the config states them, and the output vLLM's profiling pass needs of it
(:mod:`vision_output`, Qwen2-VL / Qwen2.5-VL: :mod:`qwen2_vl_tower`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvscope.errors import ConfigError
from kvscope.specs import families
from kvscope.specs.qwen2_vl_tower import QWEN2_VL_TYPES, tower_output
from kvscope.specs.vision_output import VisionOutput, vision_output


def vision_params(raw: Mapping[str, Any], source: str, text_hidden: int) -> int:
    """Weights of a wrapper's vision tower and projector (see :mod:`families`), else 0."""
    vision = raw.get("vision_config")
    flat = raw.get("model_type") in families.FLAT_WRAPPERS
    if vision is None or ("hidden_size" in raw and not flat):
        return 0
    if not isinstance(vision, Mapping):
        raise ConfigError(source, "vision_config", "must be an object")
    if raw.get("model_type") == "mistral3":  # projector keys live beside vision_config
        vision = {
            **vision,
            "_spatial_merge_size": raw.get("spatial_merge_size", 2),
            "_projector_bias": raw.get("multimodal_projector_bias", False),
        }
    if raw.get("model_type") == "gemma4" and isinstance(raw.get("audio_config"), Mapping):
        vision = {**vision, "_audio_config": raw["audio_config"]}  # E2B/E4B: config_gemma4
    from kvscope.specs.config_parse import _Cfg  # the parser's key reader (import cycle)

    v = _Cfg(vision, source, "vision_config.")
    return families.vision_params(
        str(raw.get("model_type") or ""), vision, text_hidden, lambda k, d: v.integer(k, d)
    )


def tower_output_of(raw: Mapping[str, Any], hidden: int) -> VisionOutput | None:
    """What vLLM's profiling pass needs of the tower (:mod:`vision_output`)."""
    top = str(raw.get("model_type") or "")
    vision = raw.get("vision_config")
    if top in QWEN2_VL_TYPES and isinstance(vision, Mapping):
        return tower_output(top, vision, hidden)
    return vision_output(raw, hidden)


def vision_shape(raw: Mapping[str, Any]) -> tuple[int, int]:
    """(layers, width) of a wrapper's vision tower as its ``vision_config`` states them."""
    vision = raw.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0, 0
    prefix = "vt_" if raw.get("model_type") in ("kimi_k25", "kimi_k3") else ""
    layers = vision.get(prefix + "num_hidden_layers")
    width = vision.get(prefix + "hidden_size")
    return (
        layers if isinstance(layers, int) and layers > 0 else 0,
        width if isinstance(width, int) and width > 0 else 0,
    )
