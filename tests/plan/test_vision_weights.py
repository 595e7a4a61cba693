"""A vision-language model's encoder is in the weights each GPU loads (first stage, split
over TP), as vLLM builds it; the text-only tower of the same checkpoint is the yardstick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.plan.config import Parallelism
from kvscope.plan.weights import rank_weights
from kvscope.specs.registry import load_model

GEMMA3 = Path(__file__).parents[1] / "specs" / "data" / "configs" / "google--gemma-3-27b-it.json"
GIB = float(1 << 30)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object]:
    raw = json.loads(GEMMA3.read_text())
    text = {**raw}
    del text["vision_config"]
    d = tmp_path_factory.mktemp("gemma3")
    (d / "text.json").write_text(json.dumps(text))
    return load_model(str(GEMMA3)), load_model(str(d / "text.json"))


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_vision_tower_adds_its_published_size_split_over_tp(
    models: tuple[object, object], tp: int
) -> None:
    vlm, text = models
    par = Parallelism(tp=tp)
    extra = (
        rank_weights(vlm, par).total_bytes  # type: ignore[arg-type]
        - rank_weights(text, par).total_bytes  # type: ignore[arg-type]
    )
    # Gemma 3 report, Table 1: the 27B model's SigLIP encoder has 417M parameters, in bf16.
    assert extra / GIB == pytest.approx(417e6 * 2 / tp / GIB, rel=0.03)


def test_later_pipeline_stages_hold_no_vision_tower(models: tuple[object, object]) -> None:
    vlm, text = models
    par = Parallelism(pp=2)
    assert rank_weights(vlm, par, 1).total_bytes == rank_weights(text, par, 1).total_bytes  # type: ignore[arg-type]
