"""What a deployment costs to run: :func:`cost` ($/hour, $/million output tokens, energy).

Owns the conversion of a throughput (tokens per second, usually the roofline's) into money
and energy. The GPU-hour prices in :data:`DEFAULT_GPU_HOUR_USD` are **defaults to override**
(``--gpu-hour-price``): indicative on-demand prices per GPU-hour in USD, rounded, in the
range public price lists showed in 2025 (specialised GPU clouds for H100/H200/B200/A100/
GH200, hyperscaler single-GPU instances for L4/A10G/L40S, community marketplaces for RTX
cards). They were written down from memory of those lists, not fetched or re-checked, so
treat them as an order of magnitude: prices change monthly and differ several-fold between
providers, reserved and spot capacity. kvscope never fetches prices, and every result says
which price it used (``price_source``).

Energy uses the board power limit (TDP) of every GPU of the deployment for the whole hour, an
upper bound for the GPUs alone (host, network and cooling excluded; multiply by a PUE to
include the facility). Units: USD, seconds, tokens, watts, kWh.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.specs.hardware import GPUSpec
from kvscope.validate import finite

#: Highest ``--gpu-hour-price`` taken (USD per GPU-hour): list prices are a few dollars, and
#: a bound keeps $/hour and $/M tokens finite for every GPU count a plan may span.
MAX_GPU_HOUR_USD = 1e6

#: Indicative on-demand USD per GPU-hour (2025 public list prices, rounded); override them.
DEFAULT_GPU_HOUR_USD: dict[str, float] = {
    "A100-SXM-40GB": 1.29,
    "A100-PCIe-40GB": 1.29,
    "A100-SXM-80GB": 1.79,
    "A100-PCIe-80GB": 1.79,
    "H100-SXM-80GB": 2.99,
    "H100-PCIe-80GB": 2.49,
    "H100-NVL-94GB": 2.79,
    "H200-SXM-141GB": 3.79,
    "H200-NVL-141GB": 3.59,
    "H20-96GB": 1.50,
    "GH200-96GB": 1.49,
    "GH200-144GB": 1.99,
    "B200-SXM-180GB": 4.99,
    "RTX-PRO-6000-Blackwell-96GB": 1.79,
    "L4-24GB": 0.80,
    "L40S-48GB": 1.86,
    "A10-24GB": 0.75,
    "A10G-24GB": 1.01,
    "RTX-3090-24GB": 0.35,
    "RTX-4090-24GB": 0.69,
    "MI300X-192GB": 2.49,
}

PRICE_SOURCE = (
    "kvscope default (indicative 2025 on-demand list price; pass --gpu-hour-price for yours)"
)


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


def check_price(usd: float) -> float:
    """A ``--gpu-hour-price``: finite, not negative, at most :data:`MAX_GPU_HOUR_USD`."""
    if finite(usd, "--gpu-hour-price") < 0:
        raise KvscopeError(f"--gpu-hour-price must not be negative, got {usd}.")
    return finite(usd, "--gpu-hour-price", high=MAX_GPU_HOUR_USD)


def gpu_hour_price(gpu: GPUSpec, override: float | None = None) -> tuple[float, str]:
    """(USD per GPU-hour, where it comes from) for a catalogue GPU."""
    if override is not None:
        return check_price(override), "--gpu-hour-price"
    if gpu.name not in DEFAULT_GPU_HOUR_USD:
        raise KvscopeError(
            f"no default price for GPU '{gpu.name}'.", "Pass --gpu-hour-price USD_PER_GPU_HOUR."
        )
    return DEFAULT_GPU_HOUR_USD[gpu.name], PRICE_SOURCE


def cost(
    gpu: GPUSpec,
    num_gpus: int,
    tokens_per_s: float,
    gpu_hour_usd: float | None = None,
    pue: float = 1.0,
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
    )
