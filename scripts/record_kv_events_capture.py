"""Record a small KV-event capture from vLLM 0.33.0's own block pool and ZMQ publisher.

Starts benchmarks/vllm_kv_events_publisher.py in the vLLM oracle venv
(scripts/build_vllm_oracle.sh), subscribes with kvscope's subscriber into a DuckDB store's
``kv_events`` table (the path ``kvscope watch --kv-events`` takes), and writes that table to
Parquet with vLLM's own totals (prefix-cache hits and queries, blocks stored and removed)
and the publisher's settings in the schema metadata under ``kvscope.kv_events``:

    python scripts/record_kv_events_capture.py OUT.parquet [REQUESTS] [NUM_BLOCKS]

The committed fixture tests/telemetry/fixtures/kv_events_vllm_0_33_0.parquet is
``600 100`` (600 requests, a 100-block pool).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq
from tests.telemetry.kv_events_harness import capture

from kvscope.telemetry.kv_events.table import SCHEMA

META_KEY = b"kvscope.kv_events"


def record(out: Path, requests: int, num_blocks: int) -> dict[str, object]:
    cfg = {"num_blocks": num_blocks, "docs": 30, "prefix_blocks": 6, "suffix_blocks": 2}
    rows, tot = capture(requests, **cfg)
    cols = list(zip(*rows, strict=True))
    meta = {"vllm": "0.33.0", "publisher": {**cfg, "block_size": 16, "seed": 1}, "totals": tot}
    t = pa.table([pa.array(c, f.type) for c, f in zip(cols, SCHEMA, strict=True)], schema=SCHEMA)
    t = t.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True)})
    with out.open("wb") as f:
        pq.write_table(t, f, compression="zstd")
    return meta


def main() -> None:
    out = Path(sys.argv[1])
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    blocks = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    print(json.dumps(record(out, requests, blocks)))


if __name__ == "__main__":
    main()
