"""Malformed-row policy shared by the trace loaders.

A bad row is an error that names the file and the line (``trace.csv:17: ...``), unless the
user passed ``--skip-bad``: then it is counted, the first few reasons are kept, and the count
goes into the workload's ``spec`` (``skipped_bad_rows``) so nothing is silently dropped.

Loaders read fast with pyarrow first; only when that fast path meets anything it cannot take
(a parse error or a value out of range) do they re-read row by row, which is where exact line
numbers come from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvscope import validate
from kvscope.errors import KvscopeError
from kvscope.workload.lengths import MAX_TOKENS

#: How many skipped-row reasons are kept for the report.
KEEP_EXAMPLES = 5


class BadRow(Exception):
    """Raised by a row parser; the message says what is wrong with the row."""


class RowPolicy:
    """Either raises on the first bad row or counts and skips bad rows."""

    def __init__(self, path: Path, skip_bad: bool) -> None:
        self.path = path
        self.skip_bad = skip_bad
        self.skipped = 0
        self.examples: list[str] = []

    def bad(self, line: int | str, reason: str) -> None:
        """Report a bad row at 1-based ``line`` (or at a JSON path inside a JSON document)."""
        where = (
            f"{self.path}:{line}: {reason}"
            if isinstance(line, int)
            else (f"{self.path}: {line}: {reason}")
        )
        if not self.skip_bad:
            raise KvscopeError(
                where if where.endswith(".") else where + ".",
                hint="Fix the row or pass --skip-bad to skip and count it.",
            )
        self.skipped += 1
        if len(self.examples) < KEEP_EXAMPLES:
            self.examples.append(where)

    def summary(self) -> dict[str, Any]:
        """What went into ``spec``: the count and the first reasons."""
        out: dict[str, Any] = {"skipped_bad_rows": self.skipped}
        if self.examples:
            out["skipped_examples"] = list(self.examples)
        return out


def json_object_line(line: str) -> dict[str, Any]:
    """One JSONL line as a JSON object; :class:`BadRow` when it is not one."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise BadRow(f"not valid JSON ({err.msg})") from None
    except RecursionError:
        raise BadRow("JSON nested too deeply") from None
    if not isinstance(row, dict):
        raise BadRow("a line must be a JSON object")
    return row


def as_int(value: Any, field: str, minimum: int = 0, maximum: int = validate.INT64_MAX) -> int:
    """An integer field in [``minimum``, ``maximum``] (accepts integral floats like ``12.0``).

    Nothing beyond int64 gets through: a 23-digit count would otherwise end in an
    ``OverflowError`` when the column becomes a numpy array.
    """
    if isinstance(value, bool):
        raise BadRow(f"field '{field}' must be an integer, got {value!r}")
    out = value if isinstance(value, int) else _exact_int(value)
    if out is None:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise BadRow(f"field '{field}' must be an integer, got {_short(value)}") from None
        if not f.is_integer():
            raise BadRow(f"field '{field}' must be an integer, got {_short(value)}")
        out = int(f)
    if out < minimum:
        raise BadRow(f"field '{field}' must be >= {minimum}, got {_short(out)}")
    if out > maximum:
        shown = _short(out) if isinstance(value, int) else _short(value)
        raise BadRow(f"field '{field}' must be <= {maximum:,}, got {shown}")
    return out


def _exact_int(value: Any) -> int | None:
    """Digits read exactly (a float would round 2**60 + 1); None for other spellings."""
    if not isinstance(value, str) or not value.strip().lstrip("+-").isdigit():
        return None
    try:
        return int(value.strip())
    except ValueError:  # digits int() does not take, e.g. superscripts
        return None


def as_tokens(value: Any, field: str, minimum: int = 0) -> int:
    """A token count: an integer in [``minimum``, :data:`MAX_TOKENS`]."""
    return as_int(value, field, minimum, MAX_TOKENS)


def as_float(value: Any, field: str, minimum: float = 0.0) -> float:
    """A finite float field >= ``minimum``."""
    if isinstance(value, bool):
        raise BadRow(f"field '{field}' must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadRow(f"field '{field}' must be a number, got {_short(value)}") from None
    if out != out or out in (float("inf"), float("-inf")):
        raise BadRow(f"field '{field}' must be finite, got {_short(value)}")
    if out < minimum:
        raise BadRow(f"field '{field}' must be >= {minimum}, got {out}")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_text(path: Path) -> str:
    """Whole file as UTF-8 text, with a one-line error when it cannot be read.

    Traces may be far larger than a config file, so the size bound is a quarter of this
    machine's memory (the text, its lines and the parsed rows must all fit) instead of
    :data:`kvscope.validate.MAX_TEXT_BYTES`.
    """
    return validate.read_text(path, "trace", max_bytes=validate.machine_memory_bytes() // 4)


def csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and ``(line_number, cells)`` rows of a CSV file, for the slow, exact path."""
    import csv

    text = read_text(path)
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise KvscopeError(f"{path}: empty file.") from None
    rows = [(reader.line_num, cells) for cells in reader]
    return [h.strip() for h in header], rows
