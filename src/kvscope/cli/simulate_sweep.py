"""``simulate --sweep``'s points through the executor (:mod:`kvscope.executor`).

Each point is saved to ``OUT/<FLAG=VALUE,...>/`` as it finishes, by a local process pool
(``--workers``) or a Ray cluster (``--ray``). A rerun with the same arguments resumes: a folder
of sweep points (nothing else in it) keeps the points saved with the same configuration and
workload (their fingerprint) and simulates the rest; any other content of ``OUT`` is refused
unless ``--force``, as for every run directory. Without ``--out`` the points go to a
temporary folder that is removed afterwards.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from kvscope.errors import KvscopeError

_SAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


def point_key(label: str) -> str:
    """The folder name of a point: its label (``block-size=16``), made filesystem-safe."""
    key = _SAFE.sub("_", label.replace("/", "_"))
    if not key or not key[0].isalnum() or len(key) > 200:
        key = "p" + hashlib.sha1(label.encode()).hexdigest()[:16]
    return key


def _fingerprint(cfg: Any, spec: dict[str, Any]) -> str:
    doc = json.dumps({"cfg": asdict(cfg), "workload": spec}, sort_keys=True, default=str)
    return hashlib.sha1(doc.encode()).hexdigest()


def _only_points(out: Path) -> bool:
    """Whether ``out`` holds nothing but sweep point folders (a sweep to resume)."""
    try:
        entries = list(out.iterdir())
    except OSError:
        return False
    for e in entries:
        if e.name.startswith(".") and e.name.endswith(".tmp") and e.is_dir():
            continue
        if not e.is_dir() or not (e / "summary.json").is_file():
            return False
        head = (e / "summary.json").read_text(encoding="utf-8", errors="replace")
        if '"point_fingerprint"' not in head:
            return False
    return bool(entries)


def check_sweep_out(out: Path, force: bool) -> None:
    """Before any simulation: ``out`` is absent, empty, a sweep to resume, or ``--force``."""
    from kvscope.validate import fresh_run_dir

    if not force and out.is_dir() and _only_points(out):
        return
    fresh_run_dir(out, force=force)


def run_sweep(
    points: list[Any], labels: list[str], w: Any, out: Path | None, backend: Any, console: Any
) -> list[dict[str, Any]]:
    """Simulate every point (resuming those saved), in the sweep's order."""
    from kvscope.executor import PointStore, PointTask, run_points
    from kvscope.executor.progress import JobProgress
    from kvscope.executor.sim_point import simulate_run

    spec = dict(w.spec)
    keys = [point_key(label) for label in labels]
    if len(set(keys)) != len(keys):
        raise KvscopeError("--sweep: two points would share a folder name; name them apart.")
    tasks = [PointTask(k, p, label) for k, p, label in zip(keys, points, labels, strict=True)]
    prints = {k: _fingerprint(p, spec) for k, p in zip(keys, points, strict=True)}
    with tempfile.TemporaryDirectory(prefix="kvscope-sweep-") as tmp:
        root = out if out is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        store = PointStore(root.absolute(), prints)
        try:
            with JobProgress(console, len(tasks), "sweep") as bar:
                figures = run_points(
                    simulate_run,
                    tasks,
                    w,
                    store,
                    backend,
                    on_done=lambda task, _f, _r: bar.done(task.label, label="last"),
                )
        except KeyboardInterrupt:
            done = sum(store.load(k) is not None for k in keys)
            where = f"; rerun the same command to resume ({out})" if out is not None else ""
            sys.stderr.write(
                f"kvscope: interrupted; {done} of {len(keys)} points finished{where}\n"
            )
            raise typer.Exit(130) from None
        return [
            {"point": label, "run_dir": None if out is None else str(out / k), **figures[k]}
            for k, label in zip(keys, labels, strict=True)
        ]
