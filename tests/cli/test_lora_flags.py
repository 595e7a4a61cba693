"""``--enable-lora`` / ``--max-lora-rank`` / ``--max-loras`` mean in ``simulate`` what they mean
in ``plan`` (vLLM's adapter slots join the weights, so the pool shrinks), and SGLang refuses them
in every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process, simulated_and_planned_blocks

DEPLOY = ["--model", "llama-3.1-8b", "--gpu", "L40S", "--engine-version", "0.19.0"]
DEPLOY += ["--max-model-len", "4096"]
LORA = ["--enable-lora", "--max-lora-rank", "64", "--max-loras", "4"]
WORKLOAD = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]


def test_simulate_takes_the_planned_pool_with_lora_slots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain_sim, plain_plan = simulated_and_planned_blocks(capsys, tmp_path / "plain", DEPLOY)
    lora_sim, lora_plan = simulated_and_planned_blocks(capsys, tmp_path / "lora", DEPLOY, *LORA)
    assert (plain_sim, lora_sim) == (plain_plan, lora_plan)
    # four rank-64 slots on every Linear of a Llama 8B are over a GiB (2 MiB a block)
    assert lora_sim < plain_sim - 500


def test_max_lora_rank_without_enable_lora_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vLLM ignores --max-lora-rank unless --enable-lora is given
    plain = simulated_and_planned_blocks(capsys, tmp_path / "a", DEPLOY)
    ranked = simulated_and_planned_blocks(capsys, tmp_path / "b", DEPLOY, "--max-lora-rank", "64")
    assert plain == ranked


@pytest.mark.parametrize("command", ["plan", "simulate", "tune"])
def test_sglang_refuses_lora_slots_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--engine", "sglang", "--enable-lora"]
    argv += ["--model", "llama-3.1-8b", "--gpu", "H100"] if command == "plan" else WORKLOAD
    if command == "tune":
        argv += ["--slo", "ttft_p99=2", "--out", str(tmp_path / "t")]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--enable-lora")


@pytest.mark.parametrize("flag", ["--max-lora-rank", "--max-loras"])
def test_a_zero_slot_count_or_rank_is_one_line(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--enable-lora", flag, "0"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, flag)
