"""The ``kvscope`` command as a user runs it: a real subprocess, real exit codes."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_kvscope
from kvscope import __version__


def test_version_matches_pyproject() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__
    out = run_kvscope("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"kvscope {__version__}"


def test_models_json_lists_every_preset() -> None:
    out = run_kvscope("models", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    ids = {r["id"] for r in rows}
    assert "deepseek-ai/DeepSeek-V4-Flash" in ids
    assert len(ids) >= 19


def test_models_show_json_is_only_json() -> None:
    out = run_kvscope("models", "show", "deepseek-v2-lite", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["kv_bytes_per_token"] == 31104
    assert d["kv_groups"][0]["kind"] == "mla"


def test_models_show_human_output() -> None:
    out = run_kvscope("models", "show", "DeepSeek-V4-Flash", "--kv-cache-dtype", "fp8")
    assert out.returncode == 0, out.stderr
    assert "dsv4_csa" in out.stdout
    assert "3,850.25" in out.stdout


def test_gpus_json() -> None:
    out = run_kvscope("gpus", "h200", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["name"] == "H200-SXM-141GB"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("models", "show", "llama-9b"), "unknown model 'llama-9b'"),
        (("gpus", "H300"), "unknown GPU 'H300'"),
        (("models", "show", "/nonexistent/config.json"), "no such file"),
        (("models", "show", "llama-3.1-8b", "--kv-cache-dtype", "fp7"), "unknown kv-cache dtype"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], needle: str) -> None:
    out = run_kvscope(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("plan", "--bogus"), "No such option: --bogus"),
        (("plan", "--gpu", "H100"), "Missing option '--model'"),
        (("plan", "--model", "m", "--max-model-len", "abc"), "'--max-model-len'"),
        (("plan", "--model", "m", "--gpu-memory-utilization", "nan"), "not a finite number"),
        (("simulate", "--cpu-offload-gib", "inf"), "not a finite number"),
        (
            ("workload", "generate", "--out", "x.jsonl", "--num-requests", "1" + "0" * 25),
            "out of range",
        ),
        (("watch", "--interval"), "requires an argument"),
    ],
)
def test_parser_errors_are_one_line_with_where_to_look(args: tuple[str, ...], needle: str) -> None:
    out = run_kvscope(*args)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1, out.stderr  # not rich's five-line box
    assert lines[0].startswith("kvscope: error: ") and needle in lines[0], lines[0]
    assert lines[0].endswith(
        f"Try 'kvscope {args[0]}" + (" generate" if args[0] == "workload" else "") + " --help'."
    ), lines[0]
