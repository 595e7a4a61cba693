"""Mooncake JSONL: real FAST'25 traces, ms timestamps, 512-token blocks, malformed lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.traces.mooncake import load_mooncake


def test_conversation_trace(traces_dir: Path) -> None:
    w = load_mooncake(traces_dir / "mooncake_fast25" / "conversation_trace.jsonl")
    assert len(w) == 12_031
    assert w.hash_block_size == 512
    assert w.spec["rows_consistent_with_block_size"] == 12_031
    assert w.duration_s == pytest.approx(3536.999)  # last timestamp 3,536,999 ms
    assert w[0].prefix_hashes[:3] == (0, 1, 2)


def test_bad_line_is_named_and_can_be_skipped(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]\n'
        '{"timestamp": 20, "input_length": 700, "output_length": 5}\n'
        '{"timestamp": 30, "output_length": 5, "hash_ids": []}\n'
    )
    with pytest.raises(KvscopeError, match=r"m\.jsonl:2: not valid JSON"):
        load_mooncake(f)
    w = load_mooncake(f, skip_bad=True)
    assert len(w) == 2 and w.spec["skipped_bad_rows"] == 2
    assert w.arrival_s.tolist() == [0.0, 0.02]
    assert w.spec["skipped_examples"][1].startswith(f"{f}:4: missing field(s) input_length")
