"""``--gpu-spec FILE`` (and the per-user gpus.yaml) in `kvscope plan`, `simulate` and `gpus`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process, run_json, run_kvscope
from kvscope.specs.hardware import set_user_gpus

FILE = """
gpus:
  - name: ACME-X1-64GB
    aliases: [x1]
    memory_total_bytes: 68000000000
    hbm_bandwidth_gbps: 2000
    bf16_dense_tflops: 400
    pcie_gbps_per_direction: 64
    gpu_hour_usd: 1.25
  - name: H100
    memory_total_bytes: 84000000000
"""
PLAN = ("plan", "--model", "llama-3.1-8b", "--json")


@pytest.fixture(autouse=True)
def empty_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty per-user config folder; the catalogue is reset after each test."""
    cfg = tmp_path / "xdg"
    cfg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    yield cfg
    set_user_gpus(())


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(FILE)
    return path


def test_override_moves_the_kv_figure(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = run_json(capsys, *PLAN, "--gpu", "h100")
    mine = run_json(capsys, *PLAN, "--gpu", "h100", "--gpu-spec", str(spec))
    assert mine["gpu"] == base["gpu"] == "H100-SXM-80GB"
    assert base["gpu_memory_gib"] == pytest.approx(79.19, abs=0.01)
    assert mine["gpu_memory_gib"] == pytest.approx(84e9 / 2**30)
    # 0.9 of the total is the budget: 0.9 x (79.19 - 78.23) GiB less KV cache, the rest equal.
    drop = 0.9 * (base["gpu_memory_gib"] - mine["gpu_memory_gib"])
    assert base["kv_cache_gib"] - mine["kv_cache_gib"] == pytest.approx(drop, abs=0.02)
    assert mine["kv_tokens"] < base["kv_tokens"]
    assert mine["cost"]["price_source"] == base["cost"]["price_source"]  # no price given


def test_new_gpu_plans_and_is_priced_from_the_file(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = run_json(capsys, *PLAN, "--gpu", "x1", "--gpu-spec", str(spec))
    assert doc["gpu"] == "ACME-X1-64GB"
    assert doc["gpu_memory_gib"] == pytest.approx(68e9 / 2**30)
    assert doc["fits"] and doc["kv_tokens"] > 0
    assert doc["cost"]["gpu_hour_usd"] == 1.25
    assert doc["cost"]["price_source"] == f"your --gpu-spec file {spec}"
    # --gpu-hour-price still wins over the file's price.
    flag = run_json(capsys, *PLAN, "--gpu", "x1", "--gpu-spec", str(spec), "--gpu-hour-price", "2")
    assert flag["cost"]["gpu_hour_usd"] == 2.0


def test_gpus_lists_user_entries_marked(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_in_process(["gpus", "--json", "--gpu-spec", str(spec)], capsys)
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["ACME-X1-64GB"]["user_entry"] == f"your --gpu-spec file {spec}"
    assert rows["H100-SXM-80GB"]["user_entry"] == f"your --gpu-spec file {spec}"
    assert rows["H200-SXM-141GB"]["user_entry"] is None
    assert rows["ACME-X1-64GB"]["gpu_hour_usd"] == 1.25
    code, out, err = run_in_process(["gpus", "--gpu-spec", str(spec)], capsys)
    assert code == 0, err
    assert "ACME-X1-64GB (user)" in out and "H200-SXM-141GB (user)" not in out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus:\n  - {name: H100, hbm_bandwidth_gbps: .nan}\n", "must be a finite number"),
        ("gpus:\n  - {name: H100, tdp_w: -1}\n", "tdp_w must be >= 0"),
        ("gpus:\n  - {name: H100, memory_total_gib: 80}\n", "unknown field 'memory_total_gib'"),
        ("gpus: [\n  - name: H100\n", "not valid YAML"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "simulate", "gpus"])
def test_bad_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, needle: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    argv = [command, "--gpu-spec", str(bad)]
    if command != "gpus":
        argv += ["--model", "llama-3.1-8b", "--gpu", "h100"]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, needle, str(bad))


def test_per_user_file_applies_and_a_missing_flag_file_is_refused(
    empty_config: Path, tmp_path: Path
) -> None:
    (empty_config / "kvscope").mkdir()
    (empty_config / "kvscope" / "gpus.yaml").write_text(FILE)
    env = {**os.environ, "XDG_CONFIG_HOME": str(empty_config)}
    out = run_kvscope(*PLAN, "--gpu", "x1", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["gpu"] == "ACME-X1-64GB"
    assert doc["cost"]["price_source"].startswith("your GPU file ")
    missing = run_kvscope(*PLAN, "--gpu", "h100", "--gpu-spec", str(tmp_path / "no.yaml"), env=env)
    one_error_line(missing.returncode, missing.stderr, "no such GPU file")


def test_plan_with_a_gpu_file_stays_fast(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json(capsys, *PLAN, "--gpu", "x1", "--gpu-spec", str(spec))  # warm imports
    start = time.perf_counter()
    run_json(capsys, *PLAN, "--gpu", "b300", "--gpu-spec", str(spec))
    assert time.perf_counter() - start < 0.5


def test_simulate_runs_on_a_user_gpu(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = ("--arrival", "poisson:rate=20", "--num-requests", "30", "--seed", "3", "--json")
    doc = run_json(
        capsys, "simulate", "--model", "llama-3.1-8b", "--gpu", "x1", "--gpu-spec", str(spec), *wl
    )
    assert doc["completed"] == 30 and doc["rejected"] == 0
    code, _, err = run_in_process(["simulate", "--gpu", "x1", *wl], capsys)
    one_error_line(code, err, "unknown GPU 'x1'")  # without the file, no such GPU
