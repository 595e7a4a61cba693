"""The report opened in a real browser: no console errors, every chart drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvscope.report import write_report

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"

pytestmark = pytest.mark.integration


def test_report_renders_in_chromium(page: Any, sim_run: Path, tmp_path: Path) -> None:
    out = write_report([sim_run], tmp_path / "report.html")
    page.open(out)
    charts = page.evaluate(
        "[...document.querySelectorAll('svg.chart')].map(s => {const b = s.getBBox();"
        " return [b.width, b.height, s.querySelectorAll('polyline,rect,circle').length]})"
    )
    assert len(charts) >= 5
    for width, height, marks in charts:
        assert width > 100 and height > 100 and marks > 0
    shot = page.screenshot(ARTIFACTS / "report-simulate.png")
    assert shot.stat().st_size > 20_000
    assert page.errors == []
