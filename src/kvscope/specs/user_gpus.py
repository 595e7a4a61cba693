"""User GPU files: GPUs a user adds to the catalogue, or figures of a shipped GPU they change.

Owns reading and checking a GPU file (``--gpu-spec FILE``, else the per-user file
``$XDG_CONFIG_HOME/kvscope/gpus.yaml``, ``~/.config/kvscope/gpus.yaml`` when XDG_CONFIG_HOME is
unset) and turning it into :class:`~kvscope.specs.hardware.GPUSpec` entries that
:func:`~kvscope.specs.hardware.user_gpus` lays over the shipped catalogue. The file is YAML (or
JSON when it ends in ``.json``) with the fields and units of ``specs/gpus.json``::

    gpus:
      - name: MY-ACCEL-64GB          # a new GPU: the fields of REQUIRED must be given
        memory_total_bytes: 68000000000   # what CUDA/HIP reports as total, bytes
        hbm_bandwidth_gbps: 2000          # GB/s (1e9 B/s)
        bf16_dense_tflops: 400            # dense, not 2:4 sparse
        pcie_gbps_per_direction: 64       # GB/s per direction (PCIe Gen5 x16)
        gpu_hour_usd: 1.2                 # optional: USD per GPU-hour
      - name: H100                   # a shipped GPU (any spelling): only the fields it changes
        memory_total_bytes: 84000000000

An entry naming a shipped GPU (by any spelling ``kvscope gpus`` accepts) overrides only the
fields it gives; its ``aliases`` are added to the shipped ones. Every number must be finite and
in range, an unknown field is refused naming the field and the file, and a new GPU's alias may
not name another GPU. ``gpu_hour_usd`` is the GPU's price when neither ``--gpu-hour-price`` nor
a prices file names it (:mod:`kvscope.plan.prices`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.specs.hardware import (
    GPUSpec,
    _from_entry,
    _norm,
    catalogue_entries,
    set_user_gpus,
    shipped_gpus,
)
from kvscope.userconfig import config_dir

#: Highest price taken (USD per GPU-hour); the same bound as ``kvscope.plan.prices``.
MAX_GPU_HOUR_USD = 1e6

#: Numeric fields: (low, high, low_open, integer, may be null).
_NUMBERS: dict[str, tuple[float, float, bool, bool, bool]] = {
    "memory_total_bytes": (2**20, 1e14, False, True, False),
    "memory_marketing_gb": (0, 1e5, True, False, False),
    "memory_smi_mib": (1, 1e8, False, True, True),
    "hbm_bandwidth_gbps": (0, 1e6, True, False, False),
    "bf16_dense_tflops": (0, 1e6, True, False, False),
    "fp8_dense_tflops": (0, 1e6, True, False, True),
    "fp4_dense_tflops": (0, 1e6, True, False, True),
    "int8_dense_tops": (0, 1e6, True, False, True),
    "nvlink_gbps_per_direction": (0, 1e5, False, False, True),
    "pcie_gbps_per_direction": (0, 1e5, True, False, False),
    "pcie_gen": (0, 10, False, True, True),
    "tdp_w": (0, 1e5, False, False, True),
    "gpu_hour_usd": (0, MAX_GPU_HOUR_USD, True, False, True),
    "gpus_per_node": (1, 1024, False, True, True),
    "sm_count": (1, 100_000, False, True, True),
}
_TEXTS = (
    "name",
    "vendor",
    "architecture",
    "compute_capability",
    "memory_type",
    "memory_total_source",
    "memory_smi_source",
    "confidence",
    "notes",
)
#: Yes/no fields.
_FLAGS = ("nvlink_bridge",)
FIELDS = (*_TEXTS, "aliases", "sources", *_FLAGS, *_NUMBERS)
#: What a new GPU (one that names no shipped GPU) must give.
REQUIRED = (
    "name",
    "memory_total_bytes",
    "hbm_bandwidth_gbps",
    "bf16_dense_tflops",
    "pcie_gbps_per_direction",
)


def default_gpu_file(env: Mapping[str, str] | None = None) -> Path:
    """The per-user GPU file: ``gpus.yaml`` in kvscope's config folder (it need not exist)."""
    return config_dir(env) / "gpus.yaml"


def _check_value(key: str, value: Any, where: str) -> Any:
    """One field's value checked at the boundary (numbers through :mod:`kvscope.validate`)."""
    from kvscope.validate import count, finite

    if key in _NUMBERS:
        low, high, low_open, integer, nullable = _NUMBERS[key]
        if value is None:
            if nullable:
                return None
            raise KvscopeError(f"{where}: {key} must be a number, not null.")
        if integer:
            x = finite(value, f"{where}: {key}", low=low, high=high)
            return count(x, f"{where}: {key}", low=int(low), high=int(high))
        return finite(value, f"{where}: {key}", low=low, high=high, low_open=low_open)
    if key == "aliases":
        if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
            raise KvscopeError(f"{where}: aliases must be a list of names.")
        return value
    if key in _FLAGS:
        if not isinstance(value, bool):
            raise KvscopeError(f"{where}: {key} must be true or false, not {value!r}.")
        return value
    if key == "sources":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise KvscopeError(f"{where}: sources must be a mapping of label to text.")
        return value
    if not isinstance(value, str) or (key == "name" and not value.strip()):
        raise KvscopeError(f"{where}: {key} must be text, not {value!r}.")
    return value


