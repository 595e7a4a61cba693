"""Recording a snapshot: :func:`recording` and :func:`record_script`.

Recording uses PyTorch's own switches (``torch/cuda/memory.py``):
``torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
max_entries=N)`` turns on the allocator's trace ring buffer; ``_dump_snapshot(path)`` pickles
``_snapshot()``. ``stacks="python"`` is the default here because symbolizing C++ frames
dominates dump time (pytorch/torchtitan PR #3628: about 461 s versus 4 s per dump on a
DeepSeek-V3 16B run). The snapshot is dumped when the block exits, also when it exits with
``torch.OutOfMemoryError``, which is when it is wanted most.

It needs the ``torch`` extra and a CUDA device; without them it raises a one-line
:class:`~kvscope.errors.KvscopeError` before running anything.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.validate import writable_file

#: Default ring-buffer length: torchtitan settled on 100k entries, later 1M (anchors 4.1).
DEFAULT_MAX_ENTRIES = 1_000_000


def _cuda_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise KvscopeError(
            "recording a memory snapshot needs PyTorch: pip install 'kvscope[torch]'."
        ) from None
    if not torch.cuda.is_available():
        raise KvscopeError(
            "recording a memory snapshot needs a CUDA device "
            "(torch.cuda.is_available() is False on this machine)."
        )
    return torch


def check_out(path: str | Path, force: bool = False) -> Path:
    """Check, before anything runs, that the snapshot can be written to ``path``.

    An existing snapshot is a recording someone made: it is refused unless ``force``.
    """
    out = writable_file(path, "snapshot file")
    if out.exists() and not force:
        raise KvscopeError(
            f"{out}: the snapshot file already exists.",
            "Pass --force to replace it, or choose another --out.",
        )
    return out


@contextmanager
def recording(
    path: str | Path,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "python",
    *,
    force: bool = False,
) -> Iterator[Path]:
    """Record CUDA memory history inside the block and dump a snapshot to ``path`` on exit."""
    if max_entries < 1:
        raise KvscopeError("--max-entries must be at least 1.")
    out = check_out(path, force)
    torch = _cuda_torch()
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks=stacks, max_entries=max_entries
    )
    try:
        yield out
    finally:
        try:
            torch.cuda.memory._dump_snapshot(str(out))
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)


def record_script(
    command: Sequence[str], out: str | Path, max_entries: int, *, force: bool = False
) -> Path:
    """Run a Python script (``[python] script.py args...`` or ``[python] -m module args...``)
    in this process with memory history on, and dump the snapshot to ``out``."""
    args = list(command)
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
    if not args:
        raise KvscopeError("nothing to record: give a script after '--', e.g. -- python train.py.")
    if args[0] == "-m" and len(args) < 2:
        raise KvscopeError("'-m' needs a module name.")
    if args[0] != "-m" and not Path(args[0]).is_file():
        raise KvscopeError(f"{args[0]}: no such script.")
    check_out(out, force)  # before the script: a run must not end unable to save its trace
    with recording(out, max_entries=max_entries, force=force) as p:
        saved = sys.argv[:]
        try:
            if args[0] == "-m":
                sys.argv = args[1:]
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = args
                runpy.run_path(args[0], run_name="__main__")
        except SystemExit as stop:
            if stop.code not in (None, 0):
                raise KvscopeError(
                    f"the recorded script exited with status {stop.code}; the snapshot is in {p}."
                ) from None
        except Exception as err:  # the script's own failure, an OOM above all
            first = str(err).splitlines()[0] if str(err) else ""
            raise KvscopeError(
                f"the recorded script raised {type(err).__name__}: {first[:200]}; "
                f"the snapshot (dumped at the failure) is in {p}."
            ) from err
        finally:
            sys.argv = saved
    return p
