"""Environment variables with known-risky values for a serving process.

Each rule says what the variable does, citing its owner's documentation:

* NCCL variables: NVIDIA *NCCL User Guide*, "Environment Variables"
  (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
* CUDA variables: *CUDA C++ Programming Guide*, "CUDA Environment Variables" and
  "Lazy Loading" (docs.nvidia.com/cuda/cuda-c-programming-guide).
* ``PYTORCH_CUDA_ALLOC_CONF``: PyTorch docs, "CUDA semantics → Optimizing memory usage with
  PYTORCH_CUDA_ALLOC_CONF" (pytorch.org/docs/stable/notes/cuda.html).

The environment read is the engine's (``--pid``) when captured, else the kvscope process's.
"""

from __future__ import annotations

from kvscope.doctor.checks.common import View, fail, ok, warn
from kvscope.doctor.model import Check

_TRUE = ("1", "true", "yes", "on")


def _on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def _nvlink_active(v: View) -> bool:
    from kvscope.doctor.nvsmi import parse_nvlink_status

    text = v.bundle.text("nvidia_smi_nvlink")
    if text is None:
        return False
    return any(speed for g in parse_nvlink_status(text) for speed in g.links.values())


def env_checks(v: View) -> list[Check]:
    e = v.env
    src = v.env_source
    out: list[Check] = []

    def ev(name: str) -> str:
        return f"{src}: {name}={e[name]}"

    if _on(e.get("NCCL_P2P_DISABLE")):
        # NCCL_P2P_DISABLE=1 turns off the P2P transport (direct CUDA access between GPUs over
        # NVLink or PCIe); collectives then stage through host shared memory.
        make = fail if _nvlink_active(v) else warn
        out.append(
            make(
                "env.NCCL_P2P_DISABLE",
                "environment",
                "NCCL peer-to-peer transport disabled: all-reduce goes through host memory"
                + (" although NVLink is up" if make is fail else ""),
                "Unset NCCL_P2P_DISABLE (it is a work-around for broken P2P, e.g. some consumer "
                "GPUs or VMs without ACS/IOMMU set-up).",
                ev("NCCL_P2P_DISABLE"),
            )
        )
    if _on(e.get("NCCL_SHM_DISABLE")):
        out.append(
            warn(
                "env.NCCL_SHM_DISABLE",
                "environment",
                "NCCL shared-memory transport disabled: GPUs without P2P fall back to sockets",
                "Unset NCCL_SHM_DISABLE and give the container a large /dev/shm instead.",
                ev("NCCL_SHM_DISABLE"),
            )
        )
    ib = v.infiniband_devices()
    if _on(e.get("NCCL_IB_DISABLE")) and ib:
        out.append(
            warn(
                "env.NCCL_IB_DISABLE",
                "environment",
                "NCCL told not to use InfiniBand/RoCE on a host that has it: inter-node traffic "
                "goes over TCP sockets",
                "Unset NCCL_IB_DISABLE for multi-node serving.",
                ev("NCCL_IB_DISABLE"),
                f"infiniband devices: {', '.join(map(str, ib))}",
            )
        )
    dbg = e.get("NCCL_DEBUG", "").upper()
    if dbg in ("INFO", "TRACE"):
        out.append(
            warn(
                "env.NCCL_DEBUG",
                "environment",
                f"NCCL_DEBUG={dbg} logs every communicator set-up "
                "(TRACE: every call, debug builds)",
                "Use NCCL_DEBUG=WARN in production; keep INFO for diagnosis runs.",
                ev("NCCL_DEBUG"),
            )
        )
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        if e.get(name):
            out.append(
                warn(
                    f"env.{name}",
                    "environment",
                    f"{name} forces NCCL's choice instead of its tuner (meant for debugging)",
                    f"Unset {name} unless a measured benchmark on this topology justifies it.",
                    ev(name),
                )
            )
    if _on(e.get("CUDA_LAUNCH_BLOCKING")):
        out.append(
            fail(
                "env.CUDA_LAUNCH_BLOCKING",
                "environment",
                "every CUDA kernel launch is synchronous: the CPU waits for each kernel",
                "Unset CUDA_LAUNCH_BLOCKING (a debugging aid for locating the failing kernel).",
                ev("CUDA_LAUNCH_BLOCKING"),
            )
        )
    cvd = e.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        n = len(v.smi.gpus) if v.smi else None
        idx = [s.strip() for s in cvd.split(",") if s.strip()]
        bad = [s for s in idx if s.isdigit() and n is not None and int(s) >= n]
        if not idx or idx[0] in ("-1", "none", "NoDevFiles"):
            out.append(
                fail(
                    "env.CUDA_VISIBLE_DEVICES",
                    "environment",
                    "CUDA_VISIBLE_DEVICES hides every GPU",
                    "Set CUDA_VISIBLE_DEVICES to the GPUs this engine should use, or unset it.",
                    ev("CUDA_VISIBLE_DEVICES"),
                )
            )
        elif bad:
            out.append(
                fail(
                    "env.CUDA_VISIBLE_DEVICES",
                    "environment",
                    f"CUDA_VISIBLE_DEVICES names GPU(s) {', '.join(bad)} but the host has {n}",
                    "List only existing GPU indices or UUIDs.",
                    ev("CUDA_VISIBLE_DEVICES"),
                )
            )
        names = {g.name for g in v.smi.gpus} if v.smi else set()
        if len(names) > 1 and e.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            out.append(
                warn(
                    "env.CUDA_DEVICE_ORDER",
                    "environment",
                    "mixed GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's "
                    "indices (fastest first) differ from nvidia-smi's",
                    "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
                    ev("CUDA_VISIBLE_DEVICES"),
                    f"GPU models: {', '.join(sorted(names))}",
                )
            )
    if e.get("CUDA_MODULE_LOADING", "").upper() == "EAGER":
        out.append(
            warn(
                "env.CUDA_MODULE_LOADING",
                "environment",
                "eager module loading: every kernel of every library is loaded at start "
                "(more device memory, slower start; LAZY is the default since CUDA 12.2)",
                "Unset CUDA_MODULE_LOADING.",
                ev("CUDA_MODULE_LOADING"),
            )
        )
    if _on(e.get("CUDA_CACHE_DISABLE")):
        out.append(
            warn(
                "env.CUDA_CACHE_DISABLE",
                "environment",
                "the PTX JIT cache is off: JIT-compiled kernels are rebuilt at every start",
                "Unset CUDA_CACHE_DISABLE.",
                ev("CUDA_CACHE_DISABLE"),
            )
        )
    if "stubs" in e.get("LD_LIBRARY_PATH", ""):
        out.append(
            fail(
                "env.LD_LIBRARY_PATH",
                "environment",
                "LD_LIBRARY_PATH contains a CUDA 'stubs' directory: its libcuda.so is a "
                "link-time stub that cannot drive a GPU",
                "Remove .../lib64/stubs from LD_LIBRARY_PATH.",
                ev("LD_LIBRARY_PATH"),
            )
        )
    conf = e.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf is not None and "expandable_segments:true" not in conf.replace(" ", "").lower():
        # Without expandable segments the caching allocator keeps fixed-size segments; mixed
        # request sizes (prefill vs decode) leave free-but-unusable gaps -> OOM with memory
        # reported free. vLLM's sleep mode (CuMemAllocator) refuses expandable segments, so
        # this stays a warning, not a failure.
        out.append(
            warn(
                "env.PYTORCH_CUDA_ALLOC_CONF",
                "environment",
                "PYTORCH_CUDA_ALLOC_CONF is set without expandable_segments:True: the caching "
                "allocator fragments under changing request sizes",
                "Add expandable_segments:True (not with vLLM --enable-sleep-mode).",
                ev("PYTORCH_CUDA_ALLOC_CONF"),
            )
        )
    if not out:
        shown = [f"{k}={val}" for k, val in e.items() if not k.startswith(("VLLM_", "SGLANG_"))]
        out.append(
            ok(
                "env.settings",
                "environment",
                f"no known-risky values among {len(e)} serving-related variables",
                *(f"{src}: {s}" for s in shown[:12]),
            )
        )
    return out
