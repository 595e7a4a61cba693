"""``--cold-compile`` means in ``simulate`` what it means in ``plan``: the simulated pool is
the planned pool of a start whose torch.compile cache is cold, and SGLang refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process, simulated_and_planned_blocks

#: A small token budget, where the compile's benchmark tensors outgrow the forward pass's peak
#: (kvscope.plan.compile_peak), so the flag moves the pool.
DEPLOY = [
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "RTX-4090-48GB",
    "--engine-version",
    "0.29.0",
    "--max-num-batched-tokens",
    "512",
    "--max-num-seqs",
    "8",
    "--max-model-len",
    "4096",
    "--gpu-memory-utilization",
    "0.75",
]
WORKLOAD = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]


def _blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, int]:
    out = tmp_path / ("cold" if extra else "warm")
    return simulated_and_planned_blocks(capsys, out, DEPLOY, *extra)


def test_simulate_takes_the_planned_pool_of_a_cold_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warm_sim, warm_plan = _blocks(tmp_path, capsys)
    cold_sim, cold_plan = _blocks(tmp_path, capsys, "--cold-compile")
    assert (warm_sim, cold_sim) == (warm_plan, cold_plan)
    # the compile peak's excess over the forward pass's (~0.8 GiB, 2 MiB a block) leaves the pool
    assert 300 < warm_sim - cold_sim < 700


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_sglang_refuses_cold_compile_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--engine", "sglang", "--cold-compile", *WORKLOAD]
    if command == "tune":
        argv += ["--slo", "ttft_p99=2", "--out", str(tmp_path / "t")]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--cold-compile")
