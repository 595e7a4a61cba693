"""``kvscope models``: list bundled model presets and show one model's derived figures."""

from __future__ import annotations

import typer

from kvscope.cli.output import print_json, stdout

app = typer.Typer(help="Model presets and their derived figures.", invoke_without_command=True)


@app.callback()
def models(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the bundled model presets (``kvscope models show ID`` for one)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from kvscope.specs.registry import list_presets, load_model

    rows = []
    for p in list_presets():
        m = load_model(p.id)
        rows.append(
            {
                "id": p.id,
                "model_type": m.model_type,
                "layers": m.num_layers,
                "attention": ", ".join(f"{k}×{v}" for k, v in m.attention_kinds.items()),
                "total_params_b": m.total_params / 1e9,
                "active_params_b": m.active_params / 1e9,
                "kv_bytes_per_token": m.kv_bytes_per_token(),
                "dtype": m.dtype,
                "quantization": m.quantization.method,
            }
        )
    if json_out:
        print_json(rows)
        return
    t = Table(title="Bundled model presets (kvscope models show ID)")
    for col in ("id", "layers", "attention", "params (B)", "active (B)", "KV B/token", "weights"):
        t.add_column(col, justify="right" if col not in ("id", "attention") else "left")
    for r in rows:
        t.add_row(
            r["id"],
            str(r["layers"]),
            r["attention"],
            f"{r['total_params_b']:.1f}",
            f"{r['active_params_b']:.1f}",
            f"{r['kv_bytes_per_token']:,.0f}",
            r["quantization"] if r["quantization"] != "none" else r["dtype"],
        )
    stdout.print(t)


@app.command()
def show(
    model: str = typer.Argument(..., help="Preset id or alias, a config.json, or a model folder."),
    dtype: str = typer.Option(None, "--dtype", help="Model dtype (auto, bfloat16, float16)."),
    quantization: str = typer.Option(None, "--quantization", "-q", help="Weight quantization."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="KV-cache dtype."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show a model's parameters, weight bytes and KV bytes per token by layer group."""
    from kvscope.specs.describe import describe_model
    from kvscope.specs.registry import load_model

    d = describe_model(load_model(model, dtype, quantization), kv_cache_dtype)
    if json_out:
        print_json(d)
        return
    _render(d)


def _render(d: dict[str, object]) -> None:
    from rich.table import Table

    params = d["params_b_by_component"]
    weights = d["weights_gib_by_component"]
    assert isinstance(params, dict) and isinstance(weights, dict)
    stdout.print(
        f"[bold]{d['id']}[/] ({d['model_type']}, {d['num_layers']} layers, "
        f"{d['dtype']}, {d['quantization']})"
    )
    t = Table(title="Parameters and weights")
    t.add_column("component")
    t.add_column("params (B)", justify="right")
    t.add_column("weights (GiB)", justify="right")
    for k, v in params.items():
        if v:
            t.add_row(k, f"{v:.3f}", f"{weights[k]:.2f}")
    t.add_row("[bold]total[/]", f"{d['total_params_b']:.2f}", f"{d['weights_gib']:.2f}")
    t.add_row("active per token", f"{d['active_params_b']:.2f}", "")
    stdout.print(t)
    k = Table(title=f"KV cache per token ({d['kv_cache_dtype']}, one TP rank)")
    for col in ("group", "layers", "B/token/layer", "B/token", "bounded B/request"):
        k.add_column(col, justify="left" if col == "group" else "right")
    groups = d["kv_groups"]
    assert isinstance(groups, list)
    for g in groups:
        k.add_row(
            g["kind"],
            str(g["num_layers"]),
            f"{g['bytes_per_token_per_layer']:,.2f}",
            f"{g['bytes_per_token']:,.2f}",
            f"{g['bounded_bytes_per_request']:,.0f}",
        )
    stdout.print(k)
    stdout.print(
        f"KV bytes per token (all layers): [bold]{d['kv_bytes_per_token']:,.2f}[/]; "
        f"one request at {d['max_position_embeddings']:,} tokens: "
        f"{d['kv_gib_at_max_context']:.2f} GiB"
    )
