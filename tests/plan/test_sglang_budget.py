"""SGLang: default mem_fraction_static and DeepSeek V4 bytes per full token."""

from __future__ import annotations

import pytest

from kvscope.plan.config import Parallelism
from kvscope.plan.sglang_budget import default_mem_fraction_static, dsv4_bytes_per_full_token
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

H100 = get_gpu("H100")


def test_sglang_default_mem_fraction_static() -> None:
    # 0.4 series: table by TP (the QwQ-32B 4x L4 log prints 0.85 at TP4).
    assert default_mem_fraction_static(get_gpu("L4"), Parallelism(tp=4), (0, 4, 3)) == 0.85
    assert default_mem_fraction_static(H100, Parallelism(tp=8), (0, 4, 9)) == 0.81
    # 0.5 rule, golden values: 80 GB class reserves 9.5 + p/2 GB (H100 TP8: 13.5 of 79.19
    # GiB), 141 GB class 12 + p/2 (H200 TP8: 16 of 139.8), > 160 GB a flat 32 (B200).
    assert default_mem_fraction_static(H100, Parallelism(tp=8), (0, 5, 2)) == 0.83
    assert default_mem_fraction_static(get_gpu("H200"), Parallelism(tp=8), (0, 5, 2)) == 0.886
    assert default_mem_fraction_static(get_gpu("B200"), Parallelism(tp=8), (0, 5, 2)) == 0.821


@pytest.mark.parametrize(
    ("model", "old", "bpft"),
    [
        ("deepseek-ai/DeepSeek-V4-Flash", False, 7705.45),
        ("deepseek-ai/DeepSeek-V4-Pro", False, 10993.84),
        ("deepseek-ai/DeepSeek-V4-Flash", True, 15955.85),
        ("deepseek-ai/DeepSeek-V4-Pro", True, 23749.84),
    ],
)
def test_sglang_dsv4_bytes_per_full_token(model: str, old: bool, bpft: float) -> None:
    m = load_model(model)
    assert dsv4_bytes_per_full_token(m, tuple(range(m.num_layers)), old) == pytest.approx(
        bpft, abs=0.01
    )
