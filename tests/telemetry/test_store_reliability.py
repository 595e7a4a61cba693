"""Issue #20 for the store: a file that is not a kvscope store is refused in one line and never
modified; retention refuses NaN/inf and is one transaction; export checks its output first."""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import duckdb
import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _foreign(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.duckdb"
    if kind == "empty-duckdb":
        duckdb.connect(str(p)).close()
    elif kind == "other-tables":
        con = duckdb.connect(str(p))
        con.execute("CREATE TABLE payroll (name VARCHAR, salary DOUBLE)")
        con.execute("INSERT INTO payroll VALUES ('a', 1.0)")
        con.close()
    elif kind == "wrong-samples":
        con = duckdb.connect(str(p))
        con.execute("CREATE TABLE samples (id INTEGER, body VARCHAR)")
        con.close()
    elif kind == "text":
        p.write_text("hello, I am a text file\n")
    elif kind == "zero-bytes":
        p.write_bytes(b"")
    elif kind == "parquet-like":
        p.write_bytes(b"PAR1" + bytes(range(256)) * 8 + b"PAR1")
    return p


FOREIGN = ["empty-duckdb", "other-tables", "wrong-samples", "text", "zero-bytes", "parquet-like"]


@pytest.mark.parametrize("kind", FOREIGN)
@pytest.mark.parametrize("mode", ["read", "maintain", "write"])
def test_foreign_file_is_refused_and_left_alone(tmp_path: Path, kind: str, mode: str) -> None:
    p = _foreign(tmp_path, kind)
    before = _digest(p)
    if kind == "empty-duckdb" and mode == "write":
        # An empty DuckDB database holds nothing to lose: a writer may make it a store.
        with Store(p) as st:
            assert st.count() == 0
        return
    kwargs = {"read": {"read_only": True}, "maintain": {"create": False}, "write": {}}[mode]
    with pytest.raises(KvscopeError) as exc:
        Store(p, **kwargs)
    msg = exc.value.one_line()
    assert msg.startswith(f"{p}: not a kvscope store ("), msg
    assert "\n" not in msg
    assert _digest(p) == before  # not one byte written (no table, no marker)
    assert sorted(os.listdir(tmp_path)) == [p.name]  # and no .wal beside it


def test_directory_and_device_are_refused(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match="is a directory"):
        Store(tmp_path)
    with pytest.raises(KvscopeError, match="not a regular file"):
        Store("/dev/null", read_only=True)


def test_store_made_by_kvscope_is_marked_and_reopens(tmp_path: Path) -> None:
    p = tmp_path / "s.duckdb"
    with Store(p) as st:
        st.append([Sample(1.0, "gpu:0", "m", 1.0)])
    with Store(p, read_only=True) as st:
        assert st.query("SELECT format FROM kvscope_store") == [(1,)]
        assert st.count() == 1


def test_store_from_before_the_marker_still_opens(tmp_path: Path) -> None:
    p = tmp_path / "old.duckdb"
    con = duckdb.connect(str(p))
    con.execute(
        "CREATE TABLE samples (t_s DOUBLE NOT NULL, source VARCHAR NOT NULL, metric VARCHAR "
        "NOT NULL, labels VARCHAR NOT NULL, value DOUBLE, res_s DOUBLE NOT NULL DEFAULT 0)"
    )
    con.execute("INSERT INTO samples VALUES (1, 'gpu:0', 'm', '', 2, 0)")
    con.close()
    with Store(p, read_only=True) as st:
        assert st.count() == 1


def _history(p: Path, n: int = 135) -> None:
    with Store(p) as st:
        st.append([Sample(1000.0 + i, "gpu:0", "m", float(i)) for i in range(n)])


def _rows(p: Path) -> list[tuple[object, ...]]:
    with Store(p, read_only=True) as st:
        return st.query("SELECT * FROM samples ORDER BY t_s, res_s")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -60.0, 1e-300])
def test_downsample_refuses_a_bad_bucket_and_keeps_every_row(tmp_path: Path, bad: float) -> None:
    # Old code: bucket NaN grouped all 135 rows under NaN times (11 rows left), exit 0.
    p = tmp_path / "s.duckdb"
    _history(p)
    before = _rows(p)
    with Store(p, create=False) as st, pytest.raises(KvscopeError, match="bucket"):
        st.downsample(older_than_s=2000.0, bucket_s=bad)
    assert _rows(p) == before


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_retention_refuses_non_finite_horizons(tmp_path: Path, bad: float) -> None:
    p = tmp_path / "s.duckdb"
    _history(p)
    before = _rows(p)
    with Store(p, create=False) as st:
        with pytest.raises(KvscopeError, match="cut-off"):
            st.retain(newer_than_s=bad)  # inf used to delete every row
        with pytest.raises(KvscopeError, match="cut-off"):
            st.downsample(older_than_s=bad, bucket_s=60.0)
    assert _rows(p) == before


class _FailingDrop:
    """A connection that fails the drop step, after the downsample step has run."""

    def __init__(self, con: object) -> None:
        self.con = con

    def execute(self, sql: str, *args: object) -> object:
        if sql.startswith("DELETE FROM samples WHERE t_s <"):
            raise duckdb.IOException("disk full (injected)")
        return self.con.execute(sql, *args)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.con.close()  # type: ignore[attr-defined]


def test_maintain_is_one_transaction(tmp_path: Path) -> None:
    """A failure in the drop step leaves what the downsample step did undone."""
    p = tmp_path / "s.duckdb"
    _history(p)
    before = _rows(p)
    with Store(p, create=False) as st:
        st._con = _FailingDrop(st._con)
        with pytest.raises(KvscopeError, match="nothing was changed"):
            st.maintain(downsample_before_s=1100.0, bucket_s=60.0, drop_before_s=1010.0)
    assert _rows(p) == before


def test_export_checks_its_output_and_writes_whole_files(tmp_path: Path) -> None:
    p = tmp_path / "s.duckdb"
    _history(p, 10)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    with Store(p, read_only=True) as st:
        with pytest.raises(KvscopeError, match="is a directory"):
            st.export(tmp_path / "adir", "parquet")
        with pytest.raises(KvscopeError, match=r"afile.*(is a file|parent is a file)"):
            st.export(tmp_path / "afile" / "x.parquet", "parquet")
        with pytest.raises(KvscopeError, match="--since"):
            st.export(tmp_path / "o.csv", "csv", since_s=math.nan)
        assert st.export(tmp_path / "o.csv", "csv") == 10
    assert sorted(os.listdir(tmp_path)) == ["adir", "afile", "o.csv", "s.duckdb"]  # no temp left
