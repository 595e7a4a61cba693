"""Synthetic series with known answers, and ``promtool test rules`` files built from them.

For every rule a pack holds, :func:`scenarios` builds two cases over the rule's own signal:
``fires`` (quiet level, then from ``change_step`` a level past the threshold) and ``quiet``
(the quiet level throughout). The *same* series feed kvscope's evaluator (as store samples,
:func:`series_set`) and promtool (as ``input_series`` under kvscope's exporter names,
:func:`input_series`), and :func:`promtool_tests` writes the alert checks kvscope predicts,
so a passing ``promtool test rules`` run proves both engines fire at the same steps.

Levels: ``f`` lies halfway between the threshold and the signal's bound (the bound itself
for 0/1 flags), ``q`` halfway between the lower bound and the threshold; counters rise by
``level x interval / 60`` per step (``rate`` levels are per minute), slopes likewise.
Times start at the Unix epoch, as promtool's do (a Thursday, 1970-01-01 00:00 UTC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kvscope.alerts.evaluate import Evaluator, SeriesSet, prom_labels
from kvscope.alerts.export import rule_annotations
from kvscope.alerts.model import Kind, Rule, RulePack, format_duration
from kvscope.alerts.signals import Signal, signal
from kvscope.errors import KvscopeError
from kvscope.telemetry.exporter import PREFIX

#: Framebuffer of an 80 GB board (H100 SXM datasheet: 80 GB HBM3), for GPU-memory ratios.
GPU_TOTAL_BYTES = 80e9
ENGINE_SOURCE = "engine:127.0.0.1:8000"
GPU_SOURCE = "gpu:0"


@dataclass(frozen=True, slots=True)
class SynthSeries:
    """One stored series: ``values[k]`` at ``k x interval`` seconds; None = no sample."""

    metric: str
    source: str
    labels: str
    values: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    """Input series of one case of one rule."""

    rule: str
    case: str  # "fires" | "quiet"
    interval_s: float
    change_step: int
    steps: int
    series: tuple[SynthSeries, ...]


def _levels(rule: Rule, sig: Signal, thr: float) -> tuple[float, float]:
    """(quiet, firing) levels of the rule's value for threshold ``thr``."""
    lo, hi, op = sig.lo, sig.hi, rule.op
    if op in ("==", "!="):
        other = hi if math.isfinite(hi) and hi != thr else thr + 1.0
        return (other, thr) if op == "==" else (thr, other)
    up = op in (">", ">=")
    bound = hi if up else lo
    if sig.unit == "flag" and math.isfinite(bound):
        fire = bound
    elif math.isfinite(bound) and (bound - thr) * (1 if up else -1) > 0:
        fire = thr + (bound - thr) / 2
    else:
        fire = thr + (1 if up else -1) * max(abs(thr) * 0.5, 1.0)
    far = lo if up else hi
    if math.isfinite(far) and (thr - far) * (1 if up else -1) > 0:
        quiet = far + (thr - far) / 2
    else:
        quiet = far if math.isfinite(far) else thr - (1 if up else -1) * max(abs(thr), 1.0)
    return quiet, fire


def _source(sig: Signal) -> str:
    return GPU_SOURCE if sig.store_metric.startswith("gpu_") else ENGINE_SOURCE


def _values(rule: Rule, levels: list[float], interval_s: float) -> list[float | None]:
    if rule.kind in (Kind.RATE, Kind.SLOPE):
        acc, out = 0.0, []
        for k, lvl in enumerate(levels):
            if k:
                acc += lvl * interval_s / 60.0
            out.append(acc)
        return list(out)
    return list(levels)


def scenario(rule: Rule, pack: RulePack, case: str) -> Scenario:
    """The ``fires`` or ``quiet`` case of ``rule``."""
    sig = signal(rule.signal)
    iv = pack.interval_s
    win = math.ceil(rule.window_s / iv) if rule.kind not in (Kind.THRESHOLD, Kind.STALE) else 0
    change = win + 3
    esc = (rule.escalate_after or 0) + 2
    steps = change + math.ceil(rule.for_s / iv) + win + esc + 4
    if rule.kind is Kind.STALE:
        steps = change + math.ceil((rule.threshold + rule.for_s + 300.0) / iv) + 3
    quiet, fire = _levels(rule, sig, rule.threshold_at(change * iv, pack.schedule))
    src = _source(sig)
    series: list[SynthSeries] = []
    if rule.kind is Kind.STALE:
        present = [1.0 if case == "quiet" or k < change else None for k in range(steps)]
        series.append(SynthSeries(sig.store_metric, src, "", tuple(present)))
    else:
        levels = [fire if case == "fires" and k >= change else quiet for k in range(steps)]
        vals = _values(rule, levels, iv)
        labels = ""
        if sig.label_key is not None:
            labels = f"{sig.label_key}={sig.label_values[-1]}"
            # a series the label filter must ignore, held high the whole time
            ignored = f"{sig.label_key}=ignored_reason"
            series.append(SynthSeries(sig.store_metric, src, ignored, tuple([fire] * steps)))
        if sig.store_denominator is not None:
            used = [None if v is None else v * GPU_TOTAL_BYTES for v in vals]
            series.append(SynthSeries(sig.store_metric, src, labels, tuple(used)))
            series.append(
                SynthSeries(sig.store_denominator, src, labels, tuple([GPU_TOTAL_BYTES] * steps))
            )
        else:
            series.append(SynthSeries(sig.store_metric, src, labels, tuple(vals)))
    return Scenario(rule.name, case, iv, change, steps, tuple(series))


