"""Trace loaders on hostile rows and files (issue #20): one error line or a counted skip.

Every format gets the same rows: a token count beyond int64 (which used to end in an
``OverflowError`` traceback when the column became a numpy array), and NaN, infinite and
negative lengths and timestamps. Without ``--skip-bad`` each is a :class:`KvscopeError` naming
the file and the row; with it the row is skipped and counted. Files that are not traces at all
(binary, empty, a directory, not UTF-8, unrecognised) are refused by name, never quoted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvscope.errors import KvscopeError
from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.traces.detect import load_trace

HUGE = "99999999999999999999999"  # 1e23: past int64


def _azure(prompt: str, output: str = "10", ts: str = "2023-11-16 18:15:47.6805900") -> str:
    return (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,100,10\n"
        f"{ts},{prompt},{output}\n"
    )


def _burstgpt(prompt: str, output: str = "5", ts: str = "2") -> str:
    return (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "1,gpt,10,5,15,x\n"
        f"{ts},gpt,{prompt},{output},15,x\n"
    )


def _mooncake(prompt: str, output: str = "5", ts: str = "10") -> str:
    ok = '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}\n'
    return ok + f'{{"timestamp": {ts}, "input_length": {prompt}, "output_length": {output}}}\n'


def _native(prompt: str, output: str = "5", ts: str = "1.0") -> str:
    ok = '{"request_id": "a", "arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 5}\n'
    return ok + (
        f'{{"request_id": "b", "arrival_s": {ts}, "prompt_tokens": {prompt}, '
        f'"output_tokens": {output}}}\n'
    )


def _weka(prompt: str, output: str = "5", ts: str = "1.0") -> str:
    return json.dumps({"block_size": 64, "requests": [{"t": 0, "in": 10, "out": 3}]}).removesuffix(
        "]}"
    ) + (f', {{"t": {ts}, "in": {prompt}, "out": {output}}}]}}')


def _sharegpt(prompt: str, output: str = "5", ts: str = "1.0") -> str:
    conv = '[{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]'
    return (
        f'{{"id": "a", "conversations": {conv}, "timestamp": 0}}\n'
        f'{{"id": "b", "conversations": {conv}, "timestamp": {ts}, '
        f'"prompt_tokens": {prompt}, "output_tokens": {output}}}\n'
    )


FORMATS: dict[str, tuple[str, Callable[..., str]]] = {
    "azure": ("t.csv", _azure),
    "burstgpt": ("t.csv", _burstgpt),
    "mooncake": ("t.jsonl", _mooncake),
    "kvscope": ("t.jsonl", _native),
    "weka": ("t.json", _weka),
    "sharegpt": ("t.jsonl", _sharegpt),
}
# (prompt, output, timestamp) rows that must be refused, per format; the timestamp of the
# Azure format is a date, so its "bad time" rows are dates out of range or not dates.
BAD_ROWS = {
    "prompt beyond int64": (HUGE, "5", None),
    "prompt 1e30": ("1e30", "5", None),
    "prompt negative": ("-5", "5", None),
    "output beyond int64": ("10", HUGE, None),
    "output NaN": ("10", "NaN", None),
    "prompt infinite": ("Infinity", "5", None),
    "time NaN": ("10", "5", "NaN"),
    "time infinite": ("10", "5", "Infinity"),
    "time negative": ("10", "5", "-3"),
}
AZURE_BAD_TIMES = {"time NaN": "nan", "time infinite": "9999-12-31 23:59:59", "time negative": "x"}


def _write(tmp_path: Path, fmt: str, case: str) -> Path:
    name, make = FORMATS[fmt]
    prompt, output, ts = BAD_ROWS[case]
    if fmt in ("azure", "burstgpt"):  # CSV spells them as Python does
        prompt, output = (
            v.replace("Infinity", "inf").replace("NaN", "nan") for v in (prompt, output)
        )
        ts = None if ts is None else ts.replace("Infinity", "inf").replace("NaN", "nan")
    if fmt == "azure" and ts is not None:
        ts = AZURE_BAD_TIMES[case]
    f = tmp_path / name
    f.write_text(make(prompt, output) if ts is None else make(prompt, output, ts=ts))
    return f


@pytest.mark.parametrize("case", list(BAD_ROWS))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_bad_row_is_one_error_naming_the_file(tmp_path: Path, fmt: str, case: str) -> None:
    f = _write(tmp_path, fmt, case)
    with pytest.raises(KvscopeError) as info:
        load_trace(f, fmt=fmt)
    line = info.value.one_line()
    assert str(f) in line and "\n" not in line


@pytest.mark.parametrize("case", list(BAD_ROWS))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_skip_bad_counts_the_row(tmp_path: Path, fmt: str, case: str) -> None:
    f = _write(tmp_path, fmt, case)
    w = load_trace(f, fmt=fmt, skip_bad=True)
    assert len(w) == 1
    assert w.spec["skipped_bad_rows"] == 1
    assert int(w.prompt_tokens.max()) <= MAX_TOKENS


def test_detected_formats_refuse_an_overflowing_row(tmp_path: Path) -> None:
    # the audit's two rows, through format detection as `workload stats` does it
    a = tmp_path / "azure.csv"
    a.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,99999999999999999999999,10\n"
    )
    with pytest.raises(KvscopeError, match=r"azure\.csv:2: field 'ContextTokens'"):
        load_trace(a)
    m = tmp_path / "mooncake.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 1e30, "output_length": 5}\n')
    with pytest.raises(KvscopeError, match=r"mooncake\.jsonl:1: field 'input_length'"):
        load_trace(m)


def test_parquet_with_wrong_types_or_huge_counts(tmp_path: Path) -> None:
    f = tmp_path / "w.parquet"
    pq.write_table(
        pa.table({"arrival_s": [0.0], "prompt_tokens": ["many"], "output_tokens": [1]}), f
    )
    with pytest.raises(KvscopeError, match="column 'prompt_tokens' holds string"):
        load_trace(f)
    pq.write_table(
        pa.table({"arrival_s": [0.0], "prompt_tokens": [2**62], "output_tokens": [1]}), f
    )
    with pytest.raises(KvscopeError, match="row 1"):
        load_trace(f)
    f.write_bytes(b"PAR1" + bytes(range(200)) + b"PAR1")
    with pytest.raises(KvscopeError, match="cannot read Parquet"):
        load_trace(f)


SECRET = "root:SECRET-first-line:0:0"


@pytest.mark.parametrize(
    ("content", "fmt", "message"),
    [
        (bytes(range(256)) * 4, None, "binary file"),
        (bytes(range(256)) * 4, "azure", "binary file"),
        (b"", None, "empty"),
        (b"", "mooncake", "empty"),
        (b"  \n\n", "sharegpt", "empty"),
        (b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe,1,2\n", None, "not UTF-8"),
        (b"caf\xe9\n", "burstgpt", "not UTF-8"),
        (SECRET.encode() + b"\nmore\n", None, "not a recognised trace format"),
        (b'{"user": "' + SECRET.encode() + b'"}\n', None, "not a recognised trace format"),
    ],
)
def test_files_that_are_not_traces(
    tmp_path: Path, content: bytes, fmt: str | None, message: str
) -> None:
    f = tmp_path / "input.csv"
    f.write_bytes(content)
    with pytest.raises(KvscopeError) as info:
        load_trace(f, fmt=fmt)
    line = info.value.one_line()
    assert message in line and str(f) in line
    assert "SECRET" not in line and "user" not in line  # the file is named, never quoted


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "kvscope", "mooncake", "sharegpt"])
def test_a_directory_is_only_a_weka_trace(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(KvscopeError, match="is a directory"):
        load_trace(tmp_path, fmt=fmt)
    with pytest.raises(KvscopeError, match=r"no \*\.json trace files"):
        load_trace(tmp_path)
