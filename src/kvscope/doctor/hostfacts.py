"""Host facts the probe reads in-process, as JSON-ready values.

``/dev/shm`` size (statvfs), NUMA nodes and ``kernel.numa_balancing`` (sysfs/procfs), CPU
frequency governors (cpufreq sysfs), resource limits (``getrlimit``), RDMA devices
(``/sys/class/infiniband``), the serving-related subset of an environment, and the files the
loader would pick for the CUDA/NCCL/NVML libraries (``ldconfig -p`` entries, resolved).
Sizes are bytes; limits are ``[soft, hard]`` with -1 meaning unlimited.
"""

from __future__ import annotations

import glob
import os
import re
import resource
from pathlib import Path

from kvscope.redact import redact_text

#: Environment variables captured (by prefix or exact name); values of names that look
#: like credentials are replaced so a bundle can be shared.
ENV_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "NVIDIA_", "VLLM_", "SGLANG_")
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
#: Libraries whose resolved path the loader would pick (from ``ldconfig -p``).
LIBS_OF_INTEREST = ("libcuda.so", "libcudart.so", "libnccl.so", "libnvidia-ml.so")


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """The serving-relevant subset of an environment, credentials redacted."""
    out = {}
    for k, v in env.items():
        if k.startswith(ENV_PREFIXES) or k in ENV_NAMES:
            # by name (VLLM_API_KEY), and inside values (a URL with a password, a token)
            out[k] = "<redacted>" if _SECRET.search(k) else (redact_text(v) or v)
    return dict(sorted(out.items()))


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def host_shm() -> dict[str, object]:
    st = os.statvfs("/dev/shm")
    return {
        "path": "/dev/shm",
        "size_bytes": st.f_frsize * st.f_blocks,
        "free_bytes": st.f_frsize * st.f_bavail,
    }


def host_numa() -> dict[str, object]:
    nodes = {}
    for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*")):
        nodes[Path(d).name] = (read_text(f"{d}/cpulist") or "").strip()
    balancing = read_text("/proc/sys/kernel/numa_balancing")
    return {"nodes": nodes, "numa_balancing": balancing.strip() if balancing else None}


def host_governors() -> dict[str, object]:
    govs = {}
    for f in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")):
        govs[Path(f).parents[1].name] = (read_text(f) or "").strip()
    return {"governors": govs}


def host_limits() -> dict[str, object]:
    def lim(which: int) -> list[int]:
        soft, hard = resource.getrlimit(which)
        return [soft, hard]  # -1 (RLIM_INFINITY) means unlimited

    return {"nofile": lim(resource.RLIMIT_NOFILE), "memlock": lim(resource.RLIMIT_MEMLOCK)}


def host_infiniband() -> dict[str, object]:
    return {"devices": sorted(Path(p).name for p in glob.glob("/sys/class/infiniband/*"))}


def library_paths(ldconfig_text: str) -> dict[str, str]:
    """Resolve each ``ldconfig -p`` entry of interest to the file it points at."""
    out = {}
    for line in ldconfig_text.splitlines():
        m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and m.group(1).startswith(LIBS_OF_INTEREST):
            out[m.group(3)] = os.path.realpath(m.group(3))
    return out
