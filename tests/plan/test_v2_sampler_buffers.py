"""The V2 sampler's per-request tables (:mod:`kvscope.plan.v2_sampler_buffers`) and the
non-torch figure of releases that subtract all consumed memory (:mod:`vllm_collectives`),
pinned to the wheels' code and to the logged "consumed memory (weights + non-torch)"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.v2_sampler_buffers import FIXED_COLUMNS, v2_sampler_bytes
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, load_cases, offline_hub

GIB = 1 << 30
#: Unpacked V2-runner wheels (this machine's /tmp; skipped where absent).
WHEELS = ("/tmp/vllm0.27.0", "/tmp/vllm030", "/tmp/vllm031")
#: Logged "consumed memory (weights + non-torch)" less "Model loading took", GiB, and the
#: rows' ``max_num_seqs`` (vLLM 0.29.0 / 0.31.0 starts, V2 runner, TP1).
LOGGED_NON_TORCH = {
    "lab4090-qwen3-8b-blocks1024-0.29": 0.11,  # 15.38 - 15.27, 8 sequences
    "vllm-l40s-qwen3-14b-0.29": 0.27,  # 256 sequences
    "vllm-l40s-qwen3-14b-awq-0.29": 0.29,
    "vllm-a100pcie-llama8b-0.31": 0.26,
}


def _ints(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^(MAX_\w+) = (\d+)", text, re.M)}


@pytest.mark.parametrize("root", WHEELS)
def test_tables_are_the_wheels(root: str) -> None:
    """Differential check against the engine's files: the vocabulary-wide penalty tables and
    the fixed-width per-request tables the module counts."""
    sample = Path(root, "vllm/v1/worker/gpu/sample")
    if not sample.exists():
        pytest.skip(f"vLLM wheel not unpacked at {root}")
    pen = (sample / "penalties.py").read_text()
    assert re.search(r"output_bin_counts = torch\.zeros\(\s*max_num_reqs, (self\.)?vocab_size", pen)
    assert re.search(
        r"prompt_bin_mask = torch\.zeros\(\s*max_num_reqs,\s*cdiv\((self\.)?vocab_size, 32\)", pen
    )
    consts = _ints((sample / "logit_bias.py").read_text()) | _ints(
        (sample / "bad_words.py").read_text()
    )
    logprob = _ints(Path(root, "vllm/sampling_params.py").read_text())["MAX_LOGPROB_TOKEN_IDS"]
    bad = consts.get("MAX_BAD_WORDS_TOTAL_TOKENS", 1024), consts.get("MAX_NUM_BAD_WORDS", 128)
    fixed = (
        consts["MAX_NUM_ALLOWED_TOKEN_IDS"]
        + 2 * consts["MAX_NUM_LOGIT_BIAS_TOKENS"]
        + consts["MAX_NUM_STOP_TOKEN_IDS"]
        + bad[0]
        + bad[1]
        + 1
        + logprob
    )
    assert fixed == FIXED_COLUMNS
    mem = Path(root, "vllm/utils/mem_utils.py").read_text()
    assert "result.non_kv_cache_memory = result.total_consumed" in mem


def test_counted_only_where_the_profiler_counts_them() -> None:
    """0.25's profiler subtracts weights, non-torch growth and the pass's peak only; the V1
    runner has no tables; a first pipeline stage builds no sampler."""
    llama, h100 = load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100")
    assert v2_sampler_bytes(llama, EngineConfig(engine_version="0.25.0"), h100, 1024) == 0.0
    mixtral = load_model("mistralai/Mixtral-8x7B-v0.1")  # MoE: V1 at 0.27
    assert v2_sampler_bytes(mixtral, EngineConfig(engine_version="0.27.0"), h100, 1024) == 0.0
    at27 = v2_sampler_bytes(llama, EngineConfig(engine_version="0.27.0"), h100, 1024)
    assert at27 == pytest.approx(1024 * 4 * (128256 + 4008 + FIXED_COLUMNS + 4009))
    pp2 = plan_memory(llama, h100, Parallelism(pp=2), EngineConfig(engine_version="0.27.0"))
    first, last = pp2.ranks
    assert first.kv_cache_gib - last.kv_cache_gib == pytest.approx(at27 / GIB, abs=0.2)


def test_logged_non_torch_at_029_and_031() -> None:
    """Planned non-torch (0.13 + tables) against the figure the logs print, to 0.03 GiB: 8
    sequences hold ~5 MB of tables, 256 sequences ~0.16 GiB."""
    with offline_hub():
        cases = {c.id: c for c in load_cases()}
        for row_id, logged in LOGGED_NON_TORCH.items():
            plan = cases[row_id].plan()
            assert plan.non_torch_gib == pytest.approx(logged, abs=0.03), row_id


def test_qwen3_32b_tp2_logs_its_pool() -> None:
    """Two RTX PRO 6000 at 0.426, vLLM 0.27.1: 'Available KV cache memory: 8.22 GiB' (8.67
    planned without the 1,024-row tables)."""
    with offline_hub():
        case = case_by_id("rtxpro6000-qwen3-32b-tp2-u0426-0.27")
        assert case.plan().kv_cache_gib == pytest.approx(8.22, abs=0.2)
