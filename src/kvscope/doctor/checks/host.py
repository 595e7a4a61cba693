"""Host checks: ``/dev/shm``, hugepages, NUMA, CPU frequency governor, file and memlock limits.

* ``/dev/shm``: engines pass tensors between worker processes through shared memory and
  NCCL's SHM transport lives there; Docker's default ``--shm-size`` is 64 MB (Docker run
  reference), and the NCCL User Guide's troubleshooting section asks containers for
  ``--shm-size=1g`` (or ``--ipc=host``) and ``--ulimit memlock=-1``; vLLM's Docker docs ask
  for ``--ipc=host`` or ``--shm-size``.
* Open files: vLLM and SGLang raise the soft ``RLIMIT_NOFILE`` to 65535 at start
  (``set_ulimit(target_soft_limit=65535)`` in both code bases) and can only go up to the hard
  limit; a hard limit below that caps concurrent connections.
* CPU governor: the scheduler, tokenizer and HTTP server of an engine are single-threaded
  hot loops; ``powersave``/``ondemand`` governors add frequency ramp-up latency to each step
  (Linux ``Documentation/admin-guide/pm/cpufreq.rst`` describes the governors).
"""

from __future__ import annotations

import re

from kvscope.doctor.checks.common import (
    View,
    fail,
    int_field,
    limit_pair,
    ok,
    skipped,
    str_map,
    warn,
)
from kvscope.doctor.model import Check

GIB = 1024**3
SHM_MIN_BYTES = 1 * GIB  # NCCL troubleshooting: --shm-size=1g for containers
SHM_FAIL_BYTES = 256 * 1024**2
NOFILE_TARGET = 65535  # vLLM / SGLang set_ulimit target


def check_shm(v: View) -> Check:
    d = v.json_dict("shm")
    if d is None:
        return skipped("host.shm", "/dev/shm", "not captured", v.bundle.get("shm").why_not())
    size, free = int_field(d, "size_bytes"), int_field(d, "free_bytes") or 0
    if size is None:
        return skipped("host.shm", "/dev/shm", "captured, but without a size in bytes")
    gpus = len(v.smi.gpus) if v.smi else 0
    ev = (
        f"/dev/shm size: {size / GIB:.2f} GiB, free: {free / GIB:.2f} GiB",
        f"GPUs: {gpus}",
    )
    fix = (
        "Run the container with --ipc=host or --shm-size=16g "
        "(Kubernetes: an emptyDir with medium: Memory)."
    )
    if size < SHM_FAIL_BYTES and gpus > 1:
        return fail(
            "host.shm",
            "/dev/shm",
            f"/dev/shm is {size / 1024**2:.0f} MiB: multi-GPU "
            "engines and NCCL's SHM transport will fail or crash",
            fix,
            *ev,
        )
    if size < SHM_MIN_BYTES:
        return warn("host.shm", "/dev/shm", f"/dev/shm is only {size / 1024**2:.0f} MiB", fix, *ev)
    return ok("host.shm", "/dev/shm", f"/dev/shm {size / GIB:.1f} GiB", *ev)


