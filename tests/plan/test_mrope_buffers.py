"""vLLM's M-RoPE rotary folds and Qwen3-VL's deepstack buffers (:mod:`kvscope.plan.mrope_buffers`)
against the "Model loading took" of real starts."""

from __future__ import annotations

import pytest

from kvscope.plan.mrope_buffers import deepstack_buffer_bytes, mrope_extra_cache_bytes
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, evaluate, offline_hub


@pytest.mark.parametrize(
    ("row_id", "logged"),
    [
        # Qwen3.5-9B at TP4 on 4x RTX 3090, vLLM 0.19.0 (leadawon/LAMBO log): 4.52 GiB a rank
        ("ghfile-4x3090-qwen35-9b-tp4-0.19", 4.52),
        # Qwen3-VL-30B-A3B at TP4 on 4x RTX 3090, vLLM 0.11.0: folds and deepstack buffers
        ("nanokvm-4x3090-qwen3vl30b-tp4-0.11.0", 14.7708),
    ],
)
def test_loads_land_on_the_logged_weights(row_id: str, logged: float) -> None:
    case = case_by_id(row_id)
    result = evaluate(case)
    assert result.predicted_weights_gib == pytest.approx(logged, rel=0.005)


def _model(name: str):  # type: ignore[no-untyped-def]
    with offline_hub():
        return load_model(name, None, None)


def test_the_folds_by_release_and_family() -> None:
    qwen35, qwen25vl = _model("Qwen/Qwen3.5-9B"), _model("Qwen/Qwen2.5-VL-7B-Instruct")
    # 262,144 positions x 64 rotary dims x 2 B, three more folds: 0.09375 GiB
    assert mrope_extra_cache_bytes(qwen35, (0, 19, 0)) == 3 * 262_144 * 64 * 2
    assert mrope_extra_cache_bytes(qwen35, (0, 7, 1)) == 0.0  # one fold before 0.7.2
    assert mrope_extra_cache_bytes(qwen35, (0, 32, 0)) == 0.0  # Qwen3.5 passes factor 1
    assert mrope_extra_cache_bytes(qwen25vl, (0, 32, 0)) > 0.0  # Qwen2.5-VL keeps four
    assert mrope_extra_cache_bytes(_model("meta-llama/Llama-3.1-8B"), (0, 19, 0)) == 0.0


def test_deepstack_buffers_only_for_qwen3_vl() -> None:
    qwen3vl = _model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    per_token = deepstack_buffer_bytes(qwen3vl, 1)
    assert per_token > 0 and deepstack_buffer_bytes(qwen3vl, 2048) == 2048 * per_token
    assert deepstack_buffer_bytes(_model("Qwen/Qwen2.5-VL-7B-Instruct"), 2048) == 0.0
