"""``kvscope tune`` takes the engine flags of ``simulate`` that fix the deployment every point
shares (DCP, the encoder's TP mode, custom all-reduce, SGLang's MoE runner) and
``--kv-cache-dtype`` (pinning its axis): each reaches every point's simulated run, and each is
refused as ``simulate`` refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

WORKLOAD = [
    "--arrival",
    "poisson:rate=20",
    "--prompt-len",
    "lognormal:median=400,sigma=0.5",
    "--output-len",
    "40",
    "--num-requests",
    "40",
    "--seed",
    "5",
]
SPACE = "tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [auto, fp8]\nmax_num_seqs: [null]\n"
SPACE += "max_num_batched_tokens: [null]\n"
FIXED = ("decode_context_parallel_size", "mm_encoder_tp_mode", "disable_custom_all_reduce")


def _tune(tmp_path: Path, *extra: str) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    return [
        "tune",
        *WORKLOAD,
        "--slo",
        "ttft_p99=2",
        "--space",
        str(space),
        "--max-gpus",
        "2",
        "--workers",
        "1",
        "--eta",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--json",
        *extra,
    ]


def _point_summaries(out: Path, doc: dict) -> dict[str, dict]:
    return {
        r["label"]: json.loads((out / r["run_dir"] / "summary.json").read_text())
        for r in doc["ranked"]
    }


def test_vllm_deployment_flags_reach_every_point_as_simulate_runs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--dcp", "2", "--disable-custom-all-reduce", "--mm-encoder-tp-mode", "data"]
    code, out, err = run_in_process(_tune(tmp_path, *flags), capsys)
    assert code == 0, err
    doc = json.loads(out)
    # DCP 2 leaves only TP 2 (the defaults point included); TP 1 is pruned with the reason
    assert [r["label"] for r in doc["ranked"]] in (
        ["H100x2 tp2 (defaults)", "H100x2 tp2 kv=fp8"],
        ["H100x2 tp2 kv=fp8", "H100x2 tp2 (defaults)"],
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["pruned_reasons"] == {"--decode-context-parallel-size 2 does not divide TP 1": 2}
    runs = _point_summaries(tmp_path / "out", doc)
    for s in runs.values():
        cfg = s["config"]
        assert (cfg["decode_context_parallel_size"], cfg["mm_encoder_tp_mode"]) == (2, "data")
        assert cfg["disable_custom_all_reduce"] is True and cfg["moe_runner_backend"] == "auto"
        assert cfg["pool"]["block_size"] == 32  # vLLM's 16-token block x DCP 2
    assert "--disable-custom-all-reduce" in doc["winner"]["command"]
    # differential: the fp8 point is the run `simulate` makes with the same flags
    sim_out = tmp_path / "sim"
    argv = ["simulate", *WORKLOAD, "--tp", "2", "--kv-cache-dtype", "fp8", *flags]
    code, _o, err = run_in_process([*argv, "--out", str(sim_out)], capsys)
    assert code == 0, err
    sim = json.loads((sim_out / "summary.json").read_text())
    point = runs["H100x2 tp2 kv=fp8"]
    assert point["config"]["pool"]["num_gpu_blocks"] == sim["config"]["pool"]["num_gpu_blocks"]
    assert point["ttft_p99_s"] == sim["ttft_p99_s"]
    assert point["tpot_p99_s"] == sim["tpot_p99_s"]


def test_flags_change_the_pool_the_points_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --disable-custom-all-reduce vLLM keeps its custom all-reduce buffers on TP 2:
    the same point then gets fewer KV blocks (the flag is simulated, not only recorded)."""
    blocks = {}
    for name, extra in (("on", []), ("off", ["--disable-custom-all-reduce"])):
        d = tmp_path / name
        d.mkdir()
        # vLLM 0.25: from 0.26.0 an NVSwitch group grows what one GPU grows either way
        argv = _tune(d, "--tp", "2", "--engine-version", "0.25.0", *extra)
        code, out, err = run_in_process(argv, capsys)
        assert code == 0, err
        runs = _point_summaries(d / "out", json.loads(out))
        blocks[name] = runs["H100x2 tp2 kv=fp8"]["config"]["pool"]["num_gpu_blocks"]
    assert blocks["off"] > blocks["on"]


def test_sglang_moe_runner_reaches_the_points_and_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--engine", "sglang", "--moe-runner-backend", "triton", "--disable-custom-all-reduce"]
    code, out, err = run_in_process(_tune(tmp_path, *extra), capsys)
    assert code == 0, err
    doc = json.loads(out)
    runs = _point_summaries(tmp_path / "out", doc)
    assert len(runs) == 4
    for s in runs.values():
        assert s["config"]["moe_runner_backend"] == "triton"
        assert s["config"]["disable_custom_all_reduce"] is True
    command = doc["winner"]["command"]
    assert command.startswith("python -m sglang.launch_server")
    assert "--moe-runner-backend triton" in command and "--disable-custom-all-reduce" in command


def test_kv_cache_dtype_pins_its_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The space tries auto and fp8; --kv-cache-dtype fp8 (simulate's and plan's flag) leaves
    fp8 only, beside vLLM's defaults."""
    code, out, err = run_in_process(_tune(tmp_path, "--kv-cache-dtype", "fp8"), capsys)
    assert code == 0, err
    runs = _point_summaries(tmp_path / "out", json.loads(out))
    assert set(runs) == {"H100x1 tp1 (defaults)", "H100x1 tp1 kv=fp8", "H100x2 tp2 kv=fp8"}
    assert runs["H100x2 tp2 kv=fp8"]["config"]["kv_cache_dtype"] == "fp8"
    assert runs["H100x1 tp1 (defaults)"]["config"]["kv_cache_dtype"] is None


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--moe-runner-backend", "triton"], "--moe-runner-backend is SGLang's"),
        (["--engine", "sglang", "--moe-runner-backend", "nope"], "--moe-runner-backend must be"),
        (["--engine", "sglang", "--dcp", "2"], "--decode-context-parallel-size is vLLM's"),
        (["--dcp", "0"], "--decode-context-parallel-size"),
        (["--tp", "1", "--dcp", "2"], "does not divide TP 1"),
        (["--engine", "sglang", "--mm-encoder-tp-mode", "data"], "--mm-encoder-tp-mode is vLLM's"),
        (["--mm-encoder-tp-mode", "whole"], "--mm-encoder-tp-mode must be weights or data"),
        (["--kv-cache-dtype", "fp9"], "unknown kv-cache dtype 'fp9'"),
    ],
)
def test_refusals_are_simulates_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    code, _out, err = run_in_process(_tune(tmp_path, *extra), capsys)
    one_error_line(code, err, needle)
    if "--tp" not in extra:  # refused before the search: no tune folder
        assert not (tmp_path / "out").exists()
