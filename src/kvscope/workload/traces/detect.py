"""Recognise a trace's format from its content (header, first JSON keys, magic bytes).

Detection reads at most the first 64 KiB: Parquet by its ``PAR1`` magic, CSV by its header
columns, JSON by the keys of its first object. ``--format`` overrides detection.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.workload.stream import Workload
from kvscope.workload.traces import FORMATS

_PEEK = 65536


def detect_format(path: Path) -> str:
    """One of :data:`FORMATS`, or a one-line error saying what was seen.

    The error never quotes the file: a path that is not a trace may be anything (a key, a
    password file), and its first line has no business on a terminal or in a log.
    """
    if path.is_dir():
        return "weka"
    head = _head(path)
    if head.startswith(b"PAR1"):
        return "kvscope"
    text = _text_head(path, head)
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.startswith("{") or first.startswith("["):
        return _json_format(path, text.lstrip())
    cols = {c.strip() for c in first.split(",")}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= cols:
        return "burstgpt"
    raise KvscopeError(
        f"{path}: not a recognised trace format (its first line is no known CSV header "
        "and not JSON).",
        hint="Pass --format (one of: " + ", ".join(FORMATS) + ").",
    )


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            head = f.read(_PEEK)
    except FileNotFoundError:
        raise KvscopeError(f"{path}: no such file.") from None
    except OSError as err:
        raise KvscopeError(f"{path}: cannot read ({err.strerror or err}).") from None
    if not head.strip():
        raise KvscopeError(f"{path}: the file is empty; a trace needs at least one request.")
    return head


def _text_head(path: Path, head: bytes) -> str:
    """The first bytes as text; binary or non-UTF-8 files are refused here, by name only."""
    if b"\x00" in head:
        raise KvscopeError(
            f"{path}: a binary file, not a trace (traces are CSV, JSON or kvscope Parquet)."
        )
    try:
        return head.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as err:
        # A multi-byte character cut by the peek window is not an error.
        if len(head) < _PEEK or err.start < len(head) - 4:
            raise KvscopeError(
                f"{path}: not UTF-8 text (byte 0x{head[err.start]:02x} at offset {err.start}); "
                "traces are UTF-8 CSV or JSON, or kvscope Parquet."
            ) from None
        return head[: err.start].decode("utf-8").lstrip("\ufeff")


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
        except (json.JSONDecodeError, RecursionError):
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
        f"{path}: JSON, but not a recognised trace format (the first object has none of the "
        "fields a known trace starts with).",
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

    if path.suffix == ".parquet" or (path.is_file() and _magic(path) == b"PAR1"):
        return lambda p, skip_bad=False: native.read_parquet(p)
    return native.read_jsonl


def _mode(path: Path) -> int:
    """``st_mode`` of ``path``; a missing path or one the OS refuses (a name too long, no
    permission) is one error line, where ``Path.exists`` would raise for some of them."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise KvscopeError(f"{path}: no such file or directory.") from None
    except OSError as err:
        raise KvscopeError(f"{path}: cannot read ({err.strerror or err}).") from None


def _magic(path: Path) -> bytes:
    # Four bytes, not the whole file: the old read_bytes() pulled a multi-GB trace into memory.
    with path.open("rb") as f:
        return f.read(4)


def load_trace(path: Path, *, fmt: str | None = None, skip_bad: bool = False) -> Workload:
    """Load any supported trace or kvscope workload file."""
    if fmt is not None and fmt not in FORMATS:
        raise UnknownNameError("trace format", fmt, FORMATS)
    mode = _mode(path)
    if stat.S_ISDIR(mode):
        if fmt not in (None, "weka"):
            raise KvscopeError(
                f"{path}: is a directory; only a WEKA trace is a directory (of *.json files)."
            )
    elif not stat.S_ISREG(mode):
        raise KvscopeError(f"{path}: not a regular file (a device or a pipe is not a trace).")
    else:
        head = _head(path)
        if fmt is not None and not head.startswith(b"PAR1"):
            _text_head(path, head)  # binary and non-UTF-8 files refused whatever --format says
    chosen = fmt or detect_format(path)
    return _loader(chosen, path)(path, skip_bad=skip_bad)
