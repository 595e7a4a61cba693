"""Running a measurement under torchrun instead of launching the ranks ourselves.

When ``torchrun`` (or any launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``) started this process, it plays one rank through an ``env://``
rendezvous; rank 0 receives the timings and writes the results, the other ranks report
nothing. :func:`execute` picks that path or :func:`kvscope.comm.launch.launch`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from kvscope.comm.launch import Job, RankFailure, StepSink, launch, require_torch
from kvscope.errors import KvscopeError


def torchrun_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` when torchrun (or another ``env://`` launcher) started us."""
    env = os.environ
    launched = "TORCHELASTIC_RUN_ID" in env or all(
        k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    )
    if not launched or "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    except ValueError as err:
        raise KvscopeError(f"RANK/WORLD_SIZE are not integers: {err}.") from err


def run_as_rank(job: Job, rank: int, on_step: StepSink) -> None:
    """Play one rank of ``job`` in this process (under torchrun; ``env://`` rendezvous).

    No supervisor watches here: torchrun stops the other ranks when one fails, and the
    process group's timeout (``timeout_s + 10`` s) ends a hung collective.
    """
    require_torch()
    from kvscope.comm import worker

    def sink(msg: tuple[Any, ...]) -> None:
        if msg[0] == "step":
            on_step(int(msg[1]), np.asarray(msg[2], dtype=np.float64), list(msg[3]))

    try:
        worker.run_rank(
            rank, replace(job, init_method="env://", restrict_to_loopback=False), None, sink
        )
    except Exception as err:
        first = str(err).strip().splitlines()[:1]
        detail = f"{type(err).__name__}: {first[0] if first else ''}"[:300]
        raise RankFailure(f"rank {rank} failed under torchrun: {detail}", rank) from err


def execute(job: Job, on_step: StepSink) -> int:
    """Run ``job``: as one rank under torchrun, else on launched local ranks.

    Returns this process's rank (0 when it launched the ranks itself); only rank 0 gets
    ``on_step`` calls.
    """
    under = torchrun_rank()
    if under is None:
        launch(job, on_step)
        return 0
    rank, world = under
    if world != job.world_size:
        raise KvscopeError(f"torchrun started {world} ranks but the run asks for {job.world_size}.")
    run_as_rank(job, rank, on_step)
    return rank
