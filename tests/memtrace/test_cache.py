"""The columnar cache: hit on the second load, miss after a change, honours its env vars."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kvscope.memtrace import cache
from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.load import load_snapshot


def test_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "a"))
    assert cache.cache_root() == tmp_path / "a"
    monkeypatch.delenv("KVSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.cache_root() == tmp_path / "x" / "kvscope"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert cache.cache_root() == tmp_path / "h" / ".cache" / "kvscope"


def test_second_load_is_a_hit_with_identical_results(
    snaps: dict[str, Path], tmp_path: Path
) -> None:
    p = tmp_path / "s.pickle"
    shutil.copy(snaps["oom"], p)
    a, hit_a = load_snapshot(p)
    b, hit_b = load_snapshot(p)
    assert (hit_a, hit_b) == (False, True)
    np.testing.assert_array_equal(a.trace.addr, b.trace.addr)
    assert a.frames == b.frames
    assert analyze(a) == analyze(b)
    assert (cache.cache_root() / "memtrace").is_dir()


def test_change_invalidates(snaps: dict[str, Path], tmp_path: Path) -> None:
    p = tmp_path / "s.pickle"
    shutil.copy(snaps["oom"], p)
    load_snapshot(p)
    shutil.copy(snaps["fragmentation"], p)
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    cols, hit = load_snapshot(p)
    assert not hit and analyze(cols).ooms == []


def test_no_cache_flag_writes_nothing(snaps: dict[str, Path]) -> None:
    load_snapshot(snaps["oom"], use_cache=False)
    assert not (cache.cache_root() / "memtrace").exists()


def test_unwritable_cache_is_not_fatal(
    snaps: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(blocker / "sub"))
    cols, hit = load_snapshot(snaps["oom"])
    assert not hit and len(cols.trace) > 0
