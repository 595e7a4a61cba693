"""vLLM's ``--language-model-only``: a vision-language checkpoint served as text only.

Units: parameters and bytes through :class:`~kvscope.specs.model.ModelSpec`. Source: vLLM
0.22.0, 0.25.0 and 0.27.0 wheels. ``MultiModalConfig.get_limit_per_prompt``
(vllm/config/multimodal.py) returns 0 for every modality when ``language_model_only`` is set.
With every limit at 0:

- ``SupportsMultiModal._mark_tower_model`` (vllm/model_executor/models/interfaces.py) swaps the
  encoder and projector built inside it for ``StageMissingLayer`` under ``no_init_weights``,
  so the tower's weights are neither allocated nor loaded;
- ``MultiModalRegistry.supports_multimodal_inputs`` (vllm/multimodal/registry.py) is False, so
  ``GPUModelRunner.profile_run`` runs no encoder profiling pass and parks no encoder output.

The plan therefore drops the tower's parameters and its encoder profile. The flag is absent
from the 0.15.0 and 0.16.0 wheels (``EngineArgs`` has no such field) and present in the 0.17.0
wheel's ``MultiModalConfig`` and ``EngineArgs`` (:data:`SINCE`). Older releases reach the same
state with ``--limit-mm-per-prompt`` at 0 for every modality (PR #22299, 0.10.1), which the
planner does not take. SGLang's ``--language-model-only`` covers an allow-list of
architectures that changes by release, and is not modelled.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvscope.errors import KvscopeError
from kvscope.specs.model import ModelSpec

if TYPE_CHECKING:
    from kvscope.plan.config import EngineConfig

#: First vLLM release whose ``vllm serve`` takes ``--language-model-only``.
SINCE = (0, 17, 0)


def check_language_model_only(eng: EngineConfig) -> None:
    """Refuse the flag (and ``--limit-mm-per-prompt``) where the engine or release has no such
    behaviour (one line)."""
    if eng.limit_mm_per_prompt is not None and eng.engine != "vllm":
        raise KvscopeError(
            "--limit-mm-per-prompt is vLLM's; SGLang's multimodal limits are not modelled.",
            "Drop --limit-mm-per-prompt with --engine sglang.",
        )
    if not eng.language_model_only:
        return
    if eng.engine != "vllm":
        raise KvscopeError(
            "--language-model-only is planned for vLLM only; SGLang's flag covers an "
            "allow-list of architectures that changes by release.",
            "Drop --language-model-only with --engine sglang.",
        )
    if eng.version < SINCE:
        raise KvscopeError(
            f"vLLM {eng.version_text} has no --language-model-only (it joined in 0.17.0).",
            "Pass --engine-version 0.17.0 or later, or drop the flag.",
        )


def text_only(model: ModelSpec) -> ModelSpec:
    """``model`` as vLLM builds it under ``--language-model-only``: no vision tower."""
    if not model.vision_params and model.vision_output is None:
        return model
    return replace(model, vision_params=0, vision_layers=0, vision_width=0, vision_output=None)
