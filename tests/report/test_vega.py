"""The inlined charting library: cached on disk by version, usable without a writable home."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvscope.report import vega


def test_bundle_is_cached_on_disk_and_survives_an_unwritable_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    vega.javascript_bundle.cache_clear()
    try:
        first = vega.javascript_bundle()
        assert "vegaEmbed" in first and len(first) > 100_000
        cached = list((tmp_path / "cache" / "kvscope").glob("vl-convert-*-bundle.js"))
        assert len(cached) == 1 and cached[0].read_text() == first
        assert not list((tmp_path / "cache" / "kvscope").glob(".bundle-*"))  # no temp left
        vega.javascript_bundle.cache_clear()
        t0 = time.perf_counter()
        assert vega.javascript_bundle() == first  # read back from disk
        assert time.perf_counter() - t0 < 1.0
        (tmp_path / "file").write_text("x")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # mkdir fails under it
        vega.javascript_bundle.cache_clear()
        assert vega.javascript_bundle() == first
    finally:
        vega.javascript_bundle.cache_clear()


def test_spec_json_cannot_close_its_script_element() -> None:
    div = vega.chart_div({"title": "</script><script>alert(1)</script>"}, "t")
    assert div.count("</script>") == 1
