"""A damaged DeepSeek V4.1 config.json: one line on stderr naming the key, exit 2.

Starts from the real V4.1-Flash config (tests/plan/data/configs/deepseek-v4.1-flash.json) and
breaks one V4.1 key at a time, the way a hand-edited or truncated file would.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process

REAL = Path(__file__).parents[1] / "plan" / "data" / "configs" / "deepseek-v4.1-flash.json"


def _plan_with(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any) -> tuple[int, str]:
    raw = copy.deepcopy(json.loads(REAL.read_text()))
    edit(raw["text_config"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    code, _, err = run_in_process(
        ["plan", "--model", str(path), "--gpu", "h100", "--tensor-parallel-size", "8"], capsys
    )
    return code, err


def test_real_config_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _plan_with(tmp_path, capsys, lambda t: None)
    assert code == 0, err


def test_missing_kv_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _plan_with(tmp_path, capsys, lambda t: t.pop("kv_source_layer_ids"))
    one_error_line(code, err, "'kv_source_layer_ids'", "layer indices")


def test_v4_ratio_in_a_v41_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _plan_with(tmp_path, capsys, lambda t: t["compress_ratios"].__setitem__(2, 4))
    one_error_line(code, err, "'compress_ratios'", "layer 2", "0, 1 or 2")


def test_compressed_layer_below_every_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _plan_with(tmp_path, capsys, lambda t: t.update(kv_source_layer_ids=[8, 14, 20]))
    one_error_line(code, err, "'kv_source_layer_ids'", "layer 2")


def test_source_outside_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _plan_with(
        tmp_path, capsys, lambda t: t.update(index_source_layer_ids=[2, 8, 14, 20, 40])
    )
    one_error_line(code, err, "'index_source_layer_ids'", "layer 40")
