"""vLLM 0.28's multimodal profiling pass for the Qwen3.5 family (kvscope.plan.encoder_profile and
kvscope.plan.vit_peak), against the 0.27.0 and 0.28.0 wheels and a published 0.28 start.

Published figures: a vLLM 0.28.0 ``vllm serve`` start of Qwen/Qwen3.5-0.8B on one A100 80GB
PCIe (``--max-model-len 8192 --gpu-memory-utilization 0.85 --max-num-seqs 32``, row
``w1report-a100pcie-qwen35-08b-serve-0.28``) logged "1.36 GiB for peak activation" (the
profiling pass's transient headroom plus the CUDA-graph estimate, gpu_worker.py) and 61.82 GiB
of KV cache. The vision tower (depth 12, hidden 768, 12 heads, intermediate 3072, patch 16,
merge 2) on one 4096 x 4096 dummy image is 65,536 patches; walking the blocks by hand, the
attention block holds 11 rows of 768 a patch beside ``pos_embeds`` (768) and the rotary
cos/sin (64): 65,536 x 9,280 x 2 B = 1,216,348,160 B, plus the pixel values 16,384 x 4 x 1,536
x 2 B = 201,326,592 B.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvscope.plan.encoder_profile import encoder_profile, phase_bytes
from kvscope.plan.vllm_runner import v2_by_default
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, evaluate, offline_hub

#: Unpacked wheels (this machine's /tmp; skipped where absent).
V027, V028 = Path("/tmp/vllm0.27.0/vllm"), Path("/tmp/vllm028/vllm")
GIB = 1 << 30


@pytest.fixture(scope="module")
def qwen35_08b():
    with offline_hub():
        return load_model("Qwen/Qwen3.5-0.8B")


def _wheels() -> None:
    for root in (V027, V028):
        if not root.is_dir():
            pytest.skip(f"vLLM wheel not unpacked at {root}")


def _method(path: Path, name: str) -> str:
    text = path.read_text()
    m = re.search(rf"\n    def {name}\(.*?(?=\n    (?:def |@))", text, re.S)
    assert m is not None, (path, name)
    return m.group(0)


@pytest.mark.parametrize("name", ["profile_run", "_get_mm_dummy_batch"])
def test_028_v1_profiling_pass_is_027s(name: str) -> None:
    _wheels()
    rel = Path("v1/worker/gpu_model_runner.py")
    assert _method(V027 / rel, name) == _method(V028 / rel, name)
    # the encoder outputs are parked as they are, until after the language model's pass
    assert 'self.encoder_cache[f"tmp_{i}"] = output' in _method(V028 / rel, "profile_run")


@pytest.mark.parametrize(
    "rel",
    [
        "multimodal/encoder_budget.py",  # budget and items
        "model_executor/layers/attention/mm_encoder_attention.py",  # the ViT's attention
        "model_executor/layers/rotary_embedding/common.py",
    ],
)
def test_028_budget_and_vit_attention_files_are_027s(rel: str) -> None:
    _wheels()
    assert (V027 / rel).read_text() == (V028 / rel).read_text()


def test_028_vision_blocks_compile_only_on_request() -> None:
    _wheels()
    vl = (V028 / "model_executor/models/qwen3_vl.py").read_text()
    assert vl.count("enable_if=should_torch_compile_mm_encoder") == 2
    deco = (V028 / "compilation/decorators.py").read_text()
    assert "return vllm_config.compilation_config.compile_mm_encoder" in deco
    assert "compile_mm_encoder: bool = False" in (V028 / "config/compilation.py").read_text()


def test_028_qwen35_wrapper_starts_on_v1(qwen35_08b) -> None:
    _wheels()
    cfg = (V028 / "config/vllm.py").read_text()
    listed = cfg.split("DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES = frozenset(")[1].split(")")[0]
    assert "Qwen3_5" not in listed
    assert 'getattr(model_config, "is_hybrid", False) and (' in cfg
    assert not v2_by_default(qwen35_08b, (0, 28, 0))
    assert v2_by_default(qwen35_08b, (0, 29, 0))  # every model on V2 (encoder_profile_v2)


def test_serve_start_profiles_one_image_and_its_tower(qwen35_08b) -> None:
    p = encoder_profile(qwen35_08b, (0, 28, 0), 8192, 2048, 32)
    assert p is not None
    assert (p.modality, p.budget_tokens, p.items, p.rows, p.patches) == (
        "image",
        16_384,
        1,
        16_384,
        65_536,
    )
    gpu = get_gpu("A100-PCIe-80GB")
    assert phase_bytes(qwen35_08b, p, gpu, 1, (0, 28, 0)) == 1_216_348_160 + 201_326_592
    assert encoder_profile(qwen35_08b, (0, 35, 0), 8192, 2048, 32) is None


def test_serve_start_logged_peak() -> None:
    case = case_by_id("w1report-a100pcie-qwen35-08b-serve-0.28")
    plan = case.plan()
    # "1.36 GiB for peak activation" holds the graph estimate; without the tower's phase the
    # plan had 0.34 (the language model's pass at 2,048 tokens)
    assert abs(plan.activation_peak_gib + plan.cudagraph_gib - 1.36) < 0.25
    assert plan.activation_peak_gib > 1.3
    err = evaluate(case).tokens_err
    assert err is not None and err < 0.05
