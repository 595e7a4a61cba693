"""Flag values for every command: numbers read from the command line are finite and in range.

:func:`harden` walks the whole command tree once at start-up and wraps each parameter's value
processing: a float that is NaN or ±inf, or an integer beyond int64, is refused by the parser
with the flag's name (exit 2, one line), so no command needs its own NaN check for a flag and
none can forget one. Typer ≥ 0.29 carries its own copy of click (``typer._click``); both the
parameter classes and the usage errors come from there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import typer
from typer import _click as click

from kvscope.validate import INT64_MAX

UsageError = click.exceptions.UsageError
ClickException = click.exceptions.ClickException
NoArgsIsHelpError = click.exceptions.NoArgsIsHelpError
Abort = typer.Abort


def _bad_number(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(value, int) and abs(value) > INT64_MAX:
        return f"{value} is out of range (at most {INT64_MAX:,})"
    if isinstance(value, list | tuple):
        for v in value:
            problem = _bad_number(v)
            if problem:
                return problem
    return None


def _checked(param: click.core.Parameter, original: Callable[..., Any]) -> Callable[..., Any]:
    def process_value(ctx: click.Context, value: Any) -> Any:
        out = original(ctx, value)
        problem = _bad_number(out)
        if problem:
            raise click.exceptions.BadParameter(problem, ctx=ctx, param=param)  # type: ignore[arg-type]
        return out

    return process_value


def harden(command: click.core.Command) -> click.core.Command:
    """Check every numeric parameter of ``command`` and its sub-commands (in place, once)."""
    for param in command.params:
        if not getattr(param, "_kvscope_checked", False):
            param.process_value = _checked(param, param.process_value)  # type: ignore[method-assign]
            param._kvscope_checked = True  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    return command
