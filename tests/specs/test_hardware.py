"""GPU catalogue: names resolve, figures are plausible and sourced."""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.errors import UnknownNameError
from kvscope.specs.hardware import GIB, get_gpu, list_gpus

REQUIRED = [
    "A100-SXM-40GB",
    "A100-PCIe-40GB",
    "A100-SXM-80GB",
    "A100-PCIe-80GB",
    "H100-SXM-80GB",
    "H100-PCIe-80GB",
    "H200-SXM-141GB",
    "H200-NVL-141GB",
    "H20-96GB",
    "B200-SXM-180GB",
    "L4-24GB",
    "L40S-48GB",
    "A10-24GB",
    "A10G-24GB",
    "RTX-4090-24GB",
    "RTX-PRO-6000-Blackwell-96GB",
    "MI300X-192GB",
]


def test_required_gpus_present() -> None:
    names = {g.name for g in list_gpus()}
    assert set(REQUIRED) <= names
    assert any(n.startswith("GH200") for n in names)


@pytest.mark.parametrize(
    "spelling", ["H100", "h100-80gb", "NVIDIA H100 80GB HBM3", "h100_sxm", " H100-SXM-80GB "]
)
def test_common_spellings_of_h100(spelling: str) -> None:
    assert get_gpu(spelling).name == "H100-SXM-80GB"


def test_h100_reports_about_79_19_gib() -> None:
    # vLLM logs on H100 80GB: 0.95 x total = 75.23 GiB -> total 79.19 GiB
    # (the llm-d-planner study's vLLM 0.19 H100 start-up logs, tests/plan/data/engine_logs.csv).
    h100 = get_gpu("H100")
    assert h100.memory_gib == pytest.approx(79.19, abs=0.01)
    assert 0.95 * h100.memory_gib == pytest.approx(75.23, abs=0.01)


def test_datasheet_figures() -> None:
    h100 = get_gpu("H100")
    assert h100.hbm_bandwidth == 3.35e12  # H100 SXM datasheet: 3.35 TB/s
    assert h100.bf16_flops == pytest.approx(989e12, rel=0.001)  # dense, not the sparse 1979
    assert h100.nvlink_bandwidth == 450e9  # NVLink 4: 900 GB/s bidirectional
    h200 = get_gpu("h200")
    assert h200.hbm_bandwidth == 4.8e12
    assert h200.bf16_flops == h100.bf16_flops  # same GH100 compute, more memory
    assert get_gpu("A100-SXM-80GB").fp8_flops is None  # Ampere has no FP8 tensor cores
    assert get_gpu("MI300X").vendor == "amd"


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.name)
def test_every_entry_is_plausible_and_sourced(gpu: object) -> None:
    from kvscope.specs.hardware import GPUSpec

    assert isinstance(gpu, GPUSpec)
    # CUDA sees a little less than the marketing capacity (driver reservation, GB vs GiB).
    marketing = gpu.memory_marketing_gb * 1e9
    assert 0.85 * marketing < gpu.memory_bytes <= 1.1 * marketing
    assert 100e9 < gpu.hbm_bandwidth < 20e12
    # the floor is the entry-level RTX 3050 6GB: 18 SMs, 6.77 dense BF16 TFLOPS
    assert 5e12 < gpu.bf16_flops < 5e15
    if gpu.fp8_flops:
        assert gpu.fp8_flops >= gpu.bf16_flops
    assert gpu.tdp_w > 0
    assert dict(gpu.sources).get("datasheet")
    assert gpu.memory_source


def test_aliases_are_unique() -> None:
    seen: dict[str, str] = {}
    for g in list_gpus():
        for a in g.aliases:
            assert a not in seen, f"{a} names both {seen[a]} and {g.name}"
            seen[a] = g.name


def test_unknown_gpu_lists_close_matches() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_gpu("H300")
    assert info.value.close_matches
    assert "Did you mean" in info.value.one_line()
    assert GIB == 2**30


def test_capability_parses_the_catalogue_string() -> None:
    assert get_gpu("H100").capability == (9, 0)
    assert get_gpu("RTX-3090-24GB").capability == (8, 6)
    assert dataclasses.replace(get_gpu("H100"), compute_capability="").capability is None
