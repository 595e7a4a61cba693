"""Two independent vLLM V0 starts of Llama 3 8B on one MI300X leave the same KV shortfall.

One start is from AUGMXNT/MI300-testing (ROCm build 0.6.4.dev9, 1,262,736 tokens), the other
from the ROCm blog "Enhancing vLLM Inference on AMD GPUs" (a Dockerfile.rocm build of August
2024, 78,897 blocks of 16). Same model, same defaults (0.9 of the device, 8,192-token context),
different hosts, authors and builds. Both sized the pool as the device budget less the
profiled peak read from ``mem_get_info`` (vllm/worker/worker.py of 0.5.5 to 0.6.4), so memory
the ROCm libraries hold is charged to it; the planner keeps only its 0.25 GiB outside torch.
The pool is therefore planned high by the same ~2.1 GiB in both, of which hipBLASLt's
kernel libraries are 1.72 GiB (the with/without pair of benchmarks/RESULTS.md, "Issue 17
rows: ROCm V0 memory outside torch"). A rule that sized ROCm's memory outside torch would
move both surpluses together and break the bounds here; a change to the torch side or the
KV layout of one start alone would break the agreement.
"""

from __future__ import annotations

import pytest

from kvscope.specs.hardware import GIB

from .log_cases import load_cases

CASES = {c.id: c for c in load_cases()}

INDEPENDENT_TP1 = ("vllm-mi300x-llama3-8b-tp1", "vllm-mi300x-llama3-8b-blog-auto")
#: What the HIP runtime may still hold beyond the planner's figures, GiB a GPU.
REMAINDER_GIB = 0.5


def _surplus_gib(row_id: str) -> float:
    case = CASES[row_id]
    plan = case.plan()
    logged_blocks = int(case.row["kv_tokens"]) // plan.block_size
    return (plan.num_gpu_blocks - logged_blocks) * plan.block_bytes / GIB


@pytest.mark.parametrize("row_id", INDEPENDENT_TP1)
def test_what_is_left_beyond_hipblaslt_is_small_and_positive(row_id: str) -> None:
    assert 0.0 < _surplus_gib(row_id) < REMAINDER_GIB


def test_two_hosts_and_builds_agree_on_the_surplus() -> None:
    first, second = (_surplus_gib(r) for r in INDEPENDENT_TP1)
    assert first == pytest.approx(second, abs=0.1)


def test_fp8_kv_start_on_the_blog_host_holds_twice_the_tokens() -> None:
    # Same profiled peak, half the bytes a token: the logged counts are 2:1, and so are the
    # plans, up to the one block that flooring the budget by a block size can add.
    auto, fp8 = CASES["vllm-mi300x-llama3-8b-blog-auto"], CASES["vllm-mi300x-llama3-8b-blog-fp8kv"]
    assert int(fp8.row["kv_tokens"]) == 2 * int(auto.row["kv_tokens"])
    plan_auto, plan_fp8 = auto.plan(), fp8.plan()
    assert 0 <= plan_fp8.kv_tokens - 2 * plan_auto.kv_tokens <= plan_fp8.block_size
