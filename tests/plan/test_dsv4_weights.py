"""DeepSeek V4 tensors the engines hold wider than the generic rule (plan/dsv4_weights.py).

Pinned to logged weights: vLLM 0.30.1 / 0.31.1 on 8x H100 (TP8 + EP) log "Model loading took
19.79 GiB" for DeepSeek-V4-Flash-0731 (tant2tls/Deepseek-serving reports at 84d0431), stock
vLLM 0.25.0 on 2x RTX PRO 6000 logs 75.64 GiB for V4-Flash at TP2 (rows of
``engine_logs*.csv``); the generic rule was 0.4 GiB short on every rank whatever the TP.
"""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.plan.dsv4_weights import dsv4_wide_param_bytes
from kvscope.specs.hardware import GIB
from kvscope.specs.quant import NONE
from kvscope.specs.registry import load_model

from .log_cases import load_cases

CASES = {c.id: c for c in load_cases()}

#: Rows whose log prints the weights of a V4 start without drafter weights of its own.
LOGGED_WEIGHTS = (
    "tant2tls-v4flash0731-h100-tp8-0.30",
    "tant2tls-v4flash0731-h100-tp8-0.31",
    "ghlog-2xrtxpro6000-v4flash-1m-mtp2-0.25",
)


@pytest.mark.parametrize("case_id", LOGGED_WEIGHTS)
def test_v4_weights_within_half_a_percent_of_the_log(case_id: str) -> None:
    case = CASES[case_id]
    logged = case.num("weights_gib")
    assert logged is not None
    planned = case.plan().weights_gib
    # Without the wide tensors the plan was 2.1 % (TP8) and 1.0 % (TP2) short.
    assert planned == pytest.approx(logged, rel=0.005)


def test_wide_tensors_are_replicated_and_absent_elsewhere() -> None:
    flash = load_model("deepseek-ai/DeepSeek-V4-Flash")
    layers = tuple(range(flash.num_layers))
    wide = dsv4_wide_param_bytes(flash, layers, last_stage=True)
    # 0.29 GiB of bf16 compressor / weights_proj at 1 byte more than FP8, 0.06 GiB of
    # float32 mixers at 2 bytes more than bf16: 0.35 GiB on every rank.
    assert 0.34 < wide / GIB < 0.36
    # A pipeline stage holds its own layers' share; the output mixer sits on the last.
    first = dsv4_wide_param_bytes(flash, layers[:22], last_stage=False)
    last = dsv4_wide_param_bytes(flash, layers[22:], last_stage=True)
    assert first + last == pytest.approx(wide)
    # An unquantized V4 keeps its projections at the model dtype already: mixers only.
    bf16 = dataclasses.replace(flash, quantization=NONE)
    assert 0.06 < dsv4_wide_param_bytes(bf16, layers, True) / GIB < 0.07
    assert dsv4_wide_param_bytes(load_model("deepseek-ai/DeepSeek-V3"), (0, 1), True) == 0.0
