"""``kvscope workload`` commands end to end (in-process), including the acceptance figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_in_process


def test_stats_azure_conv_acceptance(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    code, out, _ = run_in_process(["workload", "stats", str(f), "--json"], capsys)
    assert code == 0
    s = json.loads(out)
    assert s["requests"] == 19_366
    assert s["duration_s"] == pytest.approx(3502, abs=1)
    assert round(s["prompt_tokens"]["mean"]) == 1155 and round(s["output_tokens"]["mean"]) == 211


def test_stats_mooncake_acceptance(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = traces_dir / "mooncake_fast25" / "conversation_trace.jsonl"
    code, out, _ = run_in_process(["workload", "stats", str(f), "--json"], capsys)
    s = json.loads(out)
    assert code == 0 and s["requests"] == 12_031
    assert round(100 * s["prefix"]["block_reuse_share"], 1) == 36.6


def test_stats_human_output(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = traces_dir / "weka_agentic_sample"
    code, out, _ = run_in_process(["workload", "stats", str(f), "--block-size", "16"], capsys)
    assert code == 0 and "suggested --max-model-len" in out and "prefix block reuse" in out


def test_malformed_row_one_line_exit_2_then_skip_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,10,5\n"
        "2023-11-16 18:15:47.0,ten,5\n2023-11-16 18:15:48.0,12,5\n"
    )
    code, out, err = run_in_process(["workload", "stats", str(f), "--json"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{f}:3:" in err and "Traceback" not in err
    code, out, err = run_in_process(["workload", "stats", str(f), "--json", "--skip-bad"], capsys)
    assert code == 0
    s = json.loads(out)
    assert s["requests"] == 2 and s["source"]["skipped_bad_rows"] == 1
    assert "skipped 1 malformed row" in err


def test_generate_same_seed_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "workload",
        "generate",
        "--arrival",
        "poisson:rate=1000",
        "--prompt-len",
        "mix:0.95@128,0.05@4096",
        "--output-len",
        "lognormal:median=150,sigma=0.8",
        "--num-requests",
        "20000",
        "--seed",
        "7",
        "--json",
    ]
    for name in ("a.parquet", "b.parquet", "a.jsonl", "b.jsonl"):
        code, out, _ = run_in_process([*args, "--out", str(tmp_path / name)], capsys)
        assert code == 0 and json.loads(out)["requests"] == 20_000
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_convert_then_stats_agree(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = traces_dir / "mooncake_fast25" / "synthetic_trace.jsonl"
    code, _, _ = run_in_process(
        ["workload", "convert", str(src), "--out", str(tmp_path / "m.parquet")], capsys
    )
    assert code == 0
    _, a, _ = run_in_process(["workload", "stats", str(src), "--json"], capsys)
    _, b, _ = run_in_process(["workload", "stats", str(tmp_path / "m.parquet"), "--json"], capsys)
    sa, sb = json.loads(a), json.loads(b)
    for k in ("requests", "duration_s", "prompt_tokens", "output_tokens", "peak_rate_per_s"):
        assert sa[k] == sb[k]
    assert sa["prefix"]["block_reuse_share"] == sb["prefix"]["block_reuse_share"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["workload", "generate", "--arrival", "poison:rate=1", "--num-requests", "3"], "poisson"),
        (["workload", "generate", "--num-requests", "3"], "--arrival"),
        (["workload", "stats", "--arrival", "poisson:rate=1"], "--num-requests or --duration"),
        (["workload", "convert", "/nonexistent.csv"], "no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_in_process(
        [*argv, "--out", str(tmp_path / "x.jsonl")] if argv[1] != "stats" else argv, capsys
    )
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1
