"""``kvscope mock-server``: a scripted OpenAI-compatible server to point ``kvscope bench`` at.

Latency, failures, queueing and stalls are set by flags; it binds 127.0.0.1 only and serves
vLLM-shaped ``/metrics`` (:mod:`kvscope.bench.mock_server`).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvscope.cli.workload import SeedOpt


def mock_server(
    port: Annotated[
        int, typer.Option("--port", help="TCP port on 127.0.0.1 (0: any free).")
    ] = 8000,
    ttft: Annotated[float, typer.Option("--ttft", help="Seconds to the first token.")] = 0.0,
    itl: Annotated[float, typer.Option("--itl", help="Seconds between tokens.")] = 0.0,
    output_len: Annotated[
        int | None,
        typer.Option(
            "--output-len",
            help="Tokens per answer (default: each request's max_tokens).",
            show_default=False,
        ),
    ] = None,
    fail_rate: Annotated[
        float, typer.Option("--fail-rate", help="Share of requests answered with HTTP 500.")
    ] = 0.0,
    model: Annotated[str, typer.Option("--model", help="Model name it reports.")] = "mock",
    max_running: Annotated[
        int | None,
        typer.Option(
            "--max-running",
            help="Serve this many requests at once; queue the rest (latency grows with load).",
            show_default=False,
        ),
    ] = None,
    stall_after: Annotated[
        int | None,
        typer.Option(
            "--stall-after",
            help="Answer this many requests, then stall every later one after its headers "
            "(a hung engine).",
            show_default=False,
        ),
    ] = None,
    stall_tokens: Annotated[
        int, typer.Option("--stall-tokens", help="Token chunks a stalled answer sends first.")
    ] = 0,
    seed: SeedOpt = None,
) -> None:
    """Serve a scripted OpenAI-compatible streaming API with vLLM-shaped /metrics."""
    from kvscope.bench.mock_server import MockConfig, serve_forever
    from kvscope.errors import KvscopeError

    if ttft < 0 or itl < 0:
        raise KvscopeError("--ttft and --itl must be >= 0 s.")
    if not 0 <= fail_rate <= 1:
        raise KvscopeError("--fail-rate must be within 0-1.")
    if output_len is not None and output_len < 1:
        raise KvscopeError("--output-len must be >= 1.")
    if max_running is not None and max_running < 1:
        raise KvscopeError("--max-running must be >= 1.")
    if (stall_after is not None and stall_after < 0) or stall_tokens < 0:
        raise KvscopeError("--stall-after and --stall-tokens must be >= 0.")
    if not 0 <= port <= 65535:
        raise KvscopeError("--port must be within 0-65535.")
    cfg = MockConfig(
        ttft_s=ttft,
        itl_s=itl,
        output_len=output_len,
        fail_rate=fail_rate,
        model=model,
        seed=seed or 0,
        max_running=max_running,
        stall_after=stall_after,
        stall_tokens=stall_tokens,
    )

    def ready(bound: int) -> None:
        sys.stdout.write(f"mock server listening on http://127.0.0.1:{bound}\n")
        sys.stdout.flush()

    try:
        serve_forever(cfg, port, ready)
    except OSError as err:
        raise KvscopeError(f"cannot listen on 127.0.0.1:{port} ({err.strerror}).") from None
