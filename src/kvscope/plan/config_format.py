"""Which checkpoint format vLLM's ``--config-format auto`` loads, and the Pixtral tower it
keeps whole on every GPU in Mistral's format (bytes beyond the TP share).

``get_config`` in vllm/transformers_utils/config.py resolves ``auto``:

- up to 0.11.x (read at 0.11.0, 0.11.1 and 0.11.2): config.json first, so the Hugging Face
  format;
- 0.12.0 to 0.15.x (read at 0.12.0, 0.13.0, 0.14.1, 0.15.1): "First check for Mistral":
  ``params.json`` in the repository selects Mistral's format;
- from 0.16.0 (read at 0.16.0, 0.17.0, 0.19.0, 0.22.0, 0.34.0): ``params.json`` and
  ``consolidated*.safetensors`` (``is_mistral_model_repo`` in repo_utils.py) select it.

Mistral's format makes a vision checkpoint a ``PixtralForConditionalGeneration``
(transformers_utils/configs/mistral.py), whose ``VisionTransformer``, ``PatchMerger`` and
``VisionLanguageAdapter`` are plain ``nn.Linear`` layers (model_executor/models/pixtral.py,
0.12.0 and 0.19.0): every TP rank holds the whole tower, where the Hugging Face format's
``PixtralHFVisionModel`` splits it (``QKVParallelLinear`` / ``RowParallelLinear``).
"""

from __future__ import annotations

from kvscope.specs.model import ModelSpec

#: First release whose ``auto`` prefers Mistral's format when ``params.json`` is there.
MISTRAL_FIRST_SINCE = (0, 12, 0)
#: First release that also asks for ``consolidated*.safetensors``.
CONSOLIDATED_TOO_SINCE = (0, 16, 0)


def vllm_config_format(model: ModelSpec, version: tuple[int, ...]) -> str:
    """``"mistral"`` or ``"hf"``: what vLLM ``version`` loads for ``model`` under ``auto``."""
    files = set(model.mistral_files)
    if version < MISTRAL_FIRST_SINCE or "params.json" not in files:
        return "hf"
    if version >= CONSOLIDATED_TOO_SINCE and "consolidated.safetensors" not in files:
        return "hf"
    return "mistral"


def whole_tower_on_every_rank(model: ModelSpec, engine: str, version: tuple[int, ...]) -> bool:
    """Whether vLLM builds ``model``'s vision tower unsplit on every TP rank (Mistral's format)."""
    return (
        engine == "vllm"
        and model.vision_params > 0
        and vllm_config_format(model, version) == "mistral"
    )
