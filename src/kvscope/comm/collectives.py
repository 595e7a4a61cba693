"""The collectives kvscope measures: names, buffer sizes and the nccl-tests bandwidths.

Size convention (nccl-tests, ``doc/PERFORMANCE.md``): ``S`` is the per-rank buffer the
operation is named after, in bytes —

- ``all_reduce``: the buffer reduced in place on every rank;
- ``all_gather``: the *whole gathered* array (``n`` chunks of ``S/n``);
- ``reduce_scatter``: the *whole input* array (each rank keeps a reduced ``S/n``);
- ``all_to_all``: one rank's send buffer (``n`` chunks of ``S/n``, one per peer);
- ``broadcast``: the root's buffer; ``send_recv``: the message each rank sends to its
  right neighbour while receiving from its left one (a ring shift, as nccl-tests'
  ``sendrecv_perf`` does).

Bandwidths, in bytes per second: ``algbw = S / t`` and ``busbw = algbw x factor(op, n)``,
with the factors of nccl-tests' PERFORMANCE.md ("Bus bandwidth", summary) and
``sendrecv.cu`` (factor 1)::

    all_reduce      2(n-1)/n        all_gather, reduce_scatter, all_to_all   (n-1)/n
    broadcast       1               send_recv                                1

``busbw`` is comparable with a link's peak whatever the rank count; ``algbw`` says how
long an operation of that size takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError, UnknownNameError

#: The operations ``kvscope comm bench --op`` accepts.
OPS: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "send_recv",
)

#: Element size in bytes per dtype name (torch names and their usual short forms).
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}


def canonical_op(name: str) -> str:
    """``all-reduce``, ``ALLREDUCE`` and ``all_reduce`` are the same operation."""
    key = name.strip().lower().replace("-", "_")
    squashed = key.replace("_", "")
    for op in OPS:
        if squashed == op.replace("_", ""):
            return op
    if squashed in ("alltoallv", "a2a"):
        return "all_to_all"
    if squashed in ("sendrecv", "p2p"):
        return "send_recv"
    raise UnknownNameError("collective", name, OPS)


def canonical_dtype(name: str) -> str:
    key = name.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise UnknownNameError("dtype", name, [*DTYPE_BYTES, *_DTYPE_ALIASES])
    return key


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth for ``op`` on ``n`` ranks."""
    n = world_size
    if n < 1:
        raise KvscopeError(f"world size must be at least 1, got {n}.")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "send_recv"):
        return 1.0
    raise UnknownNameError("collective", op, OPS)


def algbw_bytes_per_s(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth ``S / t`` (nccl-tests PERFORMANCE.md)."""
    if time_s <= 0:
        return float("inf")
    return size_bytes / time_s


def busbw_bytes_per_s(op: str, size_bytes: float, time_s: float, world_size: int) -> float:
    """Bus bandwidth ``algbw x factor(op, n)`` (nccl-tests PERFORMANCE.md)."""
    return algbw_bytes_per_s(size_bytes, time_s) * bus_factor(op, world_size)


@dataclass(frozen=True)
class Buffers:
    """Element counts one rank allocates for one operation, and the size ``S`` they make.

    ``size_bytes`` may be a little below the requested size: sizes that are split into
    ``n`` chunks are rounded down to a multiple of ``n`` elements (at least ``n``), as
    nccl-tests rounds its counts.
    """

    op: str
    dtype: str
    world_size: int
    input_elems: int
    output_elems: int
    size_bytes: int


def buffers_for(op: str, requested_bytes: int, dtype: str, world_size: int) -> Buffers:
    """The buffers for ``op`` at ``requested_bytes`` (``S`` as defined in the docstring)."""
    op = canonical_op(op)
    dtype = canonical_dtype(dtype)
    n = world_size
    if n < 1:
        raise KvscopeError(f"world size must be at least 1, got {n}.")
    if op == "send_recv" and n < 2:
        raise KvscopeError("send_recv needs at least 2 ranks (--world-size 2 or more).")
    if requested_bytes < 1:
        raise KvscopeError(f"message size must be at least 1 byte, got {requested_bytes}.")
    elem = DTYPE_BYTES[dtype]
    count = max(1, requested_bytes // elem)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        chunk = max(1, count // n)
        count = chunk * n
        inp, out = {
            "all_gather": (chunk, count),
            "reduce_scatter": (count, chunk),
            "all_to_all": (count, count),
        }[op]
    else:
        inp, out = count, count
    return Buffers(op, dtype, n, inp, out, count * elem)