def _meminfo(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def check_hugepages(v: View) -> Check:
    text = v.bundle.text("meminfo")
    if text is None:
        return skipped("host.hugepages", "memory", "/proc/meminfo not captured")
    mi = _meminfo(text)
    total_kib = mi.get("MemTotal", 0)
    huge_kib = mi.get("HugePages_Total", 0) * mi.get("Hugepagesize", 0)
    thp = (v.bundle.text("thp") or "").strip()
    ev = (
        f"MemTotal: {total_kib / 1024**2:.1f} GiB",
        f"HugePages_Total: {mi.get('HugePages_Total', 0)} x {mi.get('Hugepagesize', 0)} kB",
        f"AnonHugePages: {mi.get('AnonHugePages', 0) / 1024:.0f} MiB",
        f"transparent_hugepage: {thp or 'n/a'}",
    )
    if total_kib and huge_kib > total_kib / 2:
        return warn(
            "host.hugepages",
            "memory",
            f"{huge_kib / 1024**2:.1f} GiB reserved as static hugepages, unusable for pinned "
            "host buffers (CPU KV offload, swap space)",
            "Lower vm.nr_hugepages unless a workload on this host needs them.",
            *ev,
        )
    return ok(
        "host.hugepages",
        "memory",
        f"{huge_kib / 1024**2:.1f} GiB static hugepages of {total_kib / 1024**2:.1f} GiB",
        *ev,
    )


def check_numa(v: View) -> Check:
    d = v.json_dict("numa")
    if d is None:
        return skipped("host.numa", "NUMA", "not captured")
    nodes = str_map(d, "nodes")
    ev = [f"{n}: cpus {c}" for n, c in nodes.items()]
    ev.append(f"kernel.numa_balancing: {d.get('numa_balancing')}")
    return ok("host.numa", "NUMA", f"{len(nodes)} NUMA node(s)", *ev)


def check_governor(v: View) -> Check:
    govs = str_map(v.json_dict("cpu_governor") or {}, "governors")
    if not govs:
        return skipped("host.cpu_governor", "CPU", "no cpufreq governor exposed (VM or container)")
    counts: dict[str, int] = {}
    for g in govs.values():
        counts[g] = counts.get(g, 0) + 1
    ev = tuple(f"{g}: {n} CPU(s)" for g, n in sorted(counts.items()))
    slow = {g: n for g, n in counts.items() if g != "performance"}
    if slow:
        return warn(
            "host.cpu_governor",
            "CPU",
            f"{sum(slow.values())} of {len(govs)} CPUs not on the performance governor",
            "cpupower frequency-set -g performance",
            *ev,
        )
    return ok("host.cpu_governor", "CPU", f"all {len(govs)} CPUs on performance", *ev)


def _lim(x: object) -> str:
    return "unlimited" if x in (-1, None) else str(x)


def check_nofile(v: View) -> Check:
    d = v.json_dict("limits")
    pair = limit_pair(d, "nofile") if d is not None else None
    if pair is None:
        return skipped("host.nofile", "limits", "not captured")
    soft, hard = pair
    ev = (f"RLIMIT_NOFILE soft/hard: {_lim(soft)}/{_lim(hard)}",)
    if hard != -1 and hard < NOFILE_TARGET:
        return warn(
            "host.nofile",
            "limits",
            f"open-file hard limit {hard} < {NOFILE_TARGET}: caps concurrent connections",
            "Raise it (ulimit -n / LimitNOFILE= / docker --ulimit nofile=1048576:1048576).",
            *ev,
        )
    return ok("host.nofile", "limits", f"open-file limit soft {_lim(soft)}, hard {_lim(hard)}", *ev)


def check_memlock(v: View) -> Check:
    d = v.json_dict("limits")
    ib = v.infiniband_devices()
    pair = limit_pair(d, "memlock") if d is not None else None
    if pair is None:
        return skipped("host.memlock", "limits", "not captured")
    soft, hard = pair
    ev = (
        f"RLIMIT_MEMLOCK soft/hard: {_lim(soft)}/{_lim(hard)}",
        f"infiniband devices: {', '.join(map(str, ib)) or 'none'}",
    )
    if not ib:
        return ok("host.memlock", "limits", "no RDMA devices: memlock limit irrelevant", *ev)
    if soft != -1:
        return fail(
            "host.memlock",
            "limits",
            "locked-memory limit is finite on an RDMA host: NCCL's "
            "InfiniBand transport cannot register buffers",
            "docker --ulimit memlock=-1 (or LimitMEMLOCK=infinity).",
            *ev,
        )
    return ok("host.memlock", "limits", "memlock unlimited on an RDMA host", *ev)


def host_checks(v: View) -> list[Check]:
    return [
        check_shm(v),
        check_hugepages(v),
        check_numa(v),
        check_governor(v),
        check_nofile(v),
        check_memlock(v),
    ]
