"""Software-stack checks: driver, CUDA runtime vs driver, loaded libraries, NCCL.

Sources for the rules are cited where they are applied; the driver/runtime rule and its
table live in :mod:`kvscope.doctor.cuda_compat`.
"""

from __future__ import annotations

from kvscope.doctor.checks.common import View, fail, ok, skipped, warn
from kvscope.doctor.cuda_compat import (
    cuda_supported_by_driver,
    fmt,
    from_driver_api,
    parse_version,
    runtime_verdict,
)
from kvscope.doctor.loader import LoadedLib, ldconfig_libraries
from kvscope.doctor.model import Check

HOST = "host"


def check_driver(v: View) -> Check:
    """NVML's driver version (nvidia-smi) must equal the loaded kernel module's."""
    cap = v.bundle.get("nvidia_smi_xml")
    blob = f"{cap.text or ''} {cap.record.stderr}"
    if "version mismatch" in blob.lower():
        line = next(ln for ln in blob.splitlines() if "mismatch" in ln.lower())
        return fail(
            "driver.version",
            HOST,
            "user-space NVIDIA libraries and the loaded kernel module are different versions",
            "Reboot (or unload and reload the nvidia kernel modules) after a driver upgrade.",
            line.strip(),
        )
    smi = v.smi.driver_version if v.smi else None
    kmod = v.kernel_driver
    if smi is None and kmod is None:
        return skipped(
            "driver.version",
            HOST,
            "no NVIDIA driver found",
            v.smi_problem(),
            v.bundle.get("driver_version").why_not(),
        )
    ev = [f"nvidia-smi driver_version: {smi}", f"/proc/driver/nvidia/version: {kmod}"]
    if v.smi and v.smi.cuda_version:
        ev.append(f"nvidia-smi cuda_version: {v.smi.cuda_version}")
    if smi and kmod and smi != kmod:
        return fail(
            "driver.version",
            HOST,
            f"nvidia-smi reports driver {smi} but the kernel module is {kmod}",
            "Reboot or reload the nvidia kernel modules so user space and kernel agree.",
            *ev,
        )
    drv = smi or kmod
    cuda = v.smi.cuda_version if v.smi and v.smi.cuda_version else None
    if cuda is None and drv is not None:
        pv = parse_version(drv)
        cs = cuda_supported_by_driver(pv) if pv else None
        cuda = f"{fmt(cs)} (from the driver table)" if cs else None
    return ok("driver.version", HOST, f"driver {drv}, supports CUDA {cuda or 'unknown'}", *ev)


def _driver_cuda(v: View) -> tuple[tuple[int, int] | None, str]:
    if v.smi and v.smi.cuda_version:
        pv = parse_version(v.smi.cuda_version)
        if pv and len(pv) >= 2:
            return (pv[0], pv[1]), f"nvidia-smi cuda_version {v.smi.cuda_version}"
    api = v.python.get("cuda_driver", {})
    if isinstance(api, dict) and isinstance(api.get("driver_api_version"), int):
        c = from_driver_api(api["driver_api_version"])
        return c, f"cuDriverGetVersion {api['driver_api_version']}"
    drv = parse_version(v.kernel_driver)
    if drv:
        table = cuda_supported_by_driver(drv)
        if table:
            return table, f"driver {v.kernel_driver} per CUDA release-notes Table 3"
    return None, ""


