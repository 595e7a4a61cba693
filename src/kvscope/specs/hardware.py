"""GPU catalogue: memory as the driver reports it, bandwidths, compute, power.

Data lives in ``specs/gpus.json`` (one entry per GPU, each figure with its datasheet source
in the entry's ``sources``). Units in :class:`GPUSpec`: bytes, bytes/s, FLOP/s, watts.
Memory is what CUDA reports as total (``cudaMemGetInfo``), which engines budget against
(vLLM ``MemorySnapshot.total_memory``): an H100 80GB reports about 79.19 GiB, not 80 GB.
On unified-memory parts (DGX Spark's GB10) it is the share of the shared LPDDR5X pool CUDA
reports; on Grace superchips (GH200, GB200, GB300) it is the GPU's HBM only (the entry's
``notes`` say so).

A user GPU file (:mod:`kvscope.specs.user_gpus`) adds or overrides entries for the length of
one command: :func:`list_gpus` and :func:`get_gpu` see them while :func:`user_gpus` (or
:func:`set_user_gpus`) holds them; user entries carry their file in ``origin``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kvscope.errors import UnknownNameError

CATALOGUE = Path(__file__).with_name("gpus.json")

GIB = 1 << 30


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model."""

    name: str
    aliases: tuple[str, ...]
    vendor: str
    architecture: str
    memory_bytes: int  # total as CUDA/NVML reports it
    memory_marketing_gb: float
    hbm_bandwidth: float  # bytes/s
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None
    fp4_flops: float | None
    nvlink_bandwidth: float  # bytes/s per direction, 0 if none
    pcie_bandwidth: float  # bytes/s per direction
    pcie_gen: int
    tdp_w: float
    memory_source: str = ""
    sources: tuple[tuple[str, str], ...] = ()
    confidence: str = "high"
    #: Total memory as nvidia-smi prints it (``memory.total``, MiB), which SGLang reads for its
    #: defaults; on AMD the rocm-smi / rocminfo total SGLang reads. None where unverified.
    memory_smi_mib: int | None = None
    memory_smi_source: str = ""
    #: CUDA compute capability ("8.0", "9.0"); "" for non-NVIDIA parts.
    compute_capability: str = ""
    #: Streaming multiprocessors (NVIDIA) or compute units (AMD): torch's
    #: ``multi_processor_count``, which vLLM reads as ``num_compute_units``. None if unknown.
    sm_count: int | None = None
    #: What a reader should know about the entry (unified memory, estimates, variants).
    notes: str = ""
    #: Where a user entry comes from ("your --gpu-spec file gpus.yaml"); "" when shipped.
    origin: str = ""
    #: USD per GPU-hour a user GPU file gives for this GPU (``gpu_hour_usd``), else None.
    gpu_hour_usd: float | None = None
    #: GPUs one system holds where the product is one whole machine (DGX Spark: one GB10),
    #: so any larger tensor/pipeline group spans nodes; None where systems vary.
    gpus_per_node: int | None = None
    #: NVLink only through a bridge between two or four cards (H100 NVL, H200 NVL, the PCIe
    #: A100 / H100): no NVSwitch, so no NVLink SHARP (NCCL's NVLS) on any group of them.
    nvlink_bridge: bool = False

    def spans_nodes(self, gpus: int) -> bool:
        """Whether ``gpus`` GPUs of this kind need more than one node (False if unknown)."""
        return self.gpus_per_node is not None and gpus > self.gpus_per_node

    @property
    def capability(self) -> tuple[int, int] | None:
        """``compute_capability`` as (major, minor); None where the catalogue gives none."""
        major, _, minor = self.compute_capability.partition(".")
        if not major.isdigit():
            return None
        return int(major), int(minor) if minor.isdigit() else 0

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def interconnect_bandwidth(self) -> float:
        """Per-direction bytes/s between GPUs of one node: NVLink if present, else PCIe."""
        return self.nvlink_bandwidth or self.pcie_bandwidth

    def flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for a compute dtype; falls back to bf16 when unsupported."""
        key = dtype.lower()
        if key.startswith("fp8") and self.fp8_flops:
            return self.fp8_flops
        if key in ("fp4", "mxfp4", "nvfp4") and self.fp4_flops:
            return self.fp4_flops
        return self.bf16_flops


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _opt(entry: dict[str, Any], key: str, scale: float) -> float | None:
    value = entry.get(key)
    return None if value in (None, "") else float(value) * scale


def _from_entry(e: dict[str, Any], origin: str = "") -> GPUSpec:
    """A :class:`GPUSpec` from one ``gpus.json``-shaped entry (units converted here)."""
    usd = e.get("gpu_hour_usd")
    return GPUSpec(
        name=e["name"],
        aliases=tuple(dict.fromkeys(_norm(a) for a in e.get("aliases", ()))),
        vendor=e.get("vendor", "nvidia"),
        architecture=e.get("architecture", ""),
        memory_bytes=int(e["memory_total_bytes"]),
        memory_marketing_gb=float(e.get("memory_marketing_gb", 0)),
        hbm_bandwidth=float(e["hbm_bandwidth_gbps"]) * 1e9,
        bf16_flops=float(e["bf16_dense_tflops"]) * 1e12,
        fp8_flops=_opt(e, "fp8_dense_tflops", 1e12),
        fp4_flops=_opt(e, "fp4_dense_tflops", 1e12),
        nvlink_bandwidth=float(e.get("nvlink_gbps_per_direction") or 0) * 1e9,
        pcie_bandwidth=float(e.get("pcie_gbps_per_direction") or 0) * 1e9,
        pcie_gen=int(e.get("pcie_gen") or 0),
        tdp_w=float(e.get("tdp_w") or 0),
        memory_source=e.get("memory_total_source", ""),
        sources=tuple((str(k), str(v)) for k, v in (e.get("sources") or {}).items()),
        confidence=e.get("confidence", "high"),
        memory_smi_mib=None if e.get("memory_smi_mib") is None else int(e["memory_smi_mib"]),
        memory_smi_source=e.get("memory_smi_source", ""),
        compute_capability=str(e.get("compute_capability") or ""),
        sm_count=None if e.get("sm_count") is None else int(e["sm_count"]),
        notes=str(e.get("notes") or ""),
        origin=origin,
        gpu_hour_usd=None if usd is None else float(usd),
        gpus_per_node=None if e.get("gpus_per_node") is None else int(e["gpus_per_node"]),
        nvlink_bridge=bool(e.get("nvlink_bridge", False)),
    )


@cache
def catalogue_entries() -> tuple[dict[str, Any], ...]:
    """The shipped ``gpus.json`` entries as parsed (callers must not mutate them)."""
    data = json.loads(CATALOGUE.read_text())
    return tuple(data["gpus"])


@cache
def shipped_gpus() -> tuple[GPUSpec, ...]:
    """The GPUs kvscope ships, in file order, without any user file."""
    return tuple(_from_entry(e) for e in catalogue_entries())


_USER: ContextVar[tuple[GPUSpec, ...]] = ContextVar("kvscope_user_gpus", default=())


def set_user_gpus(gpus: tuple[GPUSpec, ...]) -> Token[tuple[GPUSpec, ...]]:
    """Make ``gpus`` (a user file's entries) part of the catalogue; returns the reset token."""
    return _USER.set(tuple(gpus))


@contextmanager
def user_gpus(gpus: tuple[GPUSpec, ...]) -> Iterator[None]:
    """The catalogue with ``gpus`` added or overriding, inside the ``with`` block only."""
    token = set_user_gpus(gpus)
    try:
        yield
    finally:
        _USER.reset(token)


def list_gpus() -> tuple[GPUSpec, ...]:
    """Every GPU: the shipped ones in file order (a user override in its place), then any
    new GPU of the user file."""
    user = _USER.get()
    if not user:
        return shipped_gpus()
    by_name = {g.name: g for g in user}
    merged = [by_name.pop(g.name, g) for g in shipped_gpus()]
    return (*merged, *by_name.values())


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by canonical name, alias or the product name NVML reports.

    ``H100``, ``h100-80gb`` and ``NVIDIA H100 80GB HBM3`` all resolve; an unknown name raises
    :class:`UnknownNameError` listing the close matches.
    """
    key = _norm(name)
    for gpu in list_gpus():
        if key == _norm(gpu.name) or key in gpu.aliases:
            return gpu
    known = [g.name for g in list_gpus()] + [a for g in list_gpus() for a in g.aliases]
    raise UnknownNameError("GPU", name, known)
