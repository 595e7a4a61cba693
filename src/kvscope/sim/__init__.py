"""Discrete-event simulator of a paged-KV serving engine (vLLM v1 semantics).

Public API: :func:`simulate` with a :class:`SimConfig`, returning a :class:`SimResult`
(requests and steps tables, summary figures; ``.write(dir)`` makes a run directory).
Building blocks: :mod:`~kvscope.sim.kv_pool` (paged pool and prefix cache),
:mod:`~kvscope.sim.scheduler` (vLLM v1 scheduling), :mod:`~kvscope.sim.contiguous`
(contiguous baseline), :mod:`~kvscope.sim.cost` (step time), :mod:`~kvscope.sim.engine`
(the loop). No torch, HTTP or NVML imports here (layering rule).

The public names load :mod:`~kvscope.sim.run` (and with it pyarrow) on first use, so a
caller that only needs a building block (``kvscope plan``'s step-time table imports
:mod:`~kvscope.sim.roofline`) does not pay for the run-directory code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvscope.sim.run import SimConfig, SimResult, simulate

__all__ = ["SimConfig", "SimResult", "simulate"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kvscope.sim import run

        return getattr(run, name)
    raise AttributeError(f"module 'kvscope.sim' has no attribute {name!r}")
