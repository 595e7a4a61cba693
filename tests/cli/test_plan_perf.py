"""``kvscope plan``: the roofline/comm/cost sections and ``--search`` through the real CLI."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_in_process


def test_json_has_roofline_comm_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(
        [
            "plan",
            "--model",
            "llama-3.1-70b",
            "--gpu",
            "h100",
            "--tp",
            "4",
            "--target-context",
            "8192",
            "--target-concurrency",
            "32",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    d = json.loads(out)
    r = d["roofline"]
    assert r["throughput"]["batch_per_replica"] == 32
    assert r["decode"]["limit"] in ("memory", "compute")
    # 70.55 B params in bf16 less the 1.05 GB embedding table, over 4 GPUs: 17.4 GB each.
    assert r["decode_batch1"]["weight_bytes_per_gpu"] == pytest.approx(
        (70.55e9 * 2 - 128256 * 8192 * 2) / 4, rel=0.01
    )
    assert d["comm"]["decode"]["tp_allreduce_count"] == 160
    assert d["comm"]["link"]["name"] == "NVLink"
    assert d["cost"]["num_gpus"] == 4
    assert d["cost"]["usd_per_million_tokens"] > 0


def test_price_flag_is_used(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "llama-3.1-8b", "--gpu", "l40s", "--target-context", "4096", "--json"]
    _, out1, _ = run_in_process(["plan", *base, "--gpu-hour-price", "1.0"], capsys)
    _, out2, _ = run_in_process(["plan", *base, "--gpu-hour-price", "3.0"], capsys)
    c1, c2 = json.loads(out1)["cost"], json.loads(out2)["cost"]
    assert c1["price_source"] == "--gpu-hour-price"
    assert c2["usd_per_million_tokens"] == pytest.approx(3 * c1["usd_per_million_tokens"])


def test_table_output_shows_the_speed_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(["plan", "--model", "llama-3.1-8b", "--gpu", "h100"], capsys)
    assert code == 0
    assert "time per output token" in out and "KV reads overtake weights" in out
    assert "/ M tokens" in out and "kWh" in out


def test_search_json_ranks_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(
        [
            "plan",
            "--model",
            "mixtral-8x7b",
            "--search",
            "--gpu",
            "h100",
            "--target-context",
            "4096",
            "--target-concurrency",
            "64",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    d = json.loads(out)
    costs = [c["usd_per_million_tokens"] for c in d["candidates"]]
    assert costs and costs == sorted(costs)
    assert {c["gpu"] for c in d["candidates"]} == {"H100-SXM-80GB"}
    assert d["evaluated"] >= d["feasible"] >= len(d["candidates"])


def test_search_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--search",
            "--target-context",
            "8192",
            "--target-concurrency",
            "16",
        ],
        capsys,
    )
    assert code == 0 and "cheapest first" in out and "$/M tok" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "deepseek-v3", "--search"], "--target-context"),
        (["--model", "deepseek-v3"], "--gpu is required"),
        (
            [
                "--model",
                "llama-3.1-405b",
                "--search",
                "--gpu",
                "l4",
                "--target-context",
                "8192",
                "--target-concurrency",
                "8",
            ],
            "no configuration",
        ),
        (
            ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpu-hour-price", "-1", "--json"],
            "must not be negative",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, out, err = run_in_process(["plan", *args], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_efficiency_flags_reach_the_roofline(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "llama-3.1-8b", "--gpu", "h100", "--target-context", "1", "--json"]
    _, out, _ = run_in_process(
        ["plan", *base, "--hbm-efficiency", "1.0", "--flops-efficiency", "1.0"], capsys
    )
    b = json.loads(out)["roofline"]["decode_batch1"]
    assert b["step_s"] == pytest.approx(b["step_bound_s"])
    code, out, err = run_in_process(["plan", *base, "--hbm-efficiency", "1.5"], capsys)
    assert code == 2 and "efficiency" in err and out == ""
