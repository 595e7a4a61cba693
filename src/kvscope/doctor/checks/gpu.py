"""Per-GPU hardware state from ``nvidia-smi -q -x``.

Rules and their sources:

* Clock-event reasons: the NVML bitmask (``nvmlDeviceGetCurrentClocksEventReasons``).
  Hardware slowdown, hardware thermal slowdown and power-brake slowdown mean the board is
  protecting itself: fail. Software thermal slowdown and the software power cap: warn. Idle,
  application-clock setting, sync boost and display clocks are benign. This is the split
  used by ``canonical/hardware-observer-operator#331`` (see reference observability anchors).
* Row remapping and page retirement: NVIDIA *GPU Memory Error Management*
  (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt): a pending remap takes effect only after a
  GPU reset; a remapping failure means the board should be serviced.
* Persistence mode: NVIDIA *Driver Persistence* (docs.nvidia.com/deploy/driver-persistence):
  without it the driver de-initialises the GPU when the last client exits, so every engine
  start pays the initialisation again.
* PCIe: a link trains down in generation at idle to save power (normal), but a narrower
  width than the maximum is a seating/riser/slot fault: host-device copies (weight loading,
  KV offload, sampling) run at a fraction of the bandwidth.
"""

from __future__ import annotations

from kvscope.doctor.checks.common import View, fail, ok, skipped, warn
from kvscope.doctor.model import Check
from kvscope.doctor.nvsmi import GpuState

GPU_CHECK_IDS = (
    "gpu.pcie",
    "gpu.clocks",
    "gpu.thermal_power",
    "gpu.ecc",
    "gpu.memory_health",
    "gpu.persistence",
    "gpu.mig",
    "gpu.compute_mode",
    "gpu.processes",
)
_HW_EVENTS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_SW_EVENTS = ("sw_thermal_slowdown", "sw_power_cap")
#: Warn this many °C before the slowdown threshold.
TEMP_HEADROOM_WARN_C = 5.0


def _subject(g: GpuState) -> str:
    return f"GPU {g.index} ({g.bus_id})"


def _idle(g: GpuState) -> bool:
    return g.clock_events.get("gpu_idle", False) or g.utilization_pct == 0


def check_pcie(g: GpuState) -> Check:
    s = _subject(g)
    if None in (g.pcie_width_max, g.pcie_width_current, g.pcie_gen_max, g.pcie_gen_current):
        return skipped("gpu.pcie", s, "PCIe link fields not reported (N/A)")
    ev = (
        f"pcie_gen current/max: {g.pcie_gen_current}/{g.pcie_gen_max}",
        f"link_width current/max: x{g.pcie_width_current}/x{g.pcie_width_max}",
        f"utilization: {g.utilization_pct} %, gpu_idle event: {g.clock_events.get('gpu_idle')}",
    )
    assert g.pcie_width_current is not None and g.pcie_width_max is not None
    assert g.pcie_gen_current is not None and g.pcie_gen_max is not None
    if g.pcie_width_current < g.pcie_width_max:
        return fail(
            "gpu.pcie",
            s,
            f"PCIe link runs x{g.pcie_width_current} of x{g.pcie_width_max}: "
            f"{g.pcie_width_current / g.pcie_width_max:.0%} of host-device bandwidth",
            "Reseat the GPU / riser or move it to a full-width slot; check lspci LnkSta.",
            *ev,
        )
    if g.pcie_gen_current < g.pcie_gen_max:
        if _idle(g):
            return ok(
                "gpu.pcie",
                s,
                f"Gen{g.pcie_gen_current} x{g.pcie_width_current} at idle (link trains "
                f"up to Gen{g.pcie_gen_max} under load)",
                *ev,
            )
        return warn(
            "gpu.pcie",
            s,
            f"busy GPU on PCIe Gen{g.pcie_gen_current} of Gen{g.pcie_gen_max}",
            "Check BIOS PCIe speed settings and the slot; re-run under load.",
            *ev,
        )
    return ok("gpu.pcie", s, f"PCIe Gen{g.pcie_gen_current} x{g.pcie_width_current} (maximum)", *ev)


