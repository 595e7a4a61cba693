"""Export a rule pack to Prometheus: rule files and the Prometheus Operator's PrometheusRule.

Each rule becomes one alerting rule whose expression unions the signal's exporter families
(:mod:`kvscope.alerts.signals`), so it matches vLLM, SGLang, dcgm-exporter and kvscope's own
exporter alike. Schedules become PromQL over the evaluation time: a peak window is
``hour() >= S < E`` restricted by ``day_of_week()`` (0 = Sunday), a holiday is
``year()``/``month()``/``day_of_month()``; the rule is the union of one branch per
(holiday, peak) combination, each branch gated with ``and on()`` / ``unless on()``.
Escalation is a chained rule over ``ALERTS{alertname="X", alertstate="firing"}`` with
``for: (N-1) x interval``, placed right after its base rule in the same group, because a group
evaluates its rules in order and later rules see earlier rules' output of the same round
(Prometheus docs, "Recording rules": rules in a group run sequentially).
"""

from __future__ import annotations

from typing import Any

import yaml

from kvscope.alerts.model import Kind, PeakWindow, Rule, RulePack, format_duration, relaxed
from kvscope.alerts.signals import signal

_RANGE_KINDS = (Kind.RATE, Kind.SLOPE, Kind.PERCENTILE)


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def signal_expr(rule: Rule) -> str:
    """The rule's value before the comparison, as a union over exporter families."""
    sig = signal(rule.signal)
    w = format_duration(rule.window_s)
    parts: list[str] = []
    for family, fe in sig.families.items():
        if rule.kind in _RANGE_KINDS and not fe.rangeable:
            continue
        if rule.kind is Kind.STALE and family == "prometheus":
            continue  # Prometheus writes `up` on every scrape attempt: never stale
        mult = fe.scale
        if rule.kind is Kind.THRESHOLD:
            core = fe.selector if fe.rangeable else f"({fe.selector})"
        elif rule.kind is Kind.RATE:
            core, mult = f"rate({fe.selector}[{w}])", mult * 60.0
        elif rule.kind is Kind.SLOPE:
            core, mult = f"deriv({fe.selector}[{w}])", mult * 60.0
        elif rule.kind is Kind.PERCENTILE:
            core = f"quantile_over_time({_num(rule.quantile)}, {fe.selector}[{w}])"
        else:
            core, mult = f"time() - timestamp({fe.selector})", 1.0
        if sig.label_key is not None:
            core = f"max without ({sig.label_key}) ({core})"
        if mult != 1.0:
            core = f"{core} * {_num(mult)}"
        parts.append(core)
    if len(parts) == 1:
        return parts[0] if " " not in parts[0] else f"({parts[0]})"
    return "(" + " or ".join(f"({p})" for p in parts) + ")"


def _days(days: tuple[int, ...]) -> str | None:
    if len(set(days)) == 7:
        return None
    return " or ".join(f"day_of_week() == {d % 7}" for d in sorted(set(days)))


def peak_condition(windows: tuple[PeakWindow, ...]) -> str:
    """PromQL that is non-empty while the evaluation time is in any peak window (UTC)."""
    out = []
    for w in windows:
        hours = f"hour() >= {w.start_hour} < {w.end_hour}"
        days = _days(w.days)
        out.append(f"({hours}) and on() ({days})" if days else f"({hours})")
    return " or ".join(f"({c})" for c in out)


def holiday_condition(pack: RulePack) -> str:
    """PromQL that is non-empty on any of the pack's holiday dates (UTC)."""
    return " or ".join(
        f"(year() == {d.year} and on() month() == {d.month} and on() day_of_month() == {d.day})"
        for d in pack.schedule.holidays
    )


def rule_expr(rule: Rule, pack: RulePack) -> str:
    """Full alert expression: signal, comparison and schedule branches."""
    value = signal_expr(rule)
    holiday = rule.holiday_threshold is not None and bool(pack.schedule.holidays)
    peak = rule.peak_relax is not None and bool(pack.schedule.peak_windows)
    if not holiday and not peak:
        return f"{value} {rule.op} {_num(rule.threshold)}"
    hcond = holiday_condition(pack) if holiday else ""
    pcond = peak_condition(pack.schedule.peak_windows) if peak else ""
    branches = []
    for on_holiday in (False, True) if holiday else (False,):
        for in_peak in (False, True) if peak else (False,):
            thr = rule.holiday_threshold if on_holiday else rule.threshold
            assert thr is not None
            if in_peak and rule.peak_relax is not None:
                thr = relaxed(thr, rule.op, rule.peak_relax)
            b = f"({value} {rule.op} {_num(thr)})"
            if holiday:
                b += f" {'and' if on_holiday else 'unless'} on() ({hcond})"
            if peak:
                b += f" {'and' if in_peak else 'unless'} on() ({pcond})"
            branches.append(b)
    return " or ".join(f"({b})" for b in branches)


def rule_annotations(rule: Rule, pack: RulePack, escalated: bool = False) -> dict[str, str]:
    """Static annotations (no templates, so promtool tests can pin them exactly)."""
    tier = rule.tier.next() if escalated else rule.tier
    assert tier is not None
    pol = pack.policy(tier)
    summary = rule.summary
    if escalated:
        summary += f" ({rule.escalate_after} consecutive firings of {rule.name})"
    return {
        "summary": summary,
        "description": rule.why,
        "tier": str(tier),
        "response_time": format_duration(pol.response_s),
        "actions": ", ".join(a.kind for a in pol.actions),
    }


def prometheus_rules(pack: RulePack, group: str = "kvscope") -> list[dict[str, Any]]:
    """Alerting rules of ``pack`` in Prometheus' rule-file form, escalations chained."""
    out: list[dict[str, Any]] = []
    for r in pack.rules:
        out.append(
            {
                "alert": r.name,
                "expr": rule_expr(r, pack),
                "for": format_duration(r.for_s),
                "labels": {"severity": str(r.tier)},
                "annotations": rule_annotations(r, pack),
            }
        )
        nxt = r.tier.next()
        if r.escalate_after is not None and nxt is not None:
            out.append(
                {
                    "alert": r.escalated_name,
                    "expr": "max without (alertname, alertstate, severity) "
                    f'(ALERTS{{alertname="{r.name}", alertstate="firing"}})',
                    "for": format_duration((r.escalate_after - 1) * pack.interval_s),
                    "labels": {"severity": str(nxt)},
                    "annotations": rule_annotations(r, pack, escalated=True),
                }
            )
    return [{"name": group, "interval": format_duration(pack.interval_s), "rules": out}]


def rule_file(pack: RulePack) -> str:
    """A Prometheus rule file (YAML) for ``pack``."""
    return _dump({"groups": prometheus_rules(pack)})


def prometheus_rule_crd(pack: RulePack, name: str = "kvscope-alerts", namespace: str = "") -> str:
    """The pack as a ``monitoring.coreos.com/v1`` PrometheusRule (Prometheus Operator)."""
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "kvscope"}}
    if namespace:
        meta["namespace"] = namespace
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {"groups": prometheus_rules(pack)},
    }
    return _dump(doc)


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)
