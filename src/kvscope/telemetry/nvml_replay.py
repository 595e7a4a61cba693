"""Replay of recorded NVML answers: a raw call for :class:`kvscope.telemetry.nvml.Nvml`.

A recording is JSON: ``{"devices": [{"<nvml function>": <answer>, ...}, ...], "errors": ...}``.
An answer is a number, a string, an object (returned with attribute access, the way pynvml
returns ctypes structs: ``mem.total``), a list of such objects, or ``{"error": "GpuIsLost"}``
which raises an exception class named like pynvml's (``NVMLError_GpuIsLost``). Keys may carry
the first positional argument after the handle (``nvmlDeviceGetClockInfo/1`` for the SM clock)
or ``/v2`` for the ``version=`` keyword of ``nvmlDeviceGetMemoryInfo``.

It is the "fixture backend" of tests and benchmarks; shapes follow nvidia-ml-py 13.615.71.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.telemetry.nvml import Nvml, RawCall
from kvscope.validate import load_json

_ERROR_CLASSES: dict[str, type[Exception]] = {}


def nvml_error(short: str) -> Exception:
    """An exception whose class is named ``NVMLError_<short>`` (as pynvml names them)."""
    cls = _ERROR_CLASSES.get(short)
    if cls is None:
        cls = type(f"NVMLError_{short}", (Exception,), {})
        _ERROR_CLASSES[short] = cls
    return cls(short)


def _obj(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _obj(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_obj(v) for v in value]
    return value


def replay_call(recording: dict[str, Any]) -> RawCall:
    """A raw call answering from ``recording``; unknown functions raise NotSupported."""
    devices: list[dict[str, Any]] = recording.get("devices", [])
    handles = [SimpleNamespace(index=i) for i in range(len(devices))]
    cache: dict[tuple[int, str], Any] = {}
    init_error = recording.get("init_error")

    def answer(dev: int, key: str) -> Any:
        hit = cache.get((dev, key))
        if hit is None:
            table = devices[dev]
            if key not in table:
                raise nvml_error("NotSupported")
            hit = table[key]
            if isinstance(hit, dict) and set(hit) == {"error"}:
                raise nvml_error(str(hit["error"]))
            hit = _obj(hit)
            cache[(dev, key)] = hit
        return hit

    def raw(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "nvmlInit":
            if init_error:
                raise nvml_error(str(init_error))
            return None
        if name in ("nvmlShutdown", "nvmlEventSetFree", "nvmlDeviceRegisterEvents"):
            return None
        if name == "nvmlDeviceGetCount":
            return len(devices)
        if name == "nvmlDeviceGetHandleByIndex":
            return handles[int(args[0])]
        if name == "nvmlEventSetCreate":
            return SimpleNamespace(pending=list(recording.get("xid_events", [])))
        if name == "nvmlEventSetWait_v2":
            pending = args[0].pending
            if not pending:
                raise nvml_error("Timeout")
            dev, xid = pending.pop(0)
            return SimpleNamespace(device=handles[dev], eventData=xid)
        dev = getattr(args[0], "index", None) if args else None
        if dev is None:
            raise nvml_error("InvalidArgument")
        key = name
        if "version" in kwargs:
            key += "/v2"
        elif len(args) > 1 and isinstance(args[1], int):
            key += f"/{args[1]}"
        return answer(int(dev), key)

    return raw


def load_recording(path: str | Path) -> dict[str, Any]:
    """Read a recording file (KvscopeError, one line, when missing, not JSON or misshapen)."""
    data = load_json(path, "NVML recording")
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise KvscopeError(f"NVML recording {path} has no 'devices' list.")
    for i, dev in enumerate(data["devices"]):
        if not isinstance(dev, dict):
            raise KvscopeError(f"NVML recording {path}: devices[{i}] is not an object.")
    events = data.get("xid_events", [])
    if not isinstance(events, list) or not all(
        isinstance(e, list)
        and len(e) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in e)
        and 0 <= e[0] < len(data["devices"])
        for e in events
    ):
        raise KvscopeError(
            f"NVML recording {path}: 'xid_events' must be [device, xid] pairs of integers."
        )
    return data


def open_replay(path: str | Path) -> Nvml:
    """NVML answering from the recording at ``path``, checked by a first read of every GPU.

    A replay's answers never change (save XID events), so an answer of the wrong shape (a
    string where NVML returns a struct) fails in that read, in one line, rather than in the
    middle of a watch. The check reads through its own handle: the one returned has counted
    no faults and consumed no events.
    """
    from kvscope.telemetry.gpu import GpuSampler

    recording = load_recording(path)
    try:
        GpuSampler(Nvml.open(raw=replay_call(recording))).sample(0.0)
        return Nvml.open(raw=replay_call(recording))
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as err:
        raise KvscopeError(
            f"NVML recording {path}: an answer has the wrong shape ({err})."
        ) from None
