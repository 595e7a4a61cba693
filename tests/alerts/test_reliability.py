"""Issue #20 for alert rules: every number finite and every duration bounded (one line naming
rule and field), YAML bombs refused, webhook credentials never printed, and a replay over an
absurd --since/--until ends at once with the same events."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvscope.alerts.actions import dispatch
from kvscope.alerts.evaluate import SeriesSet, replay
from kvscope.alerts.loader import load_pack, load_pack_text
from kvscope.alerts.scenarios import scenario, series_set
from kvscope.errors import ConfigError, KvscopeError

RULE = """
interval: {interval}
rules:
  - name: KvFull
    signal: kv_cache_usage_ratio
    kind: {kind}
    op: "{op}"
    threshold: {threshold}
    window: {window}
    for: {for_}
    tier: alert
    why: KV nearly full
"""
GOOD = {
    "interval": "1m",
    "kind": "threshold",
    "op": ">",
    "threshold": "0.9",
    "window": "5m",
    "for_": "1m",
}


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("threshold", ".nan", "field 'threshold' must be a finite number, not nan"),
        ("threshold", ".inf", "field 'threshold' must be a finite number, not inf"),
        ("threshold", "-.inf", "field 'threshold' must be a finite number"),
        ("threshold", "'nan'", "field 'threshold' must be a valid number, not 'nan'"),
        ("threshold", "'0.9'", "field 'threshold' must be a valid number"),
        ("threshold", "true", "field 'threshold' must be a valid number, not True"),
        ("for_", "-60", "field 'for' must not be negative"),
        ("for_", ".nan", "field 'for' must be a finite duration"),
        ("for_", "99999999999999999999d", "field 'for' must be at most 366d"),
        ("window", ".inf", "field 'window' must be a finite duration"),
        ("op", "=>", "field 'op' must be one of"),
    ],
)
def test_rule_fields_must_be_finite_and_bounded(field: str, value: str, words: str) -> None:
    text = RULE.format(**(GOOD | {field: value}))
    with pytest.raises(ConfigError) as exc:
        load_pack_text(text, "rules.yaml")
    msg = exc.value.one_line()
    assert msg.startswith("rules.yaml: rule 'KvFull': "), msg
    assert words in msg, msg


@pytest.mark.parametrize("interval", [".nan", ".inf", "0.001", "0s"])
def test_pack_interval_must_be_finite_and_at_least_a_second(interval: str) -> None:
    with pytest.raises(ConfigError, match="field 'interval'"):
        load_pack_text(RULE.format(**(GOOD | {"interval": interval})), "rules.yaml")


@pytest.mark.parametrize(
    "extra",
    [
        "    quantile: .nan\n",
        "    peak_relax: .nan\n",
        "    holiday_threshold: .inf\n",
    ],
)
def test_optional_numbers_are_finite(extra: str) -> None:
    with pytest.raises(ConfigError, match="finite number"):
        load_pack_text(RULE.format(**GOOD) + extra, "rules.yaml")


def test_tier_response_error_names_the_field() -> None:
    text = "tiers: {warning: {response: .nan}}\n" + RULE.format(**GOOD)
    with pytest.raises(ConfigError, match="tier 'warning': field 'response'"):
        load_pack_text(text, "rules.yaml")


def test_yaml_bomb_is_refused_before_it_expands() -> None:
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
        for i in range(8)
    )
    start = time.monotonic()
    with pytest.raises(KvscopeError, match="YAML nodes"):
        load_pack_text(bomb, "bomb.yaml")
    assert time.monotonic() - start < 2.0


def test_non_utf8_rule_file_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "rules.yaml"
    p.write_bytes(b"rules: []\n# caf\xe9\n")
    with pytest.raises(KvscopeError, match="not UTF-8"):
        load_pack(p)


def test_default_pack_still_loads() -> None:
    assert len(load_pack().rules) > 5


def test_webhook_credentials_are_sent_never_printed() -> None:
    text = (
        "tiers:\n  alert: {response: 5m, actions: [{webhook: 'http://hook:PW-Hook-8812@127.0.0.1:9/x'}]}\n"
        + RULE.format(**GOOD)
    )
    pack = load_pack_text(text, "rules.yaml")
    ev = replay(pack, series_set(scenario(pack.rules[0], pack, "fires"))).events[0]
    (result,) = dispatch(ev, pack, write=lambda _: None)
    # Used to raise InvalidURL ("nonnumeric port"): urllib read 'hook:PW...' as the host.
    assert not result.ok and "cannot POST to http://127.0.0.1:9/x" in result.detail
    assert "PW-Hook-8812" not in result.detail


def test_replay_skips_steps_where_nothing_can_change() -> None:
    pack = load_pack_text(RULE.format(**GOOD))
    data = SeriesSet()
    t0 = 1_764_399_960.0
    for k, v in enumerate([0.5] * 3 + [0.95] * 10 + [0.5] * 3):
        data.add("kv_cache_usage_ratio", "engine:h:1", "", t0 + 60.0 * k, v)
    plain = replay(pack, data)
    start = time.monotonic()
    wide = replay(pack, data, start_s=-1e308, end_s=1e308)  # used to walk ~1e306 steps
    assert time.monotonic() - start < 5.0
    assert wide.events == plain.events and wide.start_s == plain.start_s
    assert wide.steps < plain.steps + 20
