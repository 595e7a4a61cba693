"""``kvscope telemetry``, ``alerts``, ``dmon`` and ``dashboards`` under bad input (issue #20):
exit 2 with one line, nothing lost from a store, nothing written into a database kvscope did
not make, and outputs checked before the work."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import duckdb
import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store

FIX = Path(__file__).resolve().parents[1] / "telemetry" / "fixtures"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    p = tmp_path / "s.duckdb"
    with Store(p) as st:  # 135 rows, the audit's history
        st.append(
            [Sample(1000.0 + i, "gpu:0", "gpu_memory_used_bytes", float(i)) for i in range(135)]
        )
    return p


def _rows(p: Path) -> list[tuple[object, ...]]:
    with Store(p, read_only=True) as st:
        return st.query("SELECT * FROM samples ORDER BY t_s, res_s")


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--bucket", "nan", "--downsample-older-than", "0s"], "--bucket"),
        (["--bucket", "inf", "--downsample-older-than", "0s"], "--bucket"),
        (["--bucket", "0", "--downsample-older-than", "0s"], "--bucket must be >="),
        (["--bucket", "1e-300", "--downsample-older-than", "0s"], "--bucket must be >="),
        (["--drop-older-than", "inf"], "--drop-older-than"),
        (["--drop-older-than", "nan"], "--drop-older-than"),
        (["--downsample-older-than", "1" + "0" * 400], "--downsample-older-than"),
        (["--drop-older-than", "yesterday"], "--drop-older-than"),
    ],
)
def test_retain_with_bad_values_loses_nothing(
    store: Path, capsys: pytest.CaptureFixture[str], flags: list[str], words: str
) -> None:
    # Old code: --bucket nan turned 135 rows into 11 with NaN times and exited 0.
    before = _rows(store)
    code, _, err = run_in_process(["telemetry", "retain", "--store", str(store), *flags], capsys)
    one_error_line(code, err, words)
    assert _rows(store) == before


def test_retain_does_not_create_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(
        ["telemetry", "retain", "--store", str(tmp_path / "none.duckdb")], capsys
    )
    one_error_line(code, err, "does not exist")
    assert os.listdir(tmp_path) == []


def _foreign(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.duckdb"
    if kind == "empty-duckdb":
        duckdb.connect(str(p)).close()
    elif kind == "other-tables":
        con = duckdb.connect(str(p))
        con.execute("CREATE TABLE payroll (name VARCHAR, salary DOUBLE)")
        con.execute("INSERT INTO payroll VALUES ('a', 1.0)")
        con.close()
    elif kind == "binary":
        p.write_bytes(bytes(range(256)) * 16)
    else:
        p.write_text("just text\n")
    return p


@pytest.mark.parametrize("kind", ["empty-duckdb", "other-tables", "binary", "text"])
@pytest.mark.parametrize(
    "command",
    [
        ["telemetry", "export", "--out", "OUT/t.parquet"],
        ["telemetry", "retain", "--drop-older-than", "1h"],
        ["alerts", "check"],
    ],
)
def test_foreign_store_is_one_line_and_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, command: list[str]
) -> None:
    p = _foreign(tmp_path, kind)
    before = _digest(p)
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command] + ["--store", str(p)]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, f"{p}: not a kvscope store (")
    assert _digest(p) == before
    assert os.listdir(tmp_path) == [p.name]  # no .wal, no export file


def test_export_out_checked_before_reading(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for out, words in [
        (tmp_path / "adir", "is a directory"),
        (tmp_path / "afile" / "x.parquet", "afile"),
    ]:
        code, _, err = run_in_process(
            ["telemetry", "export", "--store", str(store), "--out", str(out)], capsys
        )
        one_error_line(code, err, words)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        code, _, err = run_in_process(
            ["telemetry", "export", "--store", str(store), "--out", str(locked / "t.csv")], capsys
        )
        one_error_line(code, err, "permission denied")
    finally:
        locked.chmod(0o700)


def test_since_nan_is_refused(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(
        ["alerts", "check", "--store", str(store), "--since", "nan"], capsys
    )
    one_error_line(code, err, "--since")


BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "must be a mapping"),
        (b"- 1\n- 2\n", "must be a mapping"),
        (b"rules: [\xff]\n", "not UTF-8"),
        (BOMB.encode(), "YAML nodes"),
        (b"[" * 5000 + b"]" * 5000, "YAML"),
        (b"rules: [\n  - {name: Bad", "not valid YAML"),
        (
            b"rules:\n  - {name: Bad, signal: kv_cache_usage_ratio, kind: threshold, op: '>',\n"
            b"     threshold: .inf, for: 1m, tier: warning, why: w}\n",
            "rule 'Bad': field 'threshold' must be a finite number",
        ),
        (
            b"rules:\n  - {name: Bad, signal: kv_cache_usage_ratio, kind: threshold, op: '=>',\n"
            b"     threshold: 0.9, for: 1m, tier: warning, why: w}\n",
            "rule 'Bad': field 'op'",
        ),
        (
            b"rules:\n  - {name: Bad, signal: kv_cache_usage_ratio, kind: threshold, op: '>',\n"
            b"     threshold: 0.9, for: -60, tier: warning, why: w}\n",
            "rule 'Bad': field 'for' must not be negative",
        ),
    ],
)
@pytest.mark.parametrize("command", [["alerts", "list"], ["alerts", "export"]])
def test_bad_rule_files_are_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    words: str,
    command: list[str],
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_bytes(content)
    code, out, err = run_in_process([*command, "--rules", str(rules)], capsys)
    one_error_line(code, err, words)
    assert "nan" not in out and "inf" not in out  # never exported as '> nan'


def test_alerts_export_out_and_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("x")
    code, _, err = run_in_process(["alerts", "export", "--out", str(tmp_path / "afile")], capsys)
    one_error_line(code, err, "is a file")
    code, _, err = run_in_process(
        ["alerts", "export", "--format", "k8s", "--namespace", "http://u:p@h:1/"], capsys
    )
    one_error_line(code, err, "--namespace")
    code, _, err = run_in_process(
        ["alerts", "export", "--out", str(tmp_path / "new" / "dir")], capsys
    )
    assert code == 0, err
    assert (tmp_path / "new" / "dir" / "kvscope-rules.yml").exists()


def test_dashboards_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for out, words in [
        (tmp_path / "adir", "is a directory"),
        (tmp_path / "afile" / "d.json", "afile"),
    ]:
        code, _, err = run_in_process(["dashboards", "export", "--out", str(out)], capsys)
        one_error_line(code, err, words)
    # A missing folder is made (as for every --out file), and a credential in the title is
    # not written into a file others import.
    out = tmp_path / "missing" / "folder" / "d.json"
    code, _, err = run_in_process(
        ["dashboards", "export", "--out", str(out), "--title", "x http://u:PW-4417@h:1/"], capsys
    )
    assert code == 0, err
    assert json.loads(out.read_text())["panels"] and "PW-4417" not in out.read_text()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"# gpu pwr\n# Idx W\n    0  \xff\xfe\n", "not UTF-8"),
        (bytes(range(256)) * 4, "not UTF-8"),
        (b"", "neither"),
        (b"# gpu pwr\n# Idx W\n    0  45\n    0", "1 values under a 2-column header"),
        (
            b"timestamp, index, memory.used [MiB]\n2024/05/01 10:00:00.000, 0, " + b"9" * 200_000,
            "CSV",
        ),
    ],
)
def test_bad_dmon_logs_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str
) -> None:
    log = tmp_path / "log.txt"
    log.write_bytes(content)
    code, _, err = run_in_process(["dmon", "parse", str(log)], capsys)
    one_error_line(code, err, words)


def test_dmon_nan_cell_is_missing_not_a_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.txt"
    log.write_text("# gpu pwr\n# Idx W\n    0  nan\n    0  inf\n    0  70\n")
    code, out, err = run_in_process(["dmon", "parse", str(log), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [s["value"] for s in doc["samples"]] == [70.0] and doc["missing_values"] == 2


def test_dmon_out_is_checked_and_a_colon_is_a_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    src = str(FIX / "dmon_pucm.txt")
    code, _, err = run_in_process(["dmon", "parse", src, "--out", str(tmp_path / "adir")], capsys)
    one_error_line(code, err, "is a directory")
    out = tmp_path / "lognormal:median=-1"  # pyarrow took 'lognormal:' for a URI scheme
    code, _, err = run_in_process(["dmon", "parse", src, "--out", str(out)], capsys)
    assert code == 0, err
    assert out.stat().st_size > 0


def test_output_paths_are_echoed_without_credentials(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A URL typed where a path belongs is a path ('http:/u:PW@h:1'); printed back, it must
    # not carry the password.
    monkeypatch.chdir(tmp_path)
    out = "http://u:PW-Echo-5521@h:1"
    for argv in (
        ["telemetry", "export", "--store", str(store), "--out", out, "--format", "csv", "--json"],
        ["telemetry", "export", "--store", str(store), "--out", out + ".csv"],
        ["dashboards", "export", "--out", "http://u:PW-Echo-5521@h:2/d.json", "--json"],
    ):
        code, stdout, err = run_in_process(argv, capsys)
        assert code == 0, err
        assert "PW-Echo-5521" not in stdout + err
