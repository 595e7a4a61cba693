"""No secret in a bench's run directory or output, whatever the server echoes (issue #20).

The ``echo`` server of ``bench_helpers`` answers the preflight, then repeats the request's
Authorization header (and its decoded form) in 401 bodies, 500 pages, error events inside a
200 stream and a ``/metrics`` page the parser rejects. The planted key has no provider shape
(no ``sk-``), so only its registration as a secret can mask it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from bench_helpers import cli_env, start_odd_server, stop

from kvscope.results import read_table

pytestmark = pytest.mark.integration

KEY = "plantedKEY-7f3a9c2e41"
USER, PASSWORD = "benchuser", "Pl4nted-PASS-55"


@pytest.fixture
def echo_server() -> Iterator[str]:
    proc, url = start_odd_server("echo")
    yield url
    stop(proc)  # type: ignore[arg-type]


def _bench(url: str, out: Path, env_key: str | None) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    if env_key is not None:
        env["PLANTED_KEY"] = env_key
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "bench", "--url", url, "--model", "m",
         "--api-key-env", "PLANTED_KEY", "--num-requests", "12", "--arrival", "poisson:rate=40",
         "--prompt-len", "8", "--output-len", "4", "--scrape-interval", "0.05",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def _leaks(out: Path, secrets: list[str]) -> list[str]:
    """Every place under ``out`` a secret appears: raw bytes of each file, and table cells."""
    found = []
    needles = [s.encode() for s in secrets]
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        data = f.read_bytes()
        found += [f"{f.name}: {n.decode()}" for n in needles if n in data]
    for name in ("requests", "chunks", "server"):
        table = read_table(out, name)
        if table is None:
            continue
        for col in table.column_names:
            if pa.types.is_string(table.schema.field(col).type):
                text = "\n".join(str(v) for v in table.column(col).to_pylist())
                found += [f"{name}.{col}: {s}" for s in secrets if s in text]
    return found


def test_an_echoed_api_key_is_never_written(echo_server: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = _bench(echo_server, out, KEY)
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr  # errors, not a crash
    table = read_table(out, "requests")
    assert table is not None and table.num_rows == 12
    errors = [e for e in table.column("error").to_pylist() if e]
    assert any("***" in e for e in errors), errors  # the echoes were there, and masked
    assert _leaks(out, [KEY]) == []
    assert KEY not in r.stdout + r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert "***" in summary["server_metrics"]["last_scrape_error"]  # the page's echo, masked


def test_url_credentials_are_used_but_never_written(echo_server: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    host = echo_server.removeprefix("http://")
    r = _bench(f"http://{USER}:{PASSWORD}@{host}", out, None)
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr
    table = read_table(out, "requests")
    assert table is not None and table.num_rows == 12
    # the server got Basic auth: its (masked) echo says so
    assert any("Basic ***" in (e or "") for e in table.column("error").to_pylist())
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert _leaks(out, [PASSWORD, token]) == []
    assert PASSWORD not in r.stdout + r.stderr and token not in r.stdout + r.stderr
    summary = (out / "summary.json").read_text()
    assert f'"url": "{echo_server}"' in summary


def test_credentials_in_the_url_and_a_key_are_one_line_and_no_secret(
    echo_server: str, tmp_path: Path
) -> None:
    host = echo_server.removeprefix("http://")
    r = _bench(f"http://{USER}:{PASSWORD}@{host}", tmp_path / "run", KEY)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvscope: error:")
    assert PASSWORD not in r.stderr and KEY not in r.stderr
    assert not (tmp_path / "run").exists()
