"""``kvscope models``: list bundled model presets and show one model's derived figures."""

from __future__ import annotations

from typing import Any

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
    _list(json_out)


@app.command("list")
def list_cmd(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the bundled model presets: ids in full, layers, parameters, KV bytes per token."""
    _list(json_out)


def _rows() -> list[dict[str, Any]]:
    from kvscope.specs.registry import list_presets, load_model

    rows: list[dict[str, Any]] = []
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
    return rows


#: The weight dtypes as the table shows them (the usual short names).
_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
#: Terminal width from which the attention column is shown too.
WIDE = 110


def _list(json_out: bool) -> None:
    """The preset table: ids never cut (the id is what ``--model`` takes); the attention
    layout joins as a column on wide terminals (``--json`` and ``models show`` always have it)."""
    from rich.table import Table

    rows = _rows()
    if json_out:
        print_json(rows)
        return
    wide = stdout.width >= WIDE
    # No borders and one space between columns: the longest id (41 characters) and five
    # figures fit 80 columns.
    t = Table(
        title="Bundled model presets (kvscope models show ID)",
        box=None,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        header_style="bold",
    )
    t.add_column("id", no_wrap=True, min_width=max(len(r["id"]) for r in rows))
    cols = ["layers", "params (B)", "active (B)", "KV B/token", "weights"]
    if wide:
        cols.insert(1, "attention")
    for col in cols:
        t.add_column(col, justify="left" if col == "attention" else "right")
    for r in rows:
        cells = [
            str(r["layers"]),
            f"{r['total_params_b']:.1f}",
            f"{r['active_params_b']:.1f}",
            f"{r['kv_bytes_per_token']:,.0f}",
            r["quantization"]
            if r["quantization"] != "none"
            else _SHORT.get(r["dtype"], r["dtype"]),
        ]
        if wide:
            cells.insert(1, r["attention"])
        t.add_row(r["id"], *cells)
    stdout.print(t)


@app.command()
def show(
    model: str = typer.Argument(
        ..., help="Preset id or alias, a config.json, a model folder, or a Hugging Face id."
    ),
    dtype: str = typer.Option(
        None,
        "--dtype",
        help="Model dtype (auto, bfloat16, float16).",
        show_default="the config's torch_dtype",
    ),
    quantization: str = typer.Option(
        None,
        "--quantization",
        "-q",
        help="Weight quantization (fp8, mxfp4, awq, ...).",
        show_default="the config's quantization_config, else none",
    ),
    revision: str = typer.Option(
        None,
        "--revision",
        help="Hugging Face model revision: branch, tag or commit.",
        show_default="main",
    ),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="KV-cache dtype."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show a model's parameters, weight bytes and KV bytes per token by layer group."""
    from kvscope.specs.describe import describe_model
    from kvscope.specs.registry import load_model

    d = describe_model(load_model(model, dtype, quantization, revision), kv_cache_dtype)
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
    t.add_row("  without input embedding", f"{d['active_params_excl_embedding_b']:.2f}", "")
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
