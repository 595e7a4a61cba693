"""User-facing errors.

Library code raises :class:`KvscopeError` (or a subclass) for anything a user can fix: a
bad flag, a missing or contradictory field in a file, an unknown name. The CLI turns it into
one line on stderr and a non-zero exit code; a traceback is reserved for bugs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class KvscopeError(Exception):
    """An error the user can fix. ``str(err)`` is one sentence; ``hint`` suggests a fix."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and the hint as one line, for stderr."""
        return f"{self.message} {self.hint}".strip() if self.hint else self.message


class UnknownNameError(KvscopeError):
    """A model, GPU, dtype or other catalogue name that does not exist."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known_list = sorted(set(known))
        close = difflib.get_close_matches(name, known_list, n=4, cutoff=0.4)
        if not close:
            lowered = name.lower()
            close = [k for k in known_list if lowered in k.lower() or k.lower() in lowered][:4]
        if close:
            hint = "Did you mean: " + ", ".join(close) + "?"
        else:
            hint = f"Known {kind}s: " + ", ".join(known_list[:12])
            if len(known_list) > 12:
                hint += f", ... ({len(known_list)} in all)"
        super().__init__(f"unknown {kind} '{name}'.", hint)
        self.name = name
        self.close_matches = close


class ConfigError(KvscopeError):
    """A configuration file or value that is missing a field or contradicts itself."""

    def __init__(self, source: str, field: str, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{source}: field '{field}' {problem}.", hint)
        self.source = source
        self.field = field
