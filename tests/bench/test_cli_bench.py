"""``kvscope bench`` against unusable servers: one clear line each, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import free_port, kvscope, start_odd_server, stop

pytestmark = pytest.mark.integration

BASE = ("--model", "m", "--arrival", "poisson:rate=5", "--num-requests", "3")


def _one_line_error(r: object, *needles: str) -> str:
    out = r.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert r.returncode == 2, r.stderr  # type: ignore[attr-defined]
    assert len(out) == 1 and out[0].startswith("kvscope: error:"), out
    assert "Traceback" not in r.stderr  # type: ignore[attr-defined]
    for n in needles:
        assert n in out[0], out[0]
    return out[0]


def test_bad_url(tmp_path: Path) -> None:
    r = kvscope("bench", "--url", "localhost:8000", *BASE, "--out", str(tmp_path / "r"))
    _one_line_error(r, "bad URL")


def test_refused_connection(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = kvscope("bench", "--url", url, *BASE, "--out", str(tmp_path / "r"))
    _one_line_error(r, "cannot connect to", url)


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("html", "not an OpenAI-compatible streaming endpoint: response is text/html"),
        ("json", "not an OpenAI-compatible streaming endpoint: response is application/json"),
        ("silent", "accepted the request but streamed no token within 1 s"),
        ("mute-headers", "did not answer within 1 s"),
    ],
)
def test_servers_that_are_not_openai_streaming(tmp_path: Path, mode: str, needle: str) -> None:
    proc, url = start_odd_server(mode)
    try:
        r = kvscope(
            "bench", "--url", url, *BASE, "--request-timeout", "1", "--out", str(tmp_path / "r")
        )
        _one_line_error(r, needle)
    finally:
        stop(proc)  # type: ignore[arg-type]


def test_http_error_page(tmp_path: Path) -> None:
    # Python's own http.server answers POST with 501 and an HTML page
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        import time
        import urllib.request

        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        r = kvscope(
            "bench", "--url", f"http://127.0.0.1:{port}", *BASE, "--out", str(tmp_path / "r")
        )
        _one_line_error(r, "answered http 501")
    finally:
        proc.kill()
        proc.wait()


def test_bad_flags(tmp_path: Path) -> None:
    r = kvscope(
        "bench", "--url", "http://127.0.0.1:1", *BASE, "--slo", "ttft=1", "--out", str(tmp_path)
    )
    _one_line_error(r, "--slo")
    r = kvscope(
        "bench", "--url", "http://127.0.0.1:1", *BASE, "--endpoint", "embeddings",
        "--out", str(tmp_path),
    )  # fmt: skip
    _one_line_error(r, "--endpoint")
