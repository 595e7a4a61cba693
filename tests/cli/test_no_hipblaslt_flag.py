"""``--no-hipblaslt`` means the same in ``plan``, ``simulate`` and ``tune``: on an AMD GPU the
simulated pool is the planned pool without hipBLASLt's libraries (kvscope.plan.rocm_blas),
and on a CUDA part each command refuses it in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_in_process, simulated_and_planned_blocks

DEPLOY = [
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "MI300X-192GB",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "8",
]
WORKLOAD = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]


def _blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, int]:
    out = tmp_path / ("rocblas" if extra else "hipblaslt")
    return simulated_and_planned_blocks(capsys, out, DEPLOY, *extra)


def test_simulate_takes_the_planned_pool_without_hipblaslt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_sim, on_plan = _blocks(tmp_path, capsys)
    off_sim, off_plan = _blocks(tmp_path, capsys, "--no-hipblaslt")
    assert (on_sim, off_sim) == (on_plan, off_plan)
    # 1.72 GiB of libraries at 2 MiB a block (Llama 3.1 8B, 16 tokens a block, bf16)
    assert off_sim - on_sim == pytest.approx(1.72 * 1024 / 2, abs=1)


@pytest.mark.parametrize("command", ["plan", "simulate", "tune"])
def test_a_cuda_gpu_refuses_no_hipblaslt_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--model", "llama-3.1-8b", "--gpu", "H100", "--no-hipblaslt"]
    if command != "plan":
        argv += WORKLOAD
    if command == "tune":
        argv += ["--slo", "ttft_p99=2"]
    if command != "plan":
        argv += ["--out", str(tmp_path / command)]
    code, _o, err = run_in_process(argv, capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--no-hipblaslt" in lines[0]
