"""Miss-ratio curve vs kvscope simulate on the replayed capture vs vLLM itself, at k x the pool.

One capture of vLLM 0.33.0's KVCacheManager + ZmqEventPublisher (oracle venv), stored by
kvscope's subscriber in a DuckDB store (tests/telemetry/kv_events_harness.py), is turned into
a workload by ``kvscope workload from-events`` and replayed by ``kvscope simulate`` with
pools of k x the engine's (``--num-gpu-blocks k*P+1``, vLLM's null block on top; batch size 1
as the publisher serves). Beside each: the curve's hit rate at k*P blocks, and vLLM's own
hit rate from a second run of the same request stream on a k x pool (k = 2, 4). Usage:
``python benchmarks/kv_events_replay.py [REQUESTS] [NUM_BLOCKS]`` (defaults 3000, 200).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.telemetry.kv_events_harness import capture

from kvscope.telemetry.kv_events.subscriber import COLUMNS
from kvscope.telemetry.kv_events.table import KvEventTable
from kvscope.telemetry.store import Store
from kvscope.workload.kv_reuse.reconstruct import chains
from kvscope.workload.kv_reuse.stack import miss_ratio_curve

CFG = {"docs": 40, "prefix_blocks": 6, "suffix_blocks": 2}


def kvscope(*args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def main() -> None:
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    pool = blocks - 1
    rows, tot = capture(requests, num_blocks=blocks, **CFG)
    vllm = {1: tot["hits"] / tot["queries"]}
    for k in (2, 4):
        _, t = capture(requests, num_blocks=k * pool + 1, **CFG)
        vllm[k] = t["hits"] / t["queries"]
    mrc = miss_ratio_curve(chains(rows))
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "c.duckdb")
        table = KvEventTable(store._con, flush_s=3600)
        table.put({c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)})
        table.close()
        store.close()
        w = Path(d) / "w.parquet"
        kvscope("workload", "from-events", str(Path(d) / "c.duckdb"), "--out", str(w))
        for k in (1, 2, 4, 8):
            sim = kvscope(
                "simulate", "--workload", str(w), "--block-size", "16",
                "--num-gpu-blocks", str(k * pool + 1), "--max-num-seqs", "1",
            )  # fmt: skip
            line = {
                "k": k,
                "pool_blocks": k * pool,
                "mrc_hit_rate": mrc.hit_rate(k * pool)[0],
                "simulate_hit_rate": sim["prefix_hit_rate"],
                "vllm_hit_rate": vllm.get(k),
                "requests": requests,
                "events": tot["events"],
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
