"""A recorded capture of vLLM 0.33.0's own publisher, replayed: from-events, simulate, the MRC.

The fixture (scripts/record_kv_events_capture.py, 600 requests on a 100-block pool) is the
``kv_events`` table kvscope's subscriber stored from vLLM's KVCacheManager and
ZmqEventPublisher, with vLLM's own prefix-cache totals in its metadata. It is loaded into a
real DuckDB store, turned into a workload by ``kvscope workload from-events``, and replayed
by ``kvscope simulate`` with pools of 1x, 2x and 4x the engine's: the simulator's hit rate
must be the miss-ratio curve's at each size (issue 24), and vLLM's at 1x.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, run_in_process, run_json
from kvscope.telemetry.kv_events.subscriber import COLUMNS
from kvscope.telemetry.kv_events.table import KvEventTable, read_rows
from kvscope.telemetry.store import Store
from kvscope.workload.kv_reuse.reconstruct import chains
from kvscope.workload.kv_reuse.stack import miss_ratio_curve
from kvscope.workload.stream import Workload

FIXTURE = Path(__file__).parent / "fixtures" / "kv_events_vllm_0_33_0.parquet"


def capture(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The fixture as a watch store's kv_events table, and its recording's metadata."""
    t = pq.read_table(FIXTURE)
    meta = json.loads(t.schema.metadata[b"kvscope.kv_events"])
    path = tmp_path / "capture.duckdb"
    store = Store(path)
    table = KvEventTable(store._con, flush_s=3600)
    table.put({c: t.column(c).to_pylist() for c in COLUMNS})
    table.close()
    store.close()
    return path, meta


def test_from_events_gives_the_engines_requests_with_its_hashes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, meta = capture(tmp_path)
    out = tmp_path / "w.parquet"
    doc = run_json(capsys, "workload", "from-events", str(store), "--out", str(out), "--json")
    tot, pub = meta["totals"], meta["publisher"]
    assert doc["requests"] == tot["requests"]
    assert doc["spec"]["engine_hit_rate"] == pytest.approx(tot["hits"] / tot["queries"], abs=1e-12)
    w = Workload.from_file(out)
    blocks = pub["prefix_blocks"] + pub["suffix_blocks"]
    assert set(w.prompt_tokens.tolist()) == {blocks * pub["block_size"]}
    assert w.hash_block_size == pub["block_size"]
    assert w.arrival_s[0] == 0 and (w.arrival_s[1:] >= w.arrival_s[:-1]).all()
    # requests of one document share exactly their prefix blocks' hashes
    firsts = {tuple(w.hashes_of(i)[: pub["prefix_blocks"]].tolist()) for i in range(len(w))}
    assert 1 < len(firsts) <= pub["docs"]
    assert (
        len({int(h) for i in range(len(w)) for h in w.hashes_of(i)})
        == doc["spec"]["distinct_blocks"]
    )
    assert set(w.output_tokens.tolist()) == {1}  # the stream has no outputs: 1 by default
    again = tmp_path / "o.jsonl"
    args = ["workload", "from-events", str(store), "--out", str(again), "--json"]
    run_json(capsys, *args, "--output-len", "uniform:min=10,max=500", "--seed", "4")
    drawn = Workload.from_file(again).output_tokens
    assert 10 <= drawn.min() < drawn.max() <= 500


def test_simulate_on_the_replay_hits_what_the_curve_says_at_k_x(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, meta = capture(tmp_path)
    out = tmp_path / "w.jsonl"
    run_json(capsys, "workload", "from-events", str(store), "--out", str(out), "--json")
    mrc = miss_ratio_curve(chains(read_rows(store)))
    pool = meta["publisher"]["num_blocks"] - 1  # vLLM keeps one block as the null block
    got = {}
    for k in (1, 2, 4):
        sim = run_json(
            capsys, "simulate", "--workload", str(out), "--block-size", "16",
            "--num-gpu-blocks", str(k * pool + 1), "--max-num-seqs", "1", "--json",
        )  # fmt: skip
        assert sim["completed"] == meta["totals"]["requests"]
        got[k] = sim["prefix_hit_rate"]
        assert got[k] == pytest.approx(mrc.hit_rate(k * pool)[0], abs=0.01), k
    vllm_rate = meta["totals"]["hits"] / meta["totals"]["queries"]
    assert got[1] == pytest.approx(vllm_rate, abs=0.01)
    assert got[4] > got[2] > got[1] + 0.05  # the sizes differ enough for the check to bite


@pytest.mark.parametrize("case", ["not_duckdb", "no_table", "empty", "other_endpoint"])
def test_bad_captures_are_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.duckdb"
    args = []
    if case == "not_duckdb":
        path.write_text("t_s,kind\n1,stored\n")
    elif case == "other_endpoint":
        path, _ = capture(tmp_path)
        args = ["--endpoint", "tcp://10.0.0.9:5557"]
    else:
        store = Store(path)
        if case == "empty":
            KvEventTable(store._con).close()
        store.close()
    code, _, err = run_in_process(
        ["workload", "from-events", str(path), "--out", str(tmp_path / "w.jsonl"), *args], capsys
    )
    needle = {
        "not_duckdb": "not a DuckDB",
        "no_table": "no kv_events table",
        "empty": "holds no events",
        "other_endpoint": "no events of endpoint",
    }[case]
    one_error_line(code, err, needle)
    assert not (tmp_path / "w.jsonl").exists()


def test_without_out_it_describes_the_capture_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, meta = capture(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_in_process(["workload", "from-events", str(store)], capsys)
    assert code == 0, err
    rate = meta["totals"]["hits"] / meta["totals"]["queries"]
    assert f"{meta['totals']['requests']:,} requests" in out and f"{rate:.1%}" in out
    assert "pass --out" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before