def check_clocks(g: GpuState) -> Check:
    s = _subject(g)
    if not g.clock_events:
        return skipped("gpu.clocks", s, "clock-event reasons not reported")
    active = sorted(k for k, on in g.clock_events.items() if on)
    ev = [f"active clock-event reasons: {', '.join(active) or 'none'}"]
    if g.sm_clock_mhz is not None and g.sm_clock_max_mhz:
        ev.append(
            f"sm_clock: {g.sm_clock_mhz:.0f} of max {g.sm_clock_max_mhz:.0f} MHz "
            f"({g.sm_clock_mhz / g.sm_clock_max_mhz:.0%})"
        )
    hw = [r for r in active if r in _HW_EVENTS]
    sw = [r for r in active if r in _SW_EVENTS]
    if hw:
        return fail(
            "gpu.clocks",
            s,
            f"hardware throttling: {', '.join(hw)}",
            "Check cooling (inlet temperature, fans), PSU/power-brake signal and the "
            "BMC event log; drain the GPU if it persists.",
            *ev,
        )
    if sw:
        return warn(
            "gpu.clocks",
            s,
            f"software throttling: {', '.join(sw)}",
            "Check the power limit (nvidia-smi -q -d POWER) and airflow; a sustained "
            "power cap lowers decode throughput.",
            *ev,
        )
    return ok("gpu.clocks", s, "no throttling reason active", *ev)


def check_thermal_power(g: GpuState) -> Check:
    s = _subject(g)
    ev = [f"gpu_temp: {g.temp_c} C"]
    status = "ok"
    msg: list[str] = []
    fixes: list[str] = []
    if g.tlimit_margin_c is not None:
        slow = g.tlimit_slowdown_c if g.tlimit_slowdown_c is not None else 0.0
        ev.append(f"T.Limit margin: {g.tlimit_margin_c} C (slowdown at {slow} C)")
        if g.tlimit_margin_c <= slow:
            status, msg = (
                "fail",
                [f"at the slowdown temperature (margin {g.tlimit_margin_c:.0f} C)"],
            )
        elif g.tlimit_margin_c <= TEMP_HEADROOM_WARN_C:
            status, msg = (
                "warn",
                [f"{g.tlimit_margin_c:.0f} C from the maximum operating temperature"],
            )
    elif g.temp_c is not None and g.temp_slowdown_c is not None:
        ev.append(f"slowdown threshold: {g.temp_slowdown_c} C")
        if g.temp_c >= g.temp_slowdown_c:
            status, msg = "fail", [f"{g.temp_c:.0f} C >= slowdown {g.temp_slowdown_c:.0f} C"]
        elif g.temp_c >= g.temp_slowdown_c - TEMP_HEADROOM_WARN_C:
            status, msg = (
                "warn",
                [f"{g.temp_c:.0f} C, within {TEMP_HEADROOM_WARN_C:.0f} C of slowdown"],
            )
    if g.power_limit_w is not None:
        ev.append(
            f"power: {g.power_draw_w} W of limit {g.power_limit_w} W "
            f"(default {g.power_default_limit_w} W)"
        )
        if g.power_default_limit_w and g.power_limit_w < g.power_default_limit_w - 0.5:
            msg.append(
                f"power limit lowered to {g.power_limit_w:.0f} W of {g.power_default_limit_w:.0f} W"
            )
            status = "fail" if status == "fail" else "warn"
            fixes.append(f"restore the {g.power_default_limit_w:.0f} W limit (nvidia-smi -pl)")
    if g.temp_c is None and g.power_limit_w is None:
        return skipped("gpu.thermal_power", s, "temperature and power not reported")
    if len(msg) > len(fixes):  # a temperature finding comes first in msg
        fixes.insert(0, "check airflow, inlet temperature and fans")
    joined = "; ".join(fixes)
    fix = joined[:1].upper() + joined[1:] + "."
    if status == "fail":
        return fail("gpu.thermal_power", s, "; ".join(msg), fix, *ev)
    if status == "warn":
        return warn("gpu.thermal_power", s, "; ".join(msg), fix, *ev)
    summary = f"{g.temp_c:.0f} C" if g.temp_c is not None else "temperature N/A"
    if g.power_draw_w is not None and g.power_limit_w:
        summary += f", {g.power_draw_w:.0f} W of {g.power_limit_w:.0f} W"
    return ok("gpu.thermal_power", s, summary, *ev)


