"""One rank of a communication measurement (imports torch; runs in a child process).

For every step the rank first checks the collective's result once (inputs filled with
``rank + 1``, outputs compared with what the operation must produce, like nccl-tests'
``#wrong`` column), then zeroes its buffers and times ``warmup + iters`` runs, each
starting right after a barrier. On NCCL the device is synchronised before the clock is
read at both ends. Timings (seconds, ``time.perf_counter``) are gathered to rank 0,
which sends them to the parent.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from kvscope.comm.collectives import buffers_for
from kvscope.comm.launch import (
    BARRIER,
    COLLECTIVE,
    DONE,
    GATHER,
    OUTSIDE,
    RENDEZVOUS,
    SLOTS,
    Job,
    Step,
)

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
Sink = Callable[[tuple[Any, ...]], None]


class _Progress:
    """Writes this rank's position into the shared array the parent watches."""

    def __init__(self, array: Any, rank: int) -> None:
        self.array, self.base, self.ticks = array, rank * SLOTS, 0

    def mark(self, phase: int, step: int = -1, it: int = -1) -> None:
        if self.array is None:
            return
        self.ticks += 1
        self.array[self.base], self.array[self.base + 1] = phase, step
        self.array[self.base + 2], self.array[self.base + 3] = it, self.ticks


def rank_entry(rank: int, job: Job, progress: Any, conn: Any) -> None:
    """Process target: run the rank, report an error up the pipe, exit non-zero on failure."""
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        run_rank(rank, job, progress, conn.send)
    except BaseException as err:
        try:
            conn.send(("error", rank, f"{type(err).__name__}: {err}"[:400]))
        finally:
            os._exit(1)
    conn.close()


def _exit_with_parent(parent: int) -> None:
    # A parent killed outright (SIGKILL, OOM) cannot stop its ranks: they stop themselves
    # rather than linger until the process group times out.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def run_rank(rank: int, job: Job, progress: Any, sink: Sink) -> None:
    """Join the process group, measure every step, send rank 0's gathered timings."""
    torch.set_num_threads(1)  # ranks share the host's cores; intra-op threads only add noise
    if (
        job.restrict_to_loopback
        and job.backend == "gloo"
        and "GLOO_SOCKET_IFNAME" not in os.environ
    ):
        names = {name for _, name in socket.if_nameindex()}
        if "lo" in names:
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # local ranks talk over loopback only
    prog = _Progress(progress, rank)
    prog.mark(RENDEZVOUS)
    device = torch.device("cpu")
    if job.backend == "nccl":
        # One GPU per rank, bound before the communicator is created. Under torchrun,
        # LOCAL_RANK is the GPU on this node.
        local = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    dist.init_process_group(
        job.backend,
        init_method=job.init_method,
        rank=rank,
        world_size=job.world_size,
        # Past this a collective raises instead of waiting forever (the backstop when
        # no supervisor watches, as under torchrun).
        timeout=timedelta(seconds=job.timeout_s + 10),
    )
    barrier = _barrier(device)
    try:
        for index, step in enumerate(job.steps):
            prog.mark(OUTSIDE, index, 0)
            times, wrong = _measure(rank, job, index, step, device, prog)
            prog.mark(GATHER, index, step.warmup + step.iters)
            row = torch.tensor([*times, float(wrong)], dtype=torch.float64, device=device)
            rows = [torch.empty_like(row) for _ in range(job.world_size)]
            dist.all_gather(rows, row)
            if rank == 0:
                table = torch.stack(rows).cpu().numpy()
                bad = [r for r in range(job.world_size) if table[r, -1] > 0]
                sink(("step", index, table[:, :-1].tolist(), bad))
        barrier()
        prog.mark(DONE)
        sink(("done", rank))
    finally:
        dist.destroy_process_group()


def _measure(
    rank: int, job: Job, index: int, step: Step, device: torch.device, prog: _Progress
) -> tuple[list[float], bool]:
    n = job.world_size
    barrier = _barrier(device)
    run, check = _operation(rank, n, step, device)
    wrong = not check()
    sync = torch.cuda.synchronize if device.type == "cuda" else _noop
    times: list[float] = []
    for it in range(step.warmup + step.iters):
        prog.mark(OUTSIDE, index, it)
        if job.fault and job.fault.rank == rank and job.fault.step == index and it == 0:
            if job.fault.kind == "exit":
                os._exit(job.fault.exit_code)
            while True:  # hang: sleep until the parent kills us
                time.sleep(3600)
        prog.mark(BARRIER, index, it)
        barrier()
        sync()
        prog.mark(COLLECTIVE, index, it)
        t0 = time.perf_counter()
        run(it)
        sync()
        t1 = time.perf_counter()
        if it >= step.warmup:
            times.append(t1 - t0)
    return times, wrong


