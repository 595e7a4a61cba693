"""Interconnect checks: NVLink link state (``nvidia-smi nvlink -s``) and ``topo -m``.

A GPU whose active NVLink count is below its peers' has a failed link or bridge: tensor-
parallel all-reduce over that GPU runs at the reduced bandwidth, and on HGX boards NCCL may
route through PCIe instead. Cells of ``topo -m``: ``NV#`` = # bonded NVLinks, ``PIX``/``PXB``
= PCIe switch(es), ``PHB`` = host bridge, ``NODE`` = across host bridges within a NUMA node,
``SYS`` = across the CPU interconnect (nvidia-smi's legend).
"""

from __future__ import annotations

from kvscope.doctor.checks.common import View, fail, ok, skipped, warn
from kvscope.doctor.model import Check
from kvscope.doctor.nvsmi import parse_nvlink_status, parse_topo


def check_nvlink(v: View) -> Check:
    cid = "topo.nvlink"
    cap = v.bundle.get("nvidia_smi_nvlink")
    if not cap.ok or cap.text is None:
        return skipped(cid, "NVLink", "no NVLink status captured", cap.why_not())
    gpus = parse_nvlink_status(cap.text)
    if not gpus or all(not g.links for g in gpus):
        return ok(cid, "NVLink", "no NVLink links reported (PCIe-only GPUs)")
    active = {g.gpu: sum(1 for s in g.links.values() if s) for g in gpus}
    speeds = {s for g in gpus for s in g.links.values() if s}
    ev = [
        f"GPU {g.gpu}: {active[g.gpu]}/{len(g.links)} links active"
        + (
            ", inactive: "
            + ", ".join(str(i) for i in sorted(i for i, s in g.links.items() if not s))
            if active[g.gpu] < len(g.links)
            else ""
        )
        for g in gpus
    ]
    best = max(active.values())
    short = [i for i, n in active.items() if n < best]
    if short:
        return fail(
            cid,
            "NVLink",
            f"GPU(s) {', '.join(map(str, short))} have fewer active NVLinks "
            f"than their peers ({best})",
            "Check the NVLink bridge / baseboard and fabric manager; reset or service the GPU.",
            *ev,
        )
    if len(speeds) > 1:
        return warn(
            cid,
            "NVLink",
            "links run at different speeds: "
            + ", ".join(f"{v:g}" for v in sorted(speeds))
            + " GB/s",
            "Check for links trained down; compare nvidia-smi nvlink -e error counters.",
            *ev,
        )
    speed = next(iter(speeds), 0.0)
    return ok(cid, "NVLink", f"{best} active links per GPU at {speed} GB/s each", *ev)


def check_matrix(v: View) -> Check:
    cid = "topo.matrix"
    cap = v.bundle.get("nvidia_smi_topo")
    if not cap.ok or cap.text is None:
        return skipped(cid, "topology", "no topology matrix captured", cap.why_not())
    m = parse_topo(cap.text)
    if len(m.gpus) < 2:
        return ok(cid, "topology", f"{len(m.gpus)} GPU: nothing to connect")
    pairs = [(a, b) for i, a in enumerate(m.gpus) for b in m.gpus[i + 1 :]]
    cells = {p: m.cells.get(p, "?") for p in pairs}
    nv = {p for p, c in cells.items() if c.startswith("NV")}
    kinds = sorted(set(cells.values()))
    ev = [f"GPU pair links: {', '.join(kinds)}"]
    if m.numa_affinity:
        ev.append("NUMA affinity: " + ", ".join(f"{g}={n}" for g, n in m.numa_affinity.items()))
    if nv and len(nv) < len(pairs):
        missing = [f"{a}-{b}:{cells[(a, b)]}" for a, b in pairs if (a, b) not in nv]
        return warn(
            cid,
            "topology",
            f"{len(missing)} GPU pair(s) without NVLink",
            "Keep tensor-parallel groups inside NVLink-connected GPUs.",
            *ev,
            "no NVLink: " + ", ".join(missing[:8]),
        )
    sys_pairs = [f"{a}-{b}" for a, b in pairs if cells[(a, b)] == "SYS"]
    if not nv and sys_pairs:
        return warn(
            cid,
            "topology",
            f"{len(sys_pairs)} GPU pair(s) talk across the CPU interconnect (SYS)",
            "Place tensor-parallel groups on GPUs of one NUMA node.",
            *ev,
            "SYS pairs: " + ", ".join(sys_pairs[:8]),
        )
    return ok(cid, "topology", f"{len(m.gpus)} GPUs, links: {', '.join(kinds)}", *ev)


def topology_checks(v: View) -> list[Check]:
    return [check_nvlink(v), check_matrix(v)]
