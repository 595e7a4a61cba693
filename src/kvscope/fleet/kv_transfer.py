"""KV transfer between prefill and decode pools: bytes per request from the planner, link time.

Units: bytes, bytes/s, seconds. The bytes a decode GPU must receive for a prompt of ``P``
tokens are what that request holds on one KV rank of the decode deployment,
``ModelSpec.kv_bytes_for_request(P, kv_dtype, tp)`` (the planner's per-request figure: the
full-history caches at the planner's per-token bytes -- MLA latent, DeepSeek V4's compressed
C4/C128 groups and indexer, fp8 -- plus the fixed window state of sliding/V4 layers). Each
decode KV rank (TP x PP) receives its share over its own GPU's link, in parallel, as vLLM's
NIXL connector reads per worker (MLA latents are replicated, so every rank reads the whole
latent); the request's transfer time is ``bytes_per_rank / bandwidth + latency``.

Links (per GPU, per direction):

* ``rdma``: NIXL over InfiniBand/RoCE with GPUDirect RDMA, one 400 Gb/s NIC per GPU as on
  HGX H100/H200 systems (NVIDIA ConnectX-7 NDR datasheet: 400 Gb/s = 50 GB/s); 10 us per
  transfer (a kvscope assumption: an RDMA read round trip and the completion notification).
* ``nvlink``: prefill and decode GPUs in one NVLink domain, the GPU catalogue's
  ``nvlink_gbps_per_direction`` (H100/H200 NVLink 4: 450 GB/s); 5 us (assumption).
* ``pcie``: staged through host memory over the GPU's PCIe link (catalogue
  ``pcie_gbps_per_direction``; Gen5 x16 ~64 GB/s); 20 us (assumption: two copies' set-up).
* a measured link: :func:`measured_link` of an alpha-beta fit (``kvscope comm`` runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.validate import finite

LINKS = ("rdma", "nvlink", "pcie")
#: ConnectX-7 NDR: 400 Gb/s per port, one per GPU (bytes/s, one direction).
RDMA_NIC_BW = 400e9 / 8
_LATENCY = {"rdma": 10e-6, "nvlink": 5e-6, "pcie": 20e-6}


@dataclass(frozen=True)
class KVLink:
    """One GPU's link from a prefill GPU to a decode GPU: bandwidth (bytes/s), latency (s)."""

    kind: str
    bandwidth: float
    latency_s: float

    def __post_init__(self) -> None:
        finite(self.bandwidth, f"KV link '{self.kind}' bandwidth", low=0, low_open=True)
        finite(self.latency_s, f"KV link '{self.kind}' latency", low=0)

    def seconds(self, nbytes: float) -> float:
        """Time to move ``nbytes`` over this link (one transfer)."""
        return nbytes / self.bandwidth + self.latency_s


def measured_link(model: Any, kind: str = "measured") -> KVLink:
    """A link from an alpha-beta fit (:class:`kvscope.plan.comm.LinkModel`, e.g. a
    ``kvscope comm`` run's ``to_link_model``): latency alpha, bandwidth 1 / beta."""
    return KVLink(kind, 1.0 / float(model.beta_s_per_byte), float(model.alpha_s))


def default_link(kind: str, gpu: Any) -> KVLink:
    """The cited default ``kind`` link for ``gpu`` (a :class:`GPUSpec`)."""
    if kind not in LINKS:
        raise KvscopeError(f"KV link: unknown kind '{kind}'; use {', '.join(LINKS)}.")
    if kind == "rdma":
        bw = RDMA_NIC_BW
    elif kind == "nvlink":
        bw = float(gpu.nvlink_bandwidth)
        if not bw:
            raise KvscopeError(f"KV link nvlink: {gpu.name} has no NVLink; use rdma or pcie.")
    else:
        bw = float(gpu.pcie_bandwidth)
    return KVLink(kind, bw, _LATENCY[kind])


@dataclass(frozen=True)
class KVTransfer:
    """One request's KV transfer: bytes per decode rank, ranks, seconds on the link."""

    prompt_tokens: int
    bytes_per_rank: float
    ranks: int
    seconds: float

    @property
    def total_bytes(self) -> float:
        return self.bytes_per_rank * self.ranks


def transfer_bytes_per_rank(
    model: Any, prompt_tokens: int, kv_dtype: str | None = None, tp: int = 1
) -> float:
    """KV bytes one decode rank receives for a prompt (the planner's per-request figure)."""
    return float(model.kv_bytes_for_request(prompt_tokens, kv_dtype, tp))


def kv_transfer(
    model: Any,
    prompt_tokens: int,
    link: KVLink,
    *,
    kv_dtype: str | None = None,
    tp: int = 1,
    pp: int = 1,
) -> KVTransfer:
    """The transfer of one request's prompt KV to a decode deployment of ``tp`` x ``pp``."""
    per_rank = transfer_bytes_per_rank(model, prompt_tokens, kv_dtype, tp) / pp
    return KVTransfer(prompt_tokens, per_rank, tp * pp, link.seconds(per_rank))
