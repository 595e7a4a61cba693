"""The parallel-layout flags ``plan`` and ``simulate`` share: one spelling, one help text.

Names and meaning are vLLM's ``EngineArgs`` (``--tensor-parallel-size``,
``--pipeline-parallel-size``, ``--data-parallel-size``, ``--enable-expert-parallel``) and
SGLang's ``--enable-dp-attention``; :func:`kvscope.plan.config.resolve_parallel` and
:class:`kvscope.plan.config.Parallelism` check them (one validation layer for both commands).
"""

from __future__ import annotations

from typing import Annotated

import typer

#: Engine releases assumed without ``--engine-version`` (kept literal for start-up time;
#: tests check it against kvscope.plan.config.DEFAULT_ENGINE_VERSION).
DEFAULT_VERSIONS = "vLLM 0.33.0, SGLang 0.5.23"

NumGpus = Annotated[
    int | None,
    typer.Option(
        "--num-gpus",
        help="GPUs in all, TP x PP x DP [default: that product]; for `plan --search` the "
        "only count tried [default: 1, 2, 4, 8, 16].",
    ),
]
TensorParallelSize = Annotated[
    int | None,
    typer.Option(
        "--tensor-parallel-size",
        "--tp",
        help="Tensor-parallel size [default: --num-gpus / (PP x DP), else 1].",
    ),
]
PipelineParallelSize = Annotated[
    int, typer.Option("--pipeline-parallel-size", "--pp", help="Pipeline-parallel stages.")
]
DataParallelSize = Annotated[
    int,
    typer.Option(
        "--data-parallel-size",
        "--dp",
        help="Data-parallel replicas, each its own engine and KV pool.",
    ),
]
EnableExpertParallel = Annotated[
    bool,
    typer.Option(
        "--enable-expert-parallel",
        help="MoE: split experts over TP x DP ranks [default: off].",
    ),
]
EnableDpAttention = Annotated[
    bool,
    typer.Option(
        "--enable-dp-attention",
        help="SGLang: attention data-parallel over --dp ranks [default: off].",
    ),
]
EngineVersion = Annotated[
    str | None,
    typer.Option(
        "--engine-version",
        help=f"Engine release whose memory rules apply [default: {DEFAULT_VERSIONS}].",
    ),
]
AsyncScheduling = Annotated[
    bool | None,
    typer.Option(
        "--async-scheduling/--no-async-scheduling",
        help="vLLM: schedule the next step while this one runs; two batches in flight make "
        "window groups reserve twice the token budget [default: on from 0.26 unless PP or "
        "an n-gram/suffix drafter].",
    ),
]