def _noop() -> None:
    return None


def _barrier(device: torch.device) -> Callable[[], None]:
    """``dist.barrier`` on the rank's own GPU under NCCL (torch warns without device_ids)."""
    if device.type == "cuda":
        return lambda: dist.barrier(device_ids=[device.index])
    return lambda: dist.barrier()


def _operation(
    rank: int, n: int, step: Step, device: torch.device
) -> tuple[Callable[[int], None], Callable[[], bool]]:
    """``run(iteration)`` and a one-shot ``check()`` for the step's collective."""
    dtype = _TORCH_DTYPES[step.dtype]
    if step.tokens is not None:
        return _uneven_all_to_all(rank, step, dtype, device)
    b = buffers_for(step.op, step.size_bytes, step.dtype, n)
    inp = torch.zeros(b.input_elems, dtype=dtype, device=device)
    out = torch.zeros(b.output_elems, dtype=dtype, device=device)
    total = n * (n + 1) / 2  # sum over ranks of (rank + 1)
    chunk_owner = torch.arange(n, device=device).repeat_interleave(max(1, b.output_elems // n))
    op = step.op

    def run(_: int) -> None:
        if op == "all_reduce":
            dist.all_reduce(inp)
        elif op == "all_gather":
            _all_gather(out, inp)
        elif op == "reduce_scatter":
            _reduce_scatter(out, inp)
        elif op == "all_to_all":
            dist.all_to_all_single(out, inp)
        elif op == "broadcast":
            dist.broadcast(inp, src=0)
        else:  # send_recv: ring shift, send right, receive from the left
            ops = [
                dist.P2POp(dist.isend, inp, (rank + 1) % n),
                dist.P2POp(dist.irecv, out, (rank - 1) % n),
            ]
            for req in dist.batch_isend_irecv(ops):
                req.wait()

    def check() -> bool:
        inp.fill_(rank + 1)
        run(0)
        if op == "all_reduce":
            ok = bool(torch.all(inp == total))
        elif op == "reduce_scatter":
            ok = bool(torch.all(out == total))
        elif op in ("all_gather", "all_to_all"):
            ok = bool(torch.all(out == (chunk_owner + 1).to(dtype)))
        elif op == "broadcast":
            ok = bool(torch.all(inp == 1))
        else:
            ok = bool(torch.all(out == (rank - 1) % n + 1))
        inp.zero_()
        out.zero_()
        return ok

    return run, check


def _uneven_all_to_all(
    rank: int, step: Step, dtype: torch.dtype, device: torch.device
) -> tuple[Callable[[int], None], Callable[[], bool]]:
    assert step.tokens is not None
    tokens = np.asarray(step.tokens, dtype=np.int64) * step.hidden
    send = tokens[:, rank, :]  # [iteration, dst] elements this rank sends
    recv = tokens[:, :, rank]  # [iteration, src] elements it receives
    inp = torch.zeros(int(send.sum(axis=1).max()), dtype=dtype, device=device)
    out = torch.zeros(int(recv.sum(axis=1).max()), dtype=dtype, device=device)

    def run(it: int) -> None:
        s, r = send[it], recv[it]
        dist.all_to_all_single(
            out[: int(r.sum())], inp[: int(s.sum())], [int(x) for x in r], [int(x) for x in s]
        )

    def check() -> bool:
        inp.fill_(rank + 1)
        run(0)
        owner = np.repeat(np.arange(len(recv[0])), recv[0]) + 1
        expected = torch.as_tensor(owner, device=device).to(dtype)
        ok = bool(torch.all(out[: int(recv[0].sum())] == expected))
        inp.zero_()
        out.zero_()
        return ok

    return run, check


def _all_gather(out: torch.Tensor, inp: torch.Tensor) -> None:
    # torch 2.13 renamed all_gather_into_tensor to all_gather_single; keep both working.
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor) -> None:
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp)
