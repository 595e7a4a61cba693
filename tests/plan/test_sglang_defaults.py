"""SGLang's own defaults for mem_fraction_static / chunked_prefill_size / cuda_graph_max_bs.

Three kinds of checks:

* values SGLang really printed or reported in public (each with its source);
* hand-worked cases, one or more per release branch: the expected numbers are literals worked
  out in the comment from the rule the branch applies, never recomputed with the module;
* Hypothesis properties (fraction inside (0, 1), never larger at a larger TP within a branch,
  user values passed through).

GPU memory is nvidia-smi's ``memory.total`` (MiB), what SGLang reads: H100 81559, H200 143771,
H20 97871, B200 183359, L4 23034, RTX 4090 24564, A100 40GB 40960, MI300X 196592 (ROCm).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.plan.sglang_defaults import SglangDefaults, sglang_defaults, sglang_gpu_mem_mib
from kvscope.specs.hardware import get_gpu, list_gpus

H100 = 81559.0
H200 = 143771.0
B200 = 183359.0
L4 = 23034.0
RTX4090 = 24564.0
A100_40 = 40960.0
MI300X = 196592.0


def _check(r: SglangDefaults, mfs: float, chunked: int, cgmb: int) -> None:
    assert r.mem_fraction_static == pytest.approx(mfs, abs=5e-7)
    assert r.chunked_prefill_size == chunked
    assert r.cuda_graph_max_bs == cgmb


# --------------------------------------------------------------------------------------------
# Values SGLang printed or reported in public
# --------------------------------------------------------------------------------------------


def test_real_docs_ci_h100_0_5_9_prints_0_835() -> None:
    # https://docs.sglang.io/basic_usage/offline_engine_api.html, executed-notebook output of the
    # 2026-02-05 build (same text in the code index, id 15094997619): "mem_fraction_static=0.835,
    # ... chunked_prefill_size=8192", cuda_graph_bs=[1, 2, 4, ..., 248, 256] (the printed
    # cuda_graph_max_bs=4 is the docs patch applied afterwards), enable_piecewise_cuda_graph=False,
    # piecewise list with 576 (the 0.5.9 generator). GPU: fa3 chosen by default (Hopper), 71.91 GB
    # free after loading a 0.5B model: an 80 GB H100.
    r = sglang_defaults(H100, (0, 5, 9))
    _check(r, 0.835, 8192, 256)
    assert r.rule == "0.5.3+ reserved"


def test_real_docs_ci_h100_0_5_10_prints_0_83_with_piecewise_graphs() -> None:
    # Same page, 2026-03-05 build (code index id 53258134675): "mem_fraction_static=0.83", TP1,
    # chunked_prefill_size=8192, disable_piecewise_cuda_graph=False, piecewise tokens 4..8192
    # ("Compiling num tokens ... 0/58"): 58 graphs x 8 MiB on top of the 0.835 case.
    r = sglang_defaults(H100, (0, 5, 10))
    _check(r, 0.83, 8192, 256)
    assert r.prefill_cuda_graph
    assert r.reserved_mib == 13904.0  # 13440 + 58 * 8


def test_real_issue_29092_h100_qwen3_32b_reports_0_828() -> None:
    # https://github.com/sgl-project/sglang/issues/29092 (2026-06-23): "I found the value to be
    # 0.828 for H100 with Qwen3 32B model". TP is not stated: TP1 gives 0.83 (above), TP2 gives
    # 512 + 1.5*8192 + 2*256 + 2*128 + 58*8 = 14032 -> (81559 - 14032) / 81559 = 0.82795 -> 0.828.
    r = sglang_defaults(H100, (0, 5, 13), tp=2)
    _check(r, 0.828, 8192, 256)


def test_real_pr_28884_glm52_h200_dp_attention_0_484() -> None:
    # https://github.com/sgl-project/sglang/pull/28884 (2026-06-22): GLM-5.2-FP8 on 8xH200, TP8,
    # dp8 with DP attention, --chunked-prefill-size 32768, no --mem-fraction-static: "Before:
    # mem_fraction_static = 0.484". Only the 4 GiB draft (MTP/EAGLE) term of 0.5.10-0.5.13 reaches
    # it: 512 + 1.5*32768 + 2*512 + 8*128 + 512*8*3 + 512*8*1.5 + 4096 = 74240 MiB;
    # (143771 - 74240) / 143771 = 0.48362 -> 0.484. DP attention then splits the chunk: 4096.
    r = sglang_defaults(
        H200,
        (0, 5, 13),
        tp=8,
        dp=8,
        dp_attention=True,
        chunked_prefill_size=32768,
        speculative="EAGLE",
        mla=True,
    )
    _check(r, 0.484, 4096, 512)
    assert r.reserved_mib == 74240.0


def test_real_qwq32b_on_4x_l4_0_4_3_prints_0_85_and_2048() -> None:
    # tests/plan/data/engine_logs.csv row sglang-qwq32b-l4-tp4 (README of an SGLang-on-ECS
    # deployment, g6.12xlarge 4x L4, public code search id 47376055009): SGLang 0.4.3 printed the
    # default mem_fraction_static 0.85 (TP4 row of the table) and chunked prefill 2048 (L4's
    # 23034 MiB is under 25000). The TP4 small-GPU graph limit is 80.
    _check(sglang_defaults(L4, (0, 4, 3), tp=4), 0.85, 2048, 80)


def test_real_docs_ci_0_4_5_prints_0_88_and_8192() -> None:
    # https://docs.sglang.ai/frontend/frontend.html, build of 2025-04-13 (0.4.5 was out on
    # 2025-04-07): "mem_fraction_static=0.88, ... chunked_prefill_size=8192, ... tp_size=1" for
    # Qwen2.5-7B-Instruct on the docs CI GPU (H100); the 0.4.x table does not depend on the GPU
    # above 25000 MiB.
    _check(sglang_defaults(H100, (0, 4, 5)), 0.88, 8192, 160)


def test_real_docs_ci_0_4_1_prints_0_88() -> None:
    # https://docs.sglang.ai/start/send_request.html (executed notebook, build of 2025-01-23;
    # tests/plan/data/engine_logs.csv row sglang-docs-llama8b-h100): mem_fraction_static 0.88.
    assert sglang_defaults(H100, (0, 4, 1)).mem_fraction_static == 0.88


def test_real_pr_6718_b200_settings_of_0_4_7() -> None:
    # https://github.com/sgl-project/sglang/pull/6718 ("Tune memory arguments on B200",
    # 2025-05-28) set mem_fraction_static 0.79, chunked_prefill_size 16384 and captures up to 512
    # on GPUs above 180000 MB (B200: 183359 MiB); it shipped in 0.4.7.
    r = sglang_defaults(B200, (0, 4, 7))
    _check(r, 0.79, 16384, 512)
    assert r.cuda_graph_max_bs_source == "capture_list"


# --------------------------------------------------------------------------------------------
# Hand-worked cases per branch
# --------------------------------------------------------------------------------------------


def test_0_3_6_table_and_small_gpu_shrink() -> None:
    # 0.3.6: tp>=8 -> 0.82; chunk 8192 // 4 = 2048 and graph limit 4 under 25000 MiB.
    r = sglang_defaults(L4, (0, 3, 6), tp=8)
    _check(r, 0.82, 2048, 4)
    assert r.rule == "0.3.6 TP table"
    # DP attention: dp = tp, chunk halved (8192 // 2), graph limit min(160, 96).
    _check(sglang_defaults(H100, (0, 3, 6), tp=8, dp_attention=True), 0.82, 4096, 96)


def test_0_4_0_table() -> None:
    # 0.4.0 lowers tp>=8 to 0.81; small GPU: chunk 2048, graph limit 8 at every TP.
    _check(sglang_defaults(L4, (0, 4, 0), tp=8), 0.81, 2048, 8)
    # tp 16 -> 0.79, tp 4 -> 0.85, tp 2 -> 0.87
    assert sglang_defaults(H100, (0, 4, 0), tp=16).mem_fraction_static == 0.79
    assert sglang_defaults(H100, (0, 4, 0), tp=4).mem_fraction_static == 0.85
    assert sglang_defaults(H100, (0, 4, 0), tp=2).mem_fraction_static == 0.87


def test_0_4_1_to_0_4_5_small_gpu_limit_by_tp_and_eagle_and_dp() -> None:
    # 0.4.1+: small GPU limit 8 below TP4, 80 from TP4.
    _check(sglang_defaults(RTX4090, (0, 4, 1), tp=2), 0.87, 2048, 8)
    _check(sglang_defaults(RTX4090, (0, 4, 4), tp=4), 0.85, 2048, 80)
    # 0.4.2-0.4.3: EAGLE turns chunked prefill off (-1); 0.4.4 no longer does.
    assert sglang_defaults(H100, (0, 4, 3), speculative="EAGLE").chunked_prefill_size == -1
    assert sglang_defaults(H100, (0, 4, 4), speculative="EAGLE").chunked_prefill_size == 8192
    # DP attention: 0.4.1-0.4.4 halve the chunk (8192 // 2); 0.4.5 divides by dp (8192 // 4).
    assert sglang_defaults(H100, (0, 4, 4), tp=8, dp_attention=True).chunked_prefill_size == 4096
    r = sglang_defaults(H100, (0, 4, 5), tp=8, dp=4, dp_attention=True)
    assert r.chunked_prefill_size == 2048


def test_0_4_6_reserve_above_80gib_and_capture_list() -> None:
    # H200: (143771 - 13*1024) / 143771 = 130459 / 143771 = 0.9074083 (not rounded);
    # the capture list reaches 256 above 81920 MiB with dp == 1.
    r = sglang_defaults(H200, (0, 4, 6), tp=8)
    _check(r, 0.9074083, 8192, 256)
    assert r.reserved_mib == 13312.0
    assert r.cuda_graph_max_bs_source == "capture_list"
    # H100 stays on the table; its capture list ends at 160.
    _check(sglang_defaults(H100, (0, 4, 6), tp=2), 0.87, 8192, 160)
    # with speculative decoding the 0.4.6 list ends at 152 (40, 56, ..., 152)
    assert sglang_defaults(H100, (0, 4, 6), speculative="EAGLE").cuda_graph_max_bs == 152


def test_0_4_7_large_gpu_branches() -> None:
    # H200: min(0.88 + 49152*0.12/143771, (143771 - 18432)/143771)
    #     = min(0.9210252, 0.8717961) = 0.8717961
    r = sglang_defaults(H200, (0, 4, 7))
    _check(r, 0.8717961, 8192, 256)
    assert r.reserved_mib == 18432.0
    # MI300X on ROCm skips the B200 branch: min(0.88 + 49152*0.12/196592, 178160/196592)
    #     = min(0.9100024, 0.9062424) = 0.9062424; 196592 > 180000 -> chunk 16384, list to 512.
    _check(sglang_defaults(MI300X, (0, 4, 7), rocm=True), 0.9062424, 16384, 512)
    # H100 with EAGLE: table 0.88 * 0.95 = 0.836
    assert sglang_defaults(H100, (0, 4, 7), speculative="EAGLE").mem_fraction_static == 0.836
    # TP*PP now: tp 4 x pp 2 = 8 -> 0.81
    assert sglang_defaults(H100, (0, 4, 7), tp=4, pp=2).mem_fraction_static == 0.81


def test_0_4_8_to_0_5_2_reserved_by_class() -> None:
    # H100 TP1: reserved (9.5 + 1/2) GiB = 10240 MiB; 71319 / 81559 = 0.87445 -> 0.874
    r = sglang_defaults(H100, (0, 4, 8))
    _check(r, 0.874, 8192, 160)
    assert (r.reserved_mib, r.rule) == (10240.0, "0.4.8-0.5.2 reserved by class")
    # L4 TP4: (2.8 + 4/10) GiB = 3276.8; 19757.2 / 23034 = 0.85774 -> 0.858; small class 2048/80
    _check(sglang_defaults(L4, (0, 5, 1), tp=4), 0.858, 2048, 80)
    # H200 TP8 + DP attention (dp 8): (12 + 4) GiB + 4 GiB = 20480; 123291/143771 = 0.85755
    # -> 0.858; chunk 8192 // 8 = 1024; capture list to 256 (> 90 GiB).
    _check(sglang_defaults(H200, (0, 4, 10), tp=8, dp=8, dp_attention=True), 0.858, 1024, 256)
    # 0.5.2 STANDALONE: 10240 + 6144 = 16384; 65175 / 81559 = 0.79911 -> 0.799
    assert sglang_defaults(H100, (0, 5, 2), speculative="STANDALONE").mem_fraction_static == 0.799
    # 0.5.1 had no STANDALONE term: +2 GiB like EAGLE -> 12288; 69271/81559 = 0.84933 -> 0.849
    assert sglang_defaults(H100, (0, 5, 1), speculative="STANDALONE").mem_fraction_static == 0.849
    # B200 (> 160000 MiB for the capture list, >= 160 GiB for the chunk): 32 GiB reserve;
    # 150591 / 183359 = 0.82129 -> 0.821; chunk 16384; list to 512.
    _check(sglang_defaults(B200, (0, 5, 2), tp=8), 0.821, 16384, 512)


def test_multimodal_adjustments() -> None:
    # 0.4.9: 0.874 * 0.90 = 0.7866
    r = sglang_defaults(H100, (0, 4, 9), is_multimodal=True)
    assert r.mem_fraction_static == pytest.approx(0.7866, abs=1e-9)
    # 0.4.10+: ViT 32 layers x 1280: ratio 32*1280^2 / (24*1024^2) = 2.08333;
    # factor 0.95 * (1 - 0.1*1.08333) = 0.95 * 0.891667 = 0.847083; 0.874 * 0.847083 = 0.7403508
    r = sglang_defaults(
        H100, (0, 4, 10), is_multimodal=True, vit_num_layers=32, vit_hidden_size=1280
    )
    assert r.mem_fraction_static == pytest.approx(0.7403508, abs=1e-7)
    # a model config without vision_config keeps the value
    r = sglang_defaults(H100, (0, 5, 3), is_multimodal=True, has_vision_config=False)
    assert r.mem_fraction_static == 0.835
    # 0.5.20+ post-capture sizing: 0.98 - 8192 / 81559 = 0.98 - 0.100443 = 0.8795574
    r = sglang_defaults(H100, (0, 5, 20), is_multimodal=True, post_capture_kv_sizing=True)
    assert r.mem_fraction_static == pytest.approx(0.8795574, abs=1e-7)


def test_0_5_3_reserved_from_the_defaults() -> None:
    # B200 TP8: 512 + 1.5*16384 + 2*512 + 8*128 = 27136; 156223/183359 = 0.85200 -> 0.852
    _check(sglang_defaults(B200, (0, 5, 3), tp=8), 0.852, 16384, 512)
    # A100 40GB (< 60 GiB, no 10 GiB floor): 512 + 1.5*4096 + 2*32 + 128 = 6848;
    # 34112 / 40960 = 0.83281 -> 0.833; chunk 4096, limit 32 below TP4
    _check(sglang_defaults(A100_40, (0, 5, 3)), 0.833, 4096, 32)
    # RTX 4090 in 0.5.3 (limit 16 below TP4): 512 + 3072 + 32 + 128 = 3744;
    # 20820 / 24564 = 0.84758 -> 0.848
    _check(sglang_defaults(RTX4090, (0, 5, 3)), 0.848, 2048, 16)
    # 0.5.5 raises the limit to 24: 512 + 3072 + 48 + 128 = 3760; 20804/24564 = 0.84693 -> 0.847
    _check(sglang_defaults(RTX4090, (0, 5, 5)), 0.847, 2048, 24)
    # user chunk -1 uses max_prefill_tokens: 512 + 1.5*16384 + 512 + 128 = 25728;
    # 55831 / 81559 = 0.68455 -> 0.685
    r = sglang_defaults(H100, (0, 5, 3), chunked_prefill_size=-1)
    assert (r.mem_fraction_static, r.chunked_prefill_size) == (0.685, -1)


def test_0_5_3_to_0_5_7_deepseek_nsa() -> None:
    # 0.5.3: NSA forces mem_fraction_static 0.8 and DP attention with dp = tp: 8192 // 8 = 1024
    r = sglang_defaults(H200, (0, 5, 3), tp=8, deepseek_nsa=True, mla=True)
    _check(r, 0.8, 1024, 512)
    # 0.5.4: no forced fraction; 512 + 12288 + 1024 + 1024 = 14848 -> 128923/143771 = 0.897
    _check(sglang_defaults(H200, (0, 5, 4), tp=8, deepseek_nsa=True), 0.897, 1024, 512)
    # 0.5.6: DP attention with the given dp (here 2): 8192 // 2
    assert (
        sglang_defaults(H200, (0, 5, 6), tp=8, dp=2, deepseek_nsa=True).chunked_prefill_size == 4096
    )
    # 0.5.8: nothing forced
    assert sglang_defaults(H200, (0, 5, 8), tp=8, deepseek_nsa=True).chunked_prefill_size == 8192


def test_piecewise_cuda_graph_reserves() -> None:
    # 0.5.4-0.5.5: the flag exists but reserves nothing -> A100 40GB stays 0.833
    assert sglang_defaults(A100_40, (0, 5, 5), prefill_cuda_graph=True).mem_fraction_static == 0.833
    # 0.5.6: + max_tokens // 4 with the 4096 default: 6848 + 1024 = 7872; 33088/40960 = 0.80781
    assert sglang_defaults(A100_40, (0, 5, 6), prefill_cuda_graph=True).mem_fraction_static == 0.808
    # 0.5.7: + chunk // 8 = 512: 7360; 33600 / 40960 = 0.82031 -> 0.82
    assert sglang_defaults(A100_40, (0, 5, 7), prefill_cuda_graph=True).mem_fraction_static == 0.82
    # 0.5.8: 57 graphs (640..1024 by 64) x 8 = 456: 13896; 67663/81559 = 0.82962 -> 0.83
    r = sglang_defaults(H100, (0, 5, 8), prefill_cuda_graph=True)
    assert (r.mem_fraction_static, r.reserved_mib) == (0.83, 13896.0)
    # 0.5.10: on by default, but not with speculative decoding: 13440 + 4096 (EAGLE) = 17536;
    # 64023 / 81559 = 0.78499 -> 0.785
    assert sglang_defaults(H100, (0, 5, 10), speculative="EAGLE").mem_fraction_static == 0.785
    # 0.5.11: speculative decoding keeps it: 13904 + 4096 = 18000; 63559/81559 = 0.77930 -> 0.779
    assert sglang_defaults(H100, (0, 5, 11), speculative="EAGLE").mem_fraction_static == 0.779
    # 0.5.14: no draft term any more: 13904 -> 0.83
    assert sglang_defaults(H100, (0, 5, 14), speculative="EAGLE").mem_fraction_static == 0.83
    # NGRAM never reserved a draft model
    assert sglang_defaults(H100, (0, 5, 9), speculative="NGRAM").mem_fraction_static == 0.835


def test_0_5_15_and_later_graph_backends_pd_deepep() -> None:
    # DeepSeek (MLA) on H200 TP8: 0.5.15 turns the breakable prefill graph off for MLA:
    # 512 + 12288 + 1024 + 1024 = 14848; 128923 / 143771 = 0.89672 -> 0.897
    r = sglang_defaults(H200, (0, 5, 15), tp=8, mla=True)
    assert (r.mem_fraction_static, r.prefill_cuda_graph) == (0.897, False)
    # 0.5.18 keeps it for MLA at a flat 1.5 GiB: 16384; 127387 / 143771 = 0.88604 -> 0.886
    assert sglang_defaults(H200, (0, 5, 18), tp=8, mla=True).mem_fraction_static == 0.886
    # PD decode node: activation max(256 * 1, 2048) * 1.5 = 3072; 512+3072+512+128 = 4224,
    # raised to the 10 GiB floor: 71319 / 81559 = 0.874
    r = sglang_defaults(H100, (0, 5, 15), disaggregation_mode="decode")
    assert r.mem_fraction_static == 0.874
    # DeepEP + DP attention (dp 8) on H200 TP8, 0.5.15: 14848 + 512*8*3 + 512*8*1.5 + 2048
    # = 35328; 108443 / 143771 = 0.75428 -> 0.754; chunk 8192 // 8
    r = sglang_defaults(H200, (0, 5, 15), tp=8, dp=8, dp_attention=True, deepep=True)
    _check(r, 0.754, 1024, 512)


def test_post_capture_floor() -> None:
    # 0.5.16-0.5.17: 512 + 128 = 640 -> 80919 / 81559 = 0.99215 -> 0.992
    assert (
        sglang_defaults(H100, (0, 5, 16), post_capture_kv_sizing=True).mem_fraction_static == 0.992
    )
    # 0.5.18+: 1536 + 128 = 1664 -> 79895 / 81559 = 0.97960 -> 0.98
    r = sglang_defaults(H100, (0, 5, 18), post_capture_kv_sizing=True)
    assert (r.mem_fraction_static, r.rule) == (0.98, "0.5.16+ post-capture floor")


def test_0_5_20_small_gpus_and_fallback() -> None:
    # 4090: 4k chunk, limit 48; 50 prefill graphs (4..4096) x 8 = 400:
    # 512 + 6144 + 96 + 128 + 400 = 7280; 17284 / 24564 = 0.70363 -> 0.704
    _check(sglang_defaults(RTX4090, (0, 5, 20)), 0.704, 4096, 48)
    # TP4: limit 160; 512 + 6144 + 2*160 + 4*128 + 400 = 7888; 16676 / 24564 = 0.67888 -> 0.679
    r = sglang_defaults(RTX4090, (0, 5, 20), tp=4)
    _check(r, 0.679, 4096, 160)
    assert r.reserved_mib == 7888.0
    # no GPU: 0.95 (0.88 before 0.5.20), chunk 4096, limit 160
    _check(sglang_defaults(None, (0, 5, 20)), 0.95, 4096, 160)
    _check(sglang_defaults(None, (0, 5, 19)), 0.88, 4096, 160)


def test_0_5_22_max_running_requests_caps_the_limit() -> None:
    # limit 256 capped at 64: 512 + 12288 + 128 + 128 + 464 = 13520; 68039/81559 = 0.83423
    _check(sglang_defaults(H100, (0, 5, 22), max_running_requests=64), 0.834, 8192, 64)
    # before 0.5.22 the cap does not exist
    assert sglang_defaults(H100, (0, 5, 21), max_running_requests=64).cuda_graph_max_bs == 256
    # Qwen3-VL on Hopper widens it to max_running_requests <= 512 (0.5.20+)
    r = sglang_defaults(
        H100, (0, 5, 20), max_running_requests=400, qwen3_vl_hopper=True, is_multimodal=True
    )
    assert r.cuda_graph_max_bs == 400


def test_rocm_aiter_factor() -> None:
    # MI300X 0.5.5, TP1: 512 + 1.5*16384 + 2*512 + 128 = 26240; 170352/196592 = 0.86652 -> 0.867;
    # aiter (ROCm default for MHA) with context > 8192: 0.867 * 0.85 = 0.73695
    r = sglang_defaults(MI300X, (0, 5, 5), rocm=True, model_context_len=131072)
    assert r.mem_fraction_static == pytest.approx(0.73695, abs=1e-9)
    # context <= 8192 or before 0.5.5: no factor
    assert (
        sglang_defaults(MI300X, (0, 5, 5), rocm=True, model_context_len=8192).mem_fraction_static
        == 0.867
    )
    assert (
        sglang_defaults(MI300X, (0, 5, 4), rocm=True, model_context_len=131072).mem_fraction_static
        == 0.867
    )
    # the factor also scales a given value
    r = sglang_defaults(
        MI300X, (0, 5, 8), rocm=True, model_context_len=32768, mem_fraction_static=0.9
    )
    assert r.mem_fraction_static == pytest.approx(0.765, abs=1e-12)


def test_releases_that_fail_or_are_not_modelled() -> None:
    with pytest.raises(ValueError):
        sglang_defaults(H100, (0, 3, 5))
    for v in ((0, 3, 6), (0, 4, 0), (0, 4, 6)):  # these need nvidia-smi / a GPU
        with pytest.raises(ValueError):
            sglang_defaults(None, v)
    with pytest.raises(ValueError):  # 0.4.5-0.5.1 assert dp > 1 under DP attention
        sglang_defaults(H100, (0, 5, 1), tp=8, dp_attention=True)
    with pytest.raises(ValueError):  # 0.4.5-0.4.9 assert chunk % page_size == 0
        sglang_defaults(H100, (0, 4, 8), chunked_prefill_size=1000, page_size=64)
    # newer than the last release read: the newest rules, flagged
    assert sglang_defaults(H100, (0, 6, 0)).notes[0].startswith("release newer than")


# --------------------------------------------------------------------------------------------
# GPU memory as nvidia-smi reports it
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "smi"),
    [
        ("H100", 81559),
        ("H100-PCIe-80GB", 81559),
        ("H200", 143771),
        ("H20", 97871),
        ("B200", 183359),
        ("A100-SXM-80GB", 81920),
        ("A100-SXM-40GB", 40960),
        ("L4", 23034),
        ("L40S", 46068),
        ("A10G", 23028),
        ("RTX-4090", 24564),
        ("MI300X", 196592),
    ],
)
def test_memory_smi_mib(name: str, smi: int) -> None:
    gpu = get_gpu(name)
    assert gpu.memory_smi_mib == smi
    assert sglang_gpu_mem_mib(gpu) == float(smi)
    assert gpu.memory_smi_source


@pytest.mark.parametrize("gpu", list_gpus(), ids=lambda g: g.name)
def test_smi_total_is_above_the_cuda_total_by_the_driver_reserve(gpu: object) -> None:
    from kvscope.specs.hardware import GPUSpec

    assert isinstance(gpu, GPUSpec)
    if gpu.memory_smi_mib is None:
        assert "not verified" in gpu.memory_smi_source
        return
    gap = gpu.memory_smi_mib - gpu.memory_bytes / 2**20
    if gpu.vendor == "amd":
        assert gap == 0  # rocm-smi / rocminfo total = HIP total on the MI300X
    else:
        # NVIDIA keeps a driver reserve out of the CUDA total: 300-800 MiB on the 24-192 GB
        # cards; less on small and older ones (public prints): RTX 2080 Ti 252 MiB, T4 265,
        # V100 32 GB 274, V100 16 GB 224 (a torch 1.10 print).
        assert 200 <= gap <= 800


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

RELEASES = [
    (0, 3, 6), (0, 4, 0), (0, 4, 1), (0, 4, 3), (0, 4, 5), (0, 4, 6), (0, 4, 7), (0, 4, 8),
    (0, 4, 9), (0, 4, 10), (0, 5, 1), (0, 5, 2), (0, 5, 3), (0, 5, 5), (0, 5, 6), (0, 5, 8),
    (0, 5, 10), (0, 5, 12), (0, 5, 14), (0, 5, 15), (0, 5, 17), (0, 5, 18), (0, 5, 20),
    (0, 5, 23),
]  # fmt: skip
gpu_mem = st.integers(min_value=16 * 1024, max_value=300_000).map(float)
release = st.sampled_from(RELEASES)
spec = st.sampled_from([None, "EAGLE", "STANDALONE", "NGRAM"])


@settings(max_examples=300, deadline=None)
@given(
    gpu_mem, release, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]), spec, st.booleans()
)
def test_fraction_is_a_fraction(
    mem: float, v: tuple[int, int, int], tp: int, pp: int, sp: str | None, mm: bool
) -> None:
    r = sglang_defaults(mem, v, tp=tp, pp=pp, speculative=sp, is_multimodal=mm)
    assert 0.0 < r.mem_fraction_static < 1.0
    assert r.chunked_prefill_size in (-1, 2048, 4096, 8192, 16384)
    assert r.cuda_graph_max_bs > 0


@settings(max_examples=300, deadline=None)
@given(gpu_mem, release, spec, st.booleans())
def test_larger_tp_never_raises_the_fraction_within_a_branch(
    mem: float, v: tuple[int, int, int], sp: str | None, mla: bool
) -> None:
    results = [sglang_defaults(mem, v, tp=tp, speculative=sp, mla=mla) for tp in (1, 2, 4, 8, 16)]
    for small, large in itertools.pairwise(results):
        if small.rule == large.rule:
            assert large.mem_fraction_static <= small.mem_fraction_static


@settings(max_examples=200, deadline=None)
@given(
    gpu_mem,
    st.sampled_from([v for v in RELEASES if v >= (0, 4, 4)]),
    st.sampled_from([512, 1024, 4096, 32768]),
    st.integers(min_value=1, max_value=1024),
    st.floats(min_value=0.3, max_value=0.95),
)
def test_given_values_pass_through(
    mem: float, v: tuple[int, int, int], chunk: int, bs: int, mfs: float
) -> None:
    r = sglang_defaults(
        mem, v, chunked_prefill_size=chunk, cuda_graph_max_bs=bs, mem_fraction_static=mfs
    )
    assert (r.chunked_prefill_size, r.cuda_graph_max_bs, r.mem_fraction_static) == (chunk, bs, mfs)
    assert r.rule == "given"
