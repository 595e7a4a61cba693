"""SGLang before 0.4.0 builds a separate ``ParallelLMHead`` beside a tied embedding in its Llama
and Qwen2 classes (``srt/models/llama.py`` and ``qwen2.py`` of the 0.3.3-0.3.6 wheels; shared
from 0.4.0). Pinned to the size of the copy, to the releases and model types it applies to, and
to the SGLang docs build of 2024-11-10 that loads Llama-3.2-1B-Instruct in 2.91 GB."""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_tied_head import builds_separate_head
from kvscope.specs.hardware import GIB, get_gpu

from .log_cases import case_by_id, offline_hub

LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct"


def _model(name: str):
    from kvscope.specs.registry import load_model

    with offline_hub():
        return load_model(name)


def _weights(name: str, version: str, tp: int = 1) -> float:
    eng = EngineConfig(engine="sglang", engine_version=version)
    return plan_memory(_model(name), get_gpu("H100"), Parallelism(tp=tp), eng).weights_gib


@pytest.mark.parametrize("tp", [1, 2])
def test_the_copy_is_one_vocabulary_table_per_rank(tp: int) -> None:
    m = _model(LLAMA_1B)
    vocab_rank = -(-m.vocab_size // (64 * tp)) * 64
    table = vocab_rank * m.hidden_size * 2 / GIB
    assert _weights(LLAMA_1B, "0.3.5", tp) - _weights(LLAMA_1B, "0.4.0", tp) == pytest.approx(table)


def test_applies_only_before_040_and_to_tied_llama_and_qwen2() -> None:
    llama_1b = _model(LLAMA_1B)
    assert builds_separate_head(llama_1b, (0, 3, 6))
    assert not builds_separate_head(llama_1b, (0, 4, 0))
    untied = _model("meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert not untied.tie_word_embeddings and not builds_separate_head(untied, (0, 3, 5))
    assert _weights("meta-llama/Meta-Llama-3.1-8B-Instruct", "0.3.5") == pytest.approx(
        _weights("meta-llama/Meta-Llama-3.1-8B-Instruct", "0.4.0")
    )


def test_docs_build_of_0_3_5_loads_the_table_twice() -> None:
    case = case_by_id("sgldocs-h100-llama32-1b-0.3.5")
    plan = case.plan()
    assert plan.weights_gib == pytest.approx(2.91, rel=0.01)
    assert plan.kv_tokens == pytest.approx(2170757, rel=0.01)
