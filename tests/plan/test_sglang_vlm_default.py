"""SGLang's default ``mem_fraction_static`` for vision-language wrappers.

SGLang multiplies the default by ``adjust_mem_fraction_for_vlm``'s factor (0.95 x a ViT-size
term read from ``vision_config.num_hidden_layers`` / ``hidden_size``) when the model is served
multimodal, which Gemma 3 and Llama 4 are not by default (``mm_disabled_models``,
``srt/configs/model_config.py``, 0.4.9-0.5.23).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.plan.log_cases import offline_hub

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.sglang_budget import engine_defaults, sglang_multimodal
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

NAMES = (
    "moonshotai/Kimi-K2.5",
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
    "google/gemma-3-27b-it",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "meta-llama/Llama-3.1-70B",
)


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, ModelSpec]]:
    with offline_hub():
        yield {n: load_model(n) for n in NAMES}


def _mfs(model: ModelSpec, gpu: str, tp: int, version: str) -> float:
    eng = EngineConfig(engine="sglang", engine_version=version)
    return engine_defaults(model, get_gpu(gpu), Parallelism(tp=tp), eng).mem_fraction_static


def test_kimi_k25_default_matches_the_rocm_log(models: dict[str, ModelSpec]) -> None:
    # ajith-sirra-amd/Issues Kimi-K2.5-MI355X-SGLANG-ERROR.md (rocm/sgl-dev image of
    # 2026-02-18, `sglang serve --tp 8`, no memory flags): server_args prints
    # mem_fraction_static=0.8260405859375 = 0.908 x 0.95 x (1 - 0.1 x (27 x 1152^2 /
    # (24 x 1024^2) - 1)); without the factor the planner said 0.908.
    got = _mfs(models["moonshotai/Kimi-K2.5"], "MI355X", 8, "0.5.9")
    assert got == pytest.approx(0.8260405859375, abs=1e-12)


def test_a_baseline_sized_tower_takes_the_flat_factor(models: dict[str, ModelSpec]) -> None:
    # Pixtral's 24 x 1024 tower is the ViT-L/14 baseline: the ViT term is 1, the factor 0.95.
    vlm = _mfs(models["mistralai/Mistral-Small-3.1-24B-Instruct-2503"], "H100", 2, "0.5.9")
    text = _mfs(models["meta-llama/Llama-3.1-70B"], "H100", 2, "0.5.9")
    assert vlm == pytest.approx(text * 0.95, rel=1e-12)


@pytest.mark.parametrize(
    "name", ["google/gemma-3-27b-it", "meta-llama/Llama-4-Scout-17B-16E-Instruct"]
)
def test_language_only_wrappers_keep_the_text_default(
    models: dict[str, ModelSpec], name: str
) -> None:
    assert not sglang_multimodal(models[name])
    assert _mfs(models[name], "H100", 2, "0.5.9") == _mfs(
        models["meta-llama/Llama-3.1-70B"], "H100", 2, "0.5.9"
    )


def test_vision_tower_shape_is_read_as_sglang_reads_it(models: dict[str, ModelSpec]) -> None:
    k25 = models["moonshotai/Kimi-K2.5"]
    assert (k25.vision_layers, k25.vision_width) == (27, 1152)  # MoonViT's vt_ keys
    gemma = models["google/gemma-3-27b-it"]
    assert (gemma.vision_layers, gemma.vision_width) == (27, 1152)  # SigLIP So400m
    text = models["meta-llama/Llama-3.1-70B"]
    assert (text.vision_layers, text.vision_width, sglang_multimodal(text)) == (0, 0, False)
