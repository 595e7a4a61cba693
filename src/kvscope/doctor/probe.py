"""The probe layer: run each command or read each file once, with a timeout, into a bundle.

Nothing here judges anything; :mod:`kvscope.doctor.checks` reads the bundle afterwards.
Each probe runs in its own daemon thread, so a live run costs about as long as its slowest
probe (on a GPU host, the Python child importing torch). Every probe has a time limit: an
external command is killed with its whole process group at its timeout (a hung
``nvidia-smi`` -- a GPU fallen off the bus can make it block for minutes -- cannot stall the
run), and a probe thread still running past its limit plus a short grace is recorded as
``timeout`` and abandoned; a late answer is dropped.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvscope import __version__
from kvscope.doctor.bundle import MANIFEST, Manifest, ProbeRecord, ProbeStatus
from kvscope.doctor.hostfacts import (
    filter_env,
    host_governors,
    host_infiniband,
    host_limits,
    host_numa,
    host_shm,
    library_paths,
    read_text,
)

_SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class ProbeOptions:
    """What to capture. Timeouts are seconds per probe."""

    python: str = sys.executable
    pid: int | None = None
    command_timeout_s: float = 15.0
    python_timeout_s: float = 60.0


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


# --- the capture --------------------------------------------------------------------------


class _Writer:
    """Collects probe records from the probe threads; late arrivals after close are dropped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: list[ProbeRecord] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True

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
        with self._lock:
            if self._closed or any(r.name == name for r in self.records):
                return  # a probe that already timed out, finishing late
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
    text = read_text(path)
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
    maps = read_text(f"/proc/{pid}/maps")
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


#: Extra seconds a command's thread gets beyond its own timeout (for the kill and the reap).
_GRACE_S = 3.0


def _run_all(w: _Writer, jobs: list[tuple[str, str, float, Callable[[], None]]]) -> None:
    started = []
    for name, source, limit, fn in jobs:
        th = threading.Thread(target=fn, name=f"kvscope-probe-{name}", daemon=True)
        th.start()
        started.append((name, source, limit, th, time.perf_counter()))
    for name, source, limit, th, t0 in started:
        th.join(max(0.0, t0 + limit + _GRACE_S - time.perf_counter()))
        if th.is_alive():
            w.add(name, source, "timeout", None, "txt", duration_s=time.perf_counter() - t0)


def capture(root: Path, opts: ProbeOptions | None = None) -> Path:
    """Probe this host into the (new or empty) folder ``root``; return ``root``.

    Writes one raw file per probe and ``manifest.json``. Never raises for a missing tool
    or a slow one: those become ``missing`` / ``timeout`` records.
    """
    opts = opts or ProbeOptions()
    root.mkdir(parents=True, exist_ok=True)
    w = _Writer(root)
    t = opts.command_timeout_s
    # (name, source, time limit in s, probe). Each runs in its own daemon thread, so even a
    # probe stuck in the kernel cannot hold up the run: after its limit it is recorded as a
    # timeout and abandoned. Commands also kill their own process group at the limit.
    Job = tuple[str, str, float, Callable[[], None]]

    def cmd(name: str, argv: list[str], ext: str) -> Job:
        return (name, " ".join(argv), t, lambda: _timed_command(w, name, argv, ext, t))

    def file(name: str, path: str) -> Job:
        return (name, path, t, lambda: _timed_file(w, name, path))

    def fact(name: str, source: str, fn: Callable[[], object]) -> Job:
        return (name, source, t, lambda: _timed_json(w, name, source, fn))

    jobs: list[Job] = [
        cmd("nvidia_smi_xml", ["nvidia-smi", "-q", "-x"], "xml"),
        cmd("nvidia_smi_topo", ["nvidia-smi", "topo", "-m"], "txt"),
        cmd("nvidia_smi_nvlink", ["nvidia-smi", "nvlink", "-s"], "txt"),
        cmd("ldconfig", ["ldconfig", "-p"], "txt"),
        ("python_probe", opts.python, opts.python_timeout_s, lambda: _python_child(w, opts)),
        ("kernel_log", "dmesg", 2 * t, lambda: _kernel_log(w, t)),
        file("driver_version", "/proc/driver/nvidia/version"),
        file("meminfo", "/proc/meminfo"),
        file("thp", "/sys/kernel/mm/transparent_hugepage/enabled"),
        fact("env", "environment of the kvscope process", lambda: filter_env(dict(os.environ))),
        fact("shm", "statvfs(/dev/shm)", host_shm),
        fact("numa", "/sys/devices/system/node", host_numa),
        fact("cpu_governor", "/sys/devices/system/cpu/*/cpufreq", host_governors),
        fact("limits", "getrlimit(NOFILE, MEMLOCK)", host_limits),
        fact("infiniband", "/sys/class/infiniband", host_infiniband),
    ]
    if opts.pid is not None:
        pid = opts.pid
        jobs.append(("engine_maps", f"/proc/{pid}/maps", t, lambda: _engine_process(w, pid)))
    _run_all(w, jobs)
    ld = next((r for r in w.records if r.name == "ldconfig" and r.file), None)
    if ld is not None and ld.file is not None:
        text = (root / ld.file).read_text()
        _timed_json(
            w, "library_paths", "realpath of ldconfig -p entries", lambda: library_paths(text)
        )
    w.close()
    manifest = Manifest(
        kvscope_version=__version__,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        mode="live",
        probes=sorted(w.records, key=lambda r: r.name),
    )
    (root / MANIFEST).write_text(manifest.model_dump_json(indent=1) + "\n")
    return root
