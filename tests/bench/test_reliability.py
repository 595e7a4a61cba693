"""``kvscope bench`` under issue #20: no traceback, nothing measured lost, runs that end.

Real servers on 127.0.0.1 in subprocesses: ``kvscope mock-server`` (with its scripted stall)
and the misbehaving ones of ``bench_helpers`` (they answer the preflight's short probes, then
send garbage, 500s or hang up).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from bench_helpers import free_port, kvscope, start_odd_server, stop

from kvscope.bench import BenchOptions, ClientConfig, LoadConfig, run_bench
from kvscope.bench.prompts import PromptBuilder, calibration_words
from kvscope.workload.spec import build_workload

pytestmark = pytest.mark.integration

SHORT = ("--model", "mock", "--prompt-len", "8", "--output-len", "4")


def _one_line_error(r: object, *needles: str) -> str:
    lines = r.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert r.returncode == 2, r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in r.stderr, r.stderr  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("kvscope: error:"), lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _served(url: str) -> float:
    """Requests the mock server has answered (its vllm:request_success_total)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        page = r.read().decode()
    line = next(ln for ln in page.splitlines() if ln.startswith("vllm:request_success_total"))
    return float(line.split()[-1])


def _rows(out: Path) -> list[dict[str, object]]:
    return pq.read_table(out / "requests.parquet").to_pylist()  # type: ignore[no-any-return]


# ------------------------------------------------------------------ 1. run directories
def test_an_existing_run_is_refused_before_any_request_and_kept(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server()
    out = tmp_path / "run"
    first = kvscope("bench", "--url", url, *SHORT, "--num-requests", "6",
                    "--arrival", "poisson:rate=50", "--out", str(out))  # fmt: skip
    assert first.returncode == 0, first.stderr
    served = _served(url)
    again = kvscope("bench", "--url", url, *SHORT, "--num-requests", "2",
                    "--arrival", "poisson:rate=50", "--out", str(out))  # fmt: skip
    _one_line_error(again, "already exists", "--force")
    assert _served(url) == served  # refused before the preflight sent anything
    assert len(_rows(out)) == 6  # the first run's measurements are intact
    forced = kvscope("bench", "--url", url, *SHORT, "--num-requests", "2",
                     "--arrival", "poisson:rate=50", "--out", str(out), "--force")  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert len(_rows(out)) == 2 and not list(out.glob("*.arrows"))


def test_an_existing_search_is_refused_before_any_request(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server()
    out = tmp_path / "search"
    out.mkdir()
    (out / "summary.json").write_text('{"kind": "bench"}\n')
    served = _served(url)
    r = kvscope("bench", "--url", url, *SHORT, "--find-max-rate", "--slo", "ttft_p99=1",
                "--num-requests", "4", "--out", str(out))  # fmt: skip
    _one_line_error(r, "already exists")
    assert _served(url) == served
    assert (out / "summary.json").read_text() == '{"kind": "bench"}\n'


def test_a_run_directory_that_is_a_file_fails_first(tmp_path: Path) -> None:
    # nothing listens there: the path must be refused before a connection is even tried
    url = f"http://127.0.0.1:{free_port()}"
    (tmp_path / "taken").write_text("not a directory\n")
    r = kvscope("bench", "--url", url, *SHORT, "--num-requests", "2",
                "--out", str(tmp_path / "taken"))  # fmt: skip
    _one_line_error(r, "is a file")
    r = kvscope("bench", "--url", url, *SHORT, "--num-requests", "2",
                "--out", str(tmp_path / "taken" / "run"))  # fmt: skip
    _one_line_error(r, "is a file")


# ------------------------------------------------------------------ 2. values
@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--duration", "2", "--arrival", "poisson:rate=5", "--warmup", "5"), "--warmup"),
        (("--num-requests", "4", "--slo", "ttft_p99=inf"), "--slo"),
        (("--num-requests", "4", "--slo", "ttft_p97=1"), "--slo"),
        (("--num-requests", "4", "--stream-timeout", "0"), "--stream-timeout"),
        (("--num-requests", "4", "--request-timeout", "-1"), "--request-timeout"),
    ],
)
def test_values_no_run_could_use_fail_before_it(
    mock_server: Callable[..., str], tmp_path: Path, flags: tuple[str, ...], needle: str
) -> None:
    url = mock_server()
    served = _served(url)
    r = kvscope("bench", "--url", url, *SHORT, *flags, "--out", str(tmp_path / "r"))
    _one_line_error(r, needle)
    assert _served(url) == served and not (tmp_path / "r").exists()


