"""How fast kvscope says no: hostile inputs that once hung or cost minutes, timed end to end.

Each case runs the real ``kvscope`` command in a fresh process (imports included) and prints
its wall time, exit code and the one line it printed; the targets are those of issue 20:

- a bench against a server that stalls after its headers ends within ``--duration`` plus
  ``--stream-timeout`` (plus start-up), every request kept as ``timeout``;
- a config with a million layers, a workload of 10^15 requests and a snapshot whose entries
  share one 20,000-frame list by pickle memo are answered in under 2 s each;
- ``watch --engine`` at a port where nothing listens warns within 2 s and exits non-zero.

    PYTHONPATH=src python benchmarks/reliability.py
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def kvscope(*args: str, cwd: Path, timeout: float = 120) -> tuple[float, int, str]:
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return time.perf_counter() - start, r.returncode, last


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memo_snapshot(path: Path, entries: int = 6_000, frames: int = 20_000) -> None:
    shared = [{"filename": f"f{i}.py", "line": i, "name": f"fn{i}"} for i in range(frames)]
    trace = [
        {"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0, "time_us": i,
         "frames": shared}
        for i in range(entries)
    ]  # fmt: skip
    blocks = [
        {"address": 4096 * i, "size": 512, "requested_size": 512, "state": "active_allocated",
         "frames": shared}
        for i in range(entries)
    ]  # fmt: skip
    seg = {"device": 0, "address": 0, "total_size": 4096 * entries, "stream": 0,
           "segment_type": "large", "blocks": blocks, "frames": shared}  # fmt: skip
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}, protocol=4))


def row(name: str, wall: float, rc: int, line: str, target: str) -> None:
    print(f"| {name} | {wall:.2f} s | {rc} | {target} | {line[:90]} |")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print("| case | wall | exit | target | last stderr line |")
        print("|---|---:|---:|---|---|")

        cfg = d / "layers"
        cfg.mkdir()
        (cfg / "config.json").write_text(json.dumps({
            "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "num_hidden_layers": 1_000_000, "max_position_embeddings": 8192,
        }))  # fmt: skip
        row("plan, 1,000,000 layers", *kvscope("plan", "--model", str(cfg), "--gpu", "H100",
            cwd=d), "< 2 s")  # fmt: skip
        row("workload generate, 10^15 requests", *kvscope(
            "workload", "generate", "--arrival", "poisson:rate=1000000000", "--duration",
            "1000000", "--out", str(d / "w.jsonl"), cwd=d), "< 2 s")  # fmt: skip
        snap = d / "memo.pickle"
        memo_snapshot(snap)
        row(f"memtrace analyze, memo-shared frames ({snap.stat().st_size / 1e3:.0f} KB)",
            *kvscope("memtrace", "analyze", str(snap), "--no-cache", "--json", cwd=d),
            "< 2 s")  # fmt: skip

        port = free_port()
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvscope.cli.main", "watch", "--engine",
             f"http://127.0.0.1:{port}", "--duration", "3", "--interval", "0.5", "--no-store"],
            cwd=d, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        first = proc.stderr.readline()
        warned_s = time.perf_counter() - start
        rest = proc.stderr.read()
        rc = proc.wait()
        wall = time.perf_counter() - start
        last = (rest.strip().splitlines() or [first.strip()])[-1]
        row(f"watch, nothing listening (3 s run; first warning at {warned_s:.2f} s: "
            f"{first.strip()[:50]})", wall, rc, last, "warn < 2 s, exit != 0")  # fmt: skip

        sys.path.insert(0, str(ROOT / "src"))
        from kvscope.bench.prompts import calibration_words

        # The preflight's calibration probes are answered; every request of the run stalls.
        answered = str(len(calibration_words()))
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "kvscope.cli.main", "mock-server", "--port", str(port),
             "--stall-after", answered, "--stall-tokens", "2"],
            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            out = d / "stall"
            wall, rc, line = kvscope(
                "bench", "--url", f"http://127.0.0.1:{port}", "--model", "mock", "--out",
                str(out), "--arrival", "poisson:rate=5", "--duration", "5", "--prompt-len",
                "16", "--output-len", "32", "--stream-timeout", "2",
                cwd=d, timeout=700,
            )  # fmt: skip
        finally:
            server.terminate()
            server.wait()
        summary = json.loads((out / "summary.json").read_text()) if out.exists() else {}
        kinds = summary.get("errors_by_kind")
        row(f"bench, server stalls after headers (5 s, stream timeout 2 s): {kinds}",
            wall, rc, line, "< 5 + 2 s + start-up")  # fmt: skip


if __name__ == "__main__":
    main()
