"""WEKA agentic traces: real sample, sub-agents, scoped hash ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.traces.weka import load_weka


def test_sample_directory(traces_dir: Path) -> None:
    w = load_weka(traces_dir / "weka_agentic_sample")
    assert len(w) == 62 and w.spec["conversations"] == 5  # SOURCE.md: 5 files, 62 requests
    assert w.hash_block_size == 64
    assert w.session_ids is not None and len(set(w.session_ids.tolist())) == 5
    # full blocks only: hashes never cover more tokens than the prompt has
    assert np.all(np.diff(w.hash_offsets) * 64 <= w.prompt_tokens)  # type: ignore[arg-type]
    thinks = [
        r["think_time"]
        for f in sorted((traces_dir / "weka_agentic_sample").glob("*.json"))
        for r in json.loads(f.read_text())["requests"]
    ]
    assert w.spec["mean_think_time_s"] == pytest.approx(sum(thinks) / len(thinks))


def test_local_ids_do_not_collide_between_conversations(traces_dir: Path) -> None:
    d = traces_dir / "weka_agentic_sample"
    a = load_weka(d / "trace_0012.json")
    b = load_weka(d / "trace_0026.json")
    # both number their blocks from 1, but scoped hashes differ
    assert a[0].prefix_hashes[0] != b[0].prefix_hashes[0]


def test_subagent_requests_are_offset_and_isolated(tmp_path: Path) -> None:
    doc = {
        "id": "c1",
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [
            {"t": 0.0, "type": "n", "in": 200, "out": 10, "hash_ids": [1, 2, 3]},
            {
                "t": 30.0,
                "type": "subagent",
                "agent_id": "ag7",
                "requests": [
                    {"t": 0.0, "type": "s", "in": 130, "out": 5, "hash_ids": [1, 2]},
                    {"t": 4.5, "type": "s", "in": 140, "out": 5, "hash_ids": [1, 2]},
                ],
            },
            {"t": 40.0, "type": "n", "in": 260, "out": 10, "hash_ids": [1, 2, 3, 4]},
        ],
    }
    f = tmp_path / "c1.json"
    f.write_text(json.dumps(doc))
    w = load_weka(f)
    assert w.arrival_s.tolist() == [0.0, 30.0, 34.5, 40.0]
    assert w.session_ids.tolist() == ["c1", "c1/ag7", "c1/ag7", "c1"]  # type: ignore[union-attr]
    assert w[3].prefix_hashes[:3] == w[0].prefix_hashes  # parent reuses its own prefix
    assert w[1].prefix_hashes[0] != w[0].prefix_hashes[0]  # sub-agent cache is separate


def test_bad_request_named_by_json_path(tmp_path: Path) -> None:
    f = tmp_path / "c2.json"
    f.write_text(
        json.dumps(
            {
                "id": "c2",
                "block_size": 64,
                "requests": [
                    {"t": 0.0, "in": 100, "out": 5, "hash_ids": [1]},
                    {"t": 1.0, "in": "x", "out": 5},
                ],
            }
        )
    )
    with pytest.raises(KvscopeError, match=r"c2\.json: requests\[1\]: field 'in'"):
        load_weka(f)
    assert len(load_weka(f, skip_bad=True)) == 1
