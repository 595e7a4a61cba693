"""The alpha-beta model of a link, fitted to measured collectives.

A message of ``m`` bytes costs ``alpha + m * beta`` (Hockney, "The communication
challenge for MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20(3), 1994):
``alpha`` is the per-step latency in seconds, ``beta`` the seconds per byte (1 / link
bandwidth). A collective on ``n`` ranks of size ``S`` (the nccl-tests size, see
:mod:`kvscope.comm.collectives`) then costs ``steps(op, n) * alpha + wire(op, n) * S * beta``
with the standard bandwidth-optimal algorithms:

===============  ===============  ==================  ==========================================
op               steps            wire bytes / S      algorithm and source
===============  ===============  ==================  ==========================================
all_reduce       2(n-1)           2(n-1)/n            ring (Patarasuk & Yuan, JPDC 69(2), 2009)
all_gather       n-1              (n-1)/n             ring (Thakur, Rabenseifner & Gropp,
reduce_scatter   n-1              (n-1)/n             IJHPCA 19(1), 2005); pairwise exchange
all_to_all       n-1              (n-1)/n             for all_to_all (same paper)
broadcast        n-1              1                   pipelined chain, as NCCL's ring broadcast
send_recv        1                1                   one point-to-point message
===============  ===============  ==================  ==========================================

The wire factors equal nccl-tests' bus-bandwidth factors, so on a large message the model's
bus bandwidth tends to ``1 / beta``: the fitted bandwidth is directly comparable with a
measured ``busbw``. Reduction arithmetic (the ``gamma`` term of Thakur et al.) is folded
into ``beta``.

:func:`fit_alpha_beta` fits ``alpha`` and ``beta`` by weighted least squares, each point
weighted by ``1 / measured time`` so that small messages (which fix ``alpha``) count as
much as large ones (which fix ``beta``): it minimises the sum of squared *relative* errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kvscope.comm.collectives import OPS, canonical_op
from kvscope.errors import KvscopeError

if TYPE_CHECKING:
    from kvscope.plan.comm import LinkModel


@dataclass(frozen=True)
class AlphaBeta:
    """One link: ``alpha_s`` seconds per message step, ``beta_s_per_byte`` seconds per byte."""

    alpha_s: float
    beta_s_per_byte: float

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and self.beta_s_per_byte >= 0):
            raise KvscopeError("alpha and beta must be non-negative.")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """``1 / beta``; infinite when ``beta`` is zero."""
        return math.inf if self.beta_s_per_byte == 0 else 1.0 / self.beta_s_per_byte


def collective_cost_terms(op: str, size_bytes: float, world_size: int) -> tuple[float, float]:
    """``(steps, wire_bytes)``: time = ``steps * alpha + wire_bytes * beta`` (table above)."""
    op = canonical_op(op)
    n = world_size
    if n < 1:
        raise KvscopeError(f"world size must be at least 1, got {n}.")
    if size_bytes < 0:
        raise KvscopeError(f"message size must be non-negative, got {size_bytes}.")
    if op == "send_recv":
        if n < 2:
            raise KvscopeError("send_recv needs at least 2 ranks.")
        return 1.0, float(size_bytes)
    if op == "all_reduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * size_bytes
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return float(n - 1), (n - 1) / n * size_bytes
    if op == "broadcast":
        return float(n - 1), float(size_bytes) if n > 1 else 0.0
    raise KvscopeError(f"no model for collective '{op}'; known: {', '.join(OPS)}.")


def predict_collective_time_s(
    op: str, size_bytes: float, world_size: int, alpha_s: float, beta_s_per_byte: float
) -> float:
    """Seconds one ``op`` of ``size_bytes`` takes on ``world_size`` ranks over the link."""
    steps, wire = collective_cost_terms(op, size_bytes, world_size)
    return steps * alpha_s + wire * beta_s_per_byte


@dataclass(frozen=True)
class Measurement:
    """One measured point: ``time_s`` (usually the P50) for ``op`` of ``size_bytes``."""

    op: str
    size_bytes: float
    world_size: int
    time_s: float


@dataclass(frozen=True)
class LinkFit:
    """A fitted link and how well it explains the points it was fitted to."""

    link: AlphaBeta
    points: int
    rms_rel_error: float
    max_rel_error: float


def fit_alpha_beta(points: Sequence[Measurement]) -> LinkFit:
    """Least-squares ``alpha`` and ``beta`` (both >= 0) from measured collectives."""
    terms = [collective_cost_terms(p.op, p.size_bytes, p.world_size) for p in points]
    return fit_cost_terms(terms, [p.time_s for p in points])


def fit_cost_terms(terms: Sequence[tuple[float, float]], times_s: Sequence[float]) -> LinkFit:
    """Fit ``time = steps * alpha + wire_bytes * beta`` to ``(steps, wire_bytes)`` points."""
    t = np.asarray(times_s, dtype=np.float64)
    if not (np.all(t > 0) and np.all(np.isfinite(t))):
        raise KvscopeError("measured times must be positive and finite.")
    x = np.asarray(terms, dtype=np.float64).reshape(-1, 2)
    # Relative errors: divide each equation by its measured time. Scale the columns so
    # the solve is well conditioned (wire bytes are ~1e6x the step counts).
    a = x / t[:, None]
    scale = np.where(np.abs(a).max(axis=0) > 0, np.abs(a).max(axis=0), 1.0)
    a_scaled = a / scale
    if len(t) < 2 or np.linalg.matrix_rank(a_scaled) < 2:
        raise KvscopeError(
            "fitting alpha and beta needs at least two different message sizes "
            "(with more than one rank)."
        )
    ones = np.ones_like(t)
    coef, *_ = np.linalg.lstsq(a_scaled, ones, rcond=None)
    alpha, beta = coef / scale
    # A negative coefficient means that term is not supported by the data: pin it at
    # zero and refit the other alone (the two-variable non-negative least squares).
    if alpha < 0 or beta < 0:
        keep = 1 if alpha < 0 else 0
        col = a[:, keep]
        value = float(col @ ones / (col @ col)) if col @ col > 0 else 0.0
        alpha, beta = (0.0, value) if keep == 1 else (value, 0.0)
    link = AlphaBeta(float(alpha), float(beta))
    rel = (x @ np.array([link.alpha_s, link.beta_s_per_byte]) - t) / t
    return LinkFit(
        link=link,
        points=len(t),
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        max_rel_error=float(np.max(np.abs(rel))),
    )


def dispatch_cost_terms(bottleneck_bytes: float, world_size: int) -> tuple[float, float]:
    """``(steps, wire_bytes)`` of an uneven all-to-all (MoE dispatch).

    Pairwise exchange takes ``n - 1`` steps; with uneven splits the busiest rank's
    off-rank traffic (the larger of what it sends and receives) is what the link must
    carry before the operation can end, so it replaces ``(n-1)/n * S``.
    """
    if world_size < 1 or bottleneck_bytes < 0:
        raise KvscopeError("dispatch needs at least one rank and non-negative bytes.")
    return float(world_size - 1), float(bottleneck_bytes)


def predict_dispatch_time_s(
    bottleneck_bytes: float, world_size: int, alpha_s: float, beta_s_per_byte: float
) -> float:
    """Seconds an uneven all-to-all takes when its busiest rank moves ``bottleneck_bytes``."""
    steps, wire = dispatch_cost_terms(bottleneck_bytes, world_size)
    return steps * alpha_s + wire * beta_s_per_byte


def to_link_model(link: AlphaBeta, op: str, world_size: int, name: str = "") -> LinkModel:
    """The planner's per-collective :class:`~kvscope.plan.comm.LinkModel` for ``op`` on
    ``world_size`` ranks: the planner charges one alpha per collective, this model one per
    message step (2(n-1) for a ring all-reduce), and both charge beta per byte a rank sends.
    """
    from kvscope.plan.comm import LinkModel

    if link.beta_s_per_byte <= 0:
        raise KvscopeError("the fitted link has no bandwidth term (beta = 0); measure more sizes.")
    steps, _ = collective_cost_terms(op, 0.0, max(2, world_size))
    label = name or f"measured {canonical_op(op)} link"
    return LinkModel(steps * link.alpha_s, link.beta_s_per_byte, label)


def read_run_fit(run_dir: str) -> tuple[AlphaBeta, dict[str, object]]:
    """The alpha-beta fit of a ``kvscope comm bench`` run directory and its whole summary.

    ``summary.json`` must be the run's (``kind: comm``) with a ``fit`` whose ``alpha_s`` and
    ``beta_s_per_byte`` are finite and non-negative; anything else, a missing directory or a
    name the OS cannot hold included, is one :class:`KvscopeError` line.
    """
    from pathlib import Path

    from kvscope.validate import finite, load_json

    not_comm = f"{run_dir}: not a `kvscope comm bench` run directory with a link fit."
    hint = "Pass the --out directory of `kvscope comm bench`."
    path = Path(run_dir) / "summary.json"
    try:
        present = path.is_file()
    except OSError:  # ENAMETOOLONG and the like: is_file() raises instead of answering
        present = False
    if not present:
        raise KvscopeError(not_comm, hint)
    summary = load_json(path, "run summary")
    fit = summary.get("fit") if isinstance(summary, dict) else None
    if not isinstance(summary, dict) or summary.get("kind") != "comm" or not isinstance(fit, dict):
        raise KvscopeError(not_comm, hint)
    alpha = finite(fit.get("alpha_s"), f"{path}: fit.alpha_s", low=0.0)
    beta = finite(fit.get("beta_s_per_byte"), f"{path}: fit.beta_s_per_byte", low=0.0)
    return AlphaBeta(alpha, beta), summary
