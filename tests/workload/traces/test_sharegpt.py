"""ShareGPT-style text traces: turn expansion, token estimate, unanswered turns."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.traces.sharegpt import estimate_tokens, load_sharegpt

DATA = Path(__file__).parents[1] / "data"


def test_conversations_expand_to_one_request_per_answered_turn() -> None:
    w = load_sharegpt(DATA / "sharegpt_small.json")
    assert len(w) == 3 and w.spec["unanswered_turns"] == 1
    assert w.request_ids.tolist() == ["conv-a.0", "conv-a.1", "conv-b.0"]
    second = w[1].prompt_text
    assert second is not None and second.startswith(w[0].prompt_text or "")
    assert w[1].turn == 1 and w[1].session_id == "conv-a"
    assert w.spec["has_arrival_times"] is False


def test_token_estimate_is_four_bytes_per_token() -> None:
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("") == 1
    assert estimate_tokens("é" * 4) == 2  # 8 UTF-8 bytes


def test_bad_rows(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    f.write_text('{"prompt": "hi", "output_tokens": 3}\n{"prompt": 5}\nnot json\n')
    with pytest.raises(KvscopeError, match=r"log\.jsonl:2: field 'prompt'"):
        load_sharegpt(f)
    w = load_sharegpt(f, skip_bad=True)
    assert len(w) == 1 and w.spec["skipped_bad_rows"] == 2
