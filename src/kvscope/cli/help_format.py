"""How ``--help`` looks: plain text that fits any terminal, commands grouped by purpose.

Rich's option table (typer's default help) squeezes its first column when the help column is
wide, so at 80 columns flag names were cut (``--tensor-parallel…``). kvscope instead uses
click's plain formatter for every command (``rich_markup_mode=None`` on the root app): it
writes each option's names in full and moves the description to the next line when the names
are long, wraps at the terminal width (up to :data:`MAX_WIDTH` columns) and never cuts a word.
:class:`PanelGroup` keeps the grouping of commands that rich showed as panels (the
``rich_help_panel`` each command is registered with) and prints each command's first
sentence in full, wrapped, instead of click's cut-off short help. Lines break at spaces
only, never inside a hyphenated flag name.
"""

from __future__ import annotations

from typing import Any

from typer import _click as click
from typer._click import _textwrap
from typer.core import TyperGroup

#: Help wraps at the terminal's width, but no wider than this (long lines are hard to read).
MAX_WIDTH = 120

#: Context settings for the root command; click hands them down to every sub-command.
CONTEXT_SETTINGS: dict[str, Any] = {"max_content_width": MAX_WIDTH, "show_default": True}


class _WholeWords(_textwrap.TextWrapper):
    """Wraps at spaces only: a flag named in a description (``--num-gpu-blocks-override``)
    or a hyphenated term (alpha-beta) is never split at its hyphens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("break_on_hyphens", False)
        super().__init__(*args, **kwargs)


# click's help wrapping looks this class up each time it wraps (formatting.wrap_text).
_textwrap.TextWrapper = _WholeWords  # type: ignore[misc]


class PanelGroup(TyperGroup):
    """A command group whose ``--help`` lists sub-commands under their panel titles."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            panel = getattr(cmd, "rich_help_panel", None) or "Commands"
            panels.setdefault(panel, []).append((name, cmd.get_short_help_str(limit=300)))
        # One name column for all panels, so the descriptions line up down the page.
        width = max((len(n) for rows in panels.values() for n, _ in rows), default=0)
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl([(n.ljust(width), h) for n, h in rows])
