"""The simulator on hostile input and Ctrl-C (issue #20): one error line, nothing lost."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvscope.errors import KvscopeError
from kvscope.results import read_summary
from kvscope.sim import SimConfig, simulate
from kvscope.sim.calibrate import calibrate_run_dir
from kvscope.sim.cost import CostCoefficients
from kvscope.sim.run import SimInterrupted, build_pool
from kvscope.workload import build_workload


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"gpu_memory_utilization": float("nan")}, "--gpu-memory-utilization"),
        ({"mem_fraction_static": 1.5}, "--mem-fraction-static must be <= 1"),
        ({"cpu_offload_gib": 1e300}, "--cpu-offload-gib must be <="),
        ({"cpu_offload_gib": float("inf")}, "--cpu-offload-gib"),
        ({"slo_ttft_s": -1.0}, "--slo-ttft-s must be > 0"),
        ({"slo_tpot_s": float("nan")}, "--slo-tpot-s"),
        ({"sample_interval_s": -0.1}, "--step-resolution-s must be >= 0"),
        ({"tp": 0}, "--tensor-parallel-size must be >= 1"),
        ({"max_num_seqs": 0}, "--max-num-seqs must be >= 1"),
        ({"block_size": 2**40}, "--block-size must be <="),
        ({"mode": "fast"}, "--mode must be span or step"),
        ({"compaction": "sometimes"}, "--compaction must be immediate, lazy or none"),
    ],
)
def test_config_fields_are_checked(changes: dict[str, object], message: str) -> None:
    with pytest.raises(KvscopeError, match=message):
        SimConfig(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("gpu-memory-utilization", "nan", "finite"),
        ("max-num-seqs", "-3", ">= 1"),
        ("enable-prefix-caching", "maybe", "not a valid value"),
    ],
)
def test_sweep_values_are_checked(flag: str, value: str, message: str) -> None:
    with pytest.raises(KvscopeError, match=message):
        SimConfig().with_flag(flag, value)


def test_a_deployment_the_engine_would_refuse_is_not_simulated() -> None:
    # one request of 2e9 tokens needs ~244,000 GiB of KV: vLLM refuses to start, as plan does
    with pytest.raises(KvscopeError, match="does not start: one request of max_model_len"):
        build_pool(SimConfig(max_model_len=2_000_000_000))
    # a pool given by size is the user's own: no planner verdict
    _, _, _, info = build_pool(SimConfig(max_model_len=2_000_000_000, num_gpu_blocks_override=64))
    assert info["num_gpu_blocks"] == 64


@pytest.mark.parametrize(
    "doc",
    [
        '{"overhead_s": NaN, "mfu": 0.5, "mbu": 0.5}',
        '{"overhead_s": Infinity, "mfu": 0.5, "mbu": 0.5}',
        '{"overhead_s": 1e400, "mfu": 0.5, "mbu": 0.5}',
        '{"overhead_s": "fast", "mfu": 0.5, "mbu": 0.5}',
        '{"overhead_s": 0.001, "mfu": true, "mbu": 0.5}',
        '{"overhead_s": 0.001, "mfu": 0.5, "mbu": 0.5, "source": 7}',
        "[1, 2]",
        "{not json",
    ],
)
def test_cost_file_numbers_are_finite(tmp_path: Path, doc: str) -> None:
    f = tmp_path / "cost.json"
    f.write_text(doc)
    _one_line_load(f)


def test_a_cost_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "cost.json"
    f.write_bytes(b'{"overhead_s": 0.001, "source": "caf\xe9"}')
    assert "not UTF-8" in _one_line_load(f)


def _one_line_load(f: Path) -> str:
    with pytest.raises(KvscopeError) as info:
        CostCoefficients.load(f)
    line = info.value.one_line()
    assert line.startswith(str(f)) and "\n" not in line
    return line


def test_ctrl_c_inside_the_engine_keeps_what_was_served(tmp_path: Path) -> None:
    # step mode at a low rate: ~29,000 engine steps, so the progress report (every 8,192
    # loops) comes three times
    w = build_workload(arrival="poisson:rate=1", num_requests=400, seed=1)
    calls = []

    def stop_on_second_report(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what SIGINT raises in the main thread

    with pytest.raises(SimInterrupted) as info:
        simulate(w, SimConfig(mode="step"), stop_on_second_report)
    res = info.value.result
    assert res.interrupted
    assert res.requests.num_rows == 400
    status = res.requests.column("status").to_pylist()
    assert 0 < status.count("ok") < 400
    assert res.figures["completed"] == status.count("ok")
    assert res.steps.num_rows > 0
    res.write(tmp_path / "run")
    summary = read_summary(tmp_path / "run")
    assert summary is not None and summary["status"] == "interrupted"
    assert summary["config"]["model"] == "meta-llama/Llama-3.1-8B"
    table = pq.read_table(tmp_path / "run" / "requests.parquet")
    errors = set(table.column("error").to_pylist())
    assert "interrupted (the simulation was stopped)" in errors


def test_a_finished_run_has_no_interrupted_status(tmp_path: Path) -> None:
    w = build_workload(arrival="poisson:rate=20", num_requests=50, seed=1)
    simulate(w, SimConfig()).write(tmp_path / "run")
    summary = read_summary(tmp_path / "run")
    assert summary is not None and "status" not in summary


def test_write_refuses_an_earlier_run_unless_forced(tmp_path: Path) -> None:
    w = build_workload(arrival="poisson:rate=20", num_requests=30, seed=1)
    res = simulate(w, SimConfig())
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"kind": "bench", "completed": 97}))
    with pytest.raises(KvscopeError, match="already exists"):
        res.write(d)
    assert json.loads((d / "summary.json").read_text())["kind"] == "bench"
    res.write(d, force=True)
    assert json.loads((d / "summary.json").read_text())["kind"] == "simulate"


@pytest.mark.parametrize(
    "content",
    [
        b"garbage, not parquet",
        b"PAR1" + bytes(range(200)) + b"PAR1",
        None,  # truncated: the first 300 bytes of a real table
        "wrong-columns",
        "wrong-types",
    ],
)
def test_calibrating_from_a_corrupt_requests_table(tmp_path: Path, content: object) -> None:
    run = tmp_path / "run"
    run.mkdir()
    f = run / "requests.parquet"
    if content is None or content == "wrong-types":
        w = build_workload(arrival="poisson:rate=20", num_requests=30, seed=1)
        simulate(w, SimConfig()).write(tmp_path / "real")
        real = tmp_path / "real" / "requests.parquet"
        if content is None:
            f.write_bytes(real.read_bytes()[:300])
        else:
            t = pq.read_table(real)
            i = t.column_names.index("tpot_s")
            pq.write_table(t.set_column(i, "tpot_s", t.column("status")), f)
    elif content == "wrong-columns":
        pq.write_table(pa.table({"a": [1, 2, 3]}), f)
    else:
        assert isinstance(content, bytes)
        f.write_bytes(content)
    with pytest.raises(KvscopeError) as info:
        calibrate_run_dir(run, SimConfig())
    assert str(f) in info.value.one_line()
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize("resolution", [1e-320, 1e-9])
def test_a_sample_interval_below_a_microsecond_is_refused(resolution: float) -> None:
    # Found by the CLI fuzzer: 1e-320 s overflowed the sample clock mid-run.
    with pytest.raises(KvscopeError, match="0 \\(every step\\) or at least 1e-06 s"):
        SimConfig(sample_interval_s=resolution)
    assert SimConfig(sample_interval_s=0).sample_interval_s == 0
