"""``--language-model-only`` means the same in ``plan``, ``simulate`` and ``tune``: the simulated
pool is the planned one, and an engine or release without the flag is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

QWEN36 = str(Path(__file__).parents[1] / "plan" / "data" / "configs" / "qwen3.6-35b-a3b.json")
DEPLOY = ["--model", QWEN36, "--gpu", "H100", "--max-model-len", "32768"]
WORKLOAD = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]


def test_simulate_takes_the_planned_text_only_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = {}
    for flag in ([], ["--language-model-only"]):
        flags = [*DEPLOY, "--engine-version", "0.24.0", *flag]
        out = tmp_path / ("lmo" if flag else "full")
        code, _o, err = run_in_process(["simulate", *flags, *WORKLOAD, "--out", str(out)], capsys)
        assert code == 0, err
        sim = json.loads((out / "summary.json").read_text())["config"]["pool"]["num_gpu_blocks"]
        code, plan_out, err = run_in_process(["plan", *flags, "--json"], capsys)
        assert code == 0, err
        assert sim == json.loads(plan_out)["num_gpu_blocks"]
        blocks[bool(flag)] = sim
    assert blocks[True] > blocks[False]


@pytest.mark.parametrize("command", ["plan", "simulate", "tune"])
@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--engine-version", "0.16.0"], "joined in 0.17.0"), (["--engine", "sglang"], "vLLM only")],
)
def test_refused_in_one_line_by_every_command(
    command: str, flags: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, *DEPLOY, *flags, "--language-model-only"]
    if command != "plan":
        argv += [*WORKLOAD, "--out", str(tmp_path / "o")]
    if command == "tune":
        argv += ["--slo", "ttft_p99=2"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--language-model-only", needle)


@pytest.mark.parametrize("command", ["plan", "simulate", "tune"])
def test_limit_mm_per_prompt_is_parsed_once_for_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, *DEPLOY, "--limit-mm-per-prompt", '{"image": -1}']
    if command != "plan":
        argv += [*WORKLOAD, "--out", str(tmp_path / "o")]
    if command == "tune":
        argv += ["--slo", "ttft_p99=2"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--limit-mm-per-prompt", "whole number")


def test_every_modality_at_zero_plans_as_language_model_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = []
    for flags in (
        ["--language-model-only"],
        ["--limit-mm-per-prompt", '{"image": 0, "video": 0}'],
    ):
        code, out, err = run_in_process(
            ["plan", *DEPLOY, "--engine-version", "0.24.0", *flags, "--json"], capsys
        )
        assert code == 0, err
        docs.append(json.loads(out))
    assert docs[0]["kv_tokens"] == docs[1]["kv_tokens"]
    assert docs[0]["weights_gib"] == docs[1]["weights_gib"]
