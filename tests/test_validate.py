"""The input-validation layer: numbers, files, output paths, sizes."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.validate import (
    INT64_MAX,
    bounded_alloc,
    count,
    finite,
    fresh_run_dir,
    load_json,
    read_text,
    writable_file,
)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_finite_accepts_exactly_the_finite_floats(x: float) -> None:
    if math.isfinite(x):
        assert finite(x, "--x") == x
    else:
        with pytest.raises(KvscopeError, match="--x must be a finite number"):
            finite(x, "--x")


def test_finite_ranges_and_types() -> None:
    assert finite("0.5", "f", low=0, high=1) == 0.5
    with pytest.raises(KvscopeError, match=r"must be > 0, not 0"):
        finite(0, "f", low=0, low_open=True)
    with pytest.raises(KvscopeError, match=r"must be <= 1, not 1.5"):
        finite(1.5, "f", high=1)
    for bad in (True, "abc", None, [1]):
        with pytest.raises(KvscopeError, match="must be a number"):
            finite(bad, "f")


def test_count_bounds() -> None:
    assert count("12", "n") == 12
    assert count(3.0, "n") == 3
    with pytest.raises(KvscopeError, match="must be an integer"):
        count(2.5, "n")
    with pytest.raises(KvscopeError, match=">= 1"):
        count(0, "n", low=1)
    with pytest.raises(KvscopeError, match="<= "):
        count(INT64_MAX + 1, "n")


def test_read_text_errors(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(KvscopeError, match=r"not UTF-8 text \(byte 0xe9 at offset 3\)"):
        read_text(tmp_path / "latin1.txt")
    with pytest.raises(KvscopeError, match="no such file"):
        read_text(tmp_path / "missing")
    with pytest.raises(KvscopeError, match="is a directory"):
        read_text(tmp_path)
    with pytest.raises(KvscopeError, match="not a regular file"):
        read_text("/dev/zero")
    (tmp_path / "big.txt").write_bytes(b"x" * 2048)
    with pytest.raises(KvscopeError, match="over the"):
        read_text(tmp_path / "big.txt", max_bytes=1024)


def test_load_json_refuses_non_finite_literals(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text('{"hidden_size": NaN}')
    with pytest.raises(KvscopeError, match="NaN, which is not a finite number"):
        load_json(p)
    p.write_text('{"a": 1')
    with pytest.raises(KvscopeError, match="not valid JSON"):
        load_json(p)


def test_writable_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(KvscopeError, match="is a directory"):
        writable_file(tmp_path)
    with pytest.raises(KvscopeError, match="is a file"):
        writable_file(tmp_path / "f" / "under")
    assert writable_file(tmp_path / "new" / "deeper" / "out.json").name == "out.json"
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(KvscopeError, match="permission denied"):
            writable_file(ro / "x")


def test_fresh_run_dir_keeps_an_earlier_run_unless_forced(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.parquet").write_text("measured")
    with pytest.raises(KvscopeError) as err:
        fresh_run_dir(run)
    assert "already exists and is not empty. Pass --force" in err.value.one_line()
    assert (run / "requests.parquet").read_text() == "measured"
    assert fresh_run_dir(run, force=True) == run
    assert list(run.iterdir()) == []
    assert fresh_run_dir(tmp_path / "empty-or-new") == tmp_path / "empty-or-new"


def test_bounded_alloc() -> None:
    bounded_alloc(1 << 20, "a small table")
    with pytest.raises(KvscopeError, match=r"would need 7,450\.6 GiB"):
        bounded_alloc(8 * 10**12, "the workload")
    with pytest.raises(KvscopeError, match="unbounded"):
        bounded_alloc(float("inf"), "the workload")


def test_force_never_empties_the_current_home_or_a_foreign_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the CLI fuzzer: `--out '' --force` cleared the directory it ran in.
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "app.py").write_text("precious")
    monkeypatch.chdir(work / "src")
    for path in ("", " ", ".", "..", str(work)):
        with pytest.raises(KvscopeError):
            fresh_run_dir(path, force=True)
    assert (work / "src" / "app.py").read_text() == "precious"
    # a folder holding a file kvscope never writes is not replaced either
    with pytest.raises(KvscopeError) as err:
        fresh_run_dir(work, force=True)
    assert "did not write" in err.value.one_line() or "current" in err.value.one_line()
    other = tmp_path / "other"
    (other / "point-1").mkdir(parents=True)
    (other / "point-1" / "notes.docx").write_text("x")
    with pytest.raises(KvscopeError, match=r"point-1/notes.docx, which kvscope did not write"):
        fresh_run_dir(other, force=True)
    # an earlier run, sweep points included, is replaced
    run = tmp_path / "run"
    (run / "max-num-seqs=8").mkdir(parents=True)
    for name in ("summary.json", "requests.parquet", "steps.arrows", "max-num-seqs=8/x.json"):
        (run / name).write_text("old")
    assert fresh_run_dir(run, force=True) == run and list(run.iterdir()) == []
