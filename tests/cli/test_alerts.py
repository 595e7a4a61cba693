"""``kvscope alerts`` and ``kvscope dashboards`` end to end (in-process)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cli_helpers import run_in_process
from kvscope.alerts.export import rule_annotations
from kvscope.alerts.loader import load_pack
from kvscope.alerts.model import format_duration
from kvscope.alerts.scenarios import combine, input_series, scenarios
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store


@pytest.fixture(scope="module")
def synthetic() -> tuple[Path, object]:
    """Every default rule's firing case side by side (times from 0 s)."""
    return Path(), combine([s for s in scenarios(load_pack()) if s.case == "fires"])


def _store(tmp_path: Path, scn: object) -> Path:
    from kvscope.alerts.scenarios import Scenario

    assert isinstance(scn, Scenario)
    path = tmp_path / "synthetic.duckdb"
    with Store(path) as st:
        st.append(
            [
                Sample(k * scn.interval_s, s.source, s.metric, v, s.labels)
                for s in scn.series
                for k, v in enumerate(s.values)
                if v is not None
            ]
        )
    return path


def test_check_agrees_with_promtool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synthetic: tuple[Path, object]
) -> None:
    """The same series in a store (for `alerts check`) and in a promtool test: same alerts at
    every step."""
    from kvscope.alerts.scenarios import Scenario

    scn = synthetic[1]
    assert isinstance(scn, Scenario)
    store = _store(tmp_path, scn)
    code, out, err = run_in_process(["alerts", "check", "--store", str(store), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    events = result["events"]
    pack = load_pack()
    fired = {e["alertname"] for e in events if e["state"] == "firing"}
    assert {r.name for r in pack.rules} <= fired  # every default rule fires in its case
    assert result["steps"] == scn.steps
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH; install Debian's `prometheus` package")
    # firing set per step from the CLI's events, checked by promtool at every step
    names = [
        n
        for r in pack.rules
        for n in (r.name, r.escalated_name)
        if n != r.escalated_name or r.escalate_after is not None
    ]
    state: dict[tuple[str, str], dict[str, str]] = {}
    checks = []
    for k in range(scn.steps):
        t = k * scn.interval_s
        for e in (e for e in events if e["t_s"] == t):
            key = (e["alertname"], json.dumps(e["labels"], sort_keys=True))
            if e["state"] == "firing":
                state[key] = {**e["labels"], "severity": e["tier"]}
            else:
                state.pop(key, None)
        for name in names:
            base = name.removesuffix("Escalated")
            rule = pack.rule(base)
            exp = [
                {
                    "exp_labels": lab,
                    "exp_annotations": rule_annotations(rule, pack, escalated=name != base),
                }
                for (n, _), lab in sorted(state.items())
                if n == name
            ]
            checks.append({"eval_time": format_duration(t), "alertname": name, "exp_alerts": exp})
    (tmp_path / "rules.yml").write_text(run_in_process(["alerts", "export"], capsys)[1])
    doc = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series(scn), "alert_rule_test": checks}],
    }
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    done = subprocess.run(
        [promtool, "test", "rules", "t.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_check_table_and_since(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synthetic: tuple[Path, object]
) -> None:
    store = _store(tmp_path, synthetic[1])
    code, out, _ = run_in_process(["alerts", "check", "--store", str(store)], capsys)
    assert code == 0 and "25 alert state changes" in out and "69 evaluations" in out
    code, out, _ = run_in_process(
        ["alerts", "check", "--store", str(store), "--since", "1800", "--json"], capsys
    )
    later = json.loads(out)
    assert code == 0 and later["start_s"] == 1800.0
    assert all(e["t_s"] >= 1800 for e in later["events"])


def test_malformed_rules_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "rules:\n  - {name: KvFull, signal: kv_cache_usage_ratio, kind: threshold,\n"
        "     threshold: high, tier: alert, why: w}\n"
    )
    for argv in (
        ["alerts", "export", "--rules", str(bad)],
        ["alerts", "check", "--store", str(tmp_path / "x.duckdb"), "--rules", str(bad)],
    ):
        code, out, err = run_in_process(argv, capsys)
        assert code == 2 and out == ""
        assert err.count("\n") == 1, err
        assert f"{bad}: rule 'KvFull': field 'threshold'" in err


def test_bad_flags_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(["alerts", "export", "--format", "nagios"], capsys)
    assert code == 2 and "unknown export format 'nagios'" in err
    code, _, err = run_in_process(["alerts", "export", "--tests"], capsys)
    assert code == 2 and "--tests needs --out" in err
    code, _, err = run_in_process(
        ["alerts", "check", "--store", str(tmp_path / "none.duckdb")], capsys
    )
    assert code == 2 and "does not exist" in err


@pytest.mark.integration
def test_export_with_tests_passes_promtool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH; install Debian's `prometheus` package")
    for fmt in ("prometheus", "k8s"):
        out_dir = tmp_path / fmt
        code, out, err = run_in_process(
            ["alerts", "export", "--format", fmt, "--out", str(out_dir), "--tests", "--json"],
            capsys,
        )
        assert code == 0, err
        written = json.loads(out)
        assert written["tests"] == 2 * len(load_pack().rules)
        for args in (
            ["check", "rules", "kvscope-rules.yml"],
            ["test", "rules", "kvscope-rules.test.yml"],
        ):
            done = subprocess.run([promtool, *args], cwd=out_dir, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
    crd = yaml.safe_load((tmp_path / "k8s" / "kvscope-prometheusrule.yaml").read_text())
    assert crd["kind"] == "PrometheusRule"


def test_list_and_dashboards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(["alerts", "list", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 14 and all(r["why"] and r["promql"] for r in rows)
    f = tmp_path / "dash" / "kvscope.json"
    code, out, _ = run_in_process(["dashboards", "export", "--out", str(f), "--json"], capsys)
    summary = json.loads(out)
    assert code == 0 and summary["panels"] == 13 and summary["queries"] >= 20
    assert json.loads(f.read_text())["panels"][0]["targets"][0]["expr"]


@pytest.mark.integration
def test_watch_rules_live(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "interval: 1s\nrules:\n  - {name: EngineDown, signal: engine_up, kind: threshold,\n"
        '     op: "==", threshold: 0, for: 1s, tier: alert, why: scrape failing}\n'
    )
    argv = [
        "watch",
        "--engine",
        f"http://127.0.0.1:{port}",
        "--interval",
        "0.25",
        "--duration",
        "3",
        "--no-store",
        "--rules",
        str(rules),
        "--json",
    ]
    code, out, err = run_in_process(argv, capsys)
    # Exit 1 (issue #21): the watch ran, but the one engine it was asked for never answered.
    assert code == 1, err
    assert json.loads(out)["alerts"]["firing"] == ["EngineDown"]
    assert "FIRING EngineDown tier=alert" in err
