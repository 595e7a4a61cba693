"""The GPU and price flags ``plan``, ``simulate`` and ``gpus`` share: one spelling, one help.

``--gpu-hour-price`` beats a prices file (``--prices``, else the per-user
``$XDG_CONFIG_HOME/kvscope/prices.yaml``), which beats kvscope's default estimate; see
:mod:`kvscope.plan.prices`. ``--gpu-spec`` adds or changes catalogue GPUs
(:mod:`kvscope.specs.user_gpus`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

GpuHourPrice = Annotated[
    str | None,
    typer.Option(
        "--gpu-hour-price",
        help="USD per GPU-hour: one number for every GPU, or GPU=PRICE,GPU=PRICE; beats "
        "--prices [default: the prices file, else kvscope's estimate in `kvscope gpus`].",
    ),
]
PricesFile = Annotated[
    str | None,
    typer.Option(
        "--prices",
        help="Prices file (YAML or .json): 'gpus: {H100: 2.49}' and optional 'providers: "
        "{NAME: {H100: 2.1}}' [default: ~/.config/kvscope/prices.yaml if it exists].",
    ),
]
Provider = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help="Take this provider's column of the prices file first [default: the file's gpus].",
    ),
]
GpuSpecFile = Annotated[
    str | None,
    typer.Option(
        "--gpu-spec",
        help="GPU file (YAML or .json) adding GPUs or changing a shipped GPU's figures, "
        "gpu_hour_usd included; `kvscope gpus` marks its entries 'user' "
        "[default: ~/.config/kvscope/gpus.yaml if it exists].",
    ),
]
CostModelOpt = Annotated[
    str,
    typer.Option(
        "--cost-model",
        help="Step times from: roofline (kvscope's bandwidth/FLOPs bound), fitted (the "
        "roofline with terms fitted to AIConfigurator's kernels) or aic (AIConfigurator's "
        "measured kernels; pip install 'kvscope[aic]'; the fitted roofline where it has no "
        "data).",
    ),
]


def show_cost_warnings() -> None:
    """Print the cost models' fallback warnings as one ``kvscope: warning:`` line each."""
    import sys
    import warnings

    from kvscope.sim.cost import CostFallbackWarning

    previous = warnings.showwarning

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(category, type) and issubclass(category, CostFallbackWarning):
            sys.stderr.write(f"kvscope: warning: {message}\n")
        else:
            previous(message, category, *args, **kwargs)

    warnings.showwarning = show
