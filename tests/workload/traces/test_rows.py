"""Row-level field parsing and the bad-row policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.traces.rows import BadRow, RowPolicy, as_float, as_int, json_object_line


def test_as_int_accepts_integral_values_only() -> None:
    assert as_int("12", "f") == 12 and as_int(12.0, "f") == 12 and as_int(7, "f", 1) == 7
    for bad in ("1.5", "x", None, True, -1):
        with pytest.raises(BadRow):
            as_int(bad, "f")


def test_as_float_rejects_non_finite_and_negative() -> None:
    assert as_float("2.5", "t") == 2.5
    for bad in ("nan", "inf", "-1", "", None, False):
        with pytest.raises(BadRow):
            as_float(bad, "t")


def test_policy_raises_with_location_or_counts(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    with pytest.raises(KvscopeError, match=r"x\.csv:7: broken\.$"):
        RowPolicy(f, skip_bad=False).bad(7, "broken")
    p = RowPolicy(f, skip_bad=True)
    for i in range(8):
        p.bad(i + 2, f"reason {i}")
    p.bad("requests[3]", "json path")
    s = p.summary()
    assert s["skipped_bad_rows"] == 9 and len(s["skipped_examples"]) == 5
    assert s["skipped_examples"][0] == f"{f}:2: reason 0"


@pytest.mark.parametrize(
    ("line", "why"),
    [('{"a": 1', "not valid JSON"), ("[1, 2]", "must be a JSON object"), ("7", "JSON object")],
)
def test_a_jsonl_line_must_be_one_json_object(line: str, why: str) -> None:
    with pytest.raises(BadRow, match=why):
        json_object_line(line)
    assert json_object_line('{"timestamp": 3, "x": [1]}') == {"timestamp": 3, "x": [1]}
