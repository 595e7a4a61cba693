"""What every check module shares: the parsed view of a bundle and small constructors."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kvscope.doctor.bundle import Bundle
from kvscope.doctor.loader import LoadedLib, mapped_libraries
from kvscope.doctor.model import Check, Status
from kvscope.doctor.nvsmi import SmiLog, parse_smi_xml
from kvscope.errors import KvscopeError


def ok(id: str, subject: str, summary: str, *evidence: str) -> Check:
    return Check(id, subject, Status.OK, summary, tuple(evidence))


def warn(id: str, subject: str, summary: str, fix: str, *evidence: str) -> Check:
    return Check(id, subject, Status.WARN, summary, tuple(evidence), fix)


def fail(id: str, subject: str, summary: str, fix: str, *evidence: str) -> Check:
    return Check(id, subject, Status.FAIL, summary, tuple(evidence), fix)


def skipped(id: str, subject: str, summary: str, *evidence: str) -> Check:
    return Check(id, subject, Status.SKIPPED, summary, tuple(evidence))


@dataclass
class View:
    """Parsed, cached access to one bundle; checks ask it, never the live system."""

    bundle: Bundle

    @cached_property
    def smi(self) -> SmiLog | None:
        text = self.bundle.text("nvidia_smi_xml")
        if text is None:
            return None
        try:
            return parse_smi_xml(text)
        except KvscopeError:
            return None

    def smi_problem(self) -> str:
        """Why there is no usable nvidia-smi XML (evidence for skipped GPU checks)."""
        cap = self.bundle.get("nvidia_smi_xml")
        if cap.ok and self.smi is None:
            return "nvidia-smi -q -x output could not be parsed as XML"
        msg = cap.why_not()
        if cap.text and cap.text.strip():
            msg += f" | {cap.text.strip().splitlines()[0]}"
        return msg

    @cached_property
    def kernel_driver(self) -> str | None:
        """Driver version from ``/proc/driver/nvidia/version`` (the loaded kernel module)."""
        text = self.bundle.text("driver_version")
        if text is None:
            return None
        m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
        return m.group(1) if m else None

    @cached_property
    def python(self) -> dict[str, Any]:
        data = self.bundle.json("python_probe")
        return data if isinstance(data, dict) else {}

    @cached_property
    def torch(self) -> dict[str, Any]:
        t = self.python.get("torch")
        return t if isinstance(t, dict) else {}

    @cached_property
    def maps_source(self) -> str | None:
        """Which maps probe to trust: the engine process (``--pid``) over the probe child."""
        for name in ("engine_maps", "process_maps"):
            if self.bundle.text(name) is not None:
                return name
        return None

    @cached_property
    def mapped(self) -> dict[str, list[LoadedLib]] | None:
        if self.maps_source is None:
            return None
        text = self.bundle.text(self.maps_source)
        return mapped_libraries(text) if text is not None else None

    @cached_property
    def env(self) -> dict[str, str]:
        """Environment of the engine (``--pid``) when captured, else of the kvscope process."""
        for name in ("engine_env", "env"):
            data = self.bundle.json(name)
            if isinstance(data, dict):
                return {str(k): str(v) for k, v in data.items()}
        return {}

    @cached_property
    def env_source(self) -> str:
        return "engine_env" if isinstance(self.bundle.json("engine_env"), dict) else "env"

    def json_dict(self, name: str) -> dict[str, Any] | None:
        data = self.bundle.json(name)
        return data if isinstance(data, dict) else None

    def infiniband_devices(self) -> list[str]:
        """RDMA device names from the ``infiniband`` probe (a malformed list reads as none)."""
        devices = (self.json_dict("infiniband") or {}).get("devices")
        return [str(d) for d in devices] if isinstance(devices, list) else []


# A bundle comes from someone else: each field a check reads is taken only when it has the
# type the probe writes; anything else reads as absent (the check is then skipped).


def int_field(d: dict[str, Any], key: str) -> int | None:
    """``d[key]`` when it is an integer (not a bool), else None."""
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def limit_pair(d: dict[str, Any], key: str) -> tuple[int, int] | None:
    """A ``[soft, hard]`` resource limit (-1 = unlimited), else None."""
    v = d.get(key)
    if isinstance(v, list | tuple) and len(v) == 2:
        soft, hard = v
        if all(isinstance(x, int) and not isinstance(x, bool) for x in (soft, hard)):
            return soft, hard
    return None


def str_map(d: dict[str, Any], key: str) -> dict[str, str]:
    """``d[key]`` as a str-to-str map (non-string values shown as text); not a dict: empty."""
    v = d.get(key)
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}
