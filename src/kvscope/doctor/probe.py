"""The probe layer: run each command or read each file once, with a timeout, into a bundle.

Nothing here judges anything; :mod:`kvscope.doctor.checks` reads the bundle afterwards.
Probes run in a small thread pool so a live run costs about as long as its slowest probe
(usually the Python child importing torch). Every external command gets its own timeout and
runs in its own session, so a hung ``nvidia-smi`` (a GPU fallen off the bus can make it
block for minutes) is killed with its process group and recorded as ``timeout``. Files
under ``/proc`` and ``/sys`` are read in-process without a timeout: the kernel serves them
from memory, and the one NVIDIA file among them (``/proc/driver/nvidia/version``) is a
static string that stays readable even when the GPU is gone.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kvscope import __version__
from kvscope.doctor.bundle import MANIFEST, Manifest, ProbeRecord, ProbeStatus

#: Environment variables captured (by prefix or exact name); values of names that look
#: like credentials are replaced so a bundle can be shared.
ENV_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "NVIDIA_", "VLLM_", "SGLANG_")
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.I)
#: Libraries whose resolved path the loader would pick (from ``ldconfig -p``).
LIBS_OF_INTEREST = ("libcuda.so", "libcudart.so", "libnccl.so", "libnvidia-ml.so")

_SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class ProbeOptions:
    """What to capture. Timeouts are seconds per probe."""

    python: str = sys.executable
    pid: int | None = None
    command_timeout_s: float = 15.0
    python_timeout_s: float = 60.0


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """The serving-relevant subset of an environment, credentials redacted."""
    out = {}
    for k, v in env.items():
        if k.startswith(ENV_PREFIXES) or k in ENV_NAMES:
            out[k] = "<redacted>" if _SECRET.search(k) else v
    return dict(sorted(out.items()))


def _which(tool: str) -> str | None:
    found = shutil.which(tool)
    if found is None:
        path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
        found = shutil.which(tool, path=path)
    return found


def run_command(argv: list[str], timeout_s: float) -> tuple[ProbeStatus, int | None, str, str]:
    """Run ``argv``; return (status, exit code, stdout, stderr). Never raises, never hangs."""
    exe = _which(argv[0])
    if exe is None:
        return "missing", None, "", f"{argv[0]}: command not found"
    try:
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as err:
        return "error", None, "", str(err)
    try:
        out, errs = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:  # a process stuck in the kernel may not die; do not wait for it forever
            out, errs = proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:
            out, errs = "", ""
        return "timeout", None, out or "", errs or ""
    status: ProbeStatus = "ok" if proc.returncode == 0 else "failed"
    return status, proc.returncode, out, errs


# --- host facts collected in-process (as JSON) --------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def host_shm() -> dict[str, object]:
    st = os.statvfs("/dev/shm")
    return {
        "path": "/dev/shm",
        "size_bytes": st.f_frsize * st.f_blocks,
        "free_bytes": st.f_frsize * st.f_bavail,
    }


def host_numa() -> dict[str, object]:
    nodes = {}
    for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*")):
        nodes[Path(d).name] = (_read(f"{d}/cpulist") or "").strip()
    balancing = _read("/proc/sys/kernel/numa_balancing")
    return {"nodes": nodes, "numa_balancing": balancing.strip() if balancing else None}


def host_governors() -> dict[str, object]:
    govs = {}
    for f in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")):
        govs[Path(f).parents[1].name] = (_read(f) or "").strip()
    return {"governors": govs}


def host_limits() -> dict[str, object]:
    def lim(which: int) -> list[int]:
        soft, hard = resource.getrlimit(which)
        return [soft, hard]  # -1 (RLIM_INFINITY) means unlimited

    return {"nofile": lim(resource.RLIMIT_NOFILE), "memlock": lim(resource.RLIMIT_MEMLOCK)}


def host_infiniband() -> dict[str, object]:
    return {"devices": sorted(Path(p).name for p in glob.glob("/sys/class/infiniband/*"))}


def library_paths(ldconfig_text: str) -> dict[str, str]:
    """Resolve each ``ldconfig -p`` entry of interest to the file it points at."""
    out = {}
    for line in ldconfig_text.splitlines():
        m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and m.group(1).startswith(LIBS_OF_INTEREST):
            out[m.group(3)] = os.path.realpath(m.group(3))
    return out


# --- the capture --------------------------------------------------------------------------


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: list[ProbeRecord] = []

    def add(
        self,
        name: str,
        source: str,
        status: ProbeStatus,
        text: str | None,
        ext: str,
        *,
        returncode: int | None = None,
        duration_s: float = 0.0,
        stderr: str = "",
    ) -> None:
        file = None
        if text is not None:
            file = f"{name}.{ext}"
            (self.root / file).write_text(text)
        self.records.append(
            ProbeRecord(
                name=name,
                source=source,
                status=status,
                file=file,
                returncode=returncode,
                duration_s=round(duration_s, 3),
                stderr=stderr[-2000:],
            )
        )


def _timed_command(w: _Writer, name: str, argv: list[str], ext: str, timeout_s: float) -> None:
    t0 = time.perf_counter()
    status, rc, out, err = run_command(argv, timeout_s)
    w.add(
        name,
        " ".join(argv),
        status,
        out,
        ext,
        returncode=rc,
        duration_s=time.perf_counter() - t0,
        stderr=err,
    )


def _timed_file(w: _Writer, name: str, path: str) -> None:
    t0 = time.perf_counter()
    text = _read(path)
    w.add(
        name,
        path,
        "ok" if text is not None else "missing",
        text,
        "txt",
        duration_s=time.perf_counter() - t0,
    )


def _timed_json(w: _Writer, name: str, source: str, fn: Callable[[], object]) -> None:
    t0 = time.perf_counter()
    try:
        w.add(
            name,
            source,
            "ok",
            json.dumps(fn(), indent=1),
            "json",
            duration_s=time.perf_counter() - t0,
        )
    except OSError as err:
        w.add(name, source, "missing", None, "json", stderr=str(err))


def _kernel_log(w: _Writer, timeout_s: float) -> None:
    """NVIDIA driver lines of the kernel log (Xid events). Only ``NVRM`` lines are kept: the
    rest of the log is unrelated and may hold details of the host a bundle should not carry."""
    t0 = time.perf_counter()
    status, rc, out, err = run_command(["dmesg", "--time-format", "iso"], timeout_s)
    if status == "failed" and "time-format" in err:  # busybox dmesg has no --time-format
        status, rc, out, err = run_command(["dmesg"], timeout_s)
    text = "".join(ln + "\n" for ln in out.splitlines() if "NVRM" in ln) if status == "ok" else None
    w.add(
        "kernel_log",
        "dmesg (NVRM lines only)",
        status,
        text,
        "txt",
        returncode=rc,
        duration_s=time.perf_counter() - t0,
        stderr=err,
    )


def _python_child(w: _Writer, opts: ProbeOptions) -> None:
    script = Path(__file__).with_name("child.py")
    argv = [opts.python, str(script)]
    t0 = time.perf_counter()
    status, rc, out, err = run_command(argv, opts.python_timeout_s)
    dt = time.perf_counter() - t0
    source = f"{opts.python} kvscope/doctor/child.py"
    if status != "ok":
        w.add(
            "python_probe", source, status, None, "json", returncode=rc, duration_s=dt, stderr=err
        )
        return
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        w.add(
            "python_probe",
            source,
            "error",
            None,
            "json",
            returncode=rc,
            duration_s=dt,
            stderr="child printed no JSON: " + (err or out)[-500:],
        )
        return
    maps = data.pop("maps", None)
    w.add(
        "python_probe",
        source,
        "ok",
        json.dumps(data, indent=1),
        "json",
        returncode=rc,
        duration_s=dt,
        stderr=err,
    )
    w.add(
        "process_maps",
        f"/proc/{data.get('pid')}/maps (python_probe child)",
        "ok" if maps else "missing",
        maps,
        "txt",
    )


def _engine_process(w: _Writer, pid: int) -> None:
    maps = _read(f"/proc/{pid}/maps")
    w.add(
        "engine_maps",
        f"/proc/{pid}/maps",
        "ok" if maps else "missing",
        maps,
        "txt",
        stderr="" if maps else f"cannot read /proc/{pid}/maps (no such process or no permission)",
    )
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as err:
        w.add("engine_env", f"/proc/{pid}/environ", "missing", None, "json", stderr=str(err))
        return
    env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
    w.add("engine_env", f"/proc/{pid}/environ", "ok", json.dumps(filter_env(env), indent=1), "json")


def capture(root: Path, opts: ProbeOptions | None = None) -> Path:
    """Probe this host into the (new or empty) folder ``root``; return ``root``.

    Writes one raw file per probe and ``manifest.json``. Never raises for a missing tool
    or a slow one: those become ``missing`` / ``timeout`` records.
    """
    opts = opts or ProbeOptions()
    root.mkdir(parents=True, exist_ok=True)
    w = _Writer(root)
    t = opts.command_timeout_s
    jobs: list[Callable[[], None]] = [
        lambda: _timed_command(w, "nvidia_smi_xml", ["nvidia-smi", "-q", "-x"], "xml", t),
        lambda: _timed_command(w, "nvidia_smi_topo", ["nvidia-smi", "topo", "-m"], "txt", t),
        lambda: _timed_command(w, "nvidia_smi_nvlink", ["nvidia-smi", "nvlink", "-s"], "txt", t),
        lambda: _timed_command(w, "ldconfig", ["ldconfig", "-p"], "txt", t),
        lambda: _python_child(w, opts),
        lambda: _kernel_log(w, t),
    ]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(j) for j in jobs]
        _timed_file(w, "driver_version", "/proc/driver/nvidia/version")
        _timed_file(w, "meminfo", "/proc/meminfo")
        _timed_file(w, "thp", "/sys/kernel/mm/transparent_hugepage/enabled")
        _timed_json(
            w, "env", "environment of the kvscope process", lambda: filter_env(dict(os.environ))
        )
        _timed_json(w, "shm", "statvfs(/dev/shm)", host_shm)
        _timed_json(w, "numa", "/sys/devices/system/node", host_numa)
        _timed_json(w, "cpu_governor", "/sys/devices/system/cpu/*/cpufreq", host_governors)
        _timed_json(w, "limits", "getrlimit(NOFILE, MEMLOCK)", host_limits)
        _timed_json(w, "infiniband", "/sys/class/infiniband", host_infiniband)
        if opts.pid is not None:
            _engine_process(w, opts.pid)
        for f in futures:
            f.result()
    ld = next((r for r in w.records if r.name == "ldconfig" and r.file), None)
    if ld is not None and ld.file is not None:
        text = (root / ld.file).read_text()
        _timed_json(
            w, "library_paths", "realpath of ldconfig -p entries", lambda: library_paths(text)
        )
    manifest = Manifest(
        kvscope_version=__version__,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        mode="live",
        probes=sorted(w.records, key=lambda r: r.name),
    )
    (root / MANIFEST).write_text(manifest.model_dump_json(indent=1) + "\n")
    return root
