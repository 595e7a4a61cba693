"""vLLM's LoRA adapter slots (:mod:`kvscope.plan.vllm_lora`) against the "Model loading took"
of real ``--enable-lora`` starts (Unsloth's GRPO notebooks, tests/plan/data)."""

from __future__ import annotations

import dataclasses

import pytest

from .log_cases import evaluate, load_cases

LORA_ROWS = [c for c in load_cases() if c.row.get("max_lora_rank")]


def test_the_lora_starts_are_in_the_data() -> None:
    assert len(LORA_ROWS) >= 5
    assert {c.row["version"][:4] for c in LORA_ROWS} >= {"0.8.", "0.10", "0.11"}


@pytest.mark.parametrize("case", LORA_ROWS, ids=lambda c: c.id)
def test_slots_bring_the_weights_to_the_log(case) -> None:  # type: ignore[no-untyped-def]
    with_slots = evaluate(case)
    assert with_slots.weights_err is not None and with_slots.weights_err < 0.02
    row = {**case.row, "max_lora_rank": "", "max_loras": ""}
    without = evaluate(dataclasses.replace(case, row=row))
    # the slots are a real share of these loads: the plan without them is short of the log
    assert without.predicted_weights_gib < with_slots.predicted_weights_gib - 0.02
