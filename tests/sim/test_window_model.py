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
from kvscope.sim.run import SimConfig, build_pool, engine_for
from kvscope.workload.spec import build_workload

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


@pytest.mark.parametrize(("flag", "caps"), [(None, (1033,)), (False, (521,))])
def test_window_admission_cap_reserves_the_batches_in_flight(
    flag: bool | None, caps: tuple[int, ...]
) -> None:
    # gpt-oss-20b's 128-token windows in 16-token blocks at vLLM 0.33's 8,192-token budget:
    # cdiv(127 + in_flight, 16) + 1 blocks, in_flight 16,384 under async scheduling (two
    # batches, the default: 1,032 + 1) and 8,192 without it (520 + 1)
    cfg = SimConfig(
        model="openai/gpt-oss-20b", gpu="H100", window_model="exact", async_scheduling=flag
    )
    pool, _layout, _terms, info = build_pool(cfg)
    assert info["in_flight_tokens"] == (16384 if flag is None else 8192)
    w = build_workload(None, "poisson:rate=1", "64", "8", None, 4, None, 0, None)
    engine_for(w, cfg, pool, _layout, _terms, info, None)
    assert isinstance(pool, HybridPool) and pool.admission_caps() == caps
