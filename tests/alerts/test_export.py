"""Rule-file export: shapes, schedule PromQL, escalation chain; promtool check on both forms."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvscope.alerts.export import prometheus_rule_crd, rule_expr, rule_file, signal_expr
from kvscope.alerts.loader import load_pack, load_pack_text

from .conftest import run_promtool

SCHED = """
schedule:
  peak_windows:
    - {days: [mon, tue, wed, thu, fri], start: 9, end: 18}
    - {days: [sun], start: 0, end: 24}
  holidays: [2026-12-25, 2027-01-01]
rules:
  - {name: Storm, signal: preemptions, kind: rate, window: 2m, threshold: 5, for: 2m,
     tier: alert, why: w, peak_relax: 0.2, holiday_threshold: 10, escalate_after: 3}
"""


def test_union_over_real_names() -> None:
    pack = load_pack()
    expr = signal_expr(pack.rule("PreemptionStorm"))
    assert expr == (
        "((rate(kvscope_preemptions_total[2m]) * 60) or "
        "(rate(vllm:num_preemptions_total[2m]) * 60) or "
        "(rate(sglang:num_retracted_requests_total[2m]) * 60))"
    )
    assert "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE" in rule_expr(
        pack.rule("GpuMemoryCritical"), pack
    )
    assert "deriv(DCGM_FI_DEV_FB_USED[15m]) * 62914560" in rule_expr(
        pack.rule("GpuMemoryLeak"), pack
    )


def test_schedule_branches() -> None:
    pack = load_pack_text(SCHED)
    expr = rule_expr(pack.rules[0], pack)
    # four exclusive branches: (holiday?, peak?) with thresholds 5, 6, 10, 12
    for thr in ("> 5)", "> 6)", "> 10)", "> 12)"):
        assert thr in expr
    assert "hour() >= 9 < 18" in expr and "day_of_week() == 0" in expr
    assert "day_of_week() == 5" in expr and "day_of_week() == 6" not in expr
    assert "year() == 2026 and on() month() == 12 and on() day_of_month() == 25" in expr
    assert expr.count("unless on()") == 4 and expr.count("and on() ((year()") == 2


def test_escalation_is_chained_after_its_rule() -> None:
    pack = load_pack_text(SCHED)
    rules = yaml.safe_load(rule_file(pack))["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["Storm", "StormEscalated"]
    esc = rules[1]
    assert esc["for"] == "2m" and esc["labels"] == {"severity": "critical"}
    assert 'ALERTS{alertname="Storm", alertstate="firing"}' in esc["expr"]


def test_k8s_crd_wraps_the_same_groups() -> None:
    pack = load_pack()
    crd = yaml.safe_load(prometheus_rule_crd(pack, namespace="monitoring"))
    assert crd["apiVersion"] == "monitoring.coreos.com/v1" and crd["kind"] == "PrometheusRule"
    assert crd["metadata"]["namespace"] == "monitoring"
    assert crd["spec"]["groups"] == yaml.safe_load(rule_file(pack))["groups"]


@pytest.mark.integration
def test_promtool_check_rules(tmp_path: Path, promtool: str) -> None:
    for name, pack in (("default.yml", load_pack()), ("sched.yml", load_pack_text(SCHED))):
        f = tmp_path / name
        f.write_text(rule_file(pack))
        out = run_promtool(promtool, "check", "rules", f)
        n = len(pack.rules) + sum(r.escalate_after is not None for r in pack.rules)
        assert f"SUCCESS: {n} rules found" in out
