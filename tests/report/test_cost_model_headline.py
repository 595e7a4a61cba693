"""A simulate run's headline names the cost model its latencies rest on and its expected error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_helpers import run_in_process
from kvscope.report.headline import headline_section
from kvscope.report.loader import load_run


@pytest.mark.parametrize(
    ("cost", "expect"),
    [
        # dense family, held-out median |kvscope/AIC - 1| (sim/roofline_fit.json)
        ("roofline", r"roofline \(median error 1[0-9]% vs AIC, dense\)"),
        ("fitted", r"fitted \(median error [0-9]% vs AIC, dense\)"),
    ],
)
def test_headline_names_cost_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cost: str, expect: str
) -> None:
    out = tmp_path / cost
    code, _, err = run_in_process(
        ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
         "--arrival", "poisson:rate=5", "--num-requests", "20", "--cost-model", cost,
         "--out", str(out), "--json"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    html = headline_section([load_run(out)])
    cell = re.search(r"step times</th><td>([^<]*)</td>", html)
    assert cell is not None, html[:400]
    assert re.fullmatch(expect, cell.group(1)), cell.group(1)


def test_calibrated_roofline_claims_no_error(tmp_path: Path) -> None:
    # a run priced by a user's --cost file is no longer the roofline measured against AIC
    from kvscope.report.headline import _cost_model_text

    assert _cost_model_text({"name": "roofline", "expected_error": None}) == "roofline"
    assert _cost_model_text(None) is None
