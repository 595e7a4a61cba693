"""All doctor checks. Each reads a :class:`~kvscope.doctor.bundle.Bundle` only."""

from __future__ import annotations

from collections.abc import Callable

from kvscope.doctor.bundle import Bundle
from kvscope.doctor.checks.common import View, skipped
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
    groups: tuple[tuple[str, Callable[[View], list[Check]]], ...] = (
        ("stack", stack_checks),
        ("env", env_checks),
        ("gpu", gpu_checks),
        ("xid", lambda view: [check_xid(view)]),
        ("topology", topology_checks),
        ("host", host_checks),
    )
    return [c for name, fn in groups for c in _guarded(name, fn, v)]


def _guarded(name: str, fn: Callable[[View], list[Check]], v: View) -> list[Check]:
    """The checks of one group; a bundle whose data has shapes no probe writes (it came from
    someone else, or was edited) skips that group with the reason, instead of a traceback."""
    try:
        return fn(v)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as err:
        detail = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        return [
            skipped(
                f"{name}.bundle",
                "bundle",
                f"{name} checks skipped: the bundle's data is malformed ({detail})",
            )
        ]
