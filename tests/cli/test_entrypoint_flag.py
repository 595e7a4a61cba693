"""``--entrypoint serve|offline`` means the same in ``plan``, ``simulate`` and ``tune``: vLLM's
offline ``LLM()`` class takes a larger default token budget than ``vllm serve``
(kvscope.plan.vllm_batch_defaults), so its profiling pass leaves fewer KV blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

MODEL = ["--model", "meta-llama/Llama-3.1-8B"]
WORKLOAD = ["--arrival", "poisson:rate=5", "--prompt-len", "200", "--output-len", "20"]
WORKLOAD += ["--num-requests", "20", "--seed", "1"]
SIM = ["simulate", *MODEL, "--gpu", "H100", *WORKLOAD]


def test_simulate_sizes_the_pool_for_the_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = {}
    for entry in ("serve", "offline"):
        code, out, err = run_in_process([*SIM, "--json", "--entrypoint", entry], capsys)
        assert code == 0, err
        blocks[entry] = json.loads(out)["kv_blocks_capacity"]
    assert blocks["offline"] < blocks["serve"]


@pytest.mark.parametrize("command", ["plan", "simulate", "tune"])
def test_an_unknown_entry_point_is_one_line(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = {
        "plan": ["plan", *MODEL, "--gpu", "H100"],
        "simulate": SIM,
        "tune": ["tune", *WORKLOAD, *MODEL, "--slo", "ttft_p99=2", "--out", str(tmp_path)],
    }[command]
    code, _, err = run_in_process([*args, "--entrypoint", "server"], capsys)
    one_error_line(code, err, "--entrypoint must be serve or offline")