def check_runtime(v: View) -> Check:
    """torch's CUDA runtime against the CUDA version the driver supports."""
    cid = "driver.runtime"
    t = v.torch
    if not v.python:
        return skipped(
            cid, HOST, "Python probe did not run", v.bundle.get("python_probe").why_not()
        )
    if not t.get("installed"):
        return skipped(
            cid,
            HOST,
            "torch is not installed in the probed interpreter",
            f"python: {v.python.get('executable')}",
        )
    if not t.get("cuda"):
        return skipped(
            cid, HOST, f"torch {t.get('version')} is a CPU-only build (torch.version.cuda is None)"
        )
    runtime = parse_version(str(t["cuda"]))
    dcuda, how = _driver_cuda(v)
    if runtime is None or len(runtime) < 2 or dcuda is None:
        return skipped(
            cid,
            HOST,
            f"torch CUDA {t.get('cuda')}, but no driver CUDA version was captured",
            v.smi_problem(),
        )
    libcuda = (v.mapped or {}).get("libcuda", [])
    compat = any(lib.is_compat for lib in libcuda)
    drv = parse_version(v.smi.driver_version if v.smi else v.kernel_driver)
    status, summary, fix = runtime_verdict(drv, dcuda, (runtime[0], runtime[1]), compat)
    ev = [f"torch {t.get('version')}: torch.version.cuda = {t['cuda']}", f"driver CUDA: {how}"]
    ev += [f"mapped libcuda: {lib.path}" for lib in libcuda]
    return Check(cid, HOST, status, summary, tuple(ev), fix)


def _libs(v: View, family: str) -> tuple[list[LoadedLib], str]:
    if v.mapped is not None and v.mapped.get(family):
        return v.mapped[family], f"mapped in {v.maps_source}"
    resolved = v.json_dict("library_paths") or {}
    libs = ldconfig_libraries({str(k): str(x) for k, x in resolved.items()}).get(family, [])
    return libs, "resolved by ldconfig -p (not mapped)"


def check_libcuda(v: View) -> Check:
    """Exactly one libcuda mapped, not the toolkit stub, matching the kernel driver."""
    cid = "libs.libcuda"
    if v.mapped is None:
        return skipped(
            cid, HOST, "no process maps captured", v.bundle.get("process_maps").why_not()
        )
    libs = v.mapped["libcuda"]
    if not libs:
        return skipped(
            cid, HOST, f"no libcuda mapped in {v.maps_source} (CUDA not initialised there)"
        )
    ev = [f"{v.maps_source}: {lib.path}" for lib in libs]
    if len(libs) > 1:
        return fail(
            cid,
            HOST,
            f"{len(libs)} different libcuda files are mapped into one process",
            "Remove the stray copy from LD_LIBRARY_PATH / the image (only the driver's libcuda, "
            "or one cuda-compat libcuda, may be visible).",
            *ev,
        )
    lib = libs[0]
    if lib.is_stub:
        return fail(
            cid,
            HOST,
            "the CUDA toolkit's link-time stub libcuda is loaded instead of the driver's",
            "Drop the toolkit's lib64/stubs directory from LD_LIBRARY_PATH.",
            *ev,
        )
    drv = (v.smi.driver_version if v.smi else None) or v.kernel_driver
    if drv and lib.version and lib.version != drv and not lib.is_compat:
        return fail(
            cid,
            HOST,
            f"libcuda {lib.version} is mapped but the kernel driver is {drv}",
            "Mount the host driver's libcuda into the container (nvidia-container-toolkit) "
            "instead of a copy baked into the image.",
            *ev,
            f"driver: {drv}",
        )
    note = " (forward-compatibility package)" if lib.is_compat else ""
    return ok(cid, HOST, f"one libcuda mapped: {lib.version or 'unversioned name'}{note}", *ev)


def check_nvml(v: View) -> Check:
    """libnvidia-ml must come from the same driver release as the kernel module."""
    cid = "libs.nvml"
    libs, where = _libs(v, "libnvidia-ml")
    if not libs:
        return skipped(cid, HOST, "no libnvidia-ml mapped or on the loader path")
    drv = (v.smi.driver_version if v.smi else None) or v.kernel_driver
    ev = [f"{where}: {lib.path}" for lib in libs]
    versions = {lib.version for lib in libs if lib.version}
    if len(versions) > 1:
        return fail(
            cid,
            HOST,
            f"several libnvidia-ml versions: {', '.join(sorted(versions))}",
            "Keep only the driver's libnvidia-ml on the loader path.",
            *ev,
        )
    if drv and versions and versions != {drv}:
        return fail(
            cid,
            HOST,
            f"libnvidia-ml {versions.pop()} does not match driver {drv}",
            "Use the driver's own libnvidia-ml (NVML reports 'Driver/library version mismatch').",
            *ev,
        )
    return ok(
        cid, HOST, f"libnvidia-ml {next(iter(versions), 'unversioned')} matches the driver", *ev
    )


