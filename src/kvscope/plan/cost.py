"""What a deployment costs to run: :func:`cost` ($/hour, $/million output tokens, energy).

Owns the conversion of a throughput (tokens per second, usually the roofline's) into money
and energy. The price per GPU-hour comes from :mod:`kvscope.plan.prices` (``--gpu-hour-price``
> prices file > kvscope's default estimates, ``specs/prices.json``); every result says which
price it used and where it came from (``price_source``), and the context per request its
throughput assumes (``context_tokens``, ``context_source``). kvscope never fetches prices.

Energy uses the board power limit (TDP) of every GPU of the deployment for the whole hour, an
upper bound for the GPUs alone (host, network and cooling excluded; multiply by a PUE to
include the facility). Units: USD, seconds, tokens, watts, kWh.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.plan.prices import (
    DEFAULT_SOURCE,
    MAX_GPU_HOUR_USD,
    Prices,
    check_price,
    default_prices,
)
from kvscope.specs.hardware import GPUSpec

__all__ = [
    "DEFAULT_GPU_HOUR_USD",
    "MAX_GPU_HOUR_USD",
    "PRICE_SOURCE",
    "Cost",
    "check_price",
    "cost",
    "gpu_hour_price",
]

#: Default USD per GPU-hour by catalogue name (kvscope's estimates; see specs/prices.json).
DEFAULT_GPU_HOUR_USD: dict[str, float] = {
    name: p.usd_per_gpu_hour for name, p in default_prices().items()
}

PRICE_SOURCE = DEFAULT_SOURCE


@dataclass(frozen=True)
class Cost:
    """Cost of a deployment of ``num_gpus`` GPUs producing ``tokens_per_s`` output tokens."""

    gpu: str
    num_gpus: int
    gpu_hour_usd: float
    price_source: str
    usd_per_hour: float
    tokens_per_s: float
    usd_per_million_tokens: float | None
    power_w: float
    kwh_per_million_tokens: float | None
    pue: float
    #: Prompt + output tokens per request the throughput (so the $/M tokens) assumes.
    context_tokens: int | None = None
    #: Where that context comes from (``--target-context`` or the default rule).
    context_source: str = ""


def gpu_hour_price(gpu: GPUSpec, override: float | Prices | None = None) -> tuple[float, str]:
    """(USD per GPU-hour, where it comes from) for a catalogue GPU.

    ``override``: one price for every GPU (``--gpu-hour-price``) or the resolved
    :class:`~kvscope.plan.prices.Prices` of a command line.
    """
    if isinstance(override, Prices):
        p = override.require(gpu)
        return p.usd_per_gpu_hour, p.source
    if override is not None:
        return check_price(override), "--gpu-hour-price"
    p = Prices().require(gpu)
    return p.usd_per_gpu_hour, p.source


def cost(
    gpu: GPUSpec,
    num_gpus: int,
    tokens_per_s: float,
    gpu_hour_usd: float | Prices | None = None,
    pue: float = 1.0,
    context_tokens: int | None = None,
    context_source: str = "",
) -> Cost:
    """$/hour, $/Mtok and kWh/Mtok for ``num_gpus`` GPUs sustaining ``tokens_per_s``.

    ``tokens_per_s`` is the output-token rate of the whole deployment; a zero rate gives no
    per-token figures (None) rather than infinity.
    """
    if num_gpus < 1:
        raise KvscopeError(f"number of GPUs must be at least 1, got {num_gpus}.")
    if tokens_per_s < 0:
        raise KvscopeError(f"throughput must not be negative, got {tokens_per_s}.")
    if pue < 1.0:
        raise KvscopeError(f"PUE must be at least 1.0, got {pue}.")
    price, source = gpu_hour_price(gpu, gpu_hour_usd)
    per_hour = price * num_gpus
    power = gpu.tdp_w * num_gpus * pue
    tokens_per_hour = tokens_per_s * 3600.0
    per_m = per_hour / tokens_per_hour * 1e6 if tokens_per_hour > 0 else None
    kwh = power / 1000.0 / tokens_per_hour * 1e6 if tokens_per_hour > 0 else None
    return Cost(
        gpu=gpu.name,
        num_gpus=num_gpus,
        gpu_hour_usd=price,
        price_source=source,
        usd_per_hour=per_hour,
        tokens_per_s=tokens_per_s,
        usd_per_million_tokens=per_m,
        power_w=power,
        kwh_per_million_tokens=kwh,
        pue=pue,
        context_tokens=context_tokens,
        context_source=context_source,
    )
