"""All doctor checks. Each reads a :class:`~kvscope.doctor.bundle.Bundle` only."""

from __future__ import annotations

from kvscope.doctor.bundle import Bundle
from kvscope.doctor.checks.common import View
from kvscope.doctor.checks.env import env_checks
from kvscope.doctor.checks.gpu import GPU_CHECK_IDS, gpu_checks
from kvscope.doctor.checks.host import host_checks
from kvscope.doctor.checks.stack import stack_checks
from kvscope.doctor.checks.topology import topology_checks
from kvscope.doctor.checks.xid import check_xid
from kvscope.doctor.model import Check

__all__ = ["GPU_CHECK_IDS", "run_checks"]


def run_checks(bundle: Bundle) -> list[Check]:
    """Every check over ``bundle``, in report order: stack, environment, GPUs, topology, host."""
    v = View(bundle)
    return [
        *stack_checks(v),
        *env_checks(v),
        *gpu_checks(v),
        check_xid(v),
        *topology_checks(v),
        *host_checks(v),
    ]