def check_ecc(g: GpuState) -> Check:
    s = _subject(g)
    if g.ecc_current is None:
        return skipped("gpu.ecc", s, "ECC not supported on this GPU (N/A)")
    ev = [f"ecc_mode current/pending: {g.ecc_current}/{g.ecc_pending}"]
    for label, c in (("volatile", g.ecc_volatile), ("aggregate", g.ecc_aggregate)):
        if c is not None:
            ev.append(f"{label}: correctable {c.correctable}, uncorrectable {c.uncorrectable}")
    unc = max((c.uncorrectable for c in (g.ecc_volatile, g.ecc_aggregate) if c), default=0)
    vol_corr = g.ecc_volatile.correctable if g.ecc_volatile else 0
    if unc > 0:
        return fail(
            "gpu.ecc",
            s,
            f"{unc} uncorrectable ECC error(s)",
            "Drain the GPU, check remapped rows and XIDs (dmesg), reset it; RMA if they recur.",
            *ev,
        )
    if g.ecc_current == "Disabled":
        return warn(
            "gpu.ecc",
            s,
            "ECC is disabled: memory errors go undetected",
            "nvidia-smi -e 1, then reset the GPU.",
            *ev,
        )
    if g.ecc_pending and g.ecc_pending != g.ecc_current:
        return warn(
            "gpu.ecc",
            s,
            f"ECC change to {g.ecc_pending} pending until GPU reset",
            "Reset the GPU (nvidia-smi -r) or reboot.",
            *ev,
        )
    if vol_corr > 0:
        return warn(
            "gpu.ecc",
            s,
            f"{vol_corr} corrected ECC error(s) since the last reset",
            "Watch the count; rising counts precede row remapping.",
            *ev,
        )
    return ok("gpu.ecc", s, "ECC on, no uncorrectable errors", *ev)


def check_memory_health(g: GpuState) -> Check:
    s = _subject(g)
    ev = [
        f"remapped_rows corr/unc: {g.remapped_corr}/{g.remapped_unc}, pending: "
        f"{g.remapped_pending}, failure: {g.remapped_failure}",
        f"retired pages sbe/dbe: {g.retired_sbe}/{g.retired_dbe}, pending: {g.retirement_pending}",
        f"reset_required: {g.reset_required}",
    ]
    if all(
        x is None
        for x in (
            g.remapped_pending,
            g.retirement_pending,
            g.reset_required,
            g.remapped_unc,
            g.retired_dbe,
        )
    ):
        return skipped("gpu.memory_health", s, "row remapping / page retirement not reported")
    if g.remapped_failure == "Yes":
        return fail(
            "gpu.memory_health",
            s,
            "row remapping failed: no spare rows left",
            "Take the GPU out of service and RMA it.",
            *ev,
        )
    for flag, what in (
        (g.remapped_pending, "row remapping"),
        (g.retirement_pending, "page retirement"),
        (g.reset_required, "GPU reset"),
    ):
        if flag == "Yes":
            return fail(
                "gpu.memory_health",
                s,
                f"{what} pending: takes effect after a GPU reset",
                "Drain the GPU and reset it (nvidia-smi -r -i N) or reboot.",
                *ev,
            )
    if (g.remapped_unc or 0) > 0 or (g.retired_dbe or 0) > 0:
        return warn(
            "gpu.memory_health",
            s,
            "rows remapped / pages retired after uncorrectable errors",
            "Healthy after reset; track the count, RMA if it keeps growing.",
            *ev,
        )
    return ok("gpu.memory_health", s, "no pending remaps or retirements", *ev)


