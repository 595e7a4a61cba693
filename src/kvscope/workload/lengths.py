"""Token-length distributions for prompts and outputs, sampled with numpy.

Every distribution draws integers >= 1 (a request has at least one prompt token and asks for
at least one output token). ``Mix`` is the long-tail mixture operators load-test with, written
``mix:0.95@128,0.05@4096``: each component is a weight and either a fixed length or a range
``lo-hi`` (uniform). ``Empirical`` resamples with replacement from observed lengths (a trace's
prompt or output column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]

#: Largest token count kvscope accepts for one request (prompt or output): 2**32, far past any
#: model's context, and small enough that sums over a billion requests stay exact in int64.
#: A trace row or a length parameter beyond it is refused rather than wrapped around.
MAX_TOKENS = 2**32


class LengthDist(Protocol):
    """A distribution of token counts."""

    def sample(self, rng: np.random.Generator, n: int) -> I64: ...


def _to_tokens(x: NDArray[np.float64]) -> I64:
    # Clip before the cast: a float past int64 would wrap to a negative count.
    return np.clip(np.rint(x), 1, MAX_TOKENS).astype(np.int64)


@dataclass(frozen=True)
class Fixed:
    """Always ``value`` tokens."""

    value: int

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        return np.full(n, max(self.value, 1), dtype=np.int64)


@dataclass(frozen=True)
class Uniform:
    """Integers uniform on [``low``, ``high``] (both included)."""

    low: int
    high: int

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        return np.maximum(rng.integers(self.low, self.high + 1, size=n), 1).astype(np.int64)


@dataclass(frozen=True)
class Normal:
    """Normal with ``mean`` and ``std`` tokens, rounded, floored at 1."""

    mean: float
    std: float

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        return _to_tokens(rng.normal(self.mean, self.std, size=n))


@dataclass(frozen=True)
class LogNormal:
    """Log-normal with ``median`` tokens and log-space ``sigma`` (mean = median*exp(sigma^2/2))."""

    median: float
    sigma: float

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        return _to_tokens(rng.lognormal(np.log(self.median), self.sigma, size=n))


@dataclass(frozen=True)
class Mix:
    """Weighted mixture; ``components`` are (weight, low, high) with low == high for fixed."""

    components: tuple[tuple[float, int, int], ...]

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        w = np.array([c[0] for c in self.components], dtype=np.float64)
        pick = rng.choice(len(w), size=n, p=w / w.sum())
        lo = np.array([c[1] for c in self.components], dtype=np.int64)[pick]
        hi = np.array([c[2] for c in self.components], dtype=np.int64)[pick]
        span = hi - lo + 1
        out = lo + np.floor(rng.random(n) * span).astype(np.int64)
        return np.maximum(out, 1)


@dataclass(frozen=True, eq=False)
class Empirical:
    """Resampled (with replacement) from observed lengths, e.g. a trace's prompt column."""

    values: I64
    source: str = ""

    def sample(self, rng: np.random.Generator, n: int) -> I64:
        return np.maximum(self.values[rng.integers(0, len(self.values), size=n)], 1)