def scenarios(pack: RulePack) -> list[Scenario]:
    """A firing and a quiet case for every rule of ``pack``."""
    return [scenario(r, pack, c) for r in pack.rules for c in ("fires", "quiet")]


def combine(cases: list[Scenario], name: str = "combined") -> Scenario:
    """Several scenarios side by side in one input: scenario ``i`` gets its own source
    (``engine:127.0.0.1:{8000+i}`` or ``gpu:{i}``), so their series never collide."""
    steps = max(c.steps for c in cases)
    series = []
    for i, c in enumerate(cases):
        for s in c.series:
            src = f"gpu:{i}" if s.source.startswith("gpu:") else f"engine:127.0.0.1:{8000 + i}"
            vals = s.values + (s.values[-1],) * (steps - len(s.values))
            series.append(SynthSeries(s.metric, src, s.labels, vals))
    return Scenario(name, "combined", cases[0].interval_s, 0, steps, tuple(series))


def series_set(scn: Scenario) -> SeriesSet:
    """The scenario as store samples (times from 0 s)."""
    data = SeriesSet()
    for s in scn.series:
        for k, v in enumerate(s.values):
            if v is not None:
                data.add(s.metric, s.source, s.labels, k * scn.interval_s, v)
    return data


def _selector(metric: str, labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{PREFIX}{metric}{{{inner}}}"


def input_series(scn: Scenario) -> list[dict[str, str]]:
    """promtool ``input_series`` of the scenario under kvscope's exporter names."""
    out = []
    for s in scn.series:
        vals = " ".join("_" if v is None else repr(float(v)) for v in s.values)
        out.append({"series": _selector(s.metric, prom_labels(s.source, s.labels)), "values": vals})
    return out


def predicted(pack: RulePack, scn: Scenario) -> list[tuple[float, list[tuple[str, Any]]]]:
    """kvscope's firing set at every step of the scenario."""
    ev = Evaluator(pack)
    data = series_set(scn)
    out = []
    for k in range(scn.steps):
        t = k * scn.interval_s
        ev.step(data, t)
        out.append((t, ev.firing()))
    return out


def _alert_names(rule: Rule) -> list[str]:
    return [rule.name] + ([rule.escalated_name] if rule.escalate_after is not None else [])


def promtool_case(pack: RulePack, scn: Scenario, dense: bool = False) -> dict[str, Any]:
    """One ``tests[]`` entry: the scenario's series and kvscope's predicted alerts.

    With ``dense`` every step is checked; otherwise the steps around each change of the
    firing set, the change step and the last step."""
    rule = pack.rule(scn.rule)
    pred = predicted(pack, scn)
    if dense:
        ks = list(range(scn.steps))
    else:
        marks = {0, scn.change_step, scn.steps - 1}
        for k in range(1, scn.steps):
            if pred[k][1] != pred[k - 1][1]:
                marks |= {k - 1, k}
        ks = sorted(m for m in marks if 0 <= m < scn.steps)
    checks = []
    for k in ks:
        t, firing = pred[k]
        for name in _alert_names(rule):
            esc = name != rule.name
            tier = rule.tier.next() if esc else rule.tier
            exp = [
                {
                    "exp_labels": {**dict(ls), "severity": str(tier)},
                    "exp_annotations": rule_annotations(rule, pack, escalated=esc),
                }
                for n, ls in firing
                if n == name
            ]
            checks.append({"eval_time": format_duration(t), "alertname": name, "exp_alerts": exp})
    return {
        "name": f"{rule.name} {scn.case}",
        "interval": format_duration(scn.interval_s),
        "input_series": input_series(scn),
        "alert_rule_test": checks,
    }


def first_firing_step(pack: RulePack, scn: Scenario) -> int | None:
    """First step at which the scenario's rule fires in kvscope, or None."""
    for k, (_, firing) in enumerate(predicted(pack, scn)):
        if any(name == scn.rule for name, _ in firing):
            return k
    return None


def promtool_tests(
    pack: RulePack, rule_file: str, dense: bool = False, cases: list[Scenario] | None = None
) -> dict[str, Any]:
    """A ``promtool test rules`` document checking kvscope's predictions.

    ``cases`` defaults to :func:`scenarios`. Raises KvscopeError if a ``fires`` case never
    fires or a ``quiet`` case fires (the pack could not be shown to work)."""
    tests = []
    for scn in scenarios(pack) if cases is None else cases:
        fired = first_firing_step(pack, scn) is not None
        if scn.case in ("fires", "quiet") and (scn.case == "fires") != fired:
            raise KvscopeError(
                f"rule '{scn.rule}': synthetic '{scn.case}' case "
                f"{'never fires' if scn.case == 'fires' else 'fires'}; check its threshold."
            )
        tests.append(promtool_case(pack, scn, dense))
    return {
        "rule_files": [rule_file],
        "evaluation_interval": format_duration(pack.interval_s),
        "tests": tests,
    }


def write_promtool_tests(pack: RulePack, rules_path: Path, out: Path, dense: bool = False) -> int:
    """Write the test file next to ``rules_path`` (referenced relatively); returns test count."""
    try:
        rel = str(rules_path.resolve().relative_to(out.resolve().parent))
    except ValueError:
        rel = str(rules_path.resolve())
    doc = promtool_tests(pack, rel, dense)
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return len(doc["tests"])
