"""Start vLLM's own KVCacheManager + ZmqEventPublisher (oracle venv) and talk to it."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from tests.oracle import vllm_python

DRIVER = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_kv_events_publisher.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Publisher:
    """One publisher process; ``cmd("run 100")`` returns its running totals."""

    def __init__(self, port: int, replay_port: int | None = None, **cfg: Any) -> None:
        conf = {
            "endpoint": f"tcp://*:{port}",
            "num_blocks": 200,
            "block_size": 16,
            "docs": 40,
            "prefix_blocks": 6,
            "suffix_blocks": 2,
            "seed": 1,
            **cfg,
        }
        if replay_port is not None:
            conf["replay_endpoint"] = f"tcp://127.0.0.1:{replay_port}"
        self.proc = subprocess.Popen(
            [vllm_python(), str(DRIVER), json.dumps(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.cmd("")  # the ready line

    def cmd(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if line:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        assert out, "the vLLM publisher exited"
        return dict(json.loads(out))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def capture(requests: int, **cfg: Any) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """Serve ``requests`` on one publisher with ``cfg``, subscribed by kvscope into a DuckDB
    store's kv_events table; that table's rows and the publisher's own totals."""
    import tempfile
    import time

    from kvscope.telemetry.kv_events.subscriber import KvEventSubscriber
    from kvscope.telemetry.kv_events.table import KvEventTable, read_rows, wait_until
    from kvscope.telemetry.store import Store

    port = free_port()
    pub = Publisher(port, **cfg)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "capture.duckdb"
        store = Store(path)
        table = KvEventTable(store._con, flush_s=0.5).start()
        sub = KvEventSubscriber(f"tcp://127.0.0.1:{port}", table.put)
        sub.start()
        sub.ready.wait(5)
        time.sleep(0.5)  # PUB/SUB joins late: let the subscription reach the publisher
        try:
            tot = pub.cmd(f"run {requests}")
            if not wait_until(lambda: sub.counts.batches >= tot["batches"], 10):
                raise RuntimeError("the subscriber missed batches")
        finally:
            sub.close()
            table.close()
            store.close()
            pub.close()
        return read_rows(path), tot
