"""MoE dispatch traffic: which rank sends how many tokens to which, under skewed routing.

Expert parallelism places ``E`` experts contiguously on ``n`` ranks (expert ``e`` on rank
``e // (E / n)``, the linear placement vLLM's expert-parallel layers use). Every token
picks its top-``k`` of ``E`` experts. Expert popularity is Zipf-like: the expert of
popularity rank ``r`` (1-based) is chosen with weight ``r ** -skew`` (``skew = 0`` is uniform
routing; real routers show a few hot experts); which experts are hot is a seeded random
permutation, so hot experts land on arbitrary ranks.

A token's top-``k`` is drawn without replacement with the Gumbel-top-k trick (Kool, van
Hoof & Welling, "Stochastic Beams and Where to Find Them", ICML 2019), which samples the
same distribution as drawing ``k`` experts one after another by weight.

A token travels to a rank once however many of its experts that rank holds (DeepEP's
``get_dispatch_layout`` builds ``is_token_in_rank`` the same way), so
``tokens[src, dst]`` counts tokens of rank ``src`` with at least one expert on ``dst``;
bytes = tokens x hidden size x element size. Imbalance of one dispatch is the busiest
rank's received bytes over the mean (1.0 = perfectly even).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvscope.errors import KvscopeError


@dataclass(frozen=True)
class RoutingSpec:
    """One MoE layer's dispatch: ``tokens_per_rank`` tokens of ``hidden`` elements each."""

    num_experts: int
    top_k: int
    tokens_per_rank: int
    hidden: int
    skew: float = 0.0

    def __post_init__(self) -> None:
        if self.num_experts < 1 or self.top_k < 1 or self.top_k > self.num_experts:
            raise KvscopeError(
                f"top-k must be between 1 and the number of experts "
                f"({self.num_experts}), got {self.top_k}."
            )
        if self.tokens_per_rank < 1 or self.hidden < 1:
            raise KvscopeError("tokens per rank and hidden size must be at least 1.")
        if not (self.skew >= 0 and np.isfinite(self.skew)):
            raise KvscopeError(f"skew must be a non-negative number, got {self.skew}.")


def expert_popularity(num_experts: int, skew: float, rng: np.random.Generator) -> np.ndarray:
    """Routing probability of each expert (sums to 1): Zipf weights on a seeded order."""
    weights = np.arange(1, num_experts + 1, dtype=np.float64) ** -skew
    probs = np.empty(num_experts)
    probs[rng.permutation(num_experts)] = weights / weights.sum()
    return probs


def dispatch_tokens(
    spec: RoutingSpec, world_size: int, probs: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``tokens[src, dst]`` for one dispatch (see the module docstring)."""
    n, e = world_size, spec.num_experts
    if e % n:
        raise KvscopeError(f"{e} experts do not split evenly over {n} ranks.")
    per_rank = e // n
    total = n * spec.tokens_per_rank
    keys = np.log(probs)[None, :] + rng.gumbel(size=(total, e))
    top = np.argpartition(-keys, spec.top_k - 1, axis=1)[:, : spec.top_k]
    hit = np.zeros((total, n), dtype=bool)
    np.put_along_axis(hit, top // per_rank, True, axis=1)
    src = np.repeat(np.arange(n), spec.tokens_per_rank)
    tokens = np.zeros((n, n), dtype=np.int64)
    np.add.at(tokens, src, hit.astype(np.int64))
    return tokens


def imbalance(tokens: np.ndarray) -> float:
    """Busiest rank's received tokens over the mean received (1.0 = even)."""
    recv = np.asarray(tokens).sum(axis=0)
    mean = recv.mean()
    return float(recv.max() / mean) if mean > 0 else 1.0


def bottleneck_tokens(tokens: np.ndarray) -> int:
    """Off-rank tokens of the busiest rank: the larger of what it sends and receives."""
    t = np.asarray(tokens)
    off = t - np.diag(np.diag(t))  # a rank's tokens for itself never touch the link
    return int(max(off.sum(axis=1).max(), off.sum(axis=0).max()))


def dispatch_plan(
    spec: RoutingSpec, world_size: int, iterations: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``iterations`` seeded dispatches: ``tokens[iter, src, dst]`` and the popularity."""
    rng = np.random.default_rng(seed)
    probs = expert_popularity(spec.num_experts, spec.skew, rng)
    plans = np.stack([dispatch_tokens(spec, world_size, probs, rng) for _ in range(iterations)])
    return plans, probs
