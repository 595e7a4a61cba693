"""``kvscope gpus``: the hardware catalogue."""

from __future__ import annotations

import typer

from kvscope.cli.output import print_json, stdout


def gpus(
    name: str = typer.Argument(None, help="Show one GPU (any common spelling)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the GPUs kvscope knows: memory as the driver reports it, bandwidth, compute."""
    from rich.table import Table

    from kvscope.specs.describe import describe_gpu
    from kvscope.specs.hardware import get_gpu, list_gpus

    # An empty name is looked up (and refused) rather than read as "list them all".
    one = name is not None
    rows = [describe_gpu(get_gpu(name))] if one else [describe_gpu(g) for g in list_gpus()]
    if json_out:
        print_json(rows[0] if one else rows)
        return
    t = Table(title="GPU catalogue (dense tensor TFLOPS; memory as CUDA reports it)")
    for col in ("name", "memory GiB", "HBM GB/s", "BF16", "FP8", "FP4", "NVLink GB/s/dir", "TDP W"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        t.add_row(
            r["name"],
            f"{r['memory_gib']:.2f}",
            f"{r['hbm_bandwidth_gbps']:,.0f}",
            f"{r['bf16_dense_tflops']:,.0f}",
            _opt(r["fp8_dense_tflops"]),
            _opt(r["fp4_dense_tflops"]),
            f"{r['nvlink_gbps_per_direction']:,.0f}",
            f"{r['tdp_w']:,.0f}",
        )
    stdout.print(t)


def _opt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"
