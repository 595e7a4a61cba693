"""Azure LLM inference CSV: real 2023 files, 2024 timestamp style, malformed rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.stream import Workload
from kvscope.workload.traces.azure import load_azure

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_conv_trace_rows_span_and_seven_digit_timestamps(traces_dir: Path) -> None:
    w = load_azure(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    assert len(w) == 19_366
    # first two rows: 18:15:46.6805900 and 18:15:50.9951690 -> 4.314579 s apart (all 7 digits)
    assert w.arrival_s[1] == pytest.approx(4.314579, abs=1e-9)
    assert w.spec["start_time"] == "2023-11-16 18:15:46.6805900"
    assert w.request_ids[0] == "AzureLLMInferenceTrace_conv:2"  # file line
    assert w.prompt_tokens[:2].tolist() == [374, 396] and w.output_tokens[:2].tolist() == [44, 109]


def test_2024_style_offsets_and_mixed_precision(tmp_path: Path) -> None:
    f = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    f.write_text(
        HEADER + "2024-05-12 00:00:00.012+00:00,100,10\n"
        "2024-05-12 00:00:01.5000001+00:00,200,20\n2024-05-12 00:00:03+00:00,300,30"
    )
    w = Workload.from_file(f)
    assert w.spec["format"] == "azure"
    assert w.arrival_s.tolist() == pytest.approx([0.0, 1.4880001, 2.988])


def test_bad_row_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.0000000,abc,44\n2023-11-16 18:15:48.0,10,5\n"
    )
    with pytest.raises(KvscopeError) as info:
        load_azure(f)
    assert info.value.message.startswith(f"{f}:3: ")
    assert "ContextTokens" in info.value.message and "--skip-bad" in info.value.one_line()


def test_skip_bad_counts_every_bad_row(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
        "not a time,10,4\n2023-11-16 18:15:47.0,0,4\n2023-11-16 18:15:48.0,12\n"
        "2023-11-16 18:15:49.0,10,5\n"
    )
    w = load_azure(f, skip_bad=True)
    assert len(w) == 2 and w.spec["skipped_bad_rows"] == 3
    assert [e.split(": ")[0] for e in w.spec["skipped_examples"]] == [f"{f}:3", f"{f}:4", f"{f}:5"]
    assert w.request_ids.tolist() == ["t:2", "t:6"]
    assert np.allclose(w.arrival_s, [0.0, 2.3194100])


def test_missing_column_is_named(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n")
    with pytest.raises(KvscopeError, match="GeneratedTokens"):
        load_azure(f)
