"""Xid events: the NVIDIA driver's error reports in the kernel log (``NVRM: Xid ...``).

Meanings from NVIDIA's *Xid Errors* catalogue (docs.nvidia.com/deploy/xid-errors):

* hardware / driver faults (fail): 48 double-bit ECC error, 62 internal micro-controller
  halt, 64 failure to record an ECC page retirement or row remap, 74 NVLink error,
  79 GPU has fallen off the bus, 92 high single-bit ECC error rate, 95 uncontained ECC
  error, 119 GSP RPC timeout, 120 GSP error;
* events that need a reset to complete (warn): 63 page retirement / row remap recorded,
  94 contained ECC error (the affected application was stopped);
* usually the application's own fault (ok, listed as evidence): 13 graphics engine
  exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive clean-up.

The log keeps events since boot, so a fault that was already handled by a GPU reset still
shows; the evidence keeps the timestamps so a reader can tell.
"""

from __future__ import annotations

import re

from kvscope.doctor.checks.common import View, fail, ok, skipped, warn
from kvscope.doctor.model import Check

XID_FAIL = {48, 62, 64, 74, 79, 92, 95, 119, 120}
XID_WARN = {63, 94}
_XID = re.compile(r"NVRM: Xid \((?P<dev>[^)]*)\): (?P<xid>\d+)")


def check_xid(v: View) -> Check:
    cap = v.bundle.get("kernel_log")
    if not cap.ok or cap.text is None:
        return skipped("gpu.xid", "kernel log", "kernel log not readable", cap.why_not())
    events = [
        (int(m.group("xid")), line.strip())
        for line in cap.text.splitlines()
        if (m := _XID.search(line))
    ]
    if not events:
        return ok("gpu.xid", "kernel log", "no Xid events since boot")
    bad = sorted({x for x, _ in events if x in XID_FAIL})
    notable = sorted({x for x, _ in events if x in XID_WARN})
    ev = [line for x, line in events if x in XID_FAIL | XID_WARN][-6:] or [events[-1][1]]
    summary = f"{len(events)} Xid event(s): " + ", ".join(
        str(x) for x in sorted({x for x, _ in events})
    )
    if bad:
        return fail(
            "gpu.xid",
            "kernel log",
            summary + f" (hardware/driver faults: {bad})",
            "Drain the GPU named in the log, reset it (or reboot) and RMA if it recurs.",
            *ev,
        )
    if notable:
        return warn(
            "gpu.xid",
            "kernel log",
            summary + f" (need a GPU reset: {notable})",
            "Reset the GPU at the next maintenance window.",
            *ev,
        )
    return ok("gpu.xid", "kernel log", summary + " (application-level only)", *ev)
