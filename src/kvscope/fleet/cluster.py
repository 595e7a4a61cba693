"""The fleet's clock: replicas advanced together, each arrival routed to a routable replica.

:class:`Cluster` drives :class:`kvscope.sim.engine.Engine` instances from above, as
:class:`kvscope.sim.data_parallel.DataParallelGroup` does (whose load view it shares): before
each arrival every routable replica is advanced to the arrival time, the autoscaler may
provision or drain replicas, the router picks among the routable ones and the request joins
that replica's queue. A draining replica takes no new requests and serves what it holds to
the end; its engine is simply not stepped until it is read or finished (engines are
independent, so when they are advanced does not change what they do). Deterministic: the
routers' only randomness is seeded. Units: seconds.

Approximations: the router reads each replica's state fresh at the arrival (a real gateway
reads scraped metrics or KV events some milliseconds old); a replica provisioned again after
draining keeps its prefix cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kvscope.fleet.autoscale import Scaler, Threshold
from kvscope.sim.data_parallel import DataParallelGroup, RankLoad
from kvscope.sim.engine import Engine
from kvscope.sim.sequence import Sequence as Seq

#: The load a router that reads no state is shown (never looked at).
_UNREAD = RankLoad(0, 0, 0, 0.0)


class Router(Protocol):
    wants_hits: bool
    reads_state: bool

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int: ...


class Cluster(DataParallelGroup):
    """Serve one workload over replicas behind a router, on one clock."""

    def __init__(
        self,
        engines: list[Engine],
        pools: list[Any],
        router: Router,
        scaler: Scaler | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        super().__init__(engines, on_progress)
        self.kv_pools = pools  # each replica's KV pool (read-only prefix queries)
        self.router = router
        self.scaler = scaler if scaler is not None else Scaler(None, len(engines))
        n0 = self.scaler.initial()
        #: when each replica takes requests (inf: not provisioned) and whether it drains
        self.ready_at = [0.0 if r < n0 else math.inf for r in range(len(engines))]
        self.up_since: list[float | None] = [0.0 if r < n0 else None for r in range(len(engines))]
        #: (start, stop) of each replica's time provisioned (stop: inf while up)
        self.intervals: list[list[tuple[float, float]]] = [[] for _ in engines]
        self.timeline: list[tuple[float, int]] = [(0.0, n0)]
        #: nothing reads a replica's state before the end (a router that looks at none and no
        #: threshold policy): the engines then run on undisturbed, in long decode spans, and
        #: are served to the end by ``finish`` (the same results: they are independent)
        self.lazy = not router.reads_state and not isinstance(self.scaler.policy, Threshold)

    def run(self, seqs: list[Seq], keys: Sequence[str] | None = None) -> list[int]:
        """Serve ``seqs`` (arrival order) to the end; the replica of each, in order.
        ``keys`` are the session-affinity keys (default: each request's id)."""
        engines, queues, router = self.engines, self.queues, self.router
        n = len(seqs)
        replicas: list[int] = []
        for k, seq in enumerate(seqs):
            a = seq.arrival_s
            live = self._routable(a)
            if self.scaler.policy is not None:
                live = self._scale(a, live)
            if self.lazy:
                loads = [_UNREAD] * len(live)
            else:
                for r in live:
                    engines[r].advance(queues[r], a)
                loads = [RankLoad(*self._load(r, a)) for r in live]
            hits: list[float] = []
            if router.wants_hits:
                hits = [self._hit_share(r, seq) for r in live]
            key = keys[k] if keys is not None else seq.request_id
            r = live[router.pick(key, loads, hits)]
            pool = self.kv_pools[r]
            if seq.trace_hashes is not None:  # shareable blocks in this replica's block size
                seq.n_shareable = len(seq.trace_hashes) * seq.hash_block_size // pool.block_size
            queues[r].append(seq)
            replicas.append(r)
            self._progress(k, n)
        self._finish_all()
        end = max((e.t for e in engines), default=0.0)
        for r, since in enumerate(self.up_since):
            if since is not None:
                self.intervals[r].append((since, end))
        return replicas

    def _routable(self, t: float) -> list[int]:
        live = [r for r, at in enumerate(self.ready_at) if at <= t]
        if not live:  # every active replica still provisioning: the earliest takes it
            first = min(range(len(self.ready_at)), key=lambda r: self.ready_at[r])
            live = [first]
        return live

    def _hit_share(self, r: int, seq: Seq) -> float:
        """Replica ``r``'s cached share of ``seq``'s prompt blocks (0..1)."""
        pool = self.kv_pools[r]
        query = getattr(pool, "cached_prefix_blocks", None)
        if query is None or seq.trace_hashes is None:
            return 0.0
        blocks = max(1, (seq.prompt - 1) // int(pool.block_size))
        return float(query(seq)) / blocks

    def _scale(self, t: float, live: list[int]) -> list[int]:
        """Apply the autoscaler at ``t``: provision the lowest unprovisioned replicas, drain
        the newest active ones (provisioning ones first); the routable list after it."""
        active = [r for r, s in enumerate(self.up_since) if s is not None]
        engines = self.engines
        if isinstance(self.scaler.policy, Threshold):
            for r in live:
                engines[r].advance(self.queues[r], t)
        metric = {
            "queue": sum(engines[r].sched.num_waiting for r in live) / len(live),
            "kv": sum(engines[r].pool.usage for r in live) / len(live),
        }
        want = self.scaler.target(t, len(active), metric)
        if want == len(active):
            return live
        if want > len(active):
            idle = [r for r, s in enumerate(self.up_since) if s is None]
            for r in idle[: want - len(active)]:
                self.up_since[r] = t
                self.ready_at[r] = t + self.scaler.delay_s
        else:
            order = sorted(active, key=lambda r: (-self.ready_at[r], -r))
            for r in order[: len(active) - want]:
                since = self.up_since[r]
                assert since is not None
                self.intervals[r].append((since, t))
                self.up_since[r] = None
                self.ready_at[r] = math.inf
        self.timeline.append((t, want))
        return self._routable(t)
