"""``kvscope calibrate RUN... --out cost.json``: fit the simulator's cost model to measured runs.

Thin: the deployment flags become a :class:`kvscope.sim.SimConfig`, the fit and its held-out
scores are :func:`kvscope.sim.calibrate.calibrate_runs`; this module prints them and writes
the coefficients file ``kvscope simulate --cost`` reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvscope.cli.cost_options import GpuSpecFile
from kvscope.cli.output import print_json, stdout
from kvscope.cli.workload import JsonOpt
from kvscope.errors import KvscopeError


def calibrate(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Bench run directories (each with requests.parquet) to fit on."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Coefficients file to write (JSON, for simulate --cost)."),
    ] = None,
    holdout: Annotated[
        list[Path] | None,
        typer.Option(
            "--holdout",
            help="Run directory to score the fit on, not fit on (repeatable) "
            "[default: leave-one-out when several runs are given].",
        ),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="vllm, sglang or llama.cpp.")] = "vllm",
    model: Annotated[str, typer.Option("--model", help="Preset id/alias or config.json.")] = (
        "meta-llama/Llama-3.1-8B"
    ),
    gpu: Annotated[str, typer.Option("--gpu", help="GPU name (see `kvscope gpus`).")] = "H100",
    gpu_spec_file: GpuSpecFile = None,
    tp: Annotated[
        int, typer.Option("--tensor-parallel-size", "--tp", help="GPUs one replica spans.")
    ] = 1,
    max_num_seqs: Annotated[
        int | None,
        typer.Option("--max-num-seqs", help="Most requests running at once (llama.cpp: -np)."),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", help="Token budget of one step (llama.cpp: -b)."),
    ] = None,
    max_model_len: Annotated[
        int | None, typer.Option("--max-model-len", help="Longest request accepted.")
    ] = None,
    ctx_size: Annotated[
        int | None, typer.Option("--ctx-size", help="llama.cpp's -c (KV tokens, all slots).")
    ] = None,
    num_gpu_blocks: Annotated[
        int | None, typer.Option("--num-gpu-blocks-override", help="KV pool size in blocks.")
    ] = None,
    min_requests: Annotated[
        int, typer.Option("--min-requests", help="Fewest completed requests a run may have.")
    ] = 10,
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Fit overhead, MFU and MBU to measured runs; report the error on held-out runs."""
    from kvscope.sim import SimConfig
    from kvscope.sim.calibrate import calibrate_runs
    from kvscope.sim.holdout import format_scores
    from kvscope.specs.user_gpus import use_gpu_file
    from kvscope.validate import count

    if not runs:
        raise KvscopeError("calibrate needs at least one bench run directory.")
    count(min_requests, "--min-requests", low=2)
    if out is not None and out.exists() and not force:
        raise KvscopeError(f"--out {out} exists; pass --force to replace it.")
    if out is not None and out.is_dir():
        raise KvscopeError(f"--out {out} is a directory; name the JSON file to write.")
    use_gpu_file(gpu_spec_file)
    cfg = SimConfig(
        engine=engine,  # type: ignore[arg-type]
        model=model,
        gpu=gpu,
        tp=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        ctx_size=ctx_size,
        num_gpu_blocks_override=num_gpu_blocks,
        enable_prefix_caching=engine != "llama.cpp",
    )
    cal = calibrate_runs(list(runs), cfg, holdout=list(holdout or []), min_requests=min_requests)
    path = None if out is None else cal.coefficients.save(out)
    if json_out:
        print_json({"coefficients": cal.coefficients, "fit": cal.report, "out": path and str(path)})
        return
    c = cal.coefficients
    stdout.print(
        f"fitted overhead {c.overhead_s * 1e3:.3f} ms, MFU {c.mfu:.3f}, MBU {c.mbu:.3f}"
        f"{c.host_terms_text()} from {cal.report['requests_used']} requests (in-sample TPOT error "
        f"{cal.report['tpot_mape']:.1%})",
        highlight=False,
    )
    if cal.scores:
        stdout.print(format_scores(list(cal.scores)), highlight=False, markup=False)
    else:
        stdout.print(
            "no held-out run: pass --holdout DIR or several runs (leave-one-out) to see the "
            "fit's error",
            highlight=False,
        )
    stdout.print(
        f"wrote {path} (use it with kvscope simulate --cost {path})"
        if path is not None
        else "pass --out FILE to keep the coefficients",
        highlight=False,
    )
