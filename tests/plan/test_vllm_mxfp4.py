"""vLLM's MXFP4 experts on Hopper (Triton path, Marlin fallback) and gpt-oss's float32 rope table
(:mod:`kvscope.plan.vllm_mxfp4`) against the "Model loading took" of real starts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.vllm_mxfp4 import (
    float32_rope_bytes,
    hopper_marlin,
    hopper_triton,
    triton_expert_bytes,
    vllm_expert_layout,
)
from kvscope.plan.weights import ExpertLayout
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, evaluate, load_cases

#: Hopper starts of gpt-oss (engine_logs.csv): 0.19.0 (llm-d planner study, TP1/2/4) and
#: 0.14.1 (vllm-project/vllm#33155, "Using Triton backend").
STARTS = {
    "llmd-gptoss20b": 13.64,
    "llmd-gptoss20b-tp2": 7.01,
    "llmd-gptoss20b-tp4": 3.63,
    "gh33155-h100-gptoss120b-0.14.1-oom": 64.38,
}


@pytest.mark.parametrize("row_id", sorted(STARTS))
def test_hopper_triton_layout_gives_the_logged_weights(row_id: str) -> None:
    case = case_by_id(row_id)
    result = evaluate(case)
    assert case.num("weights_gib") == STARTS[row_id]
    # Logged to 0.01 GiB; the TP4 start's 3.63 leaves 0.04 GiB (1 %) unexplained.
    assert result.weights_err is not None and result.weights_err < 0.012


def _weights(model_id: str, version: str, tp: int) -> float:
    eng = EngineConfig(engine="vllm", engine_version=version, max_model_len=8192)
    plan = plan_memory(load_model(model_id), get_gpu("H100"), Parallelism(tp=tp), eng)
    return plan.weights_gib


def test_the_value_prepad_is_a_release_fact() -> None:
    # The bundled triton_kernels of 0.17-0.21 pre-pads the swizzled values to 64 bytes; 0.14.1's
    # does not. Each start fits only its own release's layout.
    assert _weights("openai/gpt-oss-20b", "0.14.1", 1) < 0.986 * 13.64
    assert _weights("openai/gpt-oss-20b", "0.19.0", 1) == pytest.approx(13.64, rel=0.002)
    assert _weights("openai/gpt-oss-120b", "0.19.0", 1) > 1.015 * 64.38
    assert _weights("openai/gpt-oss-120b", "0.14.1", 1) == pytest.approx(64.38, rel=0.002)


def test_which_starts_take_the_triton_layout() -> None:
    h100, a100, b200 = get_gpu("H100"), get_gpu("A100-SXM-80GB"), get_gpu("B200")
    assert hopper_triton(h100, (0, 12, 0)) and hopper_triton(h100, (0, 31, 0))
    # 0.11.x wheels ship no triton_kernels; 0.34 stores the swizzled tensors in the params
    assert not hopper_triton(h100, (0, 11, 2)) and not hopper_triton(h100, (0, 34, 0))
    assert not hopper_triton(a100, (0, 19, 0)) and not hopper_triton(b200, (0, 19, 0))
    # other checkpoints and other GPUs keep the earlier rules
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert vllm_expert_layout(llama, h100, "vllm", (0, 19, 0), Parallelism()) == ExpertLayout()
    oss = load_model("openai/gpt-oss-20b")
    assert vllm_expert_layout(oss, a100, "vllm", (0, 19, 0), Parallelism()) == ExpertLayout(
        128, 256
    )


def test_hopper_marlin_fallback_before_the_triton_bundle() -> None:
    # 0.11.2 on an H100 without triton_kernels logs "Using Marlin backend" and 65.97 GiB for
    # gpt-oss-120b (blog.huikang.dev Kaggle start): Marlin's pads fit, the 256 width pad
    # (64.53) does not.
    h100, a100 = get_gpu("H100"), get_gpu("A100-SXM-80GB")
    assert hopper_marlin(h100, (0, 11, 2)) and not hopper_marlin(h100, (0, 12, 0))
    assert not hopper_marlin(a100, (0, 11, 2))
    oss = load_model("openai/gpt-oss-120b")
    assert vllm_expert_layout(oss, h100, "vllm", (0, 11, 2), Parallelism()) == ExpertLayout(
        128, 256
    )
    assert _weights("openai/gpt-oss-120b", "0.11.2", 1) == pytest.approx(65.97, rel=0.005)
    assert _weights("openai/gpt-oss-120b", "0.10.1.1", 1) < 0.985 * 65.97
    # vllm#27508 (0.11.0, one H100, gmu 0.95): its 1.71 GiB of KV is what the pads leave.
    # Planned 1.77 (+3.6 %; 1.69 while the sampler phase held the fitted 0.12 GiB instead of
    # the 0.04 its code gives, kvscope.plan.sampler_phase): 0.06 GiB of a tiny pool.
    (case,) = [c for c in load_cases() if c.id.startswith("gh27508-h100-gptoss120b")]
    kv_err = evaluate(case).kv_gib_err
    assert case.num("kv_cache_gib") == 1.71 and kv_err is not None and kv_err < 0.04


@given(
    hidden=st.integers(1, 256).map(lambda k: 32 * k),
    width=st.integers(1, 256).map(lambda k: 32 * k),
    version=st.sampled_from([(0, 14, 1), (0, 19, 0), (0, 25, 0)]),
)
def test_triton_expert_bytes_invariants(hidden: int, width: int, version: tuple[int, ...]) -> None:
    got = triton_expert_bytes(hidden, width, version)
    values, scales = 3 * hidden * width // 2, 3 * hidden * width // 32
    biases = 4 * (2 * width + hidden)
    # never below the checkpoint's values, its scales twice (swizzled + kept) and fp32 biases
    assert got >= values + 2 * scales + biases
    # with every dimension on the kernels' alignment nothing is padded
    if hidden % 256 == 0 and width % 256 == 0:
        assert got == values + 2 * scales + biases
    # the pre-padding release never holds less than one without it
    assert triton_expert_bytes(hidden, width, (0, 19, 0)) >= triton_expert_bytes(
        hidden, width, (0, 14, 1)
    )
    # a wider expert never takes fewer bytes
    assert triton_expert_bytes(hidden, width + 32, version) >= got


def test_gpt_oss_rope_table_is_float32_under_vllm_only() -> None:
    oss = load_model("openai/gpt-oss-20b")
    # YaRN: original_max_position_embeddings 4,096 x factor 32 rows of head_dim 64, float32
    assert float32_rope_bytes(oss, "vllm") == 131072 * 64 * 4
    assert float32_rope_bytes(oss, "sglang") == 0.0
    assert float32_rope_bytes(load_model("meta-llama/Llama-3.1-8B"), "vllm") == 0.0
