"""Request routers for a fleet of replicas: each a small named policy behind one interface.

A router sees, per arrival, one :class:`kvscope.sim.data_parallel.RankLoad` per routable
replica (in flight, waiting, running, KV usage, read fresh at the arrival), the request's
affinity key and, for routers with ``wants_hits``, each replica's cached share of the
prompt (0..1: leading prompt blocks in that replica's prefix cache over the prompt's
blocks), and names the replica that takes it. Deterministic: ``random`` draws from a seeded
generator, ties go to the lowest index. Routers with ``reads_state`` False (round-robin,
random, session affinity) pick without looking at the replicas, so a driver need not advance
the replicas to each arrival for them. Rules: round-robin and least outstanding requests as
in vLLM's production-stack router (``src/vllm_router/routers/routing_logic.py``, v0.1.x);
session affinity hashes the session key onto the replicas as that router's ``SessionRouter``
does (there with a consistent-hash ring; here a stable modulo, same replica per key while the
replica count holds); least KV usage as llm-d's ``kv-cache-utilization-scorer``.

``prefix-aware`` is llm-d's ``precise-prefix-cache-scorer`` alone (llm-d-inference-scheduler
v0.3, fed by vLLM's KV events: the longest run of the prompt's leading blocks a replica holds,
over the prompt's blocks); ties go to the fewest outstanding requests. ``prefix-load`` is
llm-d's weighted profile: ``prefix x hit share + queue x queue score + kv x (1 - KV usage)``,
highest wins (among equals the fewest outstanding; llm-d's ``max-score-picker`` draws one at
random), the queue score being the Gateway API Inference Extension ``queue-scorer``'s
``(max - q) / (max - min)`` over the replicas' waiting queues (1 when all are equal). Default
weights 3 / 2 / 2, the ``default`` scheduling profile of llm-d's inference-scheduling guide.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvscope.sim.data_parallel import RankLoad


def _argmin(values: list[float]) -> int:
    """Lowest value; the lowest index on a tie."""
    best = 0
    for i, v in enumerate(values):
        if v < values[best]:
            best = i
    return best


@dataclass
class RoundRobin:
    """Replica ``k mod N`` takes the k-th request."""

    wants_hits = False
    reads_state = False
    _next: int = 0

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        idx = self._next % len(loads)
        self._next = idx + 1
        return idx


@dataclass
class Random:
    """A uniform replica from a generator seeded at construction."""

    wants_hits = False
    reads_state = False
    seed: int = 0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        return self._rng.randrange(len(loads))


@dataclass
class LeastOutstanding:
    """Fewest requests dealt and not finished."""

    wants_hits = False
    reads_state = True

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        return _argmin([float(ld.in_flight) for ld in loads])


@dataclass
class LeastKVUsage:
    """Lowest KV-cache usage (fraction of the pool's blocks in use)."""

    wants_hits = False
    reads_state = True

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        return _argmin([ld.kv_usage for ld in loads])


@dataclass
class SessionAffinity:
    """Every request of a session to one replica: a stable hash of the session key."""

    wants_hits = False
    reads_state = False

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        return zlib.crc32(key.encode()) % len(loads)


@dataclass
class PrefixAware:
    """The replica holding the longest cached prefix; the fewest outstanding on a tie."""

    wants_hits = True
    reads_state = True

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        if not hits:
            return _argmin([float(ld.in_flight) for ld in loads])
        keys = [(-h, ld.in_flight) for h, ld in zip(hits, loads, strict=True)]
        return min(range(len(keys)), key=keys.__getitem__)  # lowest index among equals


@dataclass(frozen=True)
class RouterWeights:
    """Weights of ``prefix-load``'s three scorers (each finite and >= 0, not all 0)."""

    prefix: float = 3.0
    queue: float = 2.0
    kv: float = 2.0


@dataclass
class PrefixLoad:
    """llm-d's weighted sum of prefix hit share, queue score and free KV share."""

    wants_hits = True
    reads_state = True
    weights: RouterWeights = field(default_factory=RouterWeights)

    def pick(self, key: str, loads: list[RankLoad], hits: Sequence[float] = ()) -> int:
        w = self.weights
        queues = [ld.waiting for ld in loads]
        lo, hi = min(queues), max(queues)
        span = float(hi - lo)
        scores = []
        for i, ld in enumerate(loads):
            q = 1.0 if span == 0 else (hi - ld.waiting) / span
            h = hits[i] if hits else 0.0
            scores.append(w.prefix * h + w.queue * q + w.kv * (1.0 - ld.kv_usage))
        top = max(scores)
        # llm-d's max-score-picker draws among equal scores; here the fewest outstanding
        ties = [
            float(ld.in_flight) if s == top else math.inf
            for s, ld in zip(scores, loads, strict=True)
        ]
        return _argmin(ties)


ROUTERS: dict[str, Callable[[int, RouterWeights], object]] = {
    "round-robin": lambda seed, w: RoundRobin(),
    "random": lambda seed, w: Random(seed),
    "least-outstanding": lambda seed, w: LeastOutstanding(),
    "least-kv-usage": lambda seed, w: LeastKVUsage(),
    "session-affinity": lambda seed, w: SessionAffinity(),
    "prefix-aware": lambda seed, w: PrefixAware(),
    "prefix-load": lambda seed, w: PrefixLoad(w),
}


def make_router(name: str, seed: int = 0, weights: RouterWeights | None = None) -> object:
    """The named router; ``ValueError`` naming the field on an unknown name."""
    try:
        factory = ROUTERS[name]
    except KeyError:
        known = ", ".join(sorted(ROUTERS))
        raise ValueError(f"router: unknown router {name!r} (known: {known})") from None
    return factory(seed, weights or RouterWeights())
