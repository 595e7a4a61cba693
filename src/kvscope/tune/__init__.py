"""``kvscope tune``: the best deployment for a workload and an SLO, searched by simulation.

The loop: a search space of engine flags and layouts (:mod:`~kvscope.tune.space`), pruned by
the planner before anything runs (:mod:`~kvscope.tune.prune`), each survivor simulated under
the workload in a successive-halving schedule, with ``--objective max-rate`` a bisection of
the request rate per point (:mod:`~kvscope.tune.search`, points run by
:mod:`kvscope.executor`), then ranked with a Pareto front (:mod:`~kvscope.tune.rank`) and the
winner's launch command written (:mod:`~kvscope.tune.command`).
"""
