"""Shared output helpers for commands: ``--json`` to stdout, tables to the terminal."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


class _LazyConsole:
    """A rich Console created on first use, so ``--json`` runs never import rich."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Console | None = None

    def _get(self) -> Console:
        if self._console is None:
            import os

            from rich.console import Console

            console = Console(**self._kwargs)
            if not console.is_terminal and "COLUMNS" not in os.environ:
                # Pipes and log files get rich's 80 columns, which truncates wide tables;
                # 120 keeps one line per row where a person will read the file later.
                console = Console(width=120, **self._kwargs)
            self._console = console
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    # Dunder lookups bypass __getattr__: forward the ones callers use.
    def __enter__(self) -> Console:
        return self._get().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._get().__exit__(*exc)


#: Human output goes to stdout; diagnostics and progress go to stderr.
stdout: Console = _LazyConsole(highlight=False, soft_wrap=False)  # type: ignore[assignment]
stderr: Console = _LazyConsole(stderr=True, highlight=False)  # type: ignore[assignment]


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _plain(obj.item())
    return obj


def _redacted(obj: Any) -> Any:
    from kvscope.redact import redact_text

    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: _redacted(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redacted(v) for v in obj]
    return obj


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, enums, paths and numpy scalars into JSON-ready values."""
    return _plain(obj)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout and nothing else (the ``--json`` contract); every
    string is redacted on the way (a URL's password or a key a user typed never prints)."""
    doc = _redacted(to_jsonable(obj))
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
