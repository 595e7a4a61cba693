"""What a communication measurement ran on: backend, ranks, library versions, topology.

Collected once per run into ``summary.json`` so that two runs can be compared knowing
whether the transport changed. Recorded variables: every ``NCCL_*``, ``GLOO_*`` and
``TORCH_NCCL_*`` / ``TORCH_DISTRIBUTED_*`` variable, plus the launcher's ``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``. The GPU topology is the matrix
``nvidia-smi topo -m`` prints (NVLink / PCIe / socket hops between GPUs and NICs), or
``"unavailable"`` with the reason when there is no ``nvidia-smi``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_")
_NAMES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def comm_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that change how collectives behave, sorted by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(_PREFIXES) or k in _NAMES}


def gpu_topology(timeout_s: float = 10.0) -> str:
    """``nvidia-smi topo -m`` output, or ``"unavailable: <why>"``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "unavailable: nvidia-smi not found"
    try:
        out = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unavailable: {err}"
    if out.returncode != 0:
        reason = (out.stderr or out.stdout).strip().splitlines()[:1]
        return f"unavailable: nvidia-smi exited {out.returncode}" + (
            f" ({reason[0]})" if reason else ""
        )
    return out.stdout.rstrip()


def capture_environment(backend: str, world_size: int) -> dict[str, Any]:
    """Backend, world size, torch/NCCL versions, comm variables and GPU topology."""
    import torch
    import torch.distributed as dist

    cuda = bool(torch.cuda.is_available())
    nccl_version: str | None = None
    if cuda and dist.is_nccl_available():
        v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
        nccl_version = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
    return {
        "backend": backend,
        "world_size": world_size,
        "torch_version": str(torch.__version__),
        "cuda_available": cuda,
        "cuda_device_count": torch.cuda.device_count() if cuda else 0,
        "nccl_version": nccl_version,
        "gloo_available": bool(dist.is_gloo_available()),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu_count": os.cpu_count(),
        # gloo ranks spin on CPU cores: more ranks than cores puts scheduling in the tail
        "cpu_oversubscribed": backend == "gloo" and world_size > (os.cpu_count() or 1),
        "variables": comm_variables(),
        "gpu_topology": gpu_topology(),
    }
