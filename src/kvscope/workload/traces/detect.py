"""Recognise a trace's format from its content (header, first JSON keys, magic bytes).

Detection reads at most the first 64 KiB: Parquet by its ``PAR1`` magic, CSV by its header
columns, JSON by the keys of its first object. ``--format`` overrides detection.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.workload.stream import Workload
from kvscope.workload.traces import FORMATS

_PEEK = 65536


def detect_format(path: Path) -> str:
    """One of :data:`FORMATS`, or a one-line error saying what was seen."""
    if path.is_dir():
        return "weka"
    try:
        with path.open("rb") as f:
            head = f.read(_PEEK)
    except FileNotFoundError:
        raise KvscopeError(f"{path}: no such file.") from None
    except OSError as err:
        raise KvscopeError(f"{path}: cannot read ({err}).") from None
    if head.startswith(b"PAR1"):
        return "kvscope"
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.startswith("{") or first.startswith("["):
        return _json_format(path, text.lstrip())
    cols = {c.strip() for c in first.split(",")}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= cols:
        return "burstgpt"
    raise KvscopeError(
        f"{path}: cannot tell the trace format from its first line {first[:80]!r}.",
        hint="Pass --format (one of: " + ", ".join(FORMATS) + ").",
    )


def _json_format(path: Path, text: str) -> str:
    keys: set[str] = set()
    if text.startswith("["):
        if '"conversations"' in text or '"messages"' in text or '"prompt"' in text:
            return "sharegpt"
    else:
        line = text.split("\n", 1)[0]
        try:
            obj = json.loads(line)
            keys = set(obj) if isinstance(obj, dict) else set()
        except json.JSONDecodeError:
            keys = {k for k in ("requests", "block_size") if f'"{k}"' in text}
    if {"arrival_s", "prompt_tokens"} <= keys:
        return "kvscope"
    if {"timestamp", "input_length", "output_length"} <= keys:
        return "mooncake"
    if {"requests", "block_size"} <= keys:
        return "weka"
    if keys & {"conversations", "messages", "prompt"}:
        return "sharegpt"
    raise KvscopeError(
        f"{path}: JSON whose first object has keys {sorted(keys)[:8]} is not a known trace.",
        hint="Pass --format (one of: " + ", ".join(FORMATS) + ").",
    )


def _loader(fmt: str, path: Path) -> Callable[..., Workload]:
    if fmt == "azure":
        from kvscope.workload.traces.azure import load_azure

        return load_azure
    if fmt == "burstgpt":
        from kvscope.workload.traces.burstgpt import load_burstgpt

        return load_burstgpt
    if fmt == "mooncake":
        from kvscope.workload.traces.mooncake import load_mooncake

        return load_mooncake
    if fmt == "weka":
        from kvscope.workload.traces.weka import load_weka

        return load_weka
    if fmt == "sharegpt":
        from kvscope.workload.traces.sharegpt import load_sharegpt

        return load_sharegpt
    from kvscope.workload.traces import native

    if path.suffix == ".parquet" or (path.is_file() and path.read_bytes()[:4] == b"PAR1"):
        return lambda p, skip_bad=False: native.read_parquet(p)
    return native.read_jsonl


def load_trace(path: Path, *, fmt: str | None = None, skip_bad: bool = False) -> Workload:
    """Load any supported trace or kvscope workload file."""
    if fmt is not None and fmt not in FORMATS:
        raise UnknownNameError("trace format", fmt, FORMATS)
    if not path.exists():
        raise KvscopeError(f"{path}: no such file or directory.")
    chosen = fmt or detect_format(path)
    return _loader(chosen, path)(path, skip_bad=skip_bad)
