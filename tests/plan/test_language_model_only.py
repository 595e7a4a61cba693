"""vLLM's ``--language-model-only``: no vision tower weights, no encoder profiling pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.encoder_profile import encoder_profile
from kvscope.plan.language_model_only import text_only
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

QWEN36 = Path(__file__).parent / "data" / "configs" / "qwen3.6-35b-a3b.json"
#: the tower and merger of Qwen/Qwen3.6-35B-A3B's vision_config (27 blocks of width 1152,
#: MLP 4304, 16-px patches over 2 frames, 2x2 merge into the 2048-wide text model)
TOWER_PARAMS = 446_571_248


def _plans(version: str = "0.24.0", tp: int = 1) -> tuple:
    model = load_model(str(QWEN36))
    common = dict(engine_version=version, max_model_len=32768)
    par = Parallelism(tp=tp)
    full = plan_memory(model, get_gpu("H100"), par, EngineConfig(**common))
    text = plan_memory(
        model, get_gpu("H100"), par, EngineConfig(language_model_only=True, **common)
    )
    return model, full, text


@pytest.mark.parametrize("tp", [1, 2])
def test_the_tower_leaves_the_weights_and_the_pool_grows(tp: int) -> None:
    model, full, text = _plans(tp=tp)
    assert model.vision_params == TOWER_PARAMS
    # MultiModalConfig.get_limit_per_prompt -> 0: _mark_tower_model builds no tower (bf16)
    assert (full.weights_gib - text.weights_gib) * GIB == pytest.approx(
        TOWER_PARAMS * 2 / tp, rel=1e-9
    )
    # and supports_multimodal_inputs is False: no encoder profiling, a smaller peak
    assert encoder_profile(model, (0, 24, 0), 32768, 8192, 1024) is not None
    assert encoder_profile(text_only(model), (0, 24, 0), 32768, 8192, 1024) is None
    assert text.activation_peak_gib < full.activation_peak_gib
    assert text.kv_tokens > full.kv_tokens


def test_a_text_model_is_unchanged() -> None:
    model = load_model("meta-llama/Llama-3.1-8B")
    assert text_only(model) is model
    base = EngineConfig(engine_version="0.24.0")
    lmo = EngineConfig(engine_version="0.24.0", language_model_only=True)
    gpu = get_gpu("H100")
    assert (
        plan_memory(model, gpu, None, lmo).kv_tokens
        == plan_memory(model, gpu, None, base).kv_tokens
    )


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"engine_version": "0.16.0"}, "joined in 0.17.0"),
        ({"engine": "sglang"}, "vLLM only"),
    ],
)
def test_refused_where_the_engine_has_no_such_flag(kwargs: dict, needle: str) -> None:
    with pytest.raises(KvscopeError, match=needle) as info:
        EngineConfig(language_model_only=True, **kwargs)
    assert "\n" not in info.value.one_line()