def _entry(raw: Any, where: str, label: str) -> dict[str, Any]:
    """A user entry merged over its shipped entry (if it names one), every field checked."""
    if not isinstance(raw, dict):
        raise KvscopeError(f"{where} must be a mapping of field to value.")
    unknown = [str(k) for k in raw if k not in FIELDS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], FIELDS, n=1)
        raise KvscopeError(
            f"{where}: unknown field '{unknown[0]}'.",
            f"Did you mean '{close[0]}'?" if close else f"Fields: {', '.join(FIELDS)}.",
        )
    if "name" not in raw:
        raise KvscopeError(f"{where}: every GPU entry needs a name.")
    fields = {k: _check_value(k, v, where) for k, v in raw.items()}
    shipped = _shipped_entry(fields["name"])
    if shipped is None:
        missing = [k for k in REQUIRED if k not in fields]
        if missing:
            raise KvscopeError(
                f"{where}: '{fields['name']}' is not a shipped GPU, so it needs {missing[0]}.",
                f"A new GPU needs {', '.join(REQUIRED)}; to change a shipped GPU, use its name.",
            )
        merged: dict[str, Any] = {"sources": {"datasheet": label}, "confidence": "user"}
        merged["memory_marketing_gb"] = fields["memory_total_bytes"] / 1e9
    else:
        merged = dict(shipped)
        fields["name"] = shipped["name"]
        fields["aliases"] = [*shipped.get("aliases", ()), *fields.get("aliases", ())]
    if "memory_total_bytes" in fields and "memory_total_source" not in fields:
        fields["memory_total_source"] = label
    merged.update(fields)
    return merged


def _shipped_entry(name: str) -> dict[str, Any] | None:
    key = _norm(name)
    for gpu, entry in zip(shipped_gpus(), catalogue_entries(), strict=True):
        if key == _norm(gpu.name) or key in gpu.aliases:
            return entry
    return None


def load_gpu_file(path: str | Path, label: str | None = None) -> tuple[GPUSpec, ...]:
    """The GPUs of a user GPU file, each marked with ``label`` (its ``origin``)."""
    from kvscope.validate import load_json, load_yaml

    p = Path(path)
    text = f"your GPU file {p}" if label is None else label
    doc = load_json(p, "GPU file") if p.suffix == ".json" else load_yaml(p, "GPU file")
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise KvscopeError(f"{p}: a GPU file is a mapping with a 'gpus' list of GPU entries.")
    unknown = sorted(str(k) for k in doc if k != "gpus")
    if unknown:
        raise KvscopeError(f"{p}: unknown key '{unknown[0]}' in the GPU file.", "Use 'gpus'.")
    out: dict[str, GPUSpec] = {}
    for i, raw in enumerate(doc["gpus"], 1):
        spec = _from_entry(_entry(raw, f"{p}: gpus[{i}]", text), origin=text)
        if spec.name in out:
            raise KvscopeError(f"{p}: gpus[{i}]: {spec.name} is given twice.")
        out[spec.name] = spec
    _check_aliases(tuple(out.values()), p)
    return tuple(out.values())


def _check_aliases(user: tuple[GPUSpec, ...], path: Path) -> None:
    """No spelling may name two GPUs once the user entries are laid over the shipped ones."""
    names = {g.name for g in user}
    everyone = [g for g in shipped_gpus() if g.name not in names] + list(user)
    seen: dict[str, str] = {}
    for g in everyone:
        for spelling in dict.fromkeys((_norm(g.name), *g.aliases)):
            other = seen.setdefault(spelling, g.name)
            if other != g.name:
                raise KvscopeError(
                    f"{path}: '{spelling}' would name both {other} and {g.name}.",
                    "Pick another name or alias for the new GPU.",
                )


def use_gpu_file(
    path: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[GPUSpec, ...]:
    """Lay a command's GPU file over the catalogue: ``--gpu-spec FILE``, else the per-user
    file when it exists, else none (which clears any earlier one). Returns its GPUs."""
    if path is not None:
        gpus = load_gpu_file(path, f"your --gpu-spec file {path}")
    else:
        user = default_gpu_file(env)
        gpus = load_gpu_file(user) if user.is_file() else ()
    set_user_gpus(gpus)
    return gpus
