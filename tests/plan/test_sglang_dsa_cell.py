"""SGLang's profiled cell for DeepSeek V3.2 sparse MLA, by release (``dsa_profiled_cell``).

SGLang divides the pool budget by a ``cell_size`` that, before 0.5.17, is not what its fp8
pool allocates: ``(kv_lora_rank + qk_rope_head_dim) x element size`` a layer (576 B in fp8)
where the pool stores the 656-B record, and no indexer key before 0.5.4 (sglang PR #11309).
Pinned to the engine's arithmetic (``profile_max_num_token`` in the 0.5.3 and 0.5.4 wheels,
``_compute_cell_size`` / ``calculate_mla_kv_cache_dim`` in ``pool_configurator.py`` at 0.5.16
and 0.5.17) and to the log of the 0.5.3-era main branch in sglang PR #11309's description.
"""

from __future__ import annotations

import pytest

from kvscope.plan._cache import attention_kinds
from kvscope.plan.config import EngineConfig
from kvscope.plan.kv_layout import sglang_cell_bytes
from kvscope.plan.sglang_budget import dsa_kv_dtype, dsa_profiled_cell
from kvscope.specs.dtypes import resolve_kv_dtype
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id

V32 = load_model("deepseek-ai/DeepSeek-V3.2")
LAYERS = tuple(range(V32.num_layers))


@pytest.mark.parametrize(
    ("version", "fp8", "bf16"),
    [
        # 61 layers: 576 (fp8 latent + rope as one byte each); 1,152 in bf16
        ((0, 5, 3), 61 * 576, 61 * 1152),
        # + the indexer's 128 fp8 values and one fp32 scale
        ((0, 5, 4), 61 * (576 + 132), 61 * (1152 + 132)),
        ((0, 5, 16), 61 * (576 + 132), 61 * (1152 + 132)),
        # the fp8 record: 512 fp8 + 4 fp32 scales + 64 bf16 rope = 656
        ((0, 5, 17), 61 * (656 + 132), 61 * (1152 + 132)),
    ],
)
def test_profiled_cell_by_release(version: tuple[int, ...], fp8: int, bf16: int) -> None:
    for dtype, want in (("fp8_ds_mla", fp8), ("bfloat16", bf16)):
        allocated = sglang_cell_bytes(V32, LAYERS, dtype, 1)
        assert dsa_profiled_cell(V32, LAYERS, dtype, version, allocated) == want


def test_other_models_keep_the_allocated_cell() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    layers = tuple(range(v3.num_layers))
    cell = sglang_cell_bytes(v3, layers, "fp8", 1)
    assert dsa_profiled_cell(v3, layers, "fp8", (0, 5, 3), cell) == cell


def test_main_branch_log_of_pr_11309() -> None:
    # 8x B200, --tp 8 --dp 8 --enable-dp-attention, main of 2025-10-07: "KV Cache is
    # allocated. #tokens: 1462784". Priced at the 656 + 132 B the pool allocates, the plan
    # had 1,082,432 (-26 %).
    case = case_by_id("sglang-pr11309-dsv32exp-b200-main")
    assert case.plan().kv_tokens == pytest.approx(1_462_784, rel=0.02)


def test_pr_11309_build_log_under_its_release() -> None:
    # The PR build of the same start: "KV Cache is allocated. #tokens: 975424". The PR both adds
    # the indexer to the profiled cell and drops the NSA mem_fraction_static = 0.8 override, and
    # 0.5.4 ships both (model_runner.py / server_args.py of the 0.5.4 wheel). Under 0.5.3's rules
    # (576 B, mfs 0.8) the plan was 1,480,896 (+52 %).
    case = case_by_id("sglang-pr11309-dsv32exp-b200")
    assert case.row["version"] == "0.5.4"
    assert case.plan().kv_tokens == pytest.approx(975_424, rel=0.02)


@pytest.mark.parametrize(
    ("gpu", "version", "flag", "want"),
    [
        # compute capability 10+: auto (or no flag) becomes fp8_e4m3 from 0.5.3 on
        ("B200", "0.5.3", None, "fp8_e4m3"),
        ("B200", "0.5.4", "auto", "fp8_e4m3"),
        ("B200", "0.5.12", None, "fp8_e4m3"),
        # 0.5.3-0.5.4 force it whatever the flag; 0.5.5 rewrites only auto
        ("B200", "0.5.4", "bf16", "fp8_e4m3"),
        ("B200", "0.5.5", "bf16", "bfloat16"),
        # Hopper keeps the model dtype
        ("H200", "0.5.12", None, "bfloat16"),
    ],
)
def test_dsa_kv_dtype_default(gpu: str, version: str, flag: str | None, want: str) -> None:
    # server_args.py _handle_model_specific_adjustments (0.5.3-0.5.8 wheels) and
    # _set_default_nsa_kv_cache_dtype (0.5.11): "fp8_e4m3" if major >= 10 else "bfloat16".
    eng = EngineConfig(engine="sglang", engine_version=version, kv_cache_dtype=flag)
    resolved = resolve_kv_dtype(flag, V32.dtype)
    got = dsa_kv_dtype(V32, get_gpu(gpu), eng, attention_kinds(V32), resolved)
    assert got == want


def test_pr_11309_command_without_kv_flag() -> None:
    # The PR's command sets no --kv-cache-dtype; on B200 the engine's fp8 default gives the
    # same plan as an explicit fp8 cache.
    case = case_by_id("sglang-pr11309-dsv32exp-b200")
    assert case.row["kv_cache_dtype"] == ""
    assert case.plan().kv_tokens == pytest.approx(975_424, rel=0.02)
