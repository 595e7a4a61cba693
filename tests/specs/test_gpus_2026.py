"""The GPUs people rent in 2026: each pinned to the figures its cited datasheet or print gives.

The table below is written from the sources named in each entry of ``specs/gpus.json`` (the
datasheet line, the nvidia-smi / torch print), not from the file, so a typo in either fails.
"""

from __future__ import annotations

import pytest

from kvscope.specs.hardware import GIB, get_gpu, list_gpus

# name: (nominal GB, HBM GB/s, dense BF16 TFLOPS, dense FP8, dense FP4, nvidia-smi MiB)
DATASHEET = {
    # H100 SXM compute, NVLink 400 GB/s (H800 product page); nvidia-smi 81559 MiB.
    "H800-SXM-80GB": (80, 3350, 989, 1979, None, 81559),
    # H20-3e: H20 compute (148 dense BF16), H200 memory; nvidia-smi 143771 MiB.
    "H20-141GB": (141, 4800, 148, 296, None, 143771),
    # L20 spec sheet: 864 GB/s, FP16 119.5, FP8 239; nvidia-smi 46068 MiB.
    "L20-48GB": (48, 864, 119.5, 239, None, 46068),
    # HGX B300: BF16 36 / FP8 72 PF sparse, FP4 108 PF dense, per 8 GPUs; smi 275040 MiB.
    "B300-SXM-288GB": (288, 8000, 2250, 4500, 13500, 275040),
    # GB200 NVL72: BF16 360 / FP8 720 / FP4 1440 PF sparse per 72 GPUs; smi 189471 MiB.
    "GB200-186GB": (186, 8000, 2500, 5000, 10000, 189471),
    # GB300 NVL72: BF16 360 / FP8 720 PF sparse, FP4 1080 PF dense per 72 GPUs.
    "GB300-288GB": (288, 8000, 2500, 5000, 15000, 284208),
    # DGX Spark: 128 GB LPDDR5X, 273 GB/s, 1 PF FP4 sparse; nvidia-smi prints no total.
    "DGX-Spark-GB10-128GB": (128, 273, 125, 250, 500, None),
    # RTX Blackwell whitepaper, RTX 5090: BF16 209.5 (FP32 acc.), FP4 3352 sparse; smi 32607.
    "RTX-5090-32GB": (32, 1792, 209.5, 419, 1676, 32607),
    # Server Edition datasheet: 1,597 GB/s (the Workstation Edition has 1,792).
    "RTX-PRO-6000-Blackwell-Server-96GB": (96, 1597, 483.6, 967.2, 1934.6, 97887),
    "RTX-PRO-6000-Blackwell-96GB": (96, 1792, 503.8, 1007.6, 2015.2, 97887),
    # AMD data sheets: MI325X 6 TB/s, BF16 1307.4; MI355X 8 TB/s, BF16 2516.6, MXFP4 10066.3.
    "MI325X-256GB": (256, 6000, 1307.4, 2614.9, None, 262128),
    "MI355X-288GB": (288, 8000, 2516.6, 5033.2, 10066.3, 294896),
    # L40 datasheet: BF16 181.05 | 362.1*, FP8 362 | 724*; nvidia-smi 46068 MiB.
    "L40-48GB": (48, 864, 181.05, 362, None, 46068),
    # RTX A6000 datasheet: tensor 309.7* (sparse), 768 GB/s; nvidia-smi 49140 MiB.
    "RTX-A6000-48GB": (48, 768, 154.85, None, None, 49140),
    # Turing whitepaper, 2080 Ti: FP16 tensor 53.8 with FP32 accumulate; smi 11264 MiB.
    "RTX-2080-Ti-11GB": (11, 616, 53.8, None, None, 11264),
    # MI300A data sheet: 128 GB HBM3 unified, 5.3 TB/s, BF16 980.6, FP8 1961.2; no smi print.
    "MI300A-128GB": (128, 5300, 980.6, 1961.2, None, None),
    # T4 datasheet: FP16/FP32 mixed 65 TFLOPS, 300 GB/s; nvidia-smi 15360 MiB.
    "T4-16GB": (16, 300, 65, None, None, 15360),
    # V100 datasheet (SXM2): 125 TFLOPS tensor, 900 GB/s; nvidia-smi 16384 / 32768 MiB.
    "V100-SXM2-16GB": (16, 900, 125, None, None, 16384),
    "V100-SXM2-32GB": (32, 900, 125, None, None, 32768),
    # RTX PRO 4000 / 5000 Blackwell datasheets: 672 / 1,344 GB/s, 1,247 / 2,064 AI TOPS
    # (FP4 sparse, 4:2:1 with FP8 and BF16); nvidia-smi 24467 / 48935 MiB.
    "RTX-PRO-4000-Blackwell-24GB": (24, 672, 155.9, 311.8, 623.5, 24467),
    "RTX-PRO-5000-Blackwell-48GB": (48, 1344, 258, 516, 1032, 48935),
    # GeForce RTX 5080 / 5070 Ti: 960 / 896 GB/s, 1,801 / 1,406 AI TOPS; smi 16303 MiB.
    "RTX-5080-16GB": (16, 960, 112.6, 225.1, 900.5, 16303),
    "RTX-5070-Ti-16GB": (16, 896, 87.9, 175.8, 703, 16303),
    # Ada whitepaper RTX 4080 (97.5 with FP32 acc.); 4080 SUPER 836 AI TOPS; smi 16376.
    "RTX-4080-16GB": (16, 716.8, 97.5, 194.9, None, 16376),
    "RTX-4080-SUPER-16GB": (16, 736, 104.5, 209, None, 16376),
    # RTX 6000 Ada datasheet: FP8 1,457 sparse, 960 GB/s; nvidia-smi 49140 MiB (ECC off).
    "RTX-6000-Ada-48GB": (48, 960, 364.25, 728.5, None, 49140),
    # A40 datasheet: BF16 149.7 | 299.4*, 696 GB/s; nvidia-smi 46068 MiB (ECC on).
    "A40-48GB": (48, 696, 149.7, None, None, 46068),
    # RTX A4000 datasheet: tensor 153.4* (sparse), 448 GB/s, 140 W; nvidia-smi 16376 MiB.
    "RTX-A4000-16GB": (16, 448, 76.7, None, None, 16376),
    # RTX 3050 6 GB: 96-bit 14 Gbps = 168 GB/s; 18 SMs x 1.47 GHz x 256 FLOP; smi 6144 MiB.
    "RTX-3050-6GB": (6, 168, 6.77, None, None, 6144),
    # RTX 5090 Laptop GPU: 896 GB/s, 1,824 AI TOPS (FP4 sparse, 8:2:1 ratios); smi 24463.
    "RTX-5090-Laptop-24GB": (24, 896, 114, 228, 912, 24463),
}

