"""Run directories written with the real writer, for report tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kvscope.results import REQUEST_SCHEMA, RequestRecord, RunDir

STEPS = pa.schema(
    [
        ("t_s", pa.float64()),
        ("kv_usage_frac", pa.float64()),
        ("running", pa.int64()),
        ("waiting", pa.int64()),
        ("preemptions", pa.int64()),
    ]
)


def make_run(path: Path, n: int = 400, seed: int = 0, partial: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    run = RunDir(path, "simulate")
    req = run.table("requests", REQUEST_SCHEMA)
    rows = []
    for i in range(n):
        arr = i * 0.05
        ttft = float(rng.lognormal(-2, 0.5))
        out = int(rng.integers(2, 200))
        rows.append(
            RequestRecord(f"r{i}", arr, 100, out, 0, arr, arr + ttft, arr + ttft + out * 0.02).row()
        )
    req.append_rows(rows)
    steps = run.table("steps", STEPS)
    t = np.arange(0, 20, 0.1)
    usage = 0.5 + 0.4 * np.sin(t / 3) ** 2
    steps.append_columns(
        {
            "t_s": t,
            "kv_usage_frac": usage,
            "running": (usage * 100).astype(int),
            "waiting": np.zeros(t.size, dtype=int),
            "preemptions": (usage > 0.85).astype(int),
        }
    )
    if partial:
        return path  # killed before close: only the .arrows streams and no summary
    req.close()
    steps.close()
    run.write_summary(
        {"model": "test", "slo": {"ttft_s": 0.2}},
        {"ttft_p99_s": 0.3, "kv_usage_peak_frac": float(usage.max())},
    )
    return path


@pytest.fixture(name="make_run")
def make_run_fixture() -> Any:
    return make_run


@pytest.fixture
def sim_run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "sim-a")


def kvscope_ok(*args: str, timeout: float = 300) -> None:
    """Run ``kvscope ARGS`` in a subprocess; fail with its stderr when it exits non-zero."""
    from cli_helpers import run_kvscope

    out = run_kvscope(*args, timeout=timeout)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``kvscope simulate --sweep max-num-seqs=8,64,256 --out DIR`` writes."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    kvscope_ok(
        "simulate", "--model", "llama-3.1-8b", "--gpu", "h100",
        "--arrival", "poisson:rate=20", "--duration", "20",
        "--prompt-len", "512", "--output-len", "128", "--max-num-batched-tokens", "2048",
        "--sweep", "max-num-seqs=8,64,256", "--out", str(out),
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def served_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bench run, a find-max-rate folder and a watch run, measured on a real
    ``kvscope mock-server`` on 127.0.0.1."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    from bench_helpers import start_mock, stop

    base = tmp_path_factory.mktemp("served")
    proc, url = start_mock("--ttft", "0.05", "--itl", "0.01", "--max-running", "16")
    try:
        kvscope_ok(
            "bench", "--url", url, "--model", "mock", "--arrival", "poisson:rate=20",
            "--duration", "4", "--prompt-len", "256", "--output-len", "32",
            "--slo", "ttft_p99=0.2,tpot_p99=20ms", "--out", str(base / "bench"),
        )  # fmt: skip
        kvscope_ok(
            "bench", "--url", url, "--model", "mock", "--find-max-rate", "--duration", "2",
            "--start-rate", "4",
            "--prompt-len", "128", "--output-len", "16", "--max-rate", "32",
            "--slo", "ttft_p99=0.2,tpot_p99=20ms", "--out", str(base / "fmr"),
        )  # fmt: skip
        watch = subprocess.Popen(
            [
                sys.executable, "-m", "kvscope.cli.main", "watch", "--engine", url,
                "--interval", "0.2", "--duration", "4", "--out", str(base / "watch"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        kvscope_ok(
            "bench", "--url", url, "--model", "mock", "--arrival", "poisson:rate=30",
            "--duration", "4", "--prompt-len", "128", "--output-len", "32",
            "--out", str(base / "load"),
        )  # fmt: skip
        _, err = watch.communicate(timeout=60)
        assert watch.returncode == 0, err
    finally:
        stop(proc)
    return {"bench": base / "bench", "max-rate": base / "fmr", "watch": base / "watch"}


@pytest.fixture(scope="session")
def memtrace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("memtrace")
    kvscope_ok(
        "memtrace", "generate", "--scenario", "fragmentation", "--out", str(base / "f.pickle")
    )
    kvscope_ok(
        "memtrace", "analyze", str(base / "f.pickle"), "--out", str(base / "m"), "--no-cache"
    )
    return base / "m"


@pytest.fixture(scope="session")
def plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "p"
    kvscope_ok("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(out), "--json")
    return out


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's run folders and page (``kvscope demo --out DIR``)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    kvscope_ok("demo", "--out", str(out))
    return out


def kv_events_run(out: Path) -> Path:
    """A watch run directory with KV-cache events: the recorded vLLM 0.33.0 capture
    (tests/telemetry/fixtures) fed through watch's own live figures and run-dir writer."""
    import json

    import pyarrow.parquet as pq

    from kvscope.telemetry.kv_events.live import KvEventsLive, reuse_summary
    from kvscope.telemetry.kv_events.subscriber import COLUMNS
    from kvscope.telemetry.watch_output import write_run_dir

    fixture = Path(__file__).parents[1] / "telemetry" / "fixtures"
    t = pq.read_table(fixture / "kv_events_vllm_0_33_0.parquet")
    cols = {c: t.column(c).to_pylist() for c in COLUMNS}
    live = KvEventsLive(())
    samples = []
    n = t.num_rows
    for a in range(0, n, 500):
        live.put({c: v[a : a + 500] for c, v in cols.items()})
        samples.extend(live.sample(cols["t_s"][min(n, a + 500) - 1]))
    kv = live.summary()
    kv["reuse"] = reuse_summary(list(zip(*cols.values(), strict=True)))
    meta = json.loads(t.schema.metadata[b"kvscope.kv_events"])
    summary = {"kind": "watch", "config": {"kv_events": ["tcp://127.0.0.1:5557"]}, "kv_events": kv}
    write_run_dir(out, samples, cols["t_s"][0], {**summary, "recorded": meta})
    return out


@pytest.fixture(name="kv_events_run")
def kv_events_run_fixture() -> Any:
    return kv_events_run
