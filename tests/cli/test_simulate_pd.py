"""``simulate --cluster`` with prefill/decode pools (role:) and a ``kv_transfer`` link: the
run directory's KV bytes against the model's published per-token KV size, TTFT against its
breakdown, ``report`` of it, and bad P/D specs as one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, run_in_process

LLAMA = ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]
WL = [*LLAMA, "--arrival", "poisson:rate=25", "--prompt-len", "lognormal:median=600,sigma=0.6"]
WL += ["--output-len", "30", "--num-requests", "300", "--seed", "3"]
#: Llama-3.1-8B in bf16: 32 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 B per token
#: (config.json of meta-llama/Llama-3.1-8B).
LLAMA_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
PD = """
kv_transfer: {link: rdma}
pools:
  - {name: pre, role: prefill, replicas: 2}
  - {name: dec, role: decode, replicas: 1, tp: 2}
"""


def _spec(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "pd.yaml"
    spec.write_text(text)
    return spec


def test_pd_run_dir_moves_the_prompts_kv_and_ttft_includes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["simulate", *WL, "--cluster", str(_spec(tmp_path, PD)), "--out", str(out)]
    code, table, err = run_in_process(argv, capsys)
    assert code == 0, err
    assert "KV MB/request" in table and "prefill/decode" in table
    req = pq.read_table(out / "requests.parquet").to_pandas()
    assert len(req) == 300 and (req["status"] == "ok").all()
    assert req["prompt_tokens"].nunique() > 50  # the prompts differ: bytes follow each one
    # every prompt token's K and V cross the link once, split over the decode pool's 2 ranks
    expect = req["prompt_tokens"] * LLAMA_KV_BYTES_PER_TOKEN
    assert (req["transfer_bytes"] == expect).all()
    assert (req["transfer_bytes_per_rank"] == expect / 2).all()
    # one 400 Gb/s NIC per GPU (50 GB/s) and 10 us per transfer
    assert np.allclose(req["transfer_s"], expect / 2 / 50e9 + 10e-6, rtol=1e-9)
    assert (req["ttft_s"] >= req["transfer_s"]).all()
    parts = req[["prefill_s", "transfer_wait_s", "transfer_s", "decode_first_step_s"]]
    assert (parts >= -1e-12).all().all()
    assert np.allclose(parts.sum(axis=1), req["ttft_s"], rtol=1e-9, atol=1e-12)
    assert set(req["prefill_replica"]) == {0, 1} and set(req["decode_replica"]) == {2}
    summary = json.loads((out / "summary.json").read_text())
    figs = summary.get("figures", summary)
    assert figs["transfer_bytes_per_request_mean"] == pytest.approx(expect.mean(), rel=1e-12)
    assert figs["transfer_bytes_total"] == pytest.approx(expect.sum(), rel=1e-12)
    assert figs["transfer_seconds_total"] == pytest.approx(req["transfer_s"].sum(), rel=1e-9)
    assert [r["pool"] for r in figs["replicas"]] == ["pre", "pre", "dec"]
    assert figs["disagg"]["link"]["bandwidth"] == 50e9 and figs["completed"] == 300
    steps = pq.read_table(out / "steps.parquet")
    assert set(steps["role"].to_pylist()) == {"prefill", "decode"}
    code, _, err = run_in_process(["report", str(out), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    assert "Fleet: per replica" in (tmp_path / "r.html").read_text()


def test_v4_flash_pd_moves_the_planners_kv_bytes_per_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvscope.specs.registry import load_model

    spec = _spec(
        tmp_path,
        "kv_transfer: {link: rdma}\npools:\n"
        "  - {role: prefill, replicas: 2, gpu: H200, tp: 8}\n"
        "  - {role: decode, replicas: 1, gpu: H200, tp: 8}\n",
    )
    out = tmp_path / "run"
    wl = ["--arrival", "poisson:rate=5", "--prompt-len", "lognormal:median=2000,sigma=0.5"]
    wl += ["--output-len", "20", "--num-requests", "80", "--seed", "1"]
    argv = ["simulate", "--model", "deepseek-ai/DeepSeek-V4-Flash", *wl, "--cluster", str(spec)]
    code, _, err = run_in_process([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    req = pq.read_table(out / "requests.parquet").to_pandas()
    model = load_model("deepseek-ai/DeepSeek-V4-Flash")
    want = [model.kv_bytes_for_request(int(p), None, 8) for p in req["prompt_tokens"]]
    assert req["transfer_bytes_per_rank"].tolist() == want
    assert (req["transfer_bytes"] == 8 * req["transfer_bytes_per_rank"]).all()
    # per rank: 3,850.25 B per prompt token (tests/fleet/test_kv_transfer.py's arithmetic) on
    # top of the window state (SWA KV, compressor states), the same within one compressed
    # record for every prompt of >= 128 tokens
    window = req["transfer_bytes_per_rank"] - req["prompt_tokens"] * 3850.25
    assert req["prompt_tokens"].min() >= 128 and window.max() - window.min() < 64 * 1024
    assert (req["ttft_s"] >= req["transfer_s"]).all()


def test_explicit_and_measured_links_price_the_transfer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = PD.replace("{link: rdma}", "{bandwidth_gb_per_s: 5, latency_us: 100}")
    comm = tmp_path / "comm"
    comm.mkdir()
    fit = {"alpha_s": 100e-6, "beta_s_per_byte": 1 / 5e9}
    (comm / "summary.json").write_text(json.dumps({"kind": "comm", "fit": fit}))
    measured = PD.replace("{link: rdma}", f"{{comm_run: '{comm}'}}")
    runs = []
    for i, text in enumerate((slow, measured, PD)):
        spec = tmp_path / f"pd{i}.yaml"
        spec.write_text(text)
        code, out, err = run_in_process(["simulate", *WL, "--cluster", str(spec), "--json"], capsys)
        assert code == 0, err
        runs.append(json.loads(out))
    (a, b, fast) = runs
    # 5 GB/s + 100 us either way: the same transfers; 10x slower than one 400 Gb/s NIC
    assert a["transfer_seconds_total"] == pytest.approx(b["transfer_seconds_total"], rel=1e-12)
    assert a["ttft_p50_s"] == pytest.approx(b["ttft_p50_s"], rel=1e-12)
    assert a["transfer_s_mean"] > 9 * fast["transfer_s_mean"]
    assert a["ttft_p50_s"] > fast["ttft_p50_s"]


ROLE = "  - {{role: prefill, replicas: 1}}\n  - {{role: decode, replicas: 1{extra}}}\n"


@pytest.mark.parametrize(
    ("yaml_text", "needles"),
    [
        (
            "kv_transfer: {bandwidth_gb_per_s: 0}\npools:\n" + ROLE.format(extra=""),
            ("kv_transfer.bandwidth_gb_per_s", "> 0"),
        ),
        (
            "kv_transfer: {bandwidth_gb_per_s: -3, latency_us: 5}\npools:\n"
            + ROLE.format(extra=""),
            ("kv_transfer.bandwidth_gb_per_s",),
        ),
        (
            "kv_transfer: {link: rdma, latency_us: .nan}\npools:\n" + ROLE.format(extra=""),
            ("kv_transfer.latency_us",),
        ),
        (
            "kv_transfer: {link: infiniband}\npools:\n" + ROLE.format(extra=""),
            ("kv_transfer.link", "'infiniband'"),
        ),
        (
            "kv_transfer: {link: rdma, speed: 9}\npools:\n" + ROLE.format(extra=""),
            ("kv_transfer.speed",),
        ),
        (
            "kv_transfer: {comm_run: /nonexistent/comm}\npools:\n" + ROLE.format(extra=""),
            ("kv_transfer.comm_run",),
        ),
        (
            "kv_transfer: {link: nvlink}\npools:\n" + ROLE.format(extra=", gpu: L4-24GB"),
            ("kv_transfer.link", "NVLink"),
        ),
        ("kv_transfer: {}\npools:\n" + ROLE.format(extra=""), ("'kv_transfer'",)),
        ("pools:\n" + ROLE.format(extra=""), ("'kv_transfer'", "required")),
        (
            "kv_transfer: {link: rdma}\npools: [{role: encode, replicas: 1}]\n",
            ("pools[0].role", "'encode'"),
        ),
        (
            "kv_transfer: {link: rdma}\npools: [{role: prefill, replicas: 1}, "
            "{role: prefill, replicas: 2}]\n",
            ("pools[1].role", "second prefill"),
        ),
        (
            "kv_transfer: {link: rdma}\npools: [{role: prefill, replicas: 1}]\n",
            ("'pools'", "no decode pool"),
        ),
        (
            "kv_transfer: {link: rdma}\npools: [{role: prefill, replicas: 1}, {replicas: 1}]\n",
            ("pools[1].role", "required"),
        ),
        ("kv_transfer: {link: rdma}\npools: [{replicas: 2}]\n", ("pools[0].role",)),
        (
            "router: prefix-aware\nkv_transfer: {link: rdma}\npools:\n" + ROLE.format(extra=""),
            ("'router'", "not supported"),
        ),
        (
            "autoscale: 'queue:up=4,down=1'\nkv_transfer: {link: rdma}\npools:\n"
            + ROLE.format(extra=""),
            ("'autoscale'", "not supported"),
        ),
        (
            "kv_transfer: {link: rdma}\npools:\n" + ROLE.format(extra=", data-parallel-size: 2"),
            ("pools[1]", "data-parallel-size"),
        ),
        (
            "kv_transfer: {link: rdma}\npools:\n" + ROLE.format(extra=", window-model: exact"),
            ("pools[1].window-model", "bound"),
        ),
        (
            "kv_transfer: {link: rdma}\npools:\n" + ROLE.format(extra=", engine: sglang"),
            ("pools[1]", "--engine vllm"),
        ),
        (
            "kv_transfer: {link: rdma}\npools:\n" + ROLE.format(extra=", max-num-seqs: -1"),
            ("pools[1].max-num-seqs",),
        ),
        (
            "kv_transfer: {link: rdma}\npools:\n"
            + ROLE.format(extra=", gpu: L4-24GB, model: meta-llama/Llama-3.1-70B"),
            ("decode pool",),
        ),
    ],
)
def test_bad_pd_specs_are_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, needles: tuple[str, ...]
) -> None:
    spec = _spec(tmp_path, yaml_text)
    code, _, err = run_in_process(["simulate", *WL, "--cluster", str(spec)], capsys)
    one_error_line(code, err, *needles)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--router", "prefix-aware"], "--router"),
        (["--autoscale", "queue:up=4,down=1"], "--autoscale"),
        (["--sweep", "replicas=1,2"], "--sweep replicas"),
    ],
)
def test_fleet_flags_with_pd_pools_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    argv = ["simulate", *WL, "--cluster", str(_spec(tmp_path, PD)), *flags]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, needle)


def test_sweep_over_a_pool_flag_runs_each_point_disaggregated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(tmp_path, PD)
    argv = ["simulate", *WL, "--cluster", str(spec), "--sweep", "max-num-seqs=4,64", "--json"]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["point"] for r in rows] == ["max-num-seqs=4", "max-num-seqs=64"]
    # the KV moved does not depend on batching; 4 sequences on the one decode engine make
    # arrived requests wait for a slot (its first step after the KV arrived grows)
    assert rows[0]["transfer_bytes_total"] == rows[1]["transfer_bytes_total"]
    first = [r["ttft_parts_s"]["decode_first_token"]["p99"] for r in rows]
    assert first[0] > 2 * first[1] and rows[0]["ttft_p99_s"] > rows[1]["ttft_p99_s"]
