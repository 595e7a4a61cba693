"""The flags every many-point command shares (``tune``, ``simulate --sweep``): where the
points run (:mod:`kvscope.executor`), defined once."""

from __future__ import annotations

from typing import Annotated

import typer

RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="Run the points on a Ray cluster: auto (the one this machine runs) or its "
        "HOST:PORT (pip install 'kvscope[ray]') [default: a local process pool].",
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="Local worker processes (1: in this process) [default: the CPU count].",
    ),
]
