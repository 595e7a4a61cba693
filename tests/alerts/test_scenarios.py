"""kvscope and promtool agree: the same synthetic series, the same alerts at every step."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvscope.alerts.export import rule_file
from kvscope.alerts.loader import load_pack, load_pack_text
from kvscope.alerts.scenarios import (
    Scenario,
    SynthSeries,
    first_firing_step,
    predicted,
    promtool_tests,
    scenarios,
)

from .conftest import run_promtool

pytestmark = pytest.mark.integration


def _write(tmp_path: Path, pack_rules: str, doc: dict[str, object]) -> Path:
    (tmp_path / "rules.yml").write_text(pack_rules)
    test = tmp_path / "rules.test.yml"
    test.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return test


def test_every_default_rule_fires_and_stays_quiet() -> None:
    pack = load_pack()
    cases = scenarios(pack)
    assert len(cases) == 2 * len(pack.rules)
    for scn in cases:
        step = first_firing_step(pack, scn)
        assert (step is not None) == (scn.case == "fires"), (scn.rule, scn.case)
        if step is not None:
            assert step >= scn.change_step  # never before the input changes


def test_promtool_agrees_at_every_step(tmp_path: Path, promtool: str) -> None:
    pack = load_pack()
    doc = promtool_tests(pack, "rules.yml", dense=True)
    checks = sum(len(t["alert_rule_test"]) for t in doc["tests"])
    firing_checks = sum(1 for t in doc["tests"] for c in t["alert_rule_test"] if c["exp_alerts"])
    assert checks > 700 and firing_checks > 100
    test = _write(tmp_path, rule_file(pack), doc)
    out = run_promtool(promtool, "test", "rules", test.name, cwd=tmp_path)
    assert "SUCCESS" in out


def test_promtool_rejects_a_wrong_prediction(tmp_path: Path, promtool: str) -> None:
    """The agreement test can fail: shift one expected alert by a step and promtool objects."""
    import subprocess

    pack = load_pack()
    doc = promtool_tests(pack, "rules.yml", dense=True)
    for case in doc["tests"]:
        if case["name"] == "KvCacheNearFull fires":
            checks = case["alert_rule_test"]
            k = next(i for i, c in enumerate(checks) if c["exp_alerts"])
            checks[k - 1]["exp_alerts"] = checks[k]["exp_alerts"]
    test = _write(tmp_path, rule_file(pack), doc)
    done = subprocess.run(
        [promtool, "test", "rules", test.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode != 0 and "KvCacheNearFull" in done.stdout + done.stderr


SCHEDULED = """
interval: 1m
schedule:
  peak_windows: [{{days: [{day}], start: 0, end: 1}}]
  holidays: [{holiday}]
rules:
  - {{name: KvPeak, signal: kv_cache_usage_ratio, kind: threshold, threshold: 0.8, for: 0s,
     tier: warning, why: w, peak_relax: 0.2, holiday_threshold: 0.95, escalate_after: 3}}
"""


@pytest.mark.parametrize(
    ("day", "holiday", "first"),
    [
        ("thu", "1970-01-02", 60),  # 0.9 < 0.96 in Thursday's 00-01 peak, > 0.8 after it
        ("fri", "1970-01-02", 0),  # no peak on a Thursday: 0.9 > 0.8 at once
        ("thu", "1970-01-01", None),  # the holiday threshold 0.95 (1.14 in peak) holds
    ],
)
def test_schedule_in_promql_matches_kvscope(
    tmp_path: Path, promtool: str, day: str, holiday: str, first: int | None
) -> None:
    pack = load_pack_text(SCHEDULED.format(day=day, holiday=holiday))
    steps = 75
    scn = Scenario(
        "KvPeak",
        "custom",
        60.0,
        0,
        steps,
        (SynthSeries("kv_cache_usage_ratio", "engine:127.0.0.1:8000", "", (0.9,) * steps),),
    )
    assert first_firing_step(pack, scn) == first
    if first is not None:  # escalation to alert after 3 consecutive firing evaluations
        firing = dict(predicted(pack, scn))
        assert [n for n, _ in firing[first * 60.0 + 120]] == ["KvPeak", "KvPeakEscalated"]
    doc = promtool_tests(pack, "rules.yml", dense=True, cases=[scn])
    test = _write(tmp_path, rule_file(pack), doc)
    run_promtool(promtool, "test", "rules", test.name, cwd=tmp_path)


def _engine_case(pack_rule: str, name: str, labels: dict[str, str], values: list[float]) -> dict:
    sel = name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    return {"series": sel, "values": " ".join(repr(v) for v in values)}


def test_engine_and_dcgm_names_fire_like_kvscope_names(tmp_path: Path, promtool: str) -> None:
    """Same levels under vLLM, SGLang and dcgm-exporter names: same steps, their labels."""
    pack = load_pack()
    lab = {"instance": "10.0.0.7:8000", "job": "llm"}
    tests = []
    for rule, build in (
        ("KvCacheNearFull", lambda v: [_engine_case("", "vllm:kv_cache_usage_perc", lab, v)]),
        (
            "PreemptionStorm",
            lambda v: [_engine_case("", "sglang:num_retracted_requests_total", lab, v)],
        ),
        ("QueueGrowing", lambda v: [_engine_case("", "vllm:num_requests_waiting", lab, v)]),
        (
            "GpuMemoryCritical",
            lambda v: [
                _engine_case("", "DCGM_FI_DEV_FB_USED", lab, [x * 81920 for x in v]),
                _engine_case("", "DCGM_FI_DEV_FB_FREE", lab, [(1 - x) * 81920 for x in v]),
            ],
        ),
    ):
        scn = next(s for s in scenarios(pack) if s.rule == rule and s.case == "fires")
        main = next(s for s in scn.series if s.metric != "gpu_memory_total_bytes")
        values = [float(v) for v in main.values if v is not None]
        if rule == "GpuMemoryCritical":
            values = [v / 80e9 for v in values]
        pred = predicted(pack, scn)
        r = pack.rule(rule)
        checks = []
        for t, firing in pred:
            for alert in {n for n, _ in firing} | {rule}:
                if not alert.startswith(rule):
                    continue
                tier = r.tier.next() if alert != rule else r.tier
                from kvscope.alerts.export import rule_annotations

                exp = [
                    {
                        "exp_labels": {**lab, "severity": str(tier)},
                        "exp_annotations": rule_annotations(r, pack, escalated=alert != rule),
                    }
                    for n, _ in firing
                    if n == alert
                ]
                checks.append({"eval_time": f"{int(t)}s", "alertname": alert, "exp_alerts": exp})
        assert any(c["exp_alerts"] for c in checks)
        tests.append({"interval": "1m", "input_series": build(values), "alert_rule_test": checks})
    doc = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    test = _write(tmp_path, rule_file(pack), doc)
    run_promtool(promtool, "test", "rules", test.name, cwd=tmp_path)
