"""Which layer's KV cache a KV-shared layer reads, and the pipeline splits vLLM refuses for it.

Gemma 4's last ``num_kv_shared_layers`` layers keep no cache of their own: each reads the cache
of the last earlier layer of its attention type (``kv_sharing_target_layer_name``, built in
vllm/model_executor/models/gemma4.py of the 0.33.0 wheel; :mod:`kvscope.specs.config_gemma4`).
vLLM checks that target when it builds the layer (``validate_kv_sharing_target``,
vllm/model_executor/layers/attention/attention.py of the 0.33.0 wheel): the target must be an
attention layer of this worker's static forward context. Under pipeline parallelism a stage
builds only its own layers (the others are ``PPMissingLayer``), so a shared layer whose target
sits on another stage fails the check ("is not a valid Attention layer in the model") and the
engine does not start.
"""

from __future__ import annotations

from kvscope.errors import KvscopeError
from kvscope.specs.model import ModelSpec


def sharing_targets(model: ModelSpec) -> dict[int, int]:
    """``{shared layer: the layer whose cache it reads}`` (empty for a model without sharing)."""
    layers = model.layers
    shared = [i for i, layer in enumerate(layers) if layer.attention.kv_shared]
    if not shared:
        return {}
    first = shared[0]
    out: dict[int, int] = {}
    for i in shared:
        kind = layers[i].attention.kind
        out[i] = max(j for j in range(first) if layers[j].attention.kind == kind)
    return out


def check_vllm_stages(model: ModelSpec, stages: tuple[tuple[int, ...], ...]) -> None:
    """Refuse in one line a vLLM pipeline split that puts a KV-shared layer and the layer whose
    cache it reads on different stages (module text)."""
    if len(stages) < 2:
        return
    stage_of = {i: s for s, layers in enumerate(stages) for i in layers}
    for layer, target in sharing_targets(model).items():
        if stage_of[layer] != stage_of[target]:
            raise KvscopeError(
                f"vLLM cannot split {model.name} over {len(stages)} pipeline stages: layer "
                f"{layer} (stage {stage_of[layer]}) reads the KV cache of layer {target} (stage "
                f"{stage_of[target]}), and a stage builds only its own layers.",
                "Plan it with --pipeline-parallel-size 1 (use tensor parallelism instead).",
            )
