"""Run inside a separate Python process to see what a serving process really loads.

This file is executed by path (``python child.py``) with the interpreter under test, which
may be an engine's own virtualenv without kvscope, so it uses the standard library only. It
imports torch when installed, initialises CUDA when a GPU is visible, asks the CUDA driver
API for its version through ``ctypes`` (``cuDriverGetVersion``, which reports the version
the *loaded* ``libcuda`` implements), and finally prints one JSON object whose ``maps`` field
is the text of ``/proc/self/maps``: the dynamic loader's final word on which ``libcuda``,
``libcudart``, ``libnccl`` and ``libnvidia-ml`` files are mapped into the process.

On a host without an NVIDIA driver (no loadable ``libcuda.so.1`` and no
``/proc/driver/nvidia``) torch is not imported; its version and CUDA build are read from
``torch/version.py`` instead, which saves seconds and loses nothing CUDA could use.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import importlib.util
import json
import os
import sys
from typing import Any


def _torch_static(spec_origin: str) -> dict[str, Any]:
    """torch's version and CUDA from ``torch/version.py`` without importing torch."""
    info: dict[str, Any] = {"installed": True, "imported": False}
    path = os.path.join(os.path.dirname(spec_origin), "version.py")
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError) as err:
        info["error"] = f"cannot read {path}: {err}"
        return info
    names = {"__version__": "version", "cuda": "cuda"}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in names and value is not None:
            with contextlib.suppress(ValueError):
                info[names[target.id]] = ast.literal_eval(value)
    info["cuda_available"] = False
    return info


def _torch_info(driver_present: bool) -> dict[str, Any]:
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"installed": False}
    if not driver_present and spec.origin:
        # No NVIDIA driver: importing torch (seconds) would map nothing CUDA can use, so
        # read its version file instead and keep a GPU-less host's run fast.
        return _torch_static(spec.origin)
    info: dict[str, Any] = {"installed": True, "imported": True}
    try:
        import torch

        info["version"] = str(torch.__version__)
        info["cuda"] = torch.version.cuda
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            torch.cuda.init()  # type: ignore[no-untyped-call]
            info["device_count"] = torch.cuda.device_count()
            info["devices"] = [torch.cuda.get_device_name(i) for i in range(info["device_count"])]
        if torch.version.cuda is not None:
            try:
                nccl = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
                info["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else nccl
            except Exception as err:  # an absent NCCL is a finding, not a crash
                info["nccl_error"] = f"{type(err).__name__}: {err}"
    except Exception as err:
        info["error"] = f"{type(err).__name__}: {err}"
    return info


def _cuda_driver_info() -> dict[str, Any]:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        return {"loaded": False, "error": str(err)}
    out: dict[str, Any] = {"loaded": True}
    version = ctypes.c_int(0)
    out["cuInit"] = int(lib.cuInit(0))
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver_api_version"] = version.value  # e.g. 12040 means CUDA 12.4
    return out


def main() -> None:
    cuda_driver = _cuda_driver_info()
    driver_present = bool(cuda_driver.get("loaded")) or os.path.exists(
        "/proc/driver/nvidia/version"
    )
    result: dict[str, Any] = {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "torch": _torch_info(driver_present),
        "cuda_driver": cuda_driver,
    }
    try:
        with open(f"/proc/{os.getpid()}/maps") as f:
            result["maps"] = f.read()
    except OSError as err:
        result["maps_error"] = str(err)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
