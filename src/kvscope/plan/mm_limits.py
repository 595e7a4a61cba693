"""vLLM's ``--limit-mm-per-prompt``: multimodal items a prompt may hold, by modality.

Units: items a prompt. Sources: vLLM 0.25.0 wheel. ``MultiModalConfig.get_limit_per_prompt``
(vllm/config/multimodal.py) gives an unnamed modality 999. ``MultiModalBudget``
(vllm/multimodal/encoder_budget.py) keeps only modalities whose limit is above 0, profiles the
one of them with the most tokens an item, and takes ``min(limit, max_model_len // tokens)``
items a prompt (:mod:`kvscope.plan.encoder_profile`). When every modality of a tower is 0,
``SupportsMultiModal._mark_tower_model`` builds no tower and loads none of its weights
(vllm/model_executor/models/interfaces.py; vLLM PR #22299, first in 0.10.1): the plan is then
the text model's (:func:`kvscope.plan.language_model_only.text_only`).

Taken: a JSON object of modality to count (``{"image": 2, "video": 0}``), a count also as
``{"count": n}``. Refused with one line: other JSON, negative or non-integer counts, and the
dummy-size options (``width``, ``height``, ``num_frames``, ...), which change the profiled item
and are not modelled.
"""

from __future__ import annotations

import json
import re

from kvscope.errors import KvscopeError
from kvscope.specs.model import ModelSpec

#: ``get_limit_per_prompt``'s count for a modality the flag does not name.
DEFAULT_LIMIT = 999
#: First release that drops a tower whose every modality is limited to 0 (PR #22299).
TOWER_DROP_SINCE = (0, 10, 1)
#: The modalities each modelled tower serves (the processors' ``supported_mm_limits``):
#: Qwen3-VL / Qwen3.5 take images and videos, Kimi-K2.5 its one ``vision_chunk`` modality.
TOWER_MODALITIES = {
    "kimi_k25": ("vision_chunk",),
    "kimi_vl": ("image",),
    "gemma3": ("image",),
    "mistral3": ("image",),
    "llama4": ("image",),
}
#: any other tower (Qwen3-VL-style and unmodelled ones)
OTHER_TOWER_MODALITIES = ("image", "video")
_FLAG = "--limit-mm-per-prompt"
MAX_COUNT = 1_000_000

Limits = tuple[tuple[str, int], ...]


def parse_limits(text: str) -> Limits:
    """``--limit-mm-per-prompt`` as typed: a JSON object of modality to count."""
    try:
        raw = json.loads(text)
    except ValueError:
        raise KvscopeError(
            f'{_FLAG} must be a JSON object such as \'{{"image": 2, "video": 0}}\'; '
            f"got {text[:60]!r}."
        ) from None
    if not isinstance(raw, dict) or not raw:
        raise KvscopeError(f"{_FLAG} must be a non-empty JSON object of modality to count.")
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise KvscopeError(f"{_FLAG}: '{name}' is not a modality name (image, video, ...).")
        if isinstance(value, dict):
            extra = sorted(set(value) - {"count"})
            if extra:
                raise KvscopeError(
                    f"{_FLAG}: {name}'s {', '.join(extra)} set the dummy item's size, which "
                    "kvscope does not model.",
                    f"Give the count alone, e.g. '{{\"{name}\": 2}}'.",
                )
            value = value.get("count", DEFAULT_LIMIT)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise KvscopeError(
                f"{_FLAG}: {name} must be a whole number of items from 0 to {MAX_COUNT:,}; "
                f"got {value!r}."
            )
        out.append((name, value))
    return tuple(sorted(out))


def limit(limits: Limits | None, modality: str) -> int:
    """Items a prompt of ``modality`` (999 where the flag does not name it)."""
    return dict(limits or ()).get(modality, DEFAULT_LIMIT)


def tower_modalities(model: ModelSpec) -> tuple[str, ...]:
    kind = model.vision_output.kind if model.vision_output is not None else ""
    return TOWER_MODALITIES.get(kind, OTHER_TOWER_MODALITIES)


def tower_dropped(model: ModelSpec, limits: Limits | None, version: tuple[int, int, int]) -> bool:
    """Whether vLLM builds no vision tower for ``model`` under these limits."""
    if not limits or not model.vision_params or version < TOWER_DROP_SINCE:
        return False
    return all(limit(limits, m) == 0 for m in tower_modalities(model))
