"""Issue #20 for ``kvscope plan``, ``models`` and ``gpus``: bad input is exit 2 and one line.

Run in-process through :func:`kvscope.cli.main.main`, as a user types the commands. Each case
is one the audit found (a traceback, a silent exit 0 or a launch line the engine refuses).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

BASE = ("plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100")


def assert_one_error(code: int, out: str, err: str, needle: str) -> None:
    one_error_line(code, err, needle)
    assert out == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--pipeline-parallel-size", "0"), "--pipeline-parallel-size must be >= 1"),
        (("--data-parallel-size", "0"), "--data-parallel-size must be >= 1"),
        (("--tensor-parallel-size", "0"), "--tensor-parallel-size must be >= 1"),
        (("--num-gpus", "0"), "--num-gpus must be >= 1"),
        (("--block-size", "0"), "--block-size"),
        (("--block-size", "-16"), "--block-size"),
        (("--max-num-seqs", "0"), "--max-num-seqs"),
        (("--max-model-len", "0"), "--max-model-len"),
        (("--max-model-len", "-5"), "--max-model-len"),
        (("--max-num-batched-tokens", "0"), "--max-num-batched-tokens"),
        (("--data-parallel-size", "1000000000"), "--data-parallel-size must be <="),
        (("--kv-cache-memory-bytes", str(93 * 2**30)), "79.19 GiB of memory of one H100"),
        (("--kv-cache-memory-bytes", str(70 * 2**30)), "remain after weights"),
        (
            ("--engine", "sglang", "--gpu-memory-utilization", "0.9"),
            "SGLang sizes its pool with --mem-fraction-static",
        ),
        (("--mem-fraction-static", "0.8"), "--mem-fraction-static is SGLang's"),
        (("--engine-version", "abc"), "not a version number"),
        (("--engine-version", "1..2"), "not a version number"),
        (("--block-size", "7"), "neither a power of two nor a multiple of 16"),
        (("--max-model-len", "1000000000000"), "--max-model-len must be <="),
        (("--context", "0"), "--context must be >= 1"),
        (("--context", "-1"), "--context must be >= 1"),  # was named --max-model-len
        (("--target-context", "0"), "--target-context must be >= 1"),
        (("--target-concurrency", "-1"), "--target-concurrency must be >= 1"),
        (("--target-context", "200000"), "longer than the max-model-len 131072"),
        (("--kv-cache-dtype", "fp8_ds_mla"), "no MLA layers"),
        (("--gpu-hour-price", "1e308"), "--gpu-hour-price must be <="),
        (("--moe-runner-backend", "marlin"), "--moe-runner-backend is SGLang's"),
        (("--engine", "sglang", "--moe-runner-backend", "x"), "--moe-runner-backend must be one"),
    ],
)
def test_bad_plan_flags_are_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    assert_one_error(*run_in_process([*BASE, *args], capsys), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--target-context", "0", "--target-concurrency", "4"), "--target-context"),
        (("--target-context", "100", "--target-concurrency", "-1"), "--target-concurrency"),
        (("--target-context", str(10**12), "--target-concurrency", "4"), "--target-context"),
        (("--target-context", "100", "--target-concurrency", "4", "--num-gpus", "0"), "--num-gpus"),
        (
            (
                "--target-context",
                "100",
                "--target-concurrency",
                "4",
                "--pipeline-parallel-size",
                "0",
            ),
            "--pipeline-parallel-size",
        ),
        (
            ("--target-context", "100", "--target-concurrency", "4", "--num-gpus", str(2**40)),
            "--num-gpus must be <=",
        ),
        (("--target-context", "100", "--target-concurrency", "4", "--out", "x"), "--search"),
    ],
)
def test_bad_search_flags_are_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, out, err = run_in_process(["plan", "--model", "llama-3.1-8b", "--search", *args], capsys)
    assert_one_error(code, out, err, needle)


@pytest.mark.parametrize(
    ("engine", "version", "newest"),
    [("vllm", "9.9.9", "0.34.0"), ("vllm", "0.99.0", "0.34.0"), ("sglang", "0.9.0", "0.5.23")],
)
def test_a_future_release_warns_once_and_json_carries_it(
    capsys: pytest.CaptureFixture[str], engine: str, version: str, newest: str
) -> None:
    args = (*BASE, "--engine", engine, "--engine-version", version, "--max-model-len", "8192")
    code, out, err = run_in_process(args, capsys)
    assert code == 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvscope: warning: ")
    assert f"rules of {newest} are used" in lines[0]
    code, out, err = run_in_process([*args, "--json"], capsys)
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert len(warnings) == 1 and version in warnings[0] and newest in warnings[0]


def test_search_json_carries_the_version_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(
        [
            *("plan", "--model", "llama-3.1-8b", "--search", "--gpu", "H100"),
            *("--target-context", "4096", "--target-concurrency", "8"),
            *("--engine-version", "9.9.9", "--json"),
        ],
        capsys,
    )
    assert code == 0
    assert "0.34.0" in json.loads(out)["warnings"][0]


def test_a_modelled_release_has_no_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_in_process([*BASE, "--engine-version", "0.19.0", "--json"], capsys)
    assert code == 0 and err == "" and json.loads(out)["warnings"] == []


def test_launch_lines_carry_only_block_sizes_the_engine_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_in_process(
        [*BASE, "--block-size", "32", "--max-model-len", "8192", "--json"], capsys
    )
    assert code == 0 and "--block-size 32" in json.loads(out)["advice"]["command"]
    # SGLang pages may hold any count; the planned page size is repeated in its launch line.
    code, out, _ = run_in_process(
        [*BASE, "--engine", "sglang", "--block-size", "7", "--max-model-len", "8192", "--json"],
        capsys,
    )
    assert code == 0 and "--page-size 7" in json.loads(out)["advice"]["command"]


def test_config_file_problems_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_bytes(b'{"hidden_size": "\xff\xfe"}')
    code, out, err = run_in_process(["plan", "--model", str(tmp_path), "--gpu", "H100"], capsys)
    assert_one_error(code, out, err, "not UTF-8")
    code, out, err = run_in_process(["models", "show", str(tmp_path)], capsys)
    assert_one_error(code, out, err, "not UTF-8")


def test_plan_out_refuses_an_earlier_run_unless_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    code, _, err = run_in_process([*BASE, "--max-model-len", "8192", "--out", str(run_dir)], capsys)
    assert code == 0, err
    first = (run_dir / "summary.json").read_text()
    code, out, err = run_in_process(
        [*BASE, "--max-model-len", "4096", "--out", str(run_dir)], capsys
    )
    assert_one_error(code, out, err, "--force")
    assert (run_dir / "summary.json").read_text() == first
    # --force with a plan that fails leaves the earlier run in place ...
    code, out, err = run_in_process([*BASE, "--tp", "3", "--out", str(run_dir), "--force"], capsys)
    assert_one_error(code, out, err, "divide")
    assert (run_dir / "summary.json").read_text() == first
    # ... and one that succeeds replaces it.
    code, _, err = run_in_process(
        [*BASE, "--max-model-len", "4096", "--out", str(run_dir), "--force"], capsys
    )
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "plan" and summary["max_model_len"] == 4096


def test_plan_out_that_cannot_be_written_is_refused_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("keep")
    code, out, err = run_in_process([*BASE, "--out", str(blocker / "sub")], capsys)
    assert_one_error(code, out, err, "is a file")
    assert blocker.read_text() == "keep"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("models", "show", ""), "empty"),
        (("models", "show", "x" * 300), "unknown model"),  # was OSError: File name too long
        (("plan", "--model", "x" * 300, "--gpu", "H100"), "unknown model"),
        (("gpus", ""), "unknown GPU ''"),  # listed every GPU instead
        (("plan", "--model", "llama-3.1-8b", "--gpu", "unknown"), "unknown GPU"),
        (("plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--dtype", "weird"), "dtype"),
        (("plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--quantization", "awq"), "awq"),
    ],
)
def test_names_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str
) -> None:
    assert_one_error(*run_in_process(argv, capsys), needle)


@pytest.mark.parametrize(
    ("summary", "needle"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b'{"kind": "comm", "fit": {"alpha_s": NaN, "beta_s_per_byte": 1e-9}}', "NaN"),
        (b'{"kind": "comm", "fit": {"alpha_s": "a", "beta_s_per_byte": 1e-9}}', "fit.alpha_s"),
        (b'{"kind": "comm", "fit": {"alpha_s": 1e-6, "beta_s_per_byte": -1}}', "beta_s_per_byte"),
        (b"[1]", "not a `kvscope comm bench` run"),
    ],
)
def test_comm_run_summaries_are_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, summary: bytes, needle: str
) -> None:
    (tmp_path / "summary.json").write_bytes(summary)
    code, out, err = run_in_process([*BASE, "--tp", "2", "--comm-run", str(tmp_path)], capsys)
    assert_one_error(code, out, err, needle)
