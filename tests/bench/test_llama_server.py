"""End to end against a real engine: llama.cpp's ``llama-server`` on CPU (tiny random model).

The binary is built once by ``scripts/build_llama_server.sh`` (the Makefile does it before
``make test``); without it these tests skip with that reason. The model is written by
``tests/llama_cpp.py`` at session start, so nothing is downloaded.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from bench_helpers import LlamaServer, cli_env, kvscope

from kvscope.errors import KvscopeError
from kvscope.results import read_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _bench(server: LlamaServer, out: Path, *flags: str) -> dict[str, object]:
    r = kvscope("bench", "--url", server.url, "--model", "tiny", "--out", str(out), "--json",
                *flags, timeout=180)  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr
    s: dict[str, object] = json.loads(r.stdout)
    s["_rc"] = r.returncode
    return s


def test_streaming_timings_usage_and_metrics(llama_server: LlamaServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    s = _bench(
        llama_server, out, "--arrival", "poisson:rate=8", "--num-requests", "24",
        "--prompt-len", "48", "--output-len", "16", "--scrape-interval", "0.1",
    )  # fmt: skip
    t = pq.read_table(out / "requests.parquet")
    why = {k: s.get(k) for k in ("_rc", "completed", "incomplete", "errors_by_kind", "warnings")}
    why["errors"] = [e for e in t.column("error").to_pylist() if e]
    assert s["_rc"] == 0 and s["completed"] == 24, why
    # llama-server closes the connection after every streamed answer; a request that took
    # such a connection from the pool before the close arrived went out again, counted
    assert s["resends"] == sum(t.column("resends").to_pylist()) <= 24
    # ignore_eos honoured and counted from the engine's usage chunk
    assert t.column("output_tokens").to_pylist() == [16] * 24
    # chunk counting would undercount: byte tokens of an unfinished UTF-8 character stream as
    # empty text (llama-server holds them back), which is why usage is the source of truth;
    # how many a random model emits varies with its sampled tokens (a run saw fewer than 8)
    chunks = t.column("chunks").to_pylist()
    assert all(1 <= c <= 16 for c in chunks)
    # the calibrated prompts land on the engine's own prompt-token count
    pe = s["prompt_tokens_error"]
    assert pe["requests_with_usage"] == 24  # type: ignore[index]
    assert pe["mean_abs_tokens"] <= 2.0  # type: ignore[index]
    # timings are ordered and positive: send < first byte <= first token <= end
    sent = np.asarray(t.column("sent_s").to_pylist())
    fb = np.asarray(t.column("first_byte_s").to_pylist())
    ft = np.asarray(t.column("first_token_s").to_pylist())
    end = np.asarray(t.column("finish_s").to_pylist())
    assert np.all(sent < fb) and np.all(fb <= ft) and np.all(ft < end)
    assert 0 < s["ttft_p50_s"] < 2.0 and 0 < s["itl_p50_s"] < 0.5  # type: ignore[operator]
    # /metrics was scraped during the run with llama.cpp's names
    srv = pq.read_table(out / "server.parquet")
    gen = np.asarray(srv.column("generation_tokens_total").to_pylist())
    prompt = np.asarray(srv.column("prompt_tokens_total").to_pylist())
    assert srv.num_rows >= 10 and all(srv.column("scrape_ok").to_pylist())
    assert gen[-1] - gen[0] >= 16 * 20 and np.all(np.diff(gen) >= 0)
    assert prompt[-1] > prompt[0]
    assert max(srv.column("requests_running").to_pylist()) >= 1
    found = s["server_metrics"]["metrics_found"]  # type: ignore[index]
    assert {"prompt_tokens_total", "generation_tokens_total", "requests_running"} <= set(found)


def test_chat_endpoint(llama_server: LlamaServer, tmp_path: Path) -> None:
    s = _bench(
        llama_server, tmp_path / "chat", "--endpoint", "chat", "--arrival", "poisson:rate=5",
        "--num-requests", "6", "--prompt-len", "32", "--output-len", "8",
    )  # fmt: skip
    assert s["_rc"] == 0 and s["completed"] == 6
    t = pq.read_table(tmp_path / "chat" / "requests.parquet")
    assert t.column("output_tokens").to_pylist() == [8] * 6
    # the chat template adds tokens the calibration measured as overhead
    assert min(t.column("usage_prompt_tokens").to_pylist()) > 32 - 4


def _closed_after(sock: socket.socket, request: bytes) -> bool:
    """Send ``request`` on ``sock``, read its whole answer, then: did the server hang up?"""
    sock.sendall(request)
    data = b""

    def complete() -> bool:
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        return len(body) >= int(length[1]) if length else body.endswith(b"\r\n0\r\n\r\n")

    while not complete():
        chunk = sock.recv(65536)
        if not chunk:
            return True
        data += chunk
    assert b" 200 OK" in data.split(b"\r\n", 1)[0] and b"Connection: close" not in data
    sock.settimeout(2.0)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_llama_server_hangs_up_after_every_streamed_answer(llama_server: LlamaServer) -> None:
    """Why kvscope's pool resends (kvscope.bench.pool): the engine closes a connection it
    offered to keep alive once a stream ends, yet keeps it open after a plain answer."""
    host, port = "127.0.0.1", llama_server.port
    head = f"Host: {host}:{port}\r\nConnection: keep-alive\r\n"
    body = json.dumps({"model": "tiny", "prompt": "hello there", "max_tokens": 2, "stream": True})
    post = (
        f"POST /v1/completions HTTP/1.1\r\n{head}Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()
    models = f"GET /v1/models HTTP/1.1\r\n{head}\r\n".encode()
    with socket.create_connection((host, port), timeout=10) as sock:
        assert not _closed_after(sock, models)
        assert _closed_after(sock, post)


def test_context_overflow_is_an_http_error(llama_server: LlamaServer, tmp_path: Path) -> None:
    # 512 tokens per slot (-c 2048 -np 4): a 900-token prompt is refused with HTTP 400
    s = _bench(
        llama_server, tmp_path / "big", "--arrival", "poisson:rate=10", "--num-requests", "4",
        "--prompt-len", "900", "--output-len", "4",
    )  # fmt: skip
    assert s["_rc"] == 1
    assert s["errors_by_kind"] == {"http_status": 4}
    assert s["errors_by_http_status"] == {"400": 4}


def test_server_killed_mid_run_keeps_every_request(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    out = tmp_path / "crash"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", "bench", "--url", llama_server.url,
         "--model", "tiny", "--arrival", "poisson:rate=10", "--num-requests", "60",
         "--prompt-len", "32", "--output-len", "200", "--scrape-interval", "0.1",
         "--out", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill once some requests have finished
        try:
            t = read_table(out, "requests")
        except KvscopeError:  # the stream exists but its header is not flushed yet
            t = None
        if t is not None and t.num_rows >= 5:
            break
        time.sleep(0.2)
    # kill while a request streams: a Poisson gap can leave every slot idle for a moment
    while time.monotonic() < deadline and llama_server.requests_processing() == 0:
        time.sleep(0.005)
    llama_server.kill()
    stdout, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr
    assert proc.returncode == 1, stderr  # the error rate is far above 5 %
    s = json.loads(stdout)
    t = pq.read_table(out / "requests.parquet")
    assert t.num_rows == 60  # every request is in the table: measured, failed or cut off
    kinds = t.column("error_kind").to_pylist()
    status = t.column("status").to_pylist()
    assert status.count("ok") >= 5
    assert kinds.count("connection_refused") >= 10  # sent after the kill
    assert kinds.count("connection_reset") >= 1  # streaming when it died
    assert s["errors_by_kind"]["connection_refused"] == kinds.count("connection_refused")
    # the ok requests before the crash keep their full timings
    ok = t.filter(pc.equal(t.column("status"), "ok"))
    assert all(n == 200 for n in ok.column("output_tokens").to_pylist())
    assert all(np.isfinite(ok.column("ttft_s").to_numpy()))
    srv = pq.read_table(out / "server.parquet")
    scrapes = srv.column("scrape_ok").to_pylist()
    assert scrapes[0] is True and scrapes[-1] is False  # the waveform shows the crash
