"""`kvscope plan` with speculative decoding: the shared flags, JSON record, one-line refusals."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_helpers import run_kvscope

SRC = Path(__file__).resolve().parents[2] / "src"
BASE = ("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kvscope("plan", *args, env={"PYTHONPATH": str(SRC)}, timeout=60)


@pytest.mark.integration
def test_json_carries_the_drafter() -> None:
    proc = run(
        *BASE, "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}', "--json"
    )
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)["speculative"]
    assert spec["method"] == "mtp" and spec["mtp_layers"] == 1 and spec["drafter_kv_layers"] == 1
    assert spec["lookahead_tokens_per_request"] == 2


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--speculative-config", '{"method":"medusa2","num_speculative_tokens":3}'), "medusa2"),
        (("--speculative-algorithm", "NEXTN"), "SGLang's flag"),
        (("--engine", "sglang", "--speculative-algorithm", "FOO"), "unknown algorithm"),
        (("--speculative-num-steps", "3"), "needs --speculative-algorithm"),
    ],
)
def test_bad_speculative_flags_exit_2_with_one_line(args: tuple[str, ...], needle: str) -> None:
    proc = run(*BASE, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert needle in lines[0]


def test_plan_simulate_and_tune_share_the_flag() -> None:
    from kvscope.cli import plan, simulate, spec_options, tune

    for mod in (plan, simulate, tune):
        fn = getattr(mod, mod.__name__.rsplit(".", 1)[1])
        assert fn.__annotations__["speculative_config"] == "SpeculativeConfig", mod
    assert spec_options.SpeculativeConfig is not None
