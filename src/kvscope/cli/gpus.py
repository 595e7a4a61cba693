"""``kvscope gpus``: the hardware catalogue and the price per GPU-hour each GPU is costed at.

The price and its source come from :func:`kvscope.plan.prices.resolve_prices` with the same
inputs as ``kvscope plan`` (``--gpu-hour-price``, ``--prices``, ``--provider`` and the
per-user prices file), so what this lists is what a plan would use. ``--gpu-spec FILE`` (else
the per-user ``gpus.yaml``) adds or overrides entries (:mod:`kvscope.specs.user_gpus`); those
rows are marked ``(user)`` in the table and carry ``user_entry`` (their file) in ``--json``.
"""

from __future__ import annotations

from typing import Any

import typer

from kvscope.cli.cost_options import GpuHourPrice, GpuSpecFile, PricesFile, Provider
from kvscope.cli.output import print_json, stdout


def gpus(
    name: str = typer.Argument(None, help="Show one GPU (any common spelling) [default: all]."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    gpu_hour_price: GpuHourPrice = None,
    prices_file: PricesFile = None,
    provider: Provider = None,
    gpu_spec_file: GpuSpecFile = None,
) -> None:
    """List the GPUs kvscope knows: memory as the driver reports it, bandwidth, compute, and
    the USD per GPU-hour `kvscope plan` costs them at, with where that price comes from
    (--gpu-hour-price > prices file > kvscope's default estimate)."""
    from rich.table import Table

    from kvscope.plan.prices import resolve_prices
    from kvscope.specs.describe import describe_gpu
    from kvscope.specs.hardware import get_gpu, list_gpus
    from kvscope.specs.user_gpus import use_gpu_file

    use_gpu_file(gpu_spec_file)
    prices = resolve_prices(gpu_hour_price, prices_file, provider)
    # An empty name is looked up (and refused) rather than read as "list them all".
    one = name is not None
    specs = [get_gpu(name)] if one else list(list_gpus())
    rows: list[dict[str, Any]] = []
    for g in specs:
        row = describe_gpu(g)
        p = prices.price(g)
        row["gpu_hour_usd"] = None if p is None else p.usd_per_gpu_hour
        row["gpu_hour_price_source"] = None if p is None else p.source
        row["user_entry"] = g.origin or None
        rows.append(row)
    if json_out:
        print_json(rows[0] if one else rows)
        return
    # Compact on purpose: GPU names are never cut, and the whole table fits 80 columns.
    t = Table(
        title="GPU catalogue: memory as CUDA reports it (GiB), HBM and NVLink (NVL, per "
        "direction) in GB/s, dense tensor TFLOPS, TDP (W), USD per GPU-hour",
        box=None,
        header_style="bold",
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    width = max((len(str(r["name"])) + (7 if r["user_entry"] else 0) for r in rows), default=4)
    t.add_column("name", justify="left", no_wrap=True, min_width=width)
    for col in ("GiB", "HBM", "BF16", "FP8", "FP4", "NVL", "TDP", "$/h"):
        t.add_column(col, justify="right", overflow="fold")
    # Each price cell carries the number of its source, listed under the table.
    sources = list(dict.fromkeys(r["gpu_hour_price_source"] for r in rows))
    for r in rows:
        usd, source = r["gpu_hour_usd"], r["gpu_hour_price_source"]
        t.add_row(
            f"{r['name']} (user)" if r["user_entry"] else r["name"],
            f"{r['memory_gib']:.1f}",
            f"{r['hbm_bandwidth_gbps']:.0f}",
            f"{r['bf16_dense_tflops']:.0f}",
            _opt(r["fp8_dense_tflops"]),
            _opt(r["fp4_dense_tflops"]),
            f"{r['nvlink_gbps_per_direction']:.0f}",
            f"{r['tdp_w']:.0f}",
            "-" if usd is None else f"{usd:.2f}{_mark(sources.index(source))}",
        )
    stdout.print(t)
    for i, source in enumerate(sources, 1):
        text = source or "no price: pass --gpu-hour-price or --prices"
        stdout.print(f"{_mark(i - 1)} USD per GPU-hour: {text}", markup=False)
    for origin in dict.fromkeys(r["user_entry"] for r in rows if r["user_entry"]):
        stdout.print(f"(user) entries from {origin}", markup=False)


def _opt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _mark(i: int) -> str:
    """A one-letter mark tying a price to its source line: a, b, c, ..."""
    return chr(ord("a") + i) if i < 26 else str(i + 1)
