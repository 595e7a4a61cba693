"""``--gpu-memory-in-use`` (GiB other processes hold at start) means the same in ``plan``,
``simulate`` and ``tune``: bad values are one line and exit 2 in each, the simulated pool is
the planned pool, and a vLLM release that refuses such a start is refused with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

DEPLOY = ["--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "8192"]
WORKLOAD = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]


@pytest.mark.parametrize(
    ("value", "needle"),
    [("nan", "finite"), ("inf", "finite"), ("-1", ">= 0"), ("abc", "number"), ("80", "79.19 GiB")],
)
def test_plan_refuses_a_bad_figure_in_one_line(
    value: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _o, err = run_in_process(["plan", *DEPLOY, f"--gpu-memory-in-use={value}"], capsys)
    one_error_line(code, err, "--gpu-memory-in-use", needle)


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_simulate_and_tune_refuse_a_bad_figure_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, *WORKLOAD, "--gpu-memory-in-use=-1"]
    if command == "tune":
        argv += ["--slo", "ttft_p99=2", "--out", str(tmp_path / "t")]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--gpu-memory-in-use", ">= 0")


def test_llama_cpp_refuses_the_figure(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--engine", "llama.cpp", *WORKLOAD, "--gpu-memory-in-use", "2"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--gpu-memory-in-use", "vllm and sglang")


def test_plan_says_vllm_refuses_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", *DEPLOY, "--engine-version", "0.19.0", "--gpu-memory-in-use", "20"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(
        code, err, "refuses to start", "less than desired GPU memory utilization",
        "Lower --gpu-memory-utilization",
    )  # fmt: skip


@pytest.mark.parametrize("version", ["0.8.0", "0.6.4"])
def test_simulate_takes_the_planned_pool_beside_others_memory(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = {}
    for in_use in ("0", "10"):
        flags = [*DEPLOY, "--engine-version", version, "--gpu-memory-in-use", in_use]
        out = tmp_path / in_use
        code, _o, err = run_in_process(["simulate", *flags, *WORKLOAD, "--out", str(out)], capsys)
        assert code == 0, err
        sim = json.loads((out / "summary.json").read_text())["config"]["pool"]["num_gpu_blocks"]
        code, plan_out, err = run_in_process(["plan", *flags, "--json"], capsys)
        assert code == 0, err
        doc = json.loads(plan_out)
        assert sim == doc["num_gpu_blocks"] and doc["gpu_memory_in_use_gib"] == float(in_use)
        blocks[in_use] = sim
    # these releases charge the 10 GiB to the cache: 128 KiB a token, 16-token blocks
    assert blocks["0"] - blocks["10"] == pytest.approx(10 * 2**30 / (16 * 131072), abs=1)


def test_sweep_takes_the_flag_as_typed() -> None:
    from kvscope.errors import KvscopeError
    from kvscope.sim import SimConfig

    assert SimConfig().with_flag("--gpu-memory-in-use", "5").gpu_memory_in_use_gib == 5.0
    with pytest.raises(KvscopeError, match="--gpu-memory-in-use"):
        SimConfig().with_flag("--gpu-memory-in-use", "nan")
