"""Report pages of every run kind opened in real Chromium, cut off the network.

For each page: no console error, no request leaving the page, every chart drawn as SVG, and
the DOM check of :func:`browser.layout_problems` (no chart text cut with an ellipsis or
outside its chart, no overlapping legend entries, one legend entry per series).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from browser import layout_problems
from kvscope.report import write_report

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"

pytestmark = pytest.mark.integration


def check_page(page: Any, out: Path, min_charts: int) -> int:
    requested = page.offline()
    page.open(out)
    n = int(page.charts_drawn())
    assert n >= min_charts
    drawn = page.evaluate(
        "[...document.querySelectorAll('div.vl-chart')].map(d => [d.getAttribute('aria-label'),"
        " d.getAttribute('data-drawn'), d.querySelectorAll('svg path, svg line').length])"
    )
    for label, state, marks in drawn:
        assert state == "1" and marks > 0, label
    assert layout_problems(page) == []
    assert page.errors == [] and requested == []
    page.screenshot(ARTIFACTS / f"{out.stem}.png", max_height=4000)
    return n


def test_simulate_run(page: Any, sim_run: Path, tmp_path: Path) -> None:
    check_page(page, write_report([sim_run], tmp_path / "report-simulate.html"), 7)


def test_demo_page_is_small_and_works_offline(page: Any, demo_dir: Path) -> None:
    out = demo_dir / "report.html"
    assert out.stat().st_size < 5 * 2**20
    check_page(page, out, 12)


def test_sweep_folder(page: Any, sweep_dir: Path, tmp_path: Path) -> None:
    check_page(page, write_report([sweep_dir], tmp_path / "report-sweep.html"), 6)


@pytest.mark.parametrize("kind", ["bench", "max-rate", "watch"])
def test_served_runs(page: Any, served_runs: dict[str, Path], kind: str, tmp_path: Path) -> None:
    out = write_report([served_runs[kind]], tmp_path / f"report-{kind}.html")
    check_page(page, out, {"bench": 6, "max-rate": 2, "watch": 2}[kind])


def test_watch_run_with_kv_events(page: Any, kv_events_run: Any, tmp_path: Path) -> None:
    run = kv_events_run(tmp_path / "kv")
    check_page(page, write_report([run], tmp_path / "report-kv-events.html"), 4)


def test_memtrace_and_plan_runs(
    page: Any, memtrace_dir: Path, plan_dir: Path, tmp_path: Path
) -> None:
    check_page(page, write_report([memtrace_dir], tmp_path / "report-memtrace.html"), 3)
    check_page(page, write_report([plan_dir], tmp_path / "report-plan.html"), 1)


def test_several_runs_of_several_kinds(
    page: Any, sweep_dir: Path, served_runs: dict[str, Path], tmp_path: Path
) -> None:
    # a simulated queue of seconds beside a measured run of milliseconds: log latency axes
    runs = [sweep_dir / "max-num-seqs=8", sweep_dir / "max-num-seqs=256", served_runs["bench"]]
    out = write_report(runs, tmp_path / "report-mixed.html")
    check_page(page, out, 8)
    scale = page.evaluate(
        "JSON.parse(document.querySelector('[aria-label=\"TTFT distribution\"] + script')"
        ".textContent).layer[0].encoding.x.scale.type"
    )
    assert scale == "log"


def test_the_layout_check_finds_cut_labels(page: Any, make_run: Any, tmp_path: Path) -> None:
    # The same page with Vega's default label limits put back: long run names get an
    # ellipsis, and the check must say so (so an empty list above means something).
    run = make_run(tmp_path / "a-run-directory-with-a-rather-long-name-for-its-legend")
    out = write_report([run], tmp_path / "cut.html")
    out.write_text(out.read_text().replace('"labelLimit":0', '"labelLimit":60'))
    page.open(out)
    page.charts_drawn()
    assert any("truncated" in p for p in layout_problems(page))


def test_tune_folder(page: Any, tmp_path: Path) -> None:
    from kvscope.executor import Backend
    from kvscope.sim import SimConfig
    from kvscope.tune.run import TuneRequest, tune
    from kvscope.workload.spec import build_workload

    w = build_workload(
        None, "poisson:rate=20", "lognormal:median=500,sigma=0.7", "120", None, 120, None, 3, None
    )
    space = tmp_path / "space.yaml"
    space.write_text("tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [auto, fp8]\nmax_num_seqs: [null]\n")
    req = TuneRequest(
        SimConfig(), ("H100",), 2, (("ttft_p99_s", 0.5),), space_file=str(space), eta=1
    )
    tune(req, w, tmp_path / "tune", Backend("serial"))
    # the cost-against-rate chart, then the winner's and the defaults' latency and KV charts
    check_page(page, write_report([tmp_path / "tune"], tmp_path / "report-tune.html"), 5)
