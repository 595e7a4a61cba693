"""BurstGPT CSV: both column sets, failed rows kept apart, malformed rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.stream import Workload

V11 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
V12 = (
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
)


def test_v11_columns_and_failed_rows(tmp_path: Path) -> None:
    f = tmp_path / "BurstGPT_1.csv"
    f.write_text(
        V11 + "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    w = Workload.from_file(f)
    assert w.spec["format"] == "burstgpt" and w.spec["columns"] == "v1.1"
    assert len(w) == 2 and w.spec["failed_requests"] == 1
    assert w.arrival_s.tolist() == [0.0, 113.0]
    assert w.prompt_tokens.tolist() == [472, 417] and w.output_tokens.tolist() == [18, 276]
    assert w.spec["models"] == {"ChatGPT": 1, "GPT-4": 1}
    assert w.request_ids.tolist() == ["BurstGPT_1:2", "BurstGPT_1:4"]  # file lines


def test_fast_and_row_by_row_paths_agree(tmp_path: Path) -> None:
    rows = "".join(
        f"{3 * i},{'GPT-4' if i % 3 else 'ChatGPT'},{100 + i},{i % 7},1,API log\n"
        for i in range(200)
    )
    good = tmp_path / "good.csv"
    good.write_text(V11 + rows)
    bad = tmp_path / "good_plus_bad.csv"
    bad.write_text(V11 + rows + "601,GPT-4,x,5,1,API log\n")  # forces the row-by-row reader
    a = Workload.from_file(good)
    b = Workload.from_file(bad, skip_bad=True)
    assert b.spec["skipped_bad_rows"] == 1 and a.spec["failed_requests"] == 29
    for k in ("failed_requests", "models", "start_offset_s"):
        assert a.spec[k] == b.spec[k]
    assert [r.request_id.split(":")[1] for r in a] == [r.request_id.split(":")[1] for r in b]
    assert list(a) != [] and [r.arrival_s for r in a] == [r.arrival_s for r in b]


def test_v12_columns_keep_sessions(tmp_path: Path) -> None:
    f = tmp_path / "BurstGPT_v1.2.csv"
    f.write_text(
        V12 + "0,s-1,2.5,ChatGPT,100,20,120,Conversation log\n"
        "3,s-1,1.5,ChatGPT,150,30,180,Conversation log\n"
    )
    w = Workload.from_file(f)
    assert w.spec["columns"] == "v1.2"
    assert w.session_ids is not None and w.session_ids.tolist() == ["s-1", "s-1"]


def test_malformed_row_line_and_skip(tmp_path: Path) -> None:
    f = tmp_path / "b.csv"
    f.write_text(V11 + "5,ChatGPT,472,18,490,Conversation log\n5,ChatGPT,-3,18,15,API log\n")
    with pytest.raises(KvscopeError, match=r"b\.csv:3: field 'Request tokens'"):
        Workload.from_file(f)
    w = Workload.from_file(f, skip_bad=True)
    assert len(w) == 1 and w.spec["skipped_bad_rows"] == 1
