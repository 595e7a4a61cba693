"""vLLM's own attention-backend pick (:mod:`kvscope.plan.vllm_auto_backend`): FlashAttention
refuses an fp8 KV cache off Hopper, so FlashInfer runs and its workspace enters the CUDA-graph
estimate. Pinned to the selection code in the unpacked wheels and to two logged start-ups."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.vllm_auto_backend import auto_attention_backend
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import load_cases, offline_hub

GIB = 1 << 30
#: club-3090 #612 / #652: Qwen3.6-35B-A3B NVFP4 on one RTX 5090, vLLM 0.24.0, fp8 KV cache,
#: "Available KV cache memory" as logged.
CLUB_ROWS = {
    "club3090-612-5090-qwen36-35b-nvfp4": 5.98,
    "club3090-652-5090-qwen36-35b-nvfp4": 6.01,
}
#: Unpacked vLLM wheels (this machine's /tmp; skipped where absent).
WHEELS = ("/tmp/vllm0.22.0", "/tmp/vllm0.23.0", "/tmp/vllm025", "/tmp/vllm0.27.0")


def test_fp8_cache_off_hopper_runs_flashinfer() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    v = (0, 24, 0)
    for gpu in ("RTX-5090", "RTX-PRO-6000-Blackwell-Server-96GB", "L40S", "A100"):
        assert auto_attention_backend(llama, get_gpu(gpu), v, "fp8") == "FLASHINFER", gpu
        assert auto_attention_backend(llama, get_gpu(gpu), v, "bfloat16") is None, gpu
    h100 = get_gpu("H100")
    # FlashAttention 3 takes fp8 / fp8_e4m3 on SM90, and no other quantized cache
    assert auto_attention_backend(llama, h100, v, "fp8") is None
    assert auto_attention_backend(llama, h100, v, "fp8_e4m3") is None
    assert auto_attention_backend(llama, h100, v, "fp8_e5m2") == "FLASHINFER"


def test_what_the_rule_leaves_alone() -> None:
    llama, rtx = load_model("meta-llama/Llama-3.1-8B"), get_gpu("RTX-5090")
    assert auto_attention_backend(llama, get_gpu("B200"), (0, 24, 0), "fp8") is None  # 10.x
    assert auto_attention_backend(llama, rtx, (0, 21, 0), "fp8") is None  # not read
    # gpt-oss's sinks: FlashInfer takes them on SM100's TRT-LLM path only -> TRITON_ATTN
    assert auto_attention_backend(load_model("openai/gpt-oss-20b"), rtx, (0, 24, 0), "fp8") is None
    mla = load_model("deepseek-ai/DeepSeek-V2-Lite")
    assert auto_attention_backend(mla, rtx, (0, 24, 0), "fp8") is None


@pytest.mark.parametrize("root", WHEELS)
def test_selection_code_in_the_wheels(root: str) -> None:
    """Differential check against the engine's own files: off 10.x FLASH_ATTN is tried before
    FLASHINFER, and FlashAttention's fp8 check needs FA3 on the 9.x family."""
    cuda, fa = Path(root, "vllm/platforms/cuda.py"), Path(root, "vllm/v1/attention/backends")
    if not cuda.exists():
        pytest.skip(f"vLLM wheel not unpacked at {root}")
    text = cuda.read_text()
    body = text[text.index("def _get_backend_priorities") :]
    body = body[: body.index("\ndef ", 1)]
    rest = body[body.rindex("device_capability.major == 10") :]  # the non-MLA branch
    other = rest[rest.index("else:") :]
    order = re.findall(r"AttentionBackendEnum\.(\w+)", other)[:3]
    assert order == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]
    fa_text = (fa / "flash_attn.py").read_text()
    check = fa_text[fa_text.index("def supports_kv_cache_dtype") :][:900]
    if "flash_attn_supports_kv_cache_dtype" in check:  # 0.27: the check moved to fa_utils.py
        helper = (fa / "fa_utils.py").read_text()
        check = helper[helper.index("def flash_attn_supports_kv_cache_dtype") :][:900]
    assert "== 3" in check and "is_device_capability_family(90)" in check


def test_published_starts_land_with_the_workspace() -> None:
    """The two logged boots: planned "Available KV cache memory" within 3 % of the log (6.31
    GiB, +5 %, without FlashInfer's 394 MiB workspace in the first FULL graph sample; M-RoPE's
    rotary folds, kvscope.plan.mrope_buffers, hold 0.09 GiB more of the budget and put the plan
    0.13-0.16 GiB under the logged pools, whose starts do not log their weights)."""
    with offline_hub():
        cases = {c.id: c for c in load_cases()}
        for row_id, logged in CLUB_ROWS.items():
            plan = cases[row_id].plan()
            assert plan.kv_cache_gib == pytest.approx(logged, rel=0.03), row_id
            assert plan.cudagraph_gib > 394 / 1024


def test_the_workspace_is_the_difference_to_a_bf16_cache() -> None:
    llama, rtx = load_model("meta-llama/Llama-3.1-8B"), get_gpu("RTX-5090")
    fp8 = plan_memory(
        llama, rtx, Parallelism(), EngineConfig(engine_version="0.22.0", kv_cache_dtype="fp8")
    )
    bf16 = plan_memory(llama, rtx, Parallelism(), EngineConfig(engine_version="0.22.0"))
    assert fp8.cudagraph_gib - bf16.cudagraph_gib == pytest.approx(394 / 1024)
    named = EngineConfig(
        engine_version="0.22.0", kv_cache_dtype="fp8", attention_backend="FLASHINFER"
    )
    assert plan_memory(llama, rtx, Parallelism(), named).cudagraph_gib == pytest.approx(
        fp8.cudagraph_gib
    )
