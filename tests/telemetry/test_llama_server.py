"""The engine scraper against a live llama.cpp ``llama-server`` on loopback.

The binary comes from scripts/build_llama_server.sh (cached under
~/.cache/kvscope/llama-server-0.3.36/, or $KVSCOPE_LLAMA_SERVER); the model is a tiny random
GGUF written by the test. Without the binary the test skips and says how to build it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvscope.telemetry.engine import EngineScraper
from llama_cpp import llama_server_binary, write_tiny_llama


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def llama_url(tmp_path: Path) -> Iterator[str]:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built: run scripts/build_llama_server.sh (make test does)")
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    port = _port()
    proc = subprocess.Popen(
        [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics",
            "-np",
            "2",
            "-c",
            "2048",
            "-t",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("llama-server did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _complete(url: str, prompt: str, n: int) -> dict[str, int]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return dict(json.loads(r.read())["usage"])


@pytest.mark.integration
@pytest.mark.slow
def test_live_llama_server_metrics_map_to_the_catalogue(llama_url: str) -> None:
    scr = EngineScraper(llama_url, window_s=600)
    before = {s.metric: s.value for s in scr.sample(0.0)}
    assert before["engine_up"] == 1.0
    assert scr.last_page is not None and scr.last_page.kind == "llamacpp"
    usages = [_complete(llama_url, "the cat sat on a mat " * k, 16) for k in (1, 2, 3)]
    after = {s.metric: s.value for s in scr.sample(10.0)}
    gen = sum(u["completion_tokens"] for u in usages)
    prompt = sum(u["prompt_tokens"] for u in usages)
    # The engine's own counters moved by exactly what its responses reported.
    assert after["generation_tokens_total"] - before.get("generation_tokens_total", 0) == gen
    # Shared prefixes are served from llama.cpp's prompt cache: processed + cached = sent.
    processed = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    cached = after["cached_prompt_tokens_total"] - before["cached_prompt_tokens_total"]
    assert processed + cached == prompt and cached > 0
    assert after["generation_tokens_per_second"] == pytest.approx(gen / 10.0)
    assert after["requests_running"] == 0.0 and after["requests_waiting"] == 0.0
    assert scr.last_page.resolved_from["generation_tokens"] == "llamacpp:tokens_predicted"
    # No KV gauge on this build's /metrics: capacity and usage come from /slots (2 x 1024).
    assert after["kv_cache_capacity_tokens"] == 2048.0
    assert after["kv_cache_usage_ratio"] == 0.0  # idle: cached prompts are evictable
