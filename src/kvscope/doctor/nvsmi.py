"""Parsers for ``nvidia-smi`` outputs: ``-q -x`` (XML), ``topo -m`` and ``nvlink -s``.

The XML follows NVIDIA's ``nvsmi_device_v*.dtd`` (the DOCTYPE names the version). Element
names changed across drivers; both spellings are read:

* R535 and older: ``clocks_throttle_reasons`` / ``clocks_throttle_reason_*``; R550+ renamed
  them ``clocks_event_reasons`` / ``clocks_event_reason_*`` (same bits as NVML's
  ``nvmlDeviceGetCurrentClocksEventReasons``).
* Power: ``power_readings`` (older) vs ``gpu_power_readings`` with ``current_power_limit``.
* ECC counts: Ampere/Hopper-era ``sram_*`` / ``dram_*`` leaves vs older nested
  ``single_bit`` / ``double_bit`` blocks with a ``total`` leaf.
* Temperature: ``gpu_temp_slow_threshold`` (absolute °C) vs the newer T.Limit fields
  (``gpu_temp_tlimit`` = margin in °C to the maximum operating temperature, and
  ``gpu_temp_slow_tlimit_threshold`` = the margin at which slowdown starts, negative).

Values like ``"45 C"``, ``"16x"``, ``"700.00 W"`` become numbers; ``N/A`` becomes None.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from kvscope.errors import KvscopeError

_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def num(text: str | None) -> float | None:
    """Leading number of an nvidia-smi value (``"45 C"`` → 45.0); None for N/A and the like."""
    if text is None:
        return None
    m = _NUM.match(text)
    return float(m.group(1)) if m else None


def _t(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    s = found.text.strip()
    return None if s in ("", "N/A", "[N/A]", "Unknown Error", "[Not Supported]") else s


def _n(el: ET.Element | None, path: str) -> float | None:
    return num(_t(el, path))


@dataclass(frozen=True)
class Process:
    pid: int
    name: str
    used_mib: float | None


@dataclass(frozen=True)
class EccCounts:
    correctable: int = 0
    uncorrectable: int = 0


@dataclass(frozen=True)
class GpuState:
    """The fields of one ``<gpu>`` element the doctor judges."""

    index: int
    bus_id: str
    name: str
    uuid: str | None
    persistence_mode: str | None
    mig_current: str | None
    mig_pending: str | None
    compute_mode: str | None
    pcie_gen_max: int | None
    pcie_gen_current: int | None
    pcie_width_max: int | None
    pcie_width_current: int | None
    utilization_pct: float | None
    clock_events: dict[str, bool]
    sm_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    mem_clock_mhz: float | None
    mem_clock_max_mhz: float | None
    temp_c: float | None
    temp_slowdown_c: float | None
    tlimit_margin_c: float | None
    tlimit_slowdown_c: float | None
    power_draw_w: float | None
    power_limit_w: float | None
    power_default_limit_w: float | None
    ecc_current: str | None
    ecc_pending: str | None
    ecc_volatile: EccCounts | None
    ecc_aggregate: EccCounts | None
    retired_sbe: int | None
    retired_dbe: int | None
    retirement_pending: str | None
    remapped_corr: int | None
    remapped_unc: int | None
    remapped_pending: str | None
    remapped_failure: str | None
    reset_required: str | None
    fb_total_mib: float | None
    fb_used_mib: float | None
    processes: tuple[Process, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class SmiLog:
    """The whole ``nvidia_smi_log``."""

    driver_version: str | None
    cuda_version: str | None
    dtd: str | None
    gpus: tuple[GpuState, ...]


def _ecc(block: ET.Element | None) -> EccCounts | None:
    if block is None or len(block) == 0:
        return None
    corr = unc = 0
    seen = False
    for child in block:
        tag = child.tag
        if len(child):  # older nested layout: single_bit/double_bit with a total leaf
            total = _n(child, "total")
            if total is None:
                continue
            seen = True
            if tag == "double_bit":
                unc += int(total)
            elif tag == "single_bit":
                corr += int(total)
            continue
        v = num(child.text)
        if v is None:
            continue
        seen = True
        if "uncorrectable" in tag:
            unc += int(v)
        elif "correctable" in tag:
            corr += int(v)
    return EccCounts(corr, unc) if seen else None


def _clock_events(gpu: ET.Element) -> dict[str, bool]:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    out: dict[str, bool] = {}
    if block is None:
        return out
    for child in block:
        if child.tag.startswith(prefix) and child.text:
            out[child.tag[len(prefix) :]] = child.text.strip() == "Active"
    return out


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _gpu(i: int, g: ET.Element) -> GpuState:
    link = g.find("pci/pci_gpu_link_info")
    power = g.find("gpu_power_readings")
    if power is None:
        power = g.find("power_readings")
    limit = _n(power, "current_power_limit")
    if limit is None:
        limit = _n(power, "power_limit")
    procs = []
    for p in g.findall("processes/process_info"):
        pid = _n(p, "pid")
        if pid is not None:
            procs.append(Process(int(pid), _t(p, "process_name") or "?", _n(p, "used_memory")))
    return GpuState(
        index=i,
        bus_id=g.get("id") or _t(g, "pci/pci_bus_id") or f"gpu{i}",
        name=_t(g, "product_name") or "unknown GPU",
        uuid=_t(g, "uuid"),
        persistence_mode=_t(g, "persistence_mode"),
        mig_current=_t(g, "mig_mode/current_mig"),
        mig_pending=_t(g, "mig_mode/pending_mig"),
        compute_mode=_t(g, "compute_mode"),
        pcie_gen_max=_int(_n(link, "pcie_gen/max_link_gen")),
        pcie_gen_current=_int(_n(link, "pcie_gen/current_link_gen")),
        pcie_width_max=_int(_n(link, "link_widths/max_link_width")),
        pcie_width_current=_int(_n(link, "link_widths/current_link_width")),
        utilization_pct=_n(g, "utilization/gpu_util"),
        clock_events=_clock_events(g),
        sm_clock_mhz=_n(g, "clocks/sm_clock"),
        sm_clock_max_mhz=_n(g, "max_clocks/sm_clock"),
        mem_clock_mhz=_n(g, "clocks/mem_clock"),
        mem_clock_max_mhz=_n(g, "max_clocks/mem_clock"),
        temp_c=_n(g, "temperature/gpu_temp"),
        temp_slowdown_c=_n(g, "temperature/gpu_temp_slow_threshold"),
        tlimit_margin_c=_n(g, "temperature/gpu_temp_tlimit"),
        tlimit_slowdown_c=_n(g, "temperature/gpu_temp_slow_tlimit_threshold"),
        power_draw_w=_n(power, "power_draw"),
        power_limit_w=limit,
        power_default_limit_w=_n(power, "default_power_limit"),
        ecc_current=_t(g, "ecc_mode/current_ecc"),
        ecc_pending=_t(g, "ecc_mode/pending_ecc"),
        ecc_volatile=_ecc(g.find("ecc_errors/volatile")),
        ecc_aggregate=_ecc(g.find("ecc_errors/aggregate")),
        retired_sbe=_int(_n(g, "retired_pages/multiple_single_bit_retirement/retired_count")),
        retired_dbe=_int(_n(g, "retired_pages/double_bit_retirement/retired_count")),
        retirement_pending=_t(g, "retired_pages/pending_retirement"),
        remapped_corr=_int(_n(g, "remapped_rows/remapped_row_corr")),
        remapped_unc=_int(_n(g, "remapped_rows/remapped_row_unc")),
        remapped_pending=_t(g, "remapped_rows/remapped_row_pending"),
        remapped_failure=_t(g, "remapped_rows/remapped_row_failure"),
        reset_required=_t(g, "gpu_reset_status/reset_required"),
        fb_total_mib=_n(g, "fb_memory_usage/total"),
        fb_used_mib=_n(g, "fb_memory_usage/used"),
        processes=tuple(procs),
    )


def parse_smi_xml(text: str) -> SmiLog:
    """Parse ``nvidia-smi -q -x`` output. Raises :class:`KvscopeError` on malformed XML."""
    dtd = None
    m = re.search(r'<!DOCTYPE\s+nvidia_smi_log\s+SYSTEM\s+"([^"]+)"', text)
    if m:
        dtd = m.group(1)
    # The DOCTYPE names an external DTD; strip it so no parser ever tries to resolve it.
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(body)
    except ET.ParseError as err:
        raise KvscopeError(f"nvidia-smi -q -x output is not valid XML ({err}).") from err
    if root.tag != "nvidia_smi_log":
        raise KvscopeError(f"nvidia-smi -q -x output has root <{root.tag}>, not <nvidia_smi_log>.")
    gpus = tuple(_gpu(i, g) for i, g in enumerate(root.findall("gpu")))
    return SmiLog(_t(root, "driver_version"), _t(root, "cuda_version"), dtd, gpus)


@dataclass(frozen=True)
class NvLinkGpu:
    """``nvidia-smi nvlink -s`` for one GPU: per link, GB/s or None when inactive."""

    gpu: int
    name: str
    links: dict[int, float | None]


def parse_nvlink_status(text: str) -> list[NvLinkGpu]:
    """Parse ``nvidia-smi nvlink -s``: ``GPU n: NAME (UUID: ...)`` then ``Link i: 26.562 GB/s``
    or ``Link i: <inactive>`` lines."""
    out: list[NvLinkGpu] = []
    for line in text.splitlines():
        g = re.match(r"\s*GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$", line)
        if g:
            out.append(NvLinkGpu(int(g.group(1)), g.group(2), {}))
            continue
        lk = re.match(r"\s*Link (\d+): (.*)$", line)
        if lk and out:
            val = lk.group(2).strip()
            out[-1].links[int(lk.group(1))] = None if "inactive" in val else num(val)
    return out


@dataclass(frozen=True)
class TopoMatrix:
    """GPU-to-GPU cells of ``nvidia-smi topo -m`` (``NV18``, ``PIX``, ``SYS`` ...)."""

    gpus: tuple[str, ...]
    cells: dict[tuple[str, str], str]
    numa_affinity: dict[str, str]


def parse_topo(text: str) -> TopoMatrix:
    """Parse the matrix part of ``nvidia-smi topo -m`` (the legend is ignored)."""
    # Strip the terminal underline escapes newer drivers print around the header.
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln for ln in clean.splitlines() if ln.strip()]
    header_idx = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln)), None)
    if header_idx is None:
        return TopoMatrix((), {}, {})
    tabbed = "\t" in lines[header_idx]
    if tabbed:  # real output: tab-separated, first header cell empty, row label first
        cols = [h.strip() for h in lines[header_idx].split("\t")]
    else:  # hand-typed copies: whitespace, no empty first cell
        cols = ["", *lines[header_idx].split()]
    gpu_pos = {c: k for k, c in enumerate(cols) if re.fullmatch(r"GPU\d+", c)}
    numa_pos = cols.index("NUMA Affinity") if "NUMA Affinity" in cols else None
    cells: dict[tuple[str, str], str] = {}
    numa: dict[str, str] = {}
    for ln in lines[header_idx + 1 :]:
        parts = [p.strip() for p in (ln.split("\t") if tabbed else ln.split())]
        if not parts or parts[0] == "Legend:":
            break
        if not re.fullmatch(r"GPU\d+", parts[0]):
            continue
        for col, k in gpu_pos.items():
            if k < len(parts):
                cells[(parts[0], col)] = parts[k]
        if numa_pos is not None and numa_pos < len(parts):
            numa[parts[0]] = parts[numa_pos]
    gpu_cols = list(gpu_pos)
    return TopoMatrix(tuple(gpu_cols), cells, numa)
