"""``--window-model``: the per-request bound model by default, vLLM's hybrid manager on request.

The exact model is checked against vLLM step by step in ``test_vllm_fidelity.py``; here, that
``simulate`` really switches between the two and refuses anything else with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli_helpers import one_error_line, run_in_process

from kvscope.sim.hybrid_pool import HybridPool
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout, WindowGroup

SMALL = ("--model", "openai/gpt-oss-20b", "--gpu", "H100", "--num-requests", "40")
LOAD = ("--arrival", "poisson:rate=50", "--prompt-len", "700", "--output-len", "60")


def test_pool_class_follows_the_window_model() -> None:
    layout = KVLayout(16, (WindowGroup("swa", 16, 128),))
    assert type(PagedPool(100, layout)) is HybridPool
    assert type(PagedPool(100, layout, window_model="bound")) is PagedPool
    assert type(PagedPool(100, KVLayout(16))) is PagedPool  # no windows: always the paged pool


def test_simulate_switches_and_the_two_models_differ(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    figures = {}
    for model in ("bound", "exact"):
        code, _out, err = run_in_process(
            [
                "simulate",
                *SMALL,
                *LOAD,
                "--window-model",
                model,
                "--json",
                "--out",
                str(tmp_path / model),
            ],
            capsys,
        )
        assert code == 0, err
        figures[model] = json.loads((tmp_path / model / "summary.json").read_text())
    assert figures["bound"]["completed"] == figures["exact"]["completed"] == 40
    # vLLM frees out-of-window blocks only at the next allocation: the exact model holds more
    assert figures["exact"]["kv_usage_peak_frac"] > figures["bound"]["kv_usage_peak_frac"]


def test_unknown_window_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_in_process(["simulate", *SMALL, "--window-model", "approx"], capsys)
    one_error_line(code, err, "--window-model", "bound", "exact")
