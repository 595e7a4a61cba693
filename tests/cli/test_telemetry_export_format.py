"""``kvscope telemetry export`` writes the format its ``--out`` extension (or ``--format``)
names, read back here by pyarrow, Python's csv reader and a JSON-lines reader (issue #21)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.telemetry.export_format import export_format
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store

ROWS = 7


@pytest.fixture
def store(tmp_path: Path) -> Path:
    p = tmp_path / "s.duckdb"
    with Store(p) as st:
        st.append(
            [
                Sample(1000.0 + i, "gpu:0", "gpu_memory_used_bytes", float(i * 10), "gpu=0")
                for i in range(ROWS)
            ]
        )
    return p


def _export(store: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    code, stdout, err = run_in_process(
        ["telemetry", "export", "--store", str(store), "--out", str(out), *extra], capsys
    )
    assert code == 0, err
    return stdout


def test_parquet_by_extension(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.parquet"
    assert "(parquet)" in _export(store, out, capsys)
    t = pq.read_table(out)
    assert t.num_rows == ROWS
    assert t.column("value").to_pylist() == [float(i * 10) for i in range(ROWS)]


def test_csv_by_extension_is_csv(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.csv"
    assert "(csv)" in _export(store, out, capsys)
    assert not out.read_bytes().startswith(b"PAR1")  # the bug: Parquet bytes in x.csv
    rows = list(csv.DictReader(out.open(newline="")))
    assert len(rows) == ROWS
    assert rows[3]["metric"] == "gpu_memory_used_bytes" and float(rows[3]["value"]) == 30.0
    assert rows[0]["labels"] == "gpu=0"


@pytest.mark.parametrize("name", ["x.jsonl", "x.ndjson", "X.JSONL"])
def test_json_lines_by_extension(
    name: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    assert "(jsonl)" in _export(store, out, capsys)
    lines = out.read_text().splitlines()
    assert len(lines) == ROWS
    docs = [json.loads(line) for line in lines]
    assert [d["t_s"] for d in docs] == [1000.0 + i for i in range(ROWS)]
    assert docs[6]["value"] == 60.0 and docs[6]["source"] == "gpu:0"


def test_format_flag_names_a_file_without_extension(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "samples.out"
    _export(store, out, capsys, "--format", "csv")
    assert next(csv.reader(out.open(newline="")))[:3] == ["t_s", "source", "metric"]


@pytest.mark.parametrize(
    ("name", "extra", "needle"),
    [
        ("x.xlsx", (), "cannot tell the export format from the --out extension ('.xlsx')"),
        ("x", (), "no extension"),
        ("x.parquet", ("--format", "csv"), "contradicts"),
        ("x.csv", ("--format", "xml"), "unknown export format 'xml'"),
    ],
)
def test_unknown_or_contradicting_format_is_one_line_and_writes_nothing(
    name: str,
    extra: tuple[str, ...],
    needle: str,
    store: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / name
    code, _, err = run_in_process(
        ["telemetry", "export", "--store", str(store), "--out", str(out), *extra], capsys
    )
    one_error_line(code, err, needle)
    assert not out.exists()


def test_export_format_resolution() -> None:
    assert export_format("a/b.Parquet") == "parquet"
    assert export_format("b.ndjson") == "jsonl"
    assert export_format("b.txt", "NDJSON") == "jsonl"
    assert export_format("b.csv", "csv") == "csv"
