"""Request routers for a fleet of replicas: each a small named policy behind one interface.

A router sees, per arrival, one :class:`kvscope.sim.data_parallel.RankLoad` per replica
(in flight, waiting, running, KV usage, read fresh at the arrival) and the request's
affinity key, and names the replica that takes it. Deterministic: ``random`` draws from
a seeded generator. Rules: round-robin and least outstanding requests as in vLLM's
production-stack router (``src/vllm_router/routers/routing_logic.py``, v0.1.x); session
affinity hashes the session key onto the replicas as that router's ``SessionRouter`` does
(there with a consistent-hash ring; here a stable modulo, same replica per key); least
KV usage as llm-d's ``kv-cache-utilization-scorer`` (llm-d-inference-scheduler v0.2).
Prefix-aware and weighted routers (llm-d's precise-prefix-cache scorer) are not here yet.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from kvscope.sim.data_parallel import RankLoad

Pick = Callable[[str, list[RankLoad]], int]


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

    _next: int = 0

    def pick(self, key: str, loads: list[RankLoad]) -> int:
        idx = self._next % len(loads)
        self._next = idx + 1
        return idx


@dataclass
class Random:
    """A uniform replica from a generator seeded at construction."""

    seed: int = 0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def pick(self, key: str, loads: list[RankLoad]) -> int:
        return self._rng.randrange(len(loads))


@dataclass
class LeastOutstanding:
    """Fewest requests dealt and not finished."""

    def pick(self, key: str, loads: list[RankLoad]) -> int:
        return _argmin([float(ld.in_flight) for ld in loads])


@dataclass
class LeastKVUsage:
    """Lowest KV-cache usage (fraction of the pool's blocks in use)."""

    def pick(self, key: str, loads: list[RankLoad]) -> int:
        return _argmin([ld.kv_usage for ld in loads])


@dataclass
class SessionAffinity:
    """Every request of a session to one replica: a stable hash of the session key."""

    def pick(self, key: str, loads: list[RankLoad]) -> int:
        return zlib.crc32(key.encode()) % len(loads)


ROUTERS: dict[str, Callable[[int], object]] = {
    "round-robin": lambda seed: RoundRobin(),
    "random": lambda seed: Random(seed),
    "least-outstanding": lambda seed: LeastOutstanding(),
    "least-kv-usage": lambda seed: LeastKVUsage(),
    "session-affinity": lambda seed: SessionAffinity(),
}


def make_router(name: str, seed: int = 0) -> object:
    """The named router; ``ValueError`` naming the field on an unknown name."""
    try:
        return ROUTERS[name](seed)
    except KeyError:
        known = ", ".join(sorted(ROUTERS))
        raise ValueError(f"router: unknown router {name!r} (known: {known})") from None
