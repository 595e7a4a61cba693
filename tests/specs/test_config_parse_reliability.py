"""Issue #20 for model configs: a hostile ``config.json`` is one error naming the key and file.

Every case loads the file the way ``kvscope plan --model PATH`` does (:func:`load_model`), so
reading (UTF-8, JSON, NaN literals) and parsing (types, ranges, layer bound) are both covered.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kvscope.errors import ConfigError, KvscopeError
from kvscope.specs.config_parse import MAX_LAYERS
from kvscope.specs.registry import find_preset, load_model


def _llama() -> dict[str, Any]:
    p = find_preset("meta-llama/Llama-3.1-8B")
    assert p is not None
    raw: dict[str, Any] = json.loads(p.path.read_text())
    raw.pop("_kvscope")
    return raw


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "config.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"hidden_size": 1e30}, "hidden_size"),
        ({"hidden_size": 10**30}, "hidden_size"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"vocab_size": -5}, "vocab_size"),
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"num_hidden_layers": 32.5}, "num_hidden_layers"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers"),
        ({"hidden_size": "abc"}, "hidden_size"),
        ({"intermediate_size": 10**18}, "intermediate_size"),
        ({"max_position_embeddings": 10**15}, "max_position_embeddings"),
        ({"num_attention_heads": 33, "num_key_value_heads": 1}, "head_dim"),
        ({"torch_dtype": 5}, "torch_dtype"),
        ({"torch_dtype": "weird"}, "torch_dtype"),
        ({"model_type": [1]}, "model_type"),
        ({"_name_or_path": [1, 2]}, "_name_or_path"),
        (
            {
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "mlp_only_layers": 5,
            },
            "mlp_only_layers",
        ),
        (
            {
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "mlp_only_layers": [{}],
            },
            "mlp_only_layers",
        ),
        (
            {"quantization_config": {"quant_method": "awq", "bits": "x"}},
            "quantization_config.bits",
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": 5}},
            "quantization_config.weight_block_size",
        ),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": "ab"}},
            "quantization_config.weight_block_size",
        ),
        (
            {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}},
            "quantization_config.config_groups",
        ),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"g": 3},
                }
            },
            "quantization_config.config_groups",
        ),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"g": {"weights": {"num_bits": "x"}}},
                }
            },
            "quantization_config.config_groups.weights.num_bits",
        ),
    ],
)
def test_extreme_or_mistyped_values_name_the_key_and_file(
    tmp_path: Path, changes: dict[str, Any], key: str
) -> None:
    path = _write(tmp_path, json.dumps({**_llama(), **changes}))
    with pytest.raises(ConfigError) as info:
        load_model(str(tmp_path))
    assert info.value.field == key
    line = info.value.one_line()
    assert str(path) in line and f"'{key}'" in line and "\n" not in line


@pytest.mark.parametrize(
    ("literal", "key"),
    [('"hidden_size": NaN', "hidden_size"), ('"rope_theta": Infinity', "rope_theta")],
)
def test_nan_and_infinity_literals_name_their_key(tmp_path: Path, literal: str, key: str) -> None:
    text = json.dumps(_llama())
    text = text.replace(f'"{key}": {json.dumps(_llama()[key])}', literal)
    assert literal in text
    _write(tmp_path, text)
    with pytest.raises(ConfigError, match="not a finite number") as info:
        load_model(str(tmp_path))
    assert info.value.field == key


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[1, 2]", "must be a JSON object"),
        ("null", "must be a JSON object"),
        ('{"hidden_size": 4096, "num_hid', "not valid JSON"),
        ("", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"hidden_size": ' + "9" * 5000 + "}", "too long"),
    ],
)
def test_malformed_files_are_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(KvscopeError, match=needle) as info:
        load_model(str(path))
    assert "\n" not in info.value.one_line()


def test_non_utf8_config_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"hidden_size": "\xff\xfe"}')
    with pytest.raises(KvscopeError, match="not UTF-8") as info:
        load_model(str(path))
    assert str(path) in info.value.one_line()


def test_a_million_layers_are_refused_at_once(tmp_path: Path) -> None:
    _write(tmp_path, json.dumps({**_llama(), "num_hidden_layers": 1_000_000}))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=f"at most {MAX_LAYERS:,} layers"):
        load_model(str(tmp_path))
    assert time.perf_counter() - start < 2.0  # it took 67-94 s and a gigabyte


def test_the_layer_bound_itself_still_loads(tmp_path: Path) -> None:
    _write(tmp_path, json.dumps({**_llama(), "num_hidden_layers": MAX_LAYERS}))
    assert load_model(str(tmp_path)).num_layers == MAX_LAYERS


def test_names_the_file_system_cannot_look_up_are_unknown_models() -> None:
    with pytest.raises(KvscopeError, match="unknown model"):
        load_model("x" * 300)  # was OSError: File name too long
    with pytest.raises(KvscopeError, match="empty"):
        load_model("")  # was read as the current folder
