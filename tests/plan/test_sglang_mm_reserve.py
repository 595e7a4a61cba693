"""SGLang's multimodal reservation out of the KV budget (``mm_runtime_reservation_gb``,
srt/mem_cache/kv_cache_configurator.py, 0.5.18-0.5.23 wheels; absent from 0.5.17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.plan import sglang_mm_reserve
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).with_name("data") / "configs"


def _tokens(config: str, version: str) -> tuple[int, int]:
    model = load_model(str(CONFIGS / config))
    eng = EngineConfig(
        engine="sglang", engine_version=version, mem_fraction_static=0.9, max_model_len=32768
    )
    plan = plan_memory(model, get_gpu("H100-SXM-80GB"), Parallelism(tp=2), eng)
    return plan.kv_tokens, int(plan.kv_bytes_per_token)


def test_the_release_and_the_default_cache_size() -> None:
    # SGLANG_VLM_CACHE_SIZE_MB = 100 (srt/environ.py); only multimodal models, only 0.5.18+.
    assert sglang_mm_reserve.reserved_bytes((0, 5, 17), True) == 0
    assert sglang_mm_reserve.reserved_bytes((0, 5, 18), True) == 100 * 1024 * 1024
    assert sglang_mm_reserve.reserved_bytes((0, 5, 23, 1), True) == 100 * 1024 * 1024
    assert sglang_mm_reserve.reserved_bytes((0, 5, 23), False) == 0


def test_a_vision_language_start_loses_100_mib_of_kv_at_0_5_18() -> None:
    before, cell = _tokens("qwen3-vl-30b-a3b-instruct.json", "0.5.17")
    after, _ = _tokens("qwen3-vl-30b-a3b-instruct.json", "0.5.18")
    assert (before - after) * cell == pytest.approx(100 << 20, abs=cell)


def test_a_language_only_wrapper_keeps_its_kv() -> None:
    # Gemma 3 starts language-only without --enable-multimodal (mm_disabled_models), so
    # ModelConfig.is_multimodal is False and nothing is reserved.
    assert (
        _tokens("gemma-3-12b-it.json", "0.5.17")[0] == _tokens("gemma-3-12b-it.json", "0.5.18")[0]
    )
