"""KV-cache events: vLLM 0.33.0's own block pool and ZMQ publisher, subscribed and stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import zmq
from tests.telemetry.kv_events_harness import Publisher, free_port

from kvscope.telemetry.kv_events.schema import BlockStored, EventBatch, encode_batch
from kvscope.telemetry.kv_events.subscriber import KvEventSubscriber
from kvscope.telemetry.kv_events.table import KvEventTable, read_rows, wait_until
from kvscope.telemetry.store import Store
from kvscope.workload.kv_reuse.reconstruct import chains, engine_hit_rate
from kvscope.workload.kv_reuse.stack import miss_ratio_curve

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _sub(port: int, sink, **kw) -> KvEventSubscriber:  # type: ignore[no-untyped-def]
    s = KvEventSubscriber(f"tcp://127.0.0.1:{port}", sink, **kw)
    s.start()
    s.ready.wait(5)
    time.sleep(0.3)  # PUB/SUB joins late: let the subscription reach the publisher
    return s


def test_every_event_is_stored_and_the_1x_curve_is_vllms_hit_rate(tmp_path: Path) -> None:
    port = free_port()
    pub = Publisher(port)
    store = Store(tmp_path / "w.duckdb")
    table = KvEventTable(store._con, flush_s=0.5).start()
    sub = _sub(port, table.put)
    try:
        tot = pub.cmd("run 3000")
        assert wait_until(lambda: sub.counts.batches >= tot["batches"], 10)
    finally:
        sub.close()
        table.close()
        store.close()
        pub.close()
    c = sub.counts
    assert (c.batches, c.events) == (tot["batches"], tot["events"])
    assert (c.blocks_stored, c.blocks_removed) == (tot["blocks_stored"], tot["blocks_removed"])
    assert c.lost == c.gaps == c.malformed == 0
    rows = read_rows(tmp_path / "w.duckdb")
    assert sum(r[3] == "stored" for r in rows) == tot["blocks_stored"]
    assert sum(r[3] == "removed" for r in rows) == tot["blocks_removed"]
    reqs = chains(rows)
    assert len(reqs) == tot["requests"]
    vllm_rate = tot["hits"] / tot["queries"]
    assert 0.3 < vllm_rate < 0.9  # the workload reuses, and the pool is too small for all
    assert engine_hit_rate(reqs) == pytest.approx(vllm_rate, abs=1e-12)
    mrc = miss_ratio_curve(reqs)
    # vLLM keeps one of its num_blocks as the null block (block_pool.py at v0.33.0)
    assert mrc.hit_rate(199)[0] == pytest.approx(vllm_rate, abs=1e-12)


def test_a_bigger_pool_in_vllm_hits_what_the_curve_says(tmp_path: Path) -> None:
    """The curve at 2x, read off a 200-block run, against vLLM itself with 399 blocks."""
    got: dict[int, float] = {}
    rows_small: list = []
    for blocks in (200, 399):
        port = free_port()
        pub = Publisher(port, num_blocks=blocks)
        store = Store(tmp_path / f"w{blocks}.duckdb")
        table = KvEventTable(store._con, flush_s=0.5).start()
        sub = _sub(port, table.put)
        try:
            tot = pub.cmd("run 2000")
            assert wait_until(lambda: sub.counts.batches >= tot["batches"], 10)  # noqa: B023
        finally:
            sub.close()
            table.close()
            store.close()
            pub.close()
        got[blocks] = tot["hits"] / tot["queries"]
        if blocks == 200:
            rows_small = read_rows(tmp_path / "w200.duckdb")
    mrc = miss_ratio_curve(chains(rows_small))
    assert got[399] > got[200] + 0.05
    assert mrc.hit_rate(398)[0] == pytest.approx(got[399], abs=0.01)


def test_a_gap_is_recovered_from_replay_or_counted_lost() -> None:
    port, rport = free_port(), free_port()
    pub = Publisher(port, rport)
    got: list = []
    warned: list[str] = []
    sub = _sub(
        port, got.append, replay_endpoint=f"tcp://127.0.0.1:{rport}", on_warning=warned.append
    )
    bare = _sub(port, lambda rows: None, on_warning=warned.append)
    try:
        pub.cmd("run 100")
        assert wait_until(lambda: sub.counts.batches == 100 == bare.counts.batches, 10)
        sub.disconnect()
        bare.disconnect()
        time.sleep(0.3)
        pub.cmd("run 50")  # published while neither is connected
        sub.connect()
        bare.connect()
        time.sleep(0.5)
        tot = pub.cmd("run 20")
        assert wait_until(lambda: sub.counts.last_seq == bare.counts.last_seq == 169, 10)
    finally:
        sub.close()
        bare.close()
        pub.close()
    assert (sub.counts.gaps, sub.counts.replayed, sub.counts.lost) == (1, 50, 0)
    assert sub.counts.events == tot["events"]
    assert (bare.counts.gaps, bare.counts.lost) == (1, 50)
    assert sum("50 batches lost" in w for w in warned) == 1


def test_a_restarted_publisher_is_counted_and_followed() -> None:
    port = free_port()
    pub = Publisher(port)
    sub = _sub(port, lambda rows: None)
    try:
        first = pub.cmd("run 40")
        assert wait_until(lambda: sub.counts.batches == 40, 10)
        pub.kill()
        pub = Publisher(port, seed=2)
        time.sleep(1.0)  # SUB reconnects on its own (ZMQ's reconnect interval is 100 ms)
        second = pub.cmd("run 30")
        assert wait_until(lambda: sub.counts.batches == 70, 10)
    finally:
        sub.close()
        pub.close()
    assert sub.counts.restarts == 1
    assert sub.counts.events == first["events"] + second["events"]


def test_malformed_and_unknown_version_messages_are_counted_with_one_warning() -> None:
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    warned: list[str] = []
    sub = _sub(port, lambda rows: None, on_warning=warned.append)
    good = encode_batch(EventBatch(1.0, [BlockStored([b"\x01"], None, list(range(16)), 16)]))
    future = msgspec.msgpack.encode([1.0, [{"type": "BlockMoved", "to": "CXL"}]])
    try:
        for seq, frames in enumerate(
            [
                [b"", (0).to_bytes(8, "big"), good],
                [b"", (1).to_bytes(8, "big"), b"\xc1 not msgpack"],
                [b"", (2).to_bytes(8, "big"), future],
                [b"", b"short"],
                [b"", (3).to_bytes(8, "big"), good],
            ]
        ):
            pub.send_multipart(frames)
            del seq
        assert wait_until(lambda: sub.counts.last_seq == 3, 5)
    finally:
        sub.close()
        pub.close(linger=0)
    assert sub.counts.malformed == 3
    assert sub.counts.events == 2
    assert len(warned) == 1 and "skipped" in warned[0]


def _kvscope(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_kvscope_watch_subscribes_stores_and_summarises(tmp_path: Path) -> None:
    port = free_port()
    pub = Publisher(port)
    store = tmp_path / "w.duckdb"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "watch",
            "--kv-events",
            f"tcp://127.0.0.1:{port}",
            "--duration",
            "12",
            "--interval",
            "0.5",
            "--flush",
            "1",
            "--store",
            str(store),
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(6)  # the CLI's start-up, then the subscription
        tot = pub.cmd("run 1500")
        out, err = watch.communicate(timeout=60)
    finally:
        pub.close()
    assert watch.returncode == 0, err
    summary = json.loads(out)["kv_events"]
    got = summary["endpoints"][f"tcp://127.0.0.1:{port}"]
    assert (got["events"], got["blocks_stored"]) == (tot["events"], tot["blocks_stored"])
    assert got["lost"] == 0
    reuse = summary["reuse"]
    assert reuse["engine_hit_rate"] == pytest.approx(tot["hits"] / tot["queries"], abs=1e-12)
    assert reuse["pool_blocks_seen"] == 199
    assert reuse["miss_ratio_curve"]["1x"] == pytest.approx(tot["hits"] / tot["queries"])
    assert summary["eviction_churn_blocks"] > 0
    assert len(read_rows(store)) == tot["blocks_stored"] + tot["blocks_removed"]
    # the run directory's report draws the events: residency, reuse distance, the curve
    from browser import report_specs
    from kvscope.report import build_report

    specs = report_specs(build_report([tmp_path / "run"]))
    for title in ("Block residency", "Reuse distance", "Miss-ratio curve"):
        assert specs[title]["data"]["values"][0]["x"], title


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-events", "http://127.0.0.1:5557"],
        ["--kv-events-replay", "tcp://127.0.0.1:1"],
        ["--kv-events", "tcp://127.0.0.1:99999"],
    ],
)
def test_bad_kv_events_options_exit_2_in_one_line(args: list[str], tmp_path: Path) -> None:
    r = _kvscope("watch", *args, "--duration", "1", "--store", str(tmp_path / "s.duckdb"))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_kvscope_watch_reports_a_gap_with_the_number_lost_and_skips_a_bad_message(
    tmp_path: Path,
) -> None:
    """Through the CLI: batches 2..5 never sent, one payload of an unknown version."""
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.XPUB)  # XPUB: the subscription arrives as a message, no guessing
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    watch = subprocess.Popen(
        [
            sys.executable, "-m", "kvscope.cli.main", "watch",
            "--kv-events", f"tcp://127.0.0.1:{port}", "--duration", "10", "--interval", "0.5",
            "--store", str(tmp_path / "w.duckdb"), "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    good = encode_batch(EventBatch(1.0, [BlockStored([b"\x01"], None, list(range(16)), 16)]))
    future = msgspec.msgpack.encode([1.0, [{"type": "BlockMoved", "to": "CXL"}]])
    try:
        assert pub.poll(30_000), "watch never subscribed"
        pub.recv()
        for seq, payload in ((0, good), (1, good), (6, good), (7, future), (8, good)):
            pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
        pub.close(linger=0)
    assert watch.returncode == 0, err
    got = json.loads(out)["kv_events"]["endpoints"][f"tcp://127.0.0.1:{port}"]
    assert (got["gaps"], got["lost"], got["malformed"], got["batches"]) == (1, 4, 1, 4)
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert sum("4 batches lost before seq 6" in w for w in warnings) == 1
    assert sum("skipped" in w for w in warnings) == 1
    assert "4 KV-event batch(es) lost to sequence gaps" in err
    assert "Traceback" not in err
