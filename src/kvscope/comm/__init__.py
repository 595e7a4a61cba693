"""Collective communication: what tensor- and expert-parallel serving pays on the wire.

``kvscope comm`` measures collectives with ``torch.distributed`` (the ``torch`` extra) on
ranks it launches itself, and reports what hurts serving SLAs — the latency tail (P50,
P95, P99, max, jitter, slowest rank) — next to the bandwidths nccl-tests prints.

Bandwidth definitions (nccl-tests, ``doc/PERFORMANCE.md``, "Bus bandwidth"): for a
size ``S`` bytes and time ``t`` seconds, ``algbw = S / t`` and ``busbw = algbw x f`` with
``f = 2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather, reduce_scatter and all_to_all,
and ``1`` for broadcast and send_recv, on ``n`` ranks. ``S`` follows nccl-tests too: the
whole gathered array for all_gather, the whole input for reduce_scatter (details in
:mod:`kvscope.comm.collectives`).

Modules (only ``worker`` and ``environment`` import torch, and only when called):

- :mod:`~kvscope.comm.collectives` names, buffer sizes, algbw/busbw;
- :mod:`~kvscope.comm.sizes` size sweeps (``1K:64M:x2``);
- :mod:`~kvscope.comm.latency` percentiles, jitter, slowest rank;
- :mod:`~kvscope.comm.model` the alpha-beta link model and its least-squares fit;
- :mod:`~kvscope.comm.routing` MoE routing (top-k of E, Zipf skew) -> dispatch splits;
- :mod:`~kvscope.comm.launch` starting ranks, failing fast on a dead or hung rank;
- :mod:`~kvscope.comm.torchrun` playing one rank when torchrun started the process;
- :mod:`~kvscope.comm.worker` one rank's timed loop (torch);
- :mod:`~kvscope.comm.environment` backend, versions, NCCL_/GLOO_ variables, topology;
- :mod:`~kvscope.comm.bench` and :mod:`~kvscope.comm.dispatch` the two measurements;
- :mod:`~kvscope.comm.rundir` the run directory (``summary.json`` kind ``comm``).
"""

from kvscope.comm.model import AlphaBeta, fit_alpha_beta, predict_collective_time_s

__all__ = ["AlphaBeta", "fit_alpha_beta", "predict_collective_time_s"]
