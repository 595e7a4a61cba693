"""Communication volume and time of one engine step: :func:`comm_volume`.

Owns the bytes each GPU sends per step for tensor parallelism (all-reduce), expert
parallelism (all-to-all dispatch and combine) and pipeline parallelism (send/recv), and the
time they take under an alpha-beta link model (:class:`LinkModel`, which ``kvscope comm``
fits from measurements and hands back).

Formulas (textbook collectives):

- **TP all-reduce**: Megatron-style layers all-reduce twice per layer (after attention, after
  the FFN/MoE), each ``M = tokens x hidden x activation bytes``. A ring all-reduce sends
  ``2 (n-1)/n x M`` per rank (reduce-scatter then all-gather); time ``alpha + that x beta``.
  nccl-tests reports ``busbw = algbw x 2(n-1)/n`` for all-reduce (nccl-tests
  ``doc/PERFORMANCE.md``), so at alpha = 0 the busbw of this model is the link bandwidth.
- **EP all-to-all**: per MoE layer each token goes to its ``k`` experts; with uniform
  placement a fraction ``(ep-1)/ep`` of copies leave the rank. Dispatch bytes per rank
  ``tokens x k x (ep-1)/ep x hidden x dispatch bytes``; combine the same at combine bytes.
  fp8 dispatch (1 byte + one fp32 scale per 128 elements) where engines do it (DeepSeek-V3
  report §3.3, DeepEP low-latency kernels); bf16 combine. Time ``alpha + bytes x beta``
  (nccl-tests all-to-all busbw = algbw x (n-1)/n). Shared experts add no traffic.
- **PP send/recv**: each stage boundary passes ``tokens x hidden x activation bytes``.

Units: bytes per step per GPU, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.step_costs import StepCosts, maximum, step_costs, where
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Default per-collective latency: AIConfigurator's 10 us P2P latency
#: (ai-dynamo/aiconfigurator systems/*.yaml). ``kvscope comm`` replaces it with a fitted value.
DEFAULT_ALPHA_S = 10e-6
#: GPUs per node in HGX/DGX servers; larger groups cross the scale-out network.
GPUS_PER_NODE = 8
#: Scale-out bandwidth per GPU: one 400 Gb/s NIC per GPU (DGX H100 ConnectX-7), per direction.
SCALE_OUT_BANDWIDTH = 50e9
#: fp8 dispatch bytes per element: 1 byte plus one fp32 scale per 128 (DeepEP/DeepSeek-V3).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128


@dataclass(frozen=True)
class LinkModel:
    """Alpha-beta model of one collective: ``time = alpha_s + bytes x beta_s_per_byte``.

    ``bytes`` is what one rank sends under the collective's algorithm (so beta is the
    inverse of nccl-tests' bus bandwidth).
    """

    alpha_s: float
    beta_s_per_byte: float
    name: str = ""

    def __post_init__(self) -> None:
        if self.alpha_s < 0 or self.beta_s_per_byte <= 0:
            raise KvscopeError("link model needs alpha >= 0 and beta > 0.")

    @property
    def bandwidth(self) -> float:
        """Bytes per second per direction (1 / beta)."""
        return 1.0 / self.beta_s_per_byte

    def time(self, nbytes: float) -> float:
        """Seconds for one collective in which a rank sends ``nbytes`` (0 if nothing sent)."""
        return self.alpha_s + nbytes * self.beta_s_per_byte if nbytes > 0 else 0.0

    @classmethod
    def for_gpu(cls, gpu: GPUSpec, group: int, alpha_s: float = DEFAULT_ALPHA_S) -> LinkModel:
        """Catalogue link for a group of ``group`` GPUs: NVLink (else PCIe) inside a node,
        the scale-out NIC beyond :data:`GPUS_PER_NODE`."""
        if group > GPUS_PER_NODE:
            return cls(alpha_s, 1.0 / SCALE_OUT_BANDWIDTH, "scale-out 400 Gb/s")
        if gpu.nvlink_bandwidth:
            return cls(alpha_s, 1.0 / gpu.nvlink_bandwidth, "NVLink")
        return cls(alpha_s, 1.0 / gpu.pcie_bandwidth, f"PCIe Gen{gpu.pcie_gen}")


#: A measured link below this fraction of the planned GPU's catalogue link is "far below" it.
LINK_MISMATCH_FRACTION = 0.5


def link_mismatch(
    gpu: GPUSpec, group: int, backend: str, cuda: bool | None, measured_bytes_per_s: float
) -> str | None:
    """A warning when a measured link (``kvscope comm bench``) is not the planned GPU's.

    It is: the ``gloo`` backend or ranks without CUDA (CPU memory over sockets), or a
    bandwidth under :data:`LINK_MISMATCH_FRACTION` of the link :meth:`LinkModel.for_gpu`
    gives a group of ``group`` GPUs. Bandwidths are per direction, bytes per second.
    """
    planned = LinkModel.for_gpu(gpu, group)
    on_cpu = backend.lower() == "gloo" or cuda is False
    slow = measured_bytes_per_s < LINK_MISMATCH_FRACTION * planned.bandwidth
    if not (on_cpu or slow):
        return None
    where = f"{backend} on CPU" if on_cpu else backend
    return (
        f"the --comm-run link was measured with {where} at {measured_bytes_per_s / 1e9:,.2f} "
        f"GB/s; the plan is for {gpu.name} {planned.name} at {planned.bandwidth / 1e9:,.0f} "
        "GB/s per direction. The measured link is used as given; measure on the planned GPUs "
        "(`kvscope comm bench --backend nccl`) for a like-for-like figure."
    )


def ring_allreduce_bytes(message_bytes: float, n: int) -> float:
    """Bytes one rank sends in a ring all-reduce of ``message_bytes`` over ``n`` ranks."""
    return 2.0 * (n - 1) / n * message_bytes if n > 1 else 0.0


def alltoall_bytes(message_bytes: float, n: int) -> float:
    """Bytes one rank sends in an all-to-all whose per-rank buffer is ``message_bytes``."""
    return (n - 1) / n * message_bytes if n > 1 else 0.0


@dataclass(frozen=True)
class CommStep:
    """Communication of one step on one GPU (busiest stage)."""

    phase: str
    tokens: int
    tp_allreduce_bytes: float
    tp_allreduce_count: int
    ep_dispatch_bytes: float
    ep_combine_bytes: float
    ep_alltoall_count: int
    pp_sendrecv_bytes: float
    tp_s: float
    ep_s: float
    pp_s: float
    total_bytes: float
    total_s: float
    bytes_per_token: float
    share_of_step: float | None
    tp_link: str
    ep_link: str


def allreduce_count(c: StepCosts, tp: Any, pp: Any, ep_size: Any) -> Any:
    """TP all-reduces per step on one stage: two per layer, one fewer per MoE layer under EP.

    Array-friendly (the search calls it on arrays of configurations).
    """
    per_stage = where(ep_size > 1, 2.0 * c.num_layers - c.moe_layers, 2.0 * c.num_layers) / pp
    # Round half up: a stage of 40.5 layers on average still runs 41 on the busiest one.
    return where(tp > 1, (per_stage + 0.5) // 1, 0.0)


def step_comm_seconds(
    c: StepCosts,
    tp: Any,
    pp: Any,
    ep_size: Any,
    tokens: Any,
    alpha_s: float,
    beta_tp: Any,
    beta_ep: Any,
    beta_pp: Any,
    dispatch_bytes: float | None = None,
) -> Any:
    """Seconds of communication in one step of ``tokens`` tokens on the busiest stage.

    The same sums as :func:`comm_volume`, array-friendly: ``beta_*`` are seconds per byte
    of the links the TP group, the EP group and a PP boundary use.
    """
    ep, t = ep_size, tokens
    msg = t * c.hidden_size * c.act_bytes
    n_ar = allreduce_count(c, tp, pp, ep)
    ar_one = 2.0 * (tp - 1.0) / tp * msg
    tp_s = n_ar * (alpha_s + ar_one * beta_tp)
    el = (
        dispatch_bytes
        if dispatch_bytes is not None
        else (FP8_DISPATCH_BYTES if c.fp8_compute else c.act_bytes)
    )
    copies = t / tp * c.experts_per_token * c.hidden_size * (ep - 1.0) / maximum(ep, 1.0)
    a2a_one = 2.0 * alpha_s + copies * (el + c.act_bytes) * beta_ep
    ep_s = where(ep > 1, c.moe_layers / pp * a2a_one, 0.0)
    pp_s = where(pp > 1, alpha_s + msg * beta_pp, 0.0)
    return tp_s + ep_s + pp_s


def comm_volume(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    tokens: int,
    phase: str = "decode",
    step_s: float | None = None,
    link: LinkModel | None = None,
    dispatch_bytes: float | None = None,
    alpha_s: float = DEFAULT_ALPHA_S,
) -> CommStep:
    """Bytes and time of one step processing ``tokens`` tokens on one replica.

    ``step_s``: the compute/memory time of the same step (from the roofline), to report the
    share communication takes if it is not overlapped. ``dispatch_bytes`` per element
    overrides the default (fp8 for fp8 checkpoints, else the activation dtype). ``link``
    replaces the catalogue links of every group (for a fitted alpha-beta model); otherwise
    ``alpha_s`` is the per-collective latency of the catalogue links.
    """
    if tokens < 1:
        raise KvscopeError(f"tokens per step must be at least 1, got {tokens}.")
    c = step_costs(model)
    moe_layers = c.moe_layers / par.pp
    act = c.act_bytes
    msg = tokens * c.hidden_size * act
    ep = par.ep_size if c.is_moe else 1
    count = int(allreduce_count(c, par.tp, par.pp, ep))
    tp_link = link or LinkModel.for_gpu(gpu, par.tp, alpha_s)
    tp_bytes_one = ring_allreduce_bytes(msg, par.tp)
    tp_bytes = tp_bytes_one * count
    tp_s = count * tp_link.time(tp_bytes_one)

    d_bytes = c_bytes = ep_s = 0.0
    a2a = 0
    ep_name = ""
    if ep > 1:
        # Tokens of one DP replica are split over its TP ranks before dispatch.
        local = tokens / par.tp
        el = (
            dispatch_bytes
            if dispatch_bytes is not None
            else (FP8_DISPATCH_BYTES if c.fp8_compute else act)
        )
        copies = local * c.experts_per_token * c.hidden_size
        d_one = alltoall_bytes(copies * el, ep)
        c_one = alltoall_bytes(copies * act, ep)
        ep_link = link or LinkModel.for_gpu(gpu, ep, alpha_s)
        ep_name = ep_link.name
        a2a = round(2 * moe_layers)
        d_bytes, c_bytes = d_one * moe_layers, c_one * moe_layers
        ep_s = moe_layers * (ep_link.time(d_one) + ep_link.time(c_one))

    pp_bytes = msg if par.pp > 1 else 0.0  # the busiest stage sends one boundary
    pp_link = link or LinkModel.for_gpu(gpu, par.gpus_per_replica, alpha_s)
    pp_s = pp_link.time(pp_bytes)
    total_b = tp_bytes + d_bytes + c_bytes + pp_bytes
    total_s = tp_s + ep_s + pp_s
    share = total_s / (total_s + step_s) if step_s is not None and total_s + step_s > 0 else None
    return CommStep(
        phase=phase,
        tokens=tokens,
        tp_allreduce_bytes=tp_bytes,
        tp_allreduce_count=count,
        ep_dispatch_bytes=d_bytes,
        ep_combine_bytes=c_bytes,
        ep_alltoall_count=a2a,
        pp_sendrecv_bytes=pp_bytes,
        tp_s=tp_s,
        ep_s=ep_s,
        pp_s=pp_s,
        total_bytes=total_b,
        total_s=total_s,
        bytes_per_token=total_b / tokens,
        share_of_step=share,
        tp_link=tp_link.name if par.tp > 1 else "",
        ep_link=ep_name,
    )