# CUDA/HIP total in MiB: measured prints, or the entry's stated estimate rule.
CUDA_MIB: dict[str, float] = {
    "H800-SXM-80GB": 85028896768 / 2**20,  # estimated: as H100 SXM (deviceQuery bytes)
    "H20-141GB": 143156,  # estimated: as H200
    "L20-48GB": 45495,  # estimated: as L40S
    "B300-SXM-288GB": 275040 - 728,  # estimated: smi - B200 gap
    "GB200-186GB": 189471 - 728,
    "GB300-288GB": 284208 - 728,
    "DGX-Spark-GB10-128GB": 124611,  # 121.69 GiB of the unified pool
    "RTX-5090-32GB": 32102,  # torch 2.12 print
    "RTX-PRO-6000-Blackwell-Server-96GB": 97250,  # torch print
    "MI325X-256GB": 256 * 1024 - 16,  # estimated: nominal GiB x 1024 - 16
    "MI355X-288GB": 294896,  # llama.cpp HIP total
    "L40-48GB": 45495,  # estimated: as L40S (same board, same smi total)
    "RTX-A6000-48GB": 48677,  # torch 2.1 print 'NVIDIA RTX A6000, 48677MiB'
    "RTX-2080-Ti-11GB": 11012,  # torch 2.1 print 'NVIDIA GeForce RTX 2080 Ti, 11012MiB'
    "MI300A-128GB": 128 * 1024 - 16,  # estimated: nominal GiB x 1024 - 16
    "T4-16GB": 15095,  # torch 2.6 print 'Tesla T4, 15095MiB'
    "V100-SXM2-16GB": 16160,  # torch 1.10 print 'Tesla V100-SXM2-16GB, 16160MiB'
    "V100-SXM2-32GB": 32494,  # torch 2.6 print 'Tesla V100-SXM2-32GB, 32494MiB'
    "RTX-PRO-4000-Blackwell-24GB": 24467 - 505,  # estimated: smi - RTX 5090 gap
    "RTX-PRO-5000-Blackwell-48GB": 48935 - 637,  # estimated: smi - RTX PRO 6000 gap
    "RTX-5080-16GB": 15840,  # Linux torch print 'NVIDIA GeForce RTX 5080, 15840MiB'
    "RTX-5070-Ti-16GB": 15840,  # estimated: as RTX 5080 (same memory, same smi total)
    "RTX-4080-SUPER-16GB": 15944,  # torch 2.12 print 'NVIDIA GeForce RTX 4080 SUPER, 15944MiB'
    "RTX-4080-16GB": 15944,  # estimated: as RTX 4080 SUPER
    "RTX-6000-Ada-48GB": 48520,  # torch 2.7 print 'NVIDIA RTX 6000 Ada Generation, 48520MiB'
    "A40-48GB": 46068 - 463,  # estimated: ECC-on smi - RTX A6000 gap
    "RTX-A4000-16GB": 16117,  # torch 1.12 print 'NVIDIA RTX A4000, 16117MiB'
    "RTX-3050-6GB": 5804,  # torch 2.11 print 'RTX 3050 6GB Laptop GPU, 5804MiB'
    "RTX-5090-Laptop-24GB": 23962,  # Ollama CUDA discovery '23.4 GiB total'
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_pinned_to_the_datasheet(name: str) -> None:
    nominal, bw, bf16, fp8, fp4, smi = DATASHEET[name]
    g = get_gpu(name)
    assert g.memory_marketing_gb == nominal
    assert g.hbm_bandwidth == bw * 1e9
    assert g.bf16_flops == pytest.approx(bf16 * 1e12)
    assert g.fp8_flops == (None if fp8 is None else pytest.approx(fp8 * 1e12))
    assert g.fp4_flops == (None if fp4 is None else pytest.approx(fp4 * 1e12))
    assert g.memory_smi_mib == smi
    if name in CUDA_MIB:
        assert g.memory_bytes == CUDA_MIB[name] * 2**20


@pytest.mark.parametrize("name", sorted(CUDA_MIB))
def test_estimates_are_labelled_and_sources_cited(name: str) -> None:
    g = get_gpu(name)
    measured = {"DGX-Spark-GB10-128GB", "RTX-5090-32GB", "MI355X-288GB"}
    measured |= {"RTX-PRO-6000-Blackwell-Server-96GB", "RTX-A6000-48GB", "RTX-2080-Ti-11GB"}
    measured |= {"T4-16GB", "V100-SXM2-16GB", "V100-SXM2-32GB"}
    measured |= {"RTX-5080-16GB", "RTX-4080-SUPER-16GB", "RTX-6000-Ada-48GB"}
    measured |= {"RTX-A4000-16GB", "RTX-5090-Laptop-24GB"}
    assert g.memory_source.startswith("estimated:") == (name not in measured)
    assert "http" in dict(g.sources)["datasheet"] or "No public" in dict(g.sources)["datasheet"]
    assert g.notes


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("H800", "H800-SXM-80GB"),
        ("NVIDIA H800", "H800-SXM-80GB"),
        ("H20-141G", "H20-141GB"),
        ("H20 141GB", "H20-141GB"),
        ("NVIDIA H20-3e", "H20-141GB"),
        ("H20", "H20-96GB"),  # a bare H20 stays the 96 GB part
        ("L20", "L20-48GB"),
        ("NVIDIA RTX A4000", "RTX-A4000-16GB"),
        ("NVIDIA GeForce RTX 3050 6GB Laptop GPU", "RTX-3050-6GB"),
        ("NVIDIA GeForce RTX 5090 Laptop GPU", "RTX-5090-Laptop-24GB"),
        ("B300", "B300-SXM-288GB"),
        ("NVIDIA B300 SXM6 AC", "B300-SXM-288GB"),
        ("GB200", "GB200-186GB"),
        ("NVIDIA GB200", "GB200-186GB"),
        ("GB300", "GB300-288GB"),
        ("DGX Spark", "DGX-Spark-GB10-128GB"),
        ("NVIDIA RTX PRO 4000 Blackwell", "RTX-PRO-4000-Blackwell-24GB"),
        ("RTX PRO 5000 Blackwell", "RTX-PRO-5000-Blackwell-48GB"),
        ("NVIDIA GeForce RTX 5070 Ti", "RTX-5070-Ti-16GB"),
        ("NVIDIA GeForce RTX 5080", "RTX-5080-16GB"),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX-4080-SUPER-16GB"),
        ("NVIDIA GeForce RTX 4080", "RTX-4080-16GB"),  # the SUPER is its own part
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada-48GB"),
        ("NVIDIA A40", "A40-48GB"),
        ("GB10", "DGX-Spark-GB10-128GB"),
        ("NVIDIA GB10", "DGX-Spark-GB10-128GB"),
        ("RTX 5090", "RTX-5090-32GB"),
        ("NVIDIA GeForce RTX 5090", "RTX-5090-32GB"),
        ("RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server-96GB"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server-96GB"),
        ("RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-Blackwell-96GB"),
        ("RTX PRO 6000", "RTX-PRO-6000-Blackwell-96GB"),
        ("MI325X", "MI325X-256GB"),
        ("AMD Instinct MI355X", "MI355X-288GB"),
        ("NVIDIA L40", "L40-48GB"),  # the names vLLM logs print (torch device name)
        ("L40S", "L40S-48GB"),  # the L40 aliases do not capture the L40S
        ("NVIDIA RTX A6000", "RTX-A6000-48GB"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti-11GB"),
        ("2080 Ti", "RTX-2080-Ti-11GB"),
        ("AMD Instinct MI300A", "MI300A-128GB"),
        ("MI300A", "MI300A-128GB"),
        ("Tesla T4", "T4-16GB"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("V100", "V100-SXM2-16GB"),  # a bare V100 stays the original 16 GB part
    ],
)
def test_spellings(spelling: str, name: str) -> None:
    assert get_gpu(spelling).name == name


def test_unified_and_superchip_memory_is_explained() -> None:
    spark = get_gpu("GB10")
    assert spark.memory_gib == pytest.approx(121.69, abs=0.01)
    assert "unified" in spark.notes.lower()
    assert "not verified" in spark.memory_smi_source  # nvidia-smi prints no total on GB10
    for name in ("GB200", "GB300"):
        assert "HBM3e only" in get_gpu(name).notes or "own HBM3e" in get_gpu(name).notes


def test_server_and_workstation_editions_differ_only_in_clock_and_memory_speed() -> None:
    ws, se = get_gpu("RTX PRO 6000"), get_gpu("RTX-PRO-6000-SE")
    assert ws.memory_bytes == se.memory_bytes
    assert se.hbm_bandwidth < ws.hbm_bandwidth
    assert se.bf16_flops == pytest.approx(ws.bf16_flops * 120 / 125, rel=1e-3)


def test_catalogue_has_the_2026_gpus() -> None:
    names = {g.name for g in list_gpus()}
    assert set(DATASHEET) <= names
    assert len(names) >= 40


def test_log_era_gpus_match_their_public_prints() -> None:
    """The CUDA totals the public torch banners print, in MiB, for cards vLLM start-ups ran on."""
    assert get_gpu("NVIDIA RTX A6000").memory_bytes == 48677 * 2**20
    assert get_gpu("NVIDIA GeForce RTX 2080 Ti").memory_bytes == 11012 * 2**20
    assert get_gpu("Tesla T4").memory_bytes == 15095 * 2**20
    assert get_gpu("Tesla V100-SXM2-32GB").memory_bytes == 32494 * 2**20
    # L40 has no public torch total: it shares the L40S's board and nvidia-smi total.
    assert get_gpu("L40").memory_bytes == get_gpu("L40S").memory_bytes
    assert get_gpu("L40").memory_smi_mib == get_gpu("L40S").memory_smi_mib == 46068


def test_unified_apu_says_what_the_engine_counts() -> None:
    apu = get_gpu("MI300A")
    assert "unified" in apu.notes.lower() and "whole node's memory" in apu.memory_source
    assert "96 GiB" in apu.memory_source  # the default HIP device-allocator cap is stated
    assert apu.memory_smi_mib is None
    assert get_gpu("2080 Ti").bf16_flops < get_gpu("RTX 3090").bf16_flops
    assert GIB == 2**30


def test_sm_counts_match_the_published_core_counts() -> None:
    """``sm_count`` (torch's ``multi_processor_count``) against the CUDA cores the datasheets
    print: 128 cores an SM on Ada and Blackwell client/workstation parts, 64 on Turing's T4."""
    cores = {
        "RTX-PRO-6000-Blackwell-Server-96GB": (24_064, 128),
        "RTX-5090-32GB": (21_760, 128),
        "L40S-48GB": (18_176, 128),
        "L4-24GB": (7_424, 128),
        "RTX-4090-24GB": (16_384, 128),
        "DGX-Spark-GB10-128GB": (6_144, 128),
        "T4-16GB": (2_560, 64),
        "RTX-PRO-4000-Blackwell-24GB": (8_960, 128),
        "RTX-PRO-5000-Blackwell-48GB": (14_080, 128),
        "RTX-5080-16GB": (10_752, 128),
        "RTX-5070-Ti-16GB": (8_960, 128),
        "RTX-4080-SUPER-16GB": (10_240, 128),
        "RTX-4080-16GB": (9_728, 128),
        "RTX-6000-Ada-48GB": (18_176, 128),
        "A40-48GB": (10_752, 128),
        "RTX-A4000-16GB": (6_144, 128),
        "RTX-3050-6GB": (2_304, 128),
        "RTX-5090-Laptop-24GB": (10_496, 128),
    }
    for name, (n, per_sm) in cores.items():
        sm = get_gpu(name).sm_count
        assert sm is not None and sm * per_sm == n, name
    assert get_gpu("H100-SXM-80GB").sm_count == 132 and get_gpu("H100-PCIe-80GB").sm_count == 114
    assert get_gpu("MI300X-192GB").sm_count == 304  # compute units
    assert all(g.sm_count for g in list_gpus())
