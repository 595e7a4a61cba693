"""The human table of ``kvscope plan``: the per-GPU memory budget and the advice.

Rendering only: the figures come from :func:`kvscope.plan.memory.plan_memory` and
:func:`kvscope.plan.advice.advise`; units are in every row (GiB, tokens, blocks).
"""

from __future__ import annotations

from typing import Any


def print_memory_table(memory: Any, advice: Any) -> None:
    """The memory plan and the advice as a rich table, then the advice's warnings and the
    launch command (what ``kvscope plan`` prints without ``--json``)."""
    from rich.table import Table

    from kvscope.cli.output import stdout

    title = (
        f"{memory.model} on {memory.gpu}, {memory.engine} {memory.engine_version}, "
        f"TP{memory.tp} PP{memory.pp} DP{memory.dp}{' EP' if memory.ep else ''}"
    )
    t = Table(title=title, show_header=True)
    t.add_column("per GPU (rank 0)")
    t.add_column("value", justify="right")
    frac = "gpu_memory_utilization" if memory.engine == "vllm" else "mem_fraction_static"
    rows = [
        ("GPU memory (CUDA total)", f"{memory.gpu_memory_gib:.2f} GiB"),
        (
            f"budget ({frac} {memory.budget_fraction}; {memory.budget_source})",
            f"{memory.budget_gib:.2f} GiB",
        ),
        ("weights", f"{memory.weights_gib:.2f} GiB"),
        ("activation peak (profiling pass)", f"{memory.activation_peak_gib:.2f} GiB"),
        ("non-torch (CUDA context, NCCL)", f"{memory.non_torch_gib:.2f} GiB"),
        (
            "CUDA graphs"
            + (" (subtracted)" if memory.cudagraph_subtracted else " (not subtracted)"),
            f"{memory.cudagraph_gib:.2f} GiB",
        ),
        ("KV cache", f"{memory.kv_cache_gib:.2f} GiB"),
        ("KV bytes per token", f"{memory.kv_bytes_per_token:,.0f} B"),
        ("block size / KV groups", f"{memory.block_size} tokens / {memory.num_kv_groups}"),
        ("GPU blocks (min over ranks)", f"{memory.num_gpu_blocks:,}"),
        ("KV cache size (as logged)", f"{memory.kv_tokens:,} tokens"),
        (f"max concurrency at {memory.max_model_len:,} tokens", f"{memory.max_concurrency:.2f}x"),
        ("largest --max-model-len that fits", f"{advice.largest_max_model_len:,} tokens"),
        (
            f"--max-num-seqs sustained at {advice.context_tokens:,} tokens",
            f"{advice.max_num_seqs_at_context:,}",
        ),
    ]
    if memory.backend_workspace_gib:
        rows.insert(
            5,
            (
                f"{memory.attention_backend} workspace (beside the KV pool, not subtracted)",
                f"{memory.backend_workspace_gib:.2f} GiB",
            ),
        )
    if memory.gpu_memory_in_use_gib:
        rows.insert(
            1, ("held by other processes at start", f"{memory.gpu_memory_in_use_gib:.2f} GiB")
        )
    if advice.fp8_kv_gain:
        rows.append(
            (
                "with --kv-cache-dtype fp8",
                f"{advice.fp8_kv_tokens:,} tokens ({advice.fp8_kv_gain:.2f}x)",
            )
        )
    if advice.dp_attention_gain:
        rows.append(
            (
                "with data-parallel attention (per replica)",
                f"{advice.dp_attention_tokens_per_replica:,} tokens "
                f"({advice.dp_attention_gain:.2f}x)",
            )
        )
    for name, value in rows:
        t.add_row(name, value)
    stdout.print(t)
    for w in advice.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")
    for n in memory.notes:
        stdout.print(f"[dim]note:[/] {n}")
    stdout.print(f"command: {advice.command}")
