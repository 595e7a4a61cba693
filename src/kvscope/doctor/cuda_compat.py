"""Which CUDA a driver supports, and whether a CUDA runtime may run on it.

The table is NVIDIA's *CUDA Toolkit Release Notes*, Table 3 "CUDA Toolkit and Corresponding
Driver Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes), Linux x86_64 column, GA
release of each minor version. Minor-version compatibility minimums are Table 2 of the same
notes ("CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
Compatibility"): any 11.x runtime on driver >= 450.80.02, any 12.x runtime on >= 525.60.13.

The rule the doctor applies, from NVIDIA's *CUDA Compatibility* guide
(docs.nvidia.com/deploy/cuda-compatibility):

* runtime <= the CUDA version the driver reports: supported;
* same major, newer minor, driver >= the Table 2 minimum: runs under *minor version
  compatibility* (no PTX JIT of newer PTX, and APIs that need a newer driver fail);
* otherwise the runtime needs a newer driver, or the *forward compatibility* package
  (``cuda-compat-X-Y``, a newer ``libcuda`` on the library path; data-centre GPUs only).
"""

from __future__ import annotations

import re

from kvscope.doctor.model import Status

Version = tuple[int, ...]

#: (CUDA major, minor) -> minimum Linux x86_64 driver of that toolkit's GA release (Table 3).
TOOLKIT_MIN_DRIVER: dict[tuple[int, int], str] = {
    (11, 0): "450.51.05",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

#: CUDA major -> minimum driver for minor-version compatibility (Table 2).
MINOR_COMPAT_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13"}


def parse_version(text: str | None) -> Version | None:
    """``"550.54.15"`` → (550, 54, 15); ``"12.4"`` → (12, 4); None when no digits."""
    if not text:
        return None
    m = re.search(r"\d+(?:\.\d+)*", text)
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


def _v(text: str) -> Version:
    v = parse_version(text)
    assert v is not None
    return v


def fmt(v: Version) -> str:
    return ".".join(str(x) for x in v)


def cuda_supported_by_driver(driver: Version) -> tuple[int, int] | None:
    """Newest CUDA (major, minor) whose Table 3 minimum this driver meets."""
    ok = [cuda for cuda, need in TOOLKIT_MIN_DRIVER.items() if driver >= _v(need)]
    return max(ok) if ok else None


def from_driver_api(value: int) -> tuple[int, int]:
    """``cuDriverGetVersion`` integer (e.g. 12040) → (12, 4)."""
    return value // 1000, (value % 1000) // 10


def runtime_verdict(
    driver: Version | None,
    driver_cuda: tuple[int, int],
    runtime: tuple[int, int],
    compat_libcuda: bool,
) -> tuple[Status, str, str]:
    """(status, summary, fix) for CUDA ``runtime`` on a driver that supports ``driver_cuda``."""
    rt, dc = fmt(runtime), fmt(driver_cuda)
    if runtime <= driver_cuda:
        return Status.OK, f"CUDA runtime {rt} <= driver's CUDA {dc}: supported", ""
    need = TOOLKIT_MIN_DRIVER.get(runtime)
    need_s = f">= {need}" if need else "a newer one"
    fix = (
        f"Install a driver {need_s} (Table 3 of the CUDA release notes), or the "
        f"cuda-compat-{runtime[0]}-{runtime[1]} forward-compatibility package "
        "on a data-centre GPU, "
        f"or use a torch build for CUDA <= {dc}."
    )
    if compat_libcuda:
        return (
            Status.OK,
            f"CUDA runtime {rt} > driver's CUDA {dc}, served by the forward-compatibility libcuda",
            "",
        )
    minor_min = MINOR_COMPAT_MIN_DRIVER.get(runtime[0])
    if (
        runtime[0] == driver_cuda[0]
        and driver is not None
        and minor_min
        and driver >= _v(minor_min)
    ):
        return (
            Status.WARN,
            f"CUDA runtime {rt} is newer than the driver's CUDA {dc}: it runs only under "
            "minor-version compatibility (no JIT of newer PTX; newer driver APIs fail)",
            fix,
        )
    return (
        Status.FAIL,
        f"CUDA runtime {rt} needs a driver {need_s}; this driver supports CUDA {dc} only",
        fix,
    )
