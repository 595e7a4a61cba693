"""Discrete-event simulator of a paged-KV serving engine (vLLM v1 semantics).

Public API: :func:`simulate` with a :class:`SimConfig`, returning a :class:`SimResult`
(requests and steps tables, summary figures; ``.write(dir)`` makes a run directory).
Building blocks: :mod:`~kvscope.sim.kv_pool` (paged pool and prefix cache),
:mod:`~kvscope.sim.scheduler` (vLLM v1 scheduling), :mod:`~kvscope.sim.contiguous`
(contiguous baseline), :mod:`~kvscope.sim.cost` (step time), :mod:`~kvscope.sim.engine`
(the loop). No torch, HTTP or NVML imports here (layering rule).
"""

from kvscope.sim.run import SimConfig, SimResult, simulate

__all__ = ["SimConfig", "SimResult", "simulate"]
