"""KV-event ingest: vLLM 0.33.0's publisher at a set rate, kvscope's subscriber + store.

Starts benchmarks/vllm_kv_events_publisher.py in the vLLM oracle venv (its KVCacheManager
with events on, its ZmqEventPublisher), subscribes from this process into a DuckDB store's
``kv_events`` table (flush every 5 s, as watch does), and reports per phase: events
published vs received, block rows published vs stored, the achieved rate, and this
process's CPU (os.times user+sys, the subscriber and its store writer together) as a share
of one core. Usage: ``python benchmarks/kv_events_throughput.py [FAST_S] [SLOW_S]``
(defaults 60 and 30: a 60 s phase asking ~8,000 events/s, then one at 1,000 events/s).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.telemetry.kv_events_harness import Publisher, free_port

from kvscope.telemetry.kv_events.subscriber import KvEventSubscriber
from kvscope.telemetry.kv_events.table import KvEventTable, read_rows, wait_until
from kvscope.telemetry.store import Store


def phase(rate: float, secs: float, path: Path) -> dict[str, float]:
    port = free_port()
    pub = Publisher(port, num_blocks=2000, docs=400)
    store = Store(path)
    table = KvEventTable(store._con, flush_s=5.0).start()
    sub = KvEventSubscriber(f"tcp://127.0.0.1:{port}", table.put)
    sub.start()
    sub.ready.wait(5)
    time.sleep(0.5)
    t0, w0 = os.times(), time.monotonic()
    tot = pub.cmd(f"rate {rate} {secs}")
    wait_until(lambda: sub.counts.batches >= tot["batches"], 30)
    t1, w1 = os.times(), time.monotonic()
    sub.close()
    table.close()
    store.close()
    pub.close()
    rows = read_rows(path)
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    return {
        "asked_events_per_s": rate,
        "seconds": tot["seconds"],
        "events_published": tot["events"],
        "events_received": sub.counts.events,
        "events_per_s": tot["events"] / tot["seconds"],
        "block_rows_published": tot["blocks_stored"] + tot["blocks_removed"],
        "block_rows_stored": len(rows),
        "lost": sub.counts.lost,
        "malformed": sub.counts.malformed,
        "subscriber_cpu_share_of_a_core": cpu / (w1 - w0),
    }


def main() -> None:
    fast_s = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    slow_s = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    with tempfile.TemporaryDirectory() as d:
        for rate, secs in ((8000.0, fast_s), (1000.0, slow_s)):
            print(json.dumps(phase(rate, secs, Path(d) / f"kv{int(rate)}.duckdb")), flush=True)


if __name__ == "__main__":
    main()
