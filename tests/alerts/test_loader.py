"""Rule files: the default pack, and one-line errors naming the rule and field at fault."""

from __future__ import annotations

import textwrap

import pytest

from kvscope.alerts.loader import load_pack, load_pack_text
from kvscope.alerts.model import Kind, Tier
from kvscope.errors import ConfigError, KvscopeError

#: The issue's list of default rules, by name.
DEFAULT_RULES = {
    "KvFragmentationHigh": (Tier.WARNING, Kind.THRESHOLD, 0.30, 1800),
    "AllocationRetriesHigh": (Tier.ALERT, Kind.RATE, 5, 120),
    "PreemptionStorm": (Tier.ALERT, Kind.RATE, 5, 120),
    "GpuMemoryCritical": (Tier.CRITICAL, Kind.THRESHOLD, 0.95, 60),
    "KvCacheHigh": (Tier.WARNING, Kind.PERCENTILE, 0.90, 300),
    "KvCacheNearFull": (Tier.ALERT, Kind.THRESHOLD, 0.98, 300),
    "GpuMemoryLeak": (Tier.WARNING, Kind.SLOPE, 1e6, 1800),
    "QueueGrowing": (Tier.WARNING, Kind.SLOPE, 1, 300),
    "TtftP99OverSlo": (Tier.ALERT, Kind.THRESHOLD, 2.5, 300),
    "GpuThrottled": (Tier.WARNING, Kind.THRESHOLD, 0, 300),
    "XidErrors": (Tier.CRITICAL, Kind.RATE, 0, 0),
    "EngineDown": (Tier.ALERT, Kind.THRESHOLD, 0, 60),
    "SamplesStale": (Tier.WARNING, Kind.STALE, 120, 0),
    "KvEvictionChurn": (Tier.WARNING, Kind.RATE, 600, 300),  # issue 24
}


def test_default_pack_matches_the_issue() -> None:
    pack = load_pack()
    got = {r.name: (r.tier, r.kind, r.threshold, r.for_s) for r in pack.rules}
    assert got == DEFAULT_RULES
    assert len(pack.rules) == 14  # the README's count
    for r in pack.rules:
        assert len(r.why) > 80, f"{r.name} needs a reason"
    assert pack.rule("PreemptionStorm").escalate_after == 3
    assert pack.policy(Tier.ALERT).response_s == 300
    assert pack.policy(Tier.CRITICAL).response_s == 0


GOOD = """
interval: 1m
tiers:
  alert: {response: 5m, actions: [{webhook: "http://127.0.0.1:9/hook"}, {command: [echo, hi]}]}
schedule:
  peak_windows: [{days: [mon, tue], start: 9, end: 17}]
  holidays: [2026-12-25]
rules:
  - name: KvFull
    signal: kv_cache_usage_ratio
    kind: threshold
    threshold: 0.9
    for: 5m
    tier: alert
    why: because
    peak_relax: 0.2
    holiday_threshold: 0.95
"""


def test_good_file() -> None:
    pack = load_pack_text(GOOD, "f.yaml")
    r = pack.rules[0]
    assert (r.for_s, r.peak_relax, r.holiday_threshold) == (300, 0.2, 0.95)
    assert pack.schedule.peak_windows[0].days == (1, 2)
    assert [a.kind for a in pack.policy(Tier.ALERT).actions] == ["webhook", "command"]


def _rule_file(**override: object) -> str:
    fields: dict[str, object] = {
        "name": "KvFull",
        "signal": "kv_cache_usage_ratio",
        "kind": "threshold",
        "threshold": 0.9,
        "for": "5m",
        "tier": "alert",
        "why": "because",
    }
    fields.update(override)
    lines = "\n".join(f"    {k}: {v}" for k, v in fields.items() if v is not None)
    return "rules:\n  -\n" + lines + "\n"


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        ({"threshold": "lots"}, "threshold", "valid number"),
        ({"for": "5 minutes"}, "for", "duration"),
        ({"signal": "kv_usage"}, "signal", "unknown signal 'kv_usage'"),
        ({"tier": "page"}, "tier", "warning"),
        ({"op": "'=>'"}, "op", "one of"),
        ({"kind": "rate"}, "kind", "counter"),
        ({"tier": "critical", "escalate_after": 3}, "escalate_after", "critical"),
        ({"why": None}, "why", "required"),
        ({"colour": "red"}, "colour", "not permitted"),
        ({"peak_relax": -0.1}, "peak_relax", "greater than 0"),
    ],
)
def test_malformed_rule_names_rule_and_field(
    override: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        load_pack_text(_rule_file(**override), "bad.yaml")
    msg = exc.value.one_line()
    assert msg.startswith(f"bad.yaml: rule 'KvFull': field '{field}'"), msg
    assert words in msg
    assert "\n" not in msg


def test_rule_without_name_is_named_by_index() -> None:
    with pytest.raises(ConfigError) as exc:
        load_pack_text(_rule_file(name=None), "bad.yaml")
    assert exc.value.one_line().startswith("bad.yaml: rules[0]: field 'name'")


def test_file_level_errors() -> None:
    with pytest.raises(KvscopeError, match="not valid YAML at line"):
        load_pack_text("rules: [\n", "x.yaml")
    with pytest.raises(ConfigError, match="field 'rules'"):
        load_pack_text("interval: 1m\n", "x.yaml")
    dup = _rule_file() + _rule_file().removeprefix("rules:\n")
    with pytest.raises(ConfigError, match="rule 'KvFull': field 'name' is used twice"):
        load_pack_text(dup, "x.yaml")
    bad_window = GOOD.replace("start: 9, end: 17", "start: 17, end: 9")
    with pytest.raises(ConfigError, match=r"peak_windows\.0\.end"):
        load_pack_text(bad_window, "x.yaml")
    bad_hook = GOOD.replace('"http://127.0.0.1:9/hook"', "ftp://x")
    with pytest.raises(ConfigError, match="tier 'alert'"):
        load_pack_text(bad_hook, "x.yaml")


def test_missing_file() -> None:
    with pytest.raises(KvscopeError, match="no such rule file"):
        load_pack("/nonexistent/rules.yaml")


def test_text_is_dedented_yaml() -> None:
    text = textwrap.dedent(GOOD)
    assert load_pack_text(text).interval_s == 60
