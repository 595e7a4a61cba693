"""``--enable-extensible-kv-cache/--no-enable-extensible-kv-cache`` is one flag of ``plan``,
``simulate`` and ``tune``: refused in one line before vLLM 0.34.0 and for SGLang (exit 2); at
0.34.0 it picks the sizing path the plan, its ``vllm serve`` line and the simulated pool follow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]
WL = ["--arrival", "poisson:rate=20", "--prompt-len", "300", "--output-len", "40"]
WL += ["--num-requests", "30", "--seed", "2"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--engine-version", "0.33.0", "--enable-extensible-kv-cache"], "new in vLLM 0.34.0"),
        (["--engine", "sglang", "--no-enable-extensible-kv-cache"], "SGLang has no such flag"),
    ],
)
def test_plan_refusals_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, _, err = run_in_process([*PLAN, *extra], capsys)
    one_error_line(code, err, needle)


def test_plan_follows_the_path(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = {}
    for flag in ("--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache"):
        argv = [*PLAN, "--engine-version", "0.34.0", flag, "--json"]
        code, out, err = run_in_process(argv, capsys)
        assert code == 0, err
        doc = json.loads(out)
        memory = doc.get("memory", doc)
        blocks[flag] = memory["num_gpu_blocks"]
        assert flag in out  # the printed `vllm serve` line keeps it
    assert blocks["--enable-extensible-kv-cache"] > blocks["--no-enable-extensible-kv-cache"]


def test_simulate_and_tune_take_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    caps = []
    for i, flag in enumerate(("--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache")):
        argv = ["simulate", *WL, "--engine-version", "0.34.0", flag, "--json"]
        code, out, err = run_in_process([*argv, "--out", str(tmp_path / f"r{i}")], capsys)
        assert code == 0, err
        caps.append(json.loads(out)["kv_blocks_capacity"])
    assert caps[0] > caps[1]
    argv = ["simulate", *WL, "--engine-version", "0.30.0", "--no-enable-extensible-kv-cache"]
    code, _, err = run_in_process([*argv, "--out", str(tmp_path / "old")], capsys)
    one_error_line(code, err, "new in vLLM 0.34.0")
    space = tmp_path / "space.yaml"
    space.write_text("tp: [1]\ndp: [1]\n")
    argv = ["tune", *WL, "--slo", "ttft_p99=2", "--space", str(space), "--max-gpus", "1"]
    argv += ["--out", str(tmp_path / "out"), "--engine", "sglang", "--enable-extensible-kv-cache"]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, "SGLang has no such flag")
    assert not (tmp_path / "out").exists()
