"""A closed loop bounded by ``--duration``, and the request rate printed as it was asked
(issue #21), against ``kvscope mock-server`` on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from bench_helpers import kvscope, max_overlap

from kvscope.bench.metrics import asked_rate_of

pytestmark = pytest.mark.integration

SHORT = ("--output-len", "5", "--prompt-len", "16")


def _bench(url: str, out: Path, *flags: str) -> tuple[int, dict[str, object], str]:
    r = kvscope("bench", "--url", url, "--model", "mock", "--out", str(out), "--json", *flags)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def test_closed_loop_stops_issuing_after_the_duration_and_drains(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server("--ttft", "0.02", "--itl", "0.01")  # about 60 ms a request
    rc, s, err = _bench(
        url, tmp_path / "c", "--arrival", "concurrency:n=4", "--duration", "1.5", *SHORT
    )
    assert rc == 0, err
    t = pq.read_table(tmp_path / "c" / "requests.parquet")
    sent = t.column("sent_s").to_pylist()
    finish = t.column("finish_s").to_pylist()
    # issued only while the duration ran; every request issued finished (drained, not cut)
    assert max(sent) < 1.5 + 0.05
    assert s["incomplete"] == 0 and s["errors"] == 0 and s["completed"] == t.num_rows
    assert max(finish) > 1.5 - 0.2  # it kept the loop busy to the end ...
    assert max(finish) < 1.5 + 1.0  # ... and stopped there, not after 10,000 requests
    assert 40 < t.num_rows < 200
    assert max_overlap(sent, finish) == 4
    assert s["config"]["load"]["duration_s"] == 1.5  # type: ignore[index]
    assert s["warnings"] == []


def test_closed_loop_that_runs_out_of_requests_before_the_duration_says_so(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server()
    rc, s, err = _bench(
        url, tmp_path / "c", "--arrival", "concurrency:n=2", "--duration", "30",
        "--num-requests", "12", *SHORT,
    )  # fmt: skip
    assert rc == 0, err
    assert s["completed"] == 12
    assert any("before --duration 30 s was over" in w for w in s["warnings"])  # type: ignore[union-attr]


def test_requested_rate_is_the_rate_asked_for(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server()
    flags = ("--arrival", "poisson:rate=20", "--duration", "2", "--seed", "3", *SHORT)
    rc, s, err = _bench(url, tmp_path / "j", *flags)
    assert rc == 0, err
    assert s["requested_request_rate_per_s"] == 20.0
    sched = s["scheduled_request_rate_per_s"]
    assert isinstance(sched, float) and sched != 20.0  # a Poisson draw of ~40 requests
    human = kvscope("bench", "--url", url, "--model", "mock", "--out", str(tmp_path / "h"), *flags)
    assert human.returncode == 0, human.stderr
    text = " ".join(human.stdout.split())
    assert "requested 20.00/s" in text
    assert f"scheduled {sched:,.2f}/s" in text
    assert "achieved" in text


@pytest.mark.parametrize(
    ("spec", "rate"),
    [
        ({"arrival": "poisson:rate=20", "source": "synthetic"}, 20.0),
        ({"arrival": "gamma:rate=8,cv=2", "source": "synthetic", "speedup": 2.0}, 16.0),
        ({"arrival": "poisson:rate=5+poisson:rate=7", "source": "synthetic"}, 12.0),
        ({"arrival": "poisson:rate=5", "workload": "t.csv", "speedup": 3.0}, 5.0),
        ({"arrival": "spike:base=5,peak=50,start=60,length=10"}, None),
        ({"arrival": "concurrency:n=4", "closed_loop": {"concurrency": 4}}, None),
        ({"arrival": None, "workload": "trace.jsonl"}, None),
    ],
)
def test_asked_rate_of(spec: dict[str, object], rate: float | None) -> None:
    assert asked_rate_of(spec) == rate
