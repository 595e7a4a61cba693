"""``kvscope gpus``: the hardware catalogue."""

from __future__ import annotations

import typer


def gpus(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the GPUs kvscope knows, with memory, bandwidth and compute."""
