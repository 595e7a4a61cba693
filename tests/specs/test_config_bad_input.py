"""Bad model input for ``kvscope plan``: one line on stderr naming what is wrong, exit 2.

Unknown architecture, malformed or truncated config.json, fields that contradict each other,
and an unknown speculative-decoding method. Each is a file a user could plausibly pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process

LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
}


def _plan(path: Path, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    code, _, err = run_in_process(["plan", "--model", str(path), "--gpu", "h100", *more], capsys)
    return code, err


def _write(tmp_path: Path, text: str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_unknown_model_type_names_key_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, json.dumps({**LLAMA, "model_type": "falcon_mamba9"}))
    code, err = _plan(path, capsys)
    line = one_error_line(code, err, "'model_type'", "falcon_mamba9", str(path), "known:")
    assert "qwen3_moe" in line


def test_missing_model_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw: dict[str, Any] = dict(LLAMA)
    del raw["model_type"]
    code, err = _plan(_write(tmp_path, json.dumps(raw)), capsys)
    one_error_line(code, err, "'model_type'", "missing")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (json.dumps(LLAMA)[:57], "not valid JSON"),  # cut mid-download
        ('{"model_type": "llama", "hidden_size": 4096,}', "not valid JSON"),  # trailing comma
        ("", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"model_type": "llama", "hidden_size": NaN}', "not a finite number"),
    ],
)
def test_malformed_or_truncated_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    code, err = _plan(_write(tmp_path, text), capsys)
    one_error_line(code, err, needle)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hidden_size": 4100}, "hidden_size (4100) is not a multiple of num_attention_heads (32)"),
        ({"num_key_value_heads": 5}, "(5) must divide num_attention_heads (32)"),
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok"),
    ],
)
def test_contradicting_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], needle: str
) -> None:
    code, err = _plan(_write(tmp_path, json.dumps({**LLAMA, **changes})), capsys)
    one_error_line(code, err, needle)


def test_unknown_speculative_method(capsys: pytest.CaptureFixture[str]) -> None:
    spec = '{"method": "medusa9", "num_speculative_tokens": 2}'
    code, _, err = run_in_process(
        ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100",
         "--speculative-config", spec, "--num-requests", "2"],
        capsys,
    )  # fmt: skip
    one_error_line(code, err, "--speculative-config", "unknown method 'medusa9'")
    _, help_text, _ = run_in_process(["plan", "--help"], capsys)
    if "--speculative-config" not in help_text:
        pytest.skip("kvscope plan has no --speculative-config in this tree")
    code, _, err = run_in_process(
        ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100",
         "--speculative-config", spec],
        capsys,
    )  # fmt: skip
    one_error_line(code, err, "unknown method 'medusa9'")
