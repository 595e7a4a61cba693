"""Data-parallel replicas: N engines on one clock, each request dealt to one as vLLM does.

``--data-parallel-size N`` runs N engine replicas (vLLM ``DPEngineCoreProc``s, SGLang DP
attention ranks), each with its own KV pool and scheduler. :class:`DataParallelGroup`
drives :class:`kvscope.sim.engine.Engine` instances from above: before each arrival every
engine is advanced to the arrival time (:meth:`Engine.advance`), the request goes to the
engine the load balancer picks, and the engines then serve on. Deterministic: no randomness,
ties broken by the rotating scan order.

The balancer is vLLM 0.33.0's ``vllm/v1/engine/core_client.py::DPLBAsyncMPClient``
(``get_core_engine_for_request``), one API client: each engine's score is
``max(in flight, waiting + running) + waiting x 6 x max(0, kv_usage - 0.5)``, the lowest
score wins (strictly lower, scanning from a start index that rotates by one per request).
"In flight" counts requests dealt to the engine and not finished by the arrival time
(exact, as the client's own count is); waiting, running and KV usage are the engine's at
that time (vLLM reads them from the DP coordinator's snapshot, refreshed every 100 ms; the
simulator reads them fresh, at the end of the step under way).

Not modelled: MoE DP ranks stepping in lockstep (vLLM runs a dummy batch on an idle rank
and each step waits for the slowest rank's all-to-all); each replica keeps its own clock.
Units: seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvscope.sim.engine import Engine, EngineStats, StepRow
from kvscope.sim.sequence import Sequence

#: vLLM 0.33.0 ``DPLBAsyncMPClient``: waiting requests weigh this much more per unit of KV
#: usage above :data:`KV_PRESSURE_FLOOR` (3x at a full cache).
KV_PRESSURE_WEIGHT = 6.0
KV_PRESSURE_FLOOR = 0.5


@dataclass(frozen=True)
class RankLoad:
    """What the balancer sees of one engine at an arrival."""

    in_flight: int
    waiting: int
    running: int
    kv_usage: float

    @property
    def score(self) -> float:
        """vLLM 0.33.0's engine load score (lower takes the request)."""
        return load_score(self.in_flight, self.waiting, self.running, self.kv_usage)


def load_score(in_flight: int, waiting: int, running: int, kv_usage: float) -> float:
    """vLLM 0.33.0 ``DPLBAsyncMPClient``'s load score of one engine (one API client)."""
    score = float(max(in_flight, waiting + running))
    if waiting:
        score += waiting * KV_PRESSURE_WEIGHT * max(0.0, kv_usage - KV_PRESSURE_FLOOR)
    return score


def pick_rank(loads: list[RankLoad], start: int) -> int:
    """The engine a request goes to: the lowest score, the first in scan order from
    ``start`` on a tie (vLLM 0.33.0 ``DPLBAsyncMPClient.get_core_engine_for_request``)."""
    n = len(loads)
    best, best_score = start % n, math.inf
    for j in range(n):
        idx = (start + j) % n
        score = loads[idx].score
        if score < best_score:
            best, best_score = idx, score
    return best


class DataParallelGroup:
    """Serve one workload over several engines that share a clock."""

    def __init__(
        self, engines: list[Engine], on_progress: Callable[[int, int], None] | None = None
    ) -> None:
        if not engines:
            raise ValueError("a data-parallel group needs at least one engine")
        self.engines = engines
        self.on_progress = on_progress
        self.queues: list[list[Sequence]] = [[] for _ in engines]
        self._done = [0] * len(engines)  # finished requests counted as out of flight

    def run(self, seqs: list[Sequence]) -> list[int]:
        """Serve ``seqs`` (in arrival order) to the end; the DP rank of each, in order.

        Per arrival each engine is advanced to it and scored in the balancer's scan order
        (the engines are independent, so the order they are advanced in does not matter);
        the same choice as :func:`pick_rank` over :meth:`loads`, without the objects.
        """
        engines, queues = self.engines, self.queues
        n_eng, n = len(engines), len(seqs)
        ranks: list[int] = []
        start = 0
        for k, seq in enumerate(seqs):
            a = seq.arrival_s
            best, best_score = start, math.inf
            for j in range(n_eng):
                idx = start + j
                if idx >= n_eng:
                    idx -= n_eng
                engine, queue = engines[idx], queues[idx]
                engine.advance(queue, a)
                score = load_score(*self._load(idx, a))
                if score < best_score:
                    best, best_score = idx, score
            start = start + 1 if start + 1 < n_eng else 0
            queues[best].append(seq)
            ranks.append(best)
            self._progress(k, n)
        self._finish_all()
        return ranks

    def _progress(self, k: int, n: int) -> None:
        """Report requests finished every 4,096 arrivals dealt."""
        if self.on_progress is not None and not k & 4095:
            self.on_progress(sum(len(e.sched.finished) for e in self.engines), n)

    def _finish_all(self) -> None:
        """Serve every engine's queue to the end (engines are independent)."""
        for engine, queue in zip(self.engines, self.queues, strict=True):
            engine.finish(queue)

    def settle(self) -> None:
        """Make every engine's state readable after Ctrl-C."""
        for engine in self.engines:
            engine.settle()

    def loads(self, t: float) -> list[RankLoad]:
        """What the balancer sees of each engine at ``t`` (engines advanced to ``t``)."""
        return [RankLoad(*self._load(r, t)) for r in range(len(self.engines))]

    def _load(self, r: int, t: float) -> tuple[int, int, int, float]:
        engine = self.engines[r]
        sched = engine.sched
        finished = sched.finished
        done = self._done[r]
        # An engine's clock may run past t (the step under way): a request it finished
        # after t is still in flight at t. NaN (rejected, no finish time) counts as done.
        while done < len(finished) and not finished[done].finish_s > t:
            done += 1
        self._done[r] = done
        waiting = sched.num_waiting
        usage = engine.pool.usage if waiting else 0.0  # only weighs with a queue
        return len(self.queues[r]) - done, waiting, len(sched.running), usage


def merged_stats(stats: list[EngineStats], wall_s: float, cpu_s: float) -> EngineStats:
    """Whole-deployment figures from the replicas': counts, busy time and the KV-usage
    integral add up; ``peak_used`` is the sum of the ranks' peaks (each rank's pool is its
    own, so the deployment held at most that many blocks at once)."""
    peak_rank = max(range(len(stats)), key=lambda r: stats[r].peak_used)
    return EngineStats(
        steps=sum(s.steps for s in stats),
        spans=sum(s.spans for s in stats),
        busy_s=sum(s.busy_s for s in stats),
        usage_time_integral=sum(s.usage_time_integral for s in stats),
        peak_used=sum(s.peak_used for s in stats),
        peak_t_s=stats[peak_rank].peak_t_s,
        tokens=sum(s.tokens for s in stats),
        wall_s=wall_s,
        cpu_s=cpu_s,
        rows=[],
    )


def rank_rows(stats: list[EngineStats]) -> tuple[list[StepRow], list[int]]:
    """Every rank's sample rows, ordered by time then rank, and the rank of each row."""
    tagged = sorted(
        ((row.t_s, r, i) for r, s in enumerate(stats) for i, row in enumerate(s.rows)),
    )
    return [stats[r].rows[i] for _, r, i in tagged], [r for _, r, _ in tagged]