@pytest.mark.parametrize("url", ["not-a-url", "ftp://x", "http://", "http://u:Pw-9z8y@h:70000"])
def test_urls_that_are_not_servers(tmp_path: Path, url: str) -> None:
    line = _one_line_error(
        kvscope("bench", "--url", url, *SHORT, "--out", str(tmp_path / "r")), "bad URL"
    )
    assert "Pw-9z8y" not in line


# ------------------------------------------------------------------ 3. stalls
def test_a_server_that_stalls_after_its_headers_costs_one_stream_timeout(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    # the preflight's probes are answered; every request of the run then hangs after its
    # headers and two tokens, with the request timeout at its 600 s default
    url = mock_server("--stall-after", str(len(calibration_words())), "--stall-tokens", "2")
    out = tmp_path / "r"
    start = time.monotonic()
    r = kvscope("bench", "--url", url, *SHORT, "--duration", "2", "--arrival", "poisson:rate=5",
                "--stream-timeout", "1.5", "--out", str(out), "--json", timeout=60)  # fmt: skip
    elapsed = time.monotonic() - start
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr  # 100 % errors
    assert elapsed < 2 + 1.5 + 8, elapsed  # duration + stream timeout + start-up
    summary = json.loads((out / "summary.json").read_text())
    rows = _rows(out)
    assert rows and len(rows) == summary["requests_released"]
    assert {row["error_kind"] for row in rows} == {"timeout"}
    assert summary["errors_by_kind"] == {"timeout": len(rows)}
    assert summary["config"]["server"]["stream_timeout_s"] == 1.5


@pytest.fixture
def silent_server() -> Iterator[str]:
    proc, url = start_odd_server("silent")
    yield url
    stop(proc)  # type: ignore[arg-type]


def test_library_run_against_a_silent_stream_ends_and_keeps_every_request(
    silent_server: str, tmp_path: Path
) -> None:
    client = ClientConfig(silent_server, "m", stream_timeout_s=1.0)
    w = build_workload(None, "poisson:rate=10", "8", "4", None, 5, None, 0, None)
    start = time.monotonic()
    summary = run_bench(
        client,
        LoadConfig(scrape_interval_s=None, drain_timeout_s=600),
        w,
        tmp_path / "r",
        BenchOptions(preflight=False),
        builder=PromptBuilder(seed=0),
    )
    assert time.monotonic() - start < 10
    assert summary["errors_by_kind"] == {"timeout": 5} and len(_rows(tmp_path / "r")) == 5


def test_the_drain_deadline_keeps_slow_requests_as_timeouts(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    # a healthy but slow server (a token every 0.2 s): the run's drain deadline cuts it
    url = mock_server("--itl", "0.2")
    w = build_workload(None, "poisson:rate=20", "8", "50", None, 3, None, 0, None)
    summary = run_bench(
        ClientConfig(url, "mock"),
        LoadConfig(scrape_interval_s=None, drain_timeout_s=0.8),
        w,
        tmp_path / "r",
        BenchOptions(preflight=False),
        builder=PromptBuilder(seed=0),
    )
    rows = _rows(tmp_path / "r")
    assert len(rows) == 3 and {r["error_kind"] for r in rows} == {"timeout"}
    assert all("after the last release" in str(r["error"]) for r in rows)
    assert summary["unfinished_at_drain"] == 3 and not summary["interrupted"]


# ------------------------------------------------------------------ 7. garbage answers
@pytest.mark.parametrize(
    ("mode", "kinds"),
    [
        ("garbage-sse", {"malformed_stream"}),
        ("http-500", {"http_status"}),
        ("close", {"connection_reset"}),
        ("close-mid", {"connection_reset"}),
        ("huge-usage", {"malformed_stream"}),
    ],
)
def test_garbage_answers_are_rows_with_error_classes(
    tmp_path: Path, mode: str, kinds: set[str]
) -> None:
    proc, url = start_odd_server(mode)
    out = tmp_path / "r"
    try:
        r = kvscope("bench", "--url", url, *SHORT, "--num-requests", "5",
                    "--arrival", "poisson:rate=20", "--out", str(out), timeout=60)  # fmt: skip
    finally:
        stop(proc)  # type: ignore[arg-type]
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stderr  # the error rate, not a crash
    rows = _rows(out)
    assert len(rows) == 5 and {row["error_kind"] for row in rows} == kinds
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_kind"] == {k: 5 for k in kinds}