def check_persistence(g: GpuState) -> Check:
    s = _subject(g)
    if g.persistence_mode is None:
        return skipped("gpu.persistence", s, "persistence mode not reported")
    ev = (f"persistence_mode: {g.persistence_mode}",)
    if g.persistence_mode == "Disabled":
        return warn(
            "gpu.persistence",
            s,
            "persistence mode off: the driver re-initialises the GPU whenever no process holds it",
            "Run nvidia-persistenced (or nvidia-smi -pm 1).",
            *ev,
        )
    return ok("gpu.persistence", s, "persistence mode on", *ev)


def check_mig(g: GpuState) -> Check:
    s = _subject(g)
    if g.mig_current is None:
        return ok("gpu.mig", s, "MIG not supported (N/A)", "mig_mode: N/A")
    ev = (f"mig_mode current/pending: {g.mig_current}/{g.mig_pending}",)
    if g.mig_current == "Enabled":
        return warn(
            "gpu.mig",
            s,
            "MIG is on: engines see GPU instances with a fraction of the "
            "memory and SMs, and NVLink P2P between instances is unavailable",
            "nvidia-smi -i N -mig 0 (then reset) unless the slices are intended.",
            *ev,
        )
    if g.mig_pending and g.mig_pending != g.mig_current:
        return warn(
            "gpu.mig",
            s,
            f"MIG change to {g.mig_pending} pending until reset",
            "Reset the GPU to apply or revert the pending MIG mode.",
            *ev,
        )
    return ok("gpu.mig", s, "MIG off", *ev)


def check_compute_mode(g: GpuState) -> Check:
    s = _subject(g)
    mode = g.compute_mode
    if mode is None:
        return skipped("gpu.compute_mode", s, "compute mode not reported")
    ev = (f"compute_mode: {mode}",)
    if mode == "Prohibited":
        return fail(
            "gpu.compute_mode",
            s,
            "compute mode Prohibited: no process may use the GPU",
            "nvidia-smi -i N -c DEFAULT",
            *ev,
        )
    if mode.startswith("Exclusive"):
        return warn(
            "gpu.compute_mode",
            s,
            f"compute mode {mode}: a second process (another "
            "engine rank, a profiler) cannot open the GPU",
            "nvidia-smi -i N -c DEFAULT",
            *ev,
        )
    return ok("gpu.compute_mode", s, f"compute mode {mode}", *ev)


def check_processes(g: GpuState) -> Check:
    s = _subject(g)
    procs = [p for p in g.processes if (p.used_mib or 0) > 0]
    if not procs:
        used = f"{g.fb_used_mib:.0f} MiB used" if g.fb_used_mib is not None else ""
        return ok("gpu.processes", s, "no process holds GPU memory", f"fb used: {used}")
    total = sum(p.used_mib or 0 for p in procs)
    ev = [f"pid {p.pid} {p.name}: {p.used_mib:.0f} MiB" for p in procs]
    return warn(
        "gpu.processes",
        s,
        f"{len(procs)} process(es) hold {total / 1024:.1f} GiB",
        "Stop them before starting an engine, or lower --gpu-memory-utilization "
        "(expected if the engine itself is already running).",
        *ev,
    )


def gpu_checks(v: View) -> list[Check]:
    if v.smi is None or not v.smi.gpus:
        why = v.smi_problem() if v.smi is None else "nvidia-smi lists no GPUs"
        return [skipped(cid, "GPU", "no GPU state captured", why) for cid in GPU_CHECK_IDS]
    out: list[Check] = []
    for g in v.smi.gpus:
        out += [
            check_pcie(g),
            check_clocks(g),
            check_thermal_power(g),
            check_ecc(g),
            check_memory_health(g),
            check_persistence(g),
            check_mig(g),
            check_compute_mode(g),
            check_processes(g),
        ]
    return out