def check_cudart(v: View) -> Check:
    cid = "libs.cudart"
    if v.mapped is None:
        return skipped(cid, HOST, "no process maps captured")
    libs = v.mapped["libcudart"]
    if not libs:
        return skipped(cid, HOST, f"no libcudart mapped in {v.maps_source}")
    ev = [f"{v.maps_source}: {lib.path}" for lib in libs]
    majors = {(lib.version or "").split(".")[0] for lib in libs}
    if len(majors) > 1:
        return warn(
            cid,
            HOST,
            "CUDA runtimes of different major versions share one process",
            "Install extensions built against torch's CUDA major (pip wheels for the same cuXY).",
            *ev,
        )
    return ok(cid, HOST, f"{len(libs)} libcudart file(s) mapped", *ev)


def check_nccl(v: View) -> Check:
    """The NCCL torch reports vs the NCCL files mapped and on the loader path."""
    cid = "nccl.version"
    torch_nccl = v.torch.get("nccl")
    mapped = (v.mapped or {}).get("libnccl", [])
    ld = ldconfig_libraries(
        {str(k): str(x) for k, x in (v.json_dict("library_paths") or {}).items()}
    )["libnccl"]
    if torch_nccl is None and not mapped:
        return skipped(cid, HOST, "no NCCL in torch and none mapped")
    ev = [f"torch.cuda.nccl.version(): {torch_nccl}"]
    ev += [f"{v.maps_source}: {lib.path}" for lib in mapped]
    ev += [f"ldconfig -p: {lib.path}" for lib in ld]
    preload = v.env.get("LD_PRELOAD", "")
    if len(mapped) > 1:
        return fail(
            cid,
            HOST,
            f"{len(mapped)} different libnccl files mapped into one process",
            "Keep one NCCL: unset LD_PRELOAD/LD_LIBRARY_PATH entries that add a second.",
            *ev,
        )
    if "libnccl" in preload:
        return warn(
            cid,
            HOST,
            "LD_PRELOAD replaces the NCCL torch was built with",
            "Unset LD_PRELOAD unless this NCCL was chosen on purpose.",
            *ev,
            f"LD_PRELOAD={preload}",
        )
    full = mapped[0].version if mapped else None
    # pip wheels map libnccl.so.2 (major only); compare only a full x.y.z file version.
    if full and full.count(".") >= 2 and torch_nccl and full != str(torch_nccl):
        return warn(
            cid,
            HOST,
            f"mapped NCCL {full} differs from torch's {torch_nccl}",
            "Use the nvidia-nccl wheel torch depends on.",
            *ev,
        )
    other = [
        lib
        for lib in ld
        if lib.version
        and lib.version.count(".") >= 2
        and torch_nccl
        and lib.version != str(torch_nccl)
    ]
    if other:
        # torch links its own NCCL, but code that dlopens "libnccl.so.2" by name (vLLM's
        # PyNccl wrapper unless VLLM_NCCL_SO_PATH is set, CuPy) gets the loader's choice.
        return warn(
            cid,
            HOST,
            f"the loader path offers NCCL {other[0].version}, torch uses {torch_nccl}: "
            "libraries that load libnccl.so.2 by name get the other one",
            "Remove the system NCCL from the loader path or point VLLM_NCCL_SO_PATH at torch's.",
            *ev,
        )
    return ok(cid, HOST, f"NCCL {torch_nccl or mapped[0].version}", *ev)


def stack_checks(v: View) -> list[Check]:
    return [
        check_driver(v),
        check_runtime(v),
        check_libcuda(v),
        check_nvml(v),
        check_cudart(v),
        check_nccl(v),
    ]
