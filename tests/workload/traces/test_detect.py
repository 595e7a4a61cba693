"""Format detection by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.workload.traces.detect import detect_format, load_trace

DATA = Path(__file__).parents[1] / "data"


def test_real_traces_are_recognised(traces_dir: Path) -> None:
    assert (
        detect_format(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv") == "azure"
    )
    assert detect_format(traces_dir / "mooncake_fast25" / "synthetic_trace.jsonl") == "mooncake"
    assert detect_format(traces_dir / "weka_agentic_sample" / "trace_0022.json") == "weka"
    assert detect_format(traces_dir / "weka_agentic_sample") == "weka"
    assert detect_format(DATA / "sharegpt_small.json") == "sharegpt"
    assert detect_format(DATA / "chatlog_timestamped.jsonl") == "sharegpt"


def test_unknown_content_asks_for_format(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(KvscopeError) as info:
        detect_format(f)
    assert "--format" in info.value.one_line()


def test_format_override_and_unknown_name(traces_dir: Path) -> None:
    f = traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    assert len(load_trace(f, fmt="azure")) == 8_819
    with pytest.raises(UnknownNameError):
        load_trace(f, fmt="azur")
    with pytest.raises(KvscopeError, match="no such file"):
        load_trace(Path("/nonexistent/trace.csv"))
