"""A vision-language model's encoder is in the weights each GPU loads (first stage, split
over TP, or whole on every rank with vLLM's ``--mm-encoder-tp-mode data``), as vLLM builds
it; the text-only tower of the same checkpoint is the yardstick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.weights import rank_weights
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import Case, load_cases

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


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_data_parallel_encoder_is_whole_on_every_rank(
    models: tuple[object, object], tp: int
) -> None:
    # vLLM --mm-encoder-tp-mode data builds the encoder's linears with disable_tp: each rank
    # holds the full 417M-parameter SigLIP tower (Gemma 3 report, Table 1), whatever the TP.
    vlm, text = models
    gpu = get_gpu("H100")
    data = EngineConfig(mm_encoder_tp_mode="data")
    extra = (
        plan_memory(vlm, gpu, Parallelism(tp=tp), data).weights_gib  # type: ignore[arg-type]
        - plan_memory(text, gpu, Parallelism(tp=tp), data).weights_gib  # type: ignore[arg-type]
    )
    assert extra == pytest.approx(417e6 * 2 / GIB, rel=0.03)


def test_kimi_k25_weights_on_h100_need_the_replicated_encoder() -> None:
    # Kimi-K2.5, 8x H100, vLLM 0.15.0 with --mm-encoder-tp-mode data: 72.02 GiB per GPU
    # logged (t0m-vllm-kimik25-8xh100-tp8-8k); a sharded encoder would be 0.77 GiB short.
    case = {c.id: c for c in load_cases()}["t0m-vllm-kimik25-8xh100-tp8-8k"]
    assert case.plan().weights_gib == pytest.approx(72.02, rel=0.005)
    sharded = Case({**case.row, "mm_encoder_tp_mode": "weights"}).plan().weights_gib
    assert sharded < 72.02 * 0.99


def test_sglang_data_parallel_encoder_is_refused_in_one_line() -> None:
    with pytest.raises(KvscopeError, match="mm-encoder-tp-mode is vLLM's"):
        EngineConfig(engine="sglang", mm_encoder_tp_mode="data")
    with pytest.raises(KvscopeError, match="weights or data"):
        EngineConfig(mm_encoder_tp_mode="both")
