"""Parsers for ``nvidia-smi`` logs: ``dmon`` tables and ``--query-gpu --format=csv`` files.

``nvidia-smi dmon`` prints fixed-width columns under two ``#`` header lines (names, then
units), repeats them every screenful, may prefix ``#Date``/``Time`` columns (``-o DT``) and
prints ``-`` for a value the GPU does not report. The column set depends on ``-s``
(``p`` power/temperature, ``u`` utilisation, ``c`` clocks, ``v`` violations, ``m`` memory,
``e`` ECC/PCIe errors, ``t`` PCIe throughput) and on the driver (``jpg``/``ofa``, ``ccpm``,
GPM metrics). Rather than hard-coding layouts, the parser reads each header and maps known
column names and units to kvscope metrics in base units; an unknown column is kept under
``dmon_<name>`` so nothing is dropped.

``--query-gpu`` CSV has a header like ``timestamp, index, memory.used [MiB]`` and values like
``2024/05/01 10:00:00.123, 0, 1234 MiB`` (or bare numbers with ``nounits``); ``[N/A]`` and
``[Not Supported]`` are missing values.

Column meanings: nvidia-smi(1) manual, section "DEVICE MONITORING" and "--query-gpu" help.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample
from kvscope.validate import read_text

#: dmon column -> (kvscope metric, scale to base units). Units are checked from the header.
_DMON_COLUMNS: dict[str, tuple[str, float]] = {
    "pwr": ("gpu_power_watts", 1.0),
    "gtemp": ("gpu_temperature_celsius", 1.0),
    "temp": ("gpu_temperature_celsius", 1.0),
    "mtemp": ("gpu_memory_temperature_celsius", 1.0),
    "sm": ("gpu_utilization_ratio", 0.01),
    "mem": ("gpu_memory_busy_ratio", 0.01),
    "enc": ("gpu_encoder_utilization_ratio", 0.01),
    "dec": ("gpu_decoder_utilization_ratio", 0.01),
    "jpg": ("gpu_jpeg_utilization_ratio", 0.01),
    "ofa": ("gpu_ofa_utilization_ratio", 0.01),
    "mclk": ("gpu_memory_clock_hertz", 1e6),
    "pclk": ("gpu_sm_clock_hertz", 1e6),
    "pviol": ("gpu_power_violation_ratio", 0.01),
    "tviol": ("gpu_thermal_violation", 1.0),
    "fb": ("gpu_memory_used_bytes", 1024.0 * 1024.0),
    "bar1": ("gpu_bar1_used_bytes", 1024.0 * 1024.0),
    "ccpm": ("gpu_ccpm_used_bytes", 1024.0 * 1024.0),
    "sbecc": ("gpu_ecc_single_bit_errors", 1.0),
    "dbecc": ("gpu_ecc_double_bit_errors", 1.0),
    "pci": ("gpu_pcie_replay_errors", 1.0),
    "rxpci": ("gpu_pcie_rx_bytes_per_second", 1024.0 * 1024.0),
    "txpci": ("gpu_pcie_tx_bytes_per_second", 1024.0 * 1024.0),
}
#: Units nvidia-smi prints under the columns above (MB in dmon means MiB).
_UNIT_SCALE = {"MB": 1024.0 * 1024.0, "MB/s": 1024.0 * 1024.0, "MHz": 1e6, "%": 0.01}

#: --query-gpu field -> (metric, scale of the unit in brackets).
_QUERY_FIELDS: dict[str, str] = {
    "memory.used": "gpu_memory_used_bytes",
    "memory.total": "gpu_memory_total_bytes",
    "memory.free": "gpu_memory_free_bytes",
    "memory.reserved": "gpu_memory_reserved_bytes",
    "utilization.gpu": "gpu_utilization_ratio",
    "utilization.memory": "gpu_memory_busy_ratio",
    "power.draw": "gpu_power_watts",
    "power.limit": "gpu_power_limit_watts",
    "temperature.gpu": "gpu_temperature_celsius",
    "temperature.memory": "gpu_memory_temperature_celsius",
    "clocks.sm": "gpu_sm_clock_hertz",
    "clocks.current.sm": "gpu_sm_clock_hertz",
    "clocks.mem": "gpu_memory_clock_hertz",
    "clocks.current.memory": "gpu_memory_clock_hertz",
    "pcie.link.gen.current": "gpu_pcie_link_gen",
}
_QUERY_UNITS = {"MiB": 1024.0 * 1024.0, "%": 0.01, "W": 1.0, "MHz": 1e6}
_MISSING = {"-", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}


@dataclass(frozen=True, slots=True)
class DmonLog:
    """Samples parsed from a log and the layout facts found on the way."""

    format: str
    samples: tuple[Sample, ...]
    columns: tuple[str, ...]
    rows: int
    missing_values: int


def _scaled(v: float, scale: float) -> float:
    # Percent by division keeps 95 % == 0.95 exactly (95 * 0.01 is 0.9500000000000001).
    return v / 100.0 if scale == 0.01 else v * scale


def _value(text: str) -> float | None:
    text = text.strip()
    if text in _MISSING:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    # nvidia-smi prints no NaN or infinity: such a cell is damage, counted as missing.
    return v if math.isfinite(v) else None


def parse_dmon(text: str, source_name: str = "dmon") -> DmonLog:
    """Parse ``nvidia-smi dmon`` output. Rows without a date get ``t_s`` = row number."""
    names: list[str] | None = None
    units: list[str] = []
    samples: list[Sample] = []
    rows = missing = 0
    seen_cols: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if any(t.lower() == "gpu" for t in tokens):
                names = [t.lower() for t in tokens]  # the names line (repeated every screenful)
                units = []
                seen_cols.extend(n for n in names if n not in seen_cols)
            elif names is not None and len(tokens) == len(names):
                units = tokens  # the units line under it
            continue
        if names is None:
            raise KvscopeError(f"{source_name}:{lineno}: data before any '# gpu ...' header line.")
        fields = line.split()
        if len(fields) != len(names):
            raise KvscopeError(
                f"{source_name}:{lineno}: {len(fields)} values under a {len(names)}-column header."
            )
        rec = dict(zip(names, fields, strict=True))
        t_s = float(rows)
        if "date" in rec and "time" in rec:
            t_s = _dmon_time(rec["date"], rec["time"], source_name, lineno)
        gpu = rec.get("gpu", "0")
        rows += 1
        for i, col in enumerate(names):
            if col in ("gpu", "date", "time"):
                continue
            v = _value(rec[col])
            if v is None:
                missing += 1
                continue
            unit = units[i] if i < len(units) else ""
            metric, scale = _DMON_COLUMNS.get(col, (f"dmon_{col}", 1.0))
            if col in _DMON_COLUMNS and unit in _UNIT_SCALE:
                scale = _UNIT_SCALE[unit] if not metric.startswith("gpu_ecc") else 1.0
            samples.append(Sample(t_s, f"gpu:{gpu}", metric, _scaled(v, scale)))
    if names is None:
        raise KvscopeError(f"{source_name}: no 'nvidia-smi dmon' header found.")
    return DmonLog("dmon", tuple(samples), tuple(seen_cols), rows, missing)


def _dmon_time(date: str, clock: str, source: str, lineno: int) -> float:
    try:
        dt = datetime.strptime(f"{date} {clock}", "%Y%m%d %H:%M:%S")
    except ValueError as err:
        raise KvscopeError(f"{source}:{lineno}: bad date/time '{date} {clock}'.") from err
    return dt.replace(tzinfo=UTC).timestamp()


_HEAD_RE = re.compile(r"^\s*([^\[]+?)\s*(?:\[(.+)\])?\s*$")


def parse_query_csv(text: str, source_name: str = "query") -> DmonLog:
    """Parse an ``nvidia-smi --query-gpu=... --format=csv[,nounits]`` log."""
    try:
        return _parse_query_csv(text, source_name)
    except csv.Error as err:  # a NUL byte, a field over the csv module's limit
        raise KvscopeError(f"{source_name}: not a readable CSV log ({err}).") from None


def _parse_query_csv(text: str, source_name: str) -> DmonLog:
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header = next(reader)
    except StopIteration as err:
        raise KvscopeError(f"{source_name}: empty file.") from err
    fields: list[tuple[str, str]] = []
    for h in header:
        m = _HEAD_RE.match(h)
        if m is None:
            raise KvscopeError(f"{source_name}: bad header field '{h}'.")
        fields.append((m.group(1).strip(), (m.group(2) or "").strip()))
    names = [f for f, _ in fields]
    samples: list[Sample] = []
    rows = missing = 0
    for lineno, row in enumerate(reader, 2):
        if not row or row == header:
            continue
        if row[0].startswith("timestamp"):
            continue  # a repeated header from a restarted logger
        if len(row) != len(fields):
            raise KvscopeError(
                f"{source_name}:{lineno}: {len(row)} values, header has {len(fields)}."
            )
        rec = dict(zip(names, row, strict=True))
        t_s = float(rows)
        if "timestamp" in rec:
            try:
                t_s = (
                    datetime.strptime(rec["timestamp"].strip(), "%Y/%m/%d %H:%M:%S.%f")
                    .replace(tzinfo=UTC)
                    .timestamp()
                )
            except ValueError as err:
                raise KvscopeError(f"{source_name}:{lineno}: bad timestamp.") from err
        gpu = rec.get("index", "0").strip()
        rows += 1
        for (name, unit), raw in zip(fields, row, strict=True):
            if name in ("timestamp", "index", "name", "uuid", "pci.bus_id"):
                continue
            text_v = raw.strip()
            if unit and text_v.endswith(unit):
                text_v = text_v[: -len(unit)].strip()
            v = _value(text_v)
            if v is None:
                missing += 1
                continue
            metric = _QUERY_FIELDS.get(name, "smi_" + name.replace(".", "_"))
            samples.append(
                Sample(t_s, f"gpu:{gpu}", metric, _scaled(v, _QUERY_UNITS.get(unit, 1.0)))
            )
    return DmonLog("query-csv", tuple(samples), tuple(names), rows, missing)


def parse_smi_log(path: str | Path) -> DmonLog:
    """Parse a dmon or --query-gpu CSV log, telling them apart by their first line."""
    p = Path(path)
    text = read_text(p, "nvidia-smi log")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("#"):
        return parse_dmon(text, p.name)
    if "," in first:
        return parse_query_csv(text, p.name)
    raise KvscopeError(f"{p.name}: neither 'nvidia-smi dmon' output nor a --query-gpu CSV log.")
