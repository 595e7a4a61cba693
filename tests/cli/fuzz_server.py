"""A fork server for the CLI fuzzer: imports kvscope once, then runs each command in a child.

Protocol (one JSON object per line): the test writes ``{"argv": [...], "cwd": DIR, "env": {...},
"timeout_s": T}`` to stdin and reads back ``{"rc": int | null, "timed_out": bool, "wall_s": s}``;
the child's stdout and stderr go to ``cwd/.fuzz.stdout`` and ``cwd/.fuzz.stderr``.

Forking a warm interpreter costs milliseconds where a fresh ``kvscope`` process costs about
0.3 s of imports, so the fuzzer can try hundreds of inputs within CI's budget; each child is a
real process (its own signals, exit code, file descriptors) in its own process group, killed
with everything it started when it overruns its time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback

#: Exit code a child uses when something other than SystemExit escaped ``main`` (a bug: the
#: traceback is on its stderr).
ESCAPED = 99


def _preload() -> None:
    # What most commands import lazily: loaded once here, shared by every forked child.
    import duckdb  # noqa: F401
    import numpy  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import yaml  # noqa: F401

    import kvscope.cli.main  # noqa: F401

    for name in (
        "kvscope.plan.memory",
        "kvscope.plan.search",
        "kvscope.sim.run",
        "kvscope.workload.build",
        "kvscope.report",
        "kvscope.memtrace.analysis",
        "kvscope.telemetry.store",
        "kvscope.alerts.loader",
        "kvscope.bench.runner",
    ):
        # A module renamed by later work: the child imports what it needs.
        with contextlib.suppress(Exception):
            __import__(name)


def _child(req: dict[str, object]) -> None:
    os.setpgid(0, 0)
    cwd = str(req["cwd"])
    os.chdir(cwd)
    env = req.get("env") or {}
    assert isinstance(env, dict)
    os.environ.update({str(k): str(v) for k, v in env.items()})
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(os.path.join(cwd, ".fuzz.stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(os.path.join(cwd, ".fuzz.stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        from kvscope.cli.main import main

        argv = req["argv"]
        assert isinstance(argv, list)
        main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = ESCAPED
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _run(req: dict[str, object]) -> dict[str, object]:
    timeout = float(req.get("timeout_s", 30.0))  # type: ignore[arg-type]
    sys.stdout.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        _child(req)
    rc: int | None = None
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() - start > timeout:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    # Anything the child started in its group (ranks, servers) goes with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return {"rc": rc, "timed_out": timed_out, "wall_s": time.monotonic() - start}


def _jail() -> bool:
    """Make every mount but /tmp read-only for this process and its children (Linux, root).

    The fuzzer hands commands paths such as ``../../etc/passwd`` for their outputs; as root a
    command that wrongly accepted one would replace a system file. In a private mount
    namespace with ``/`` (and ``/dev``, ``/sys`` …) read-only, such a write fails like any
    unwritable path, and the sandboxes under /tmp stay writable. Returns whether it worked.
    """
    import ctypes
    import subprocess

    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns = 0x00020000
    if libc.unshare(clone_newns) != 0:
        return False

    def mount(*args: str) -> bool:
        return subprocess.run(["mount", *args], capture_output=True).returncode == 0

    if not mount("--make-rprivate", "/") or not mount("--bind", "/tmp", "/tmp"):
        return False
    keep_writable = {"/tmp", "/dev/shm", "/proc"}
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1] for line in fh]
    ok = True
    for point in points:
        if point in keep_writable or point.startswith(("/tmp/", "/proc/")):
            continue
        ok &= mount("-o", "remount,ro,bind", point) or point != "/"
    try:  # the proof: the root file system refuses a write
        open("/.kvscope-fuzz-probe", "w").close()
    except OSError:
        return ok
    os.unlink("/.kvscope-fuzz-probe")
    return False


def serve() -> None:
    jailed = _jail()
    _preload()
    sys.stdout.write(json.dumps({"ready": True, "jailed": jailed}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _run(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
