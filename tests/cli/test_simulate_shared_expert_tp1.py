"""``simulate --shared-expert-tp1`` (SGLang 0.5.12+'s ``SGLANG_SHARED_EXPERT_TP1=1``) reaches the
simulated engine's pool: DeepSeek-V2-Lite at TP2 holds its two shared experts whole on each GPU,
so fewer KV blocks fit; vLLM refuses the switch in one line."""

from __future__ import annotations

import json

import pytest

from cli_helpers import one_error_line, run_in_process

WL = ["--arrival", "poisson:rate=5", "--prompt-len", "300", "--output-len", "20"]
WL += ["--num-requests", "20", "--seed", "2"]
DEPLOY = ["--model", "deepseek-ai/DeepSeek-V2-Lite", "--gpu", "L4-24GB", "--tp", "2"]


def test_the_switch_shrinks_the_simulated_pool(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *WL, *DEPLOY, "--engine", "sglang", "--engine-version", "0.5.12", "--json"]
    runs = [run_in_process(a, capsys) for a in (argv, [*argv, "--shared-expert-tp1"])]
    assert all(code == 0 for code, _, _ in runs), runs[1][2]
    off, on = (json.loads(out)["kv_blocks_capacity"] for _, out, _ in runs)
    assert on < off


def test_vllm_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(["simulate", *WL, *DEPLOY, "--shared-expert-tp1"], capsys)
    one_error_line(code, err, "--shared-expert-tp1 is SGLang's")
