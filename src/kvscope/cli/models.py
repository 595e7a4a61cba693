"""``kvscope models``: list bundled model presets and show one model's derived figures."""

from __future__ import annotations

import typer

app = typer.Typer(help="Model presets and their derived figures.", no_args_is_help=False)
