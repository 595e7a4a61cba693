"""Helpers for tests of the ``kvscope`` command: run it, and check its one-line error contract.

``run_kvscope`` runs the CLI as a user does, in a subprocess; ``run_in_process`` calls
:func:`kvscope.cli.main.main` in this process (no interpreter start-up, so much faster) and
reads what it printed from ``capsys``. ``one_error_line`` checks a bad input's outcome: exit 2,
exactly one non-blank stderr line that starts with ``kvscope: error: ``, no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest


def run_kvscope(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``kvscope ARGS`` in a subprocess (this interpreter), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        check=False,
    )


def run_in_process(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``kvscope ARGV`` in this process: its exit code, stdout and stderr."""
    from kvscope.cli.main import main

    code = 0
    try:
        main(list(argv))
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """``kvscope ARGV --json``-style run in this process: exit 0 and its one JSON object."""
    code, out, err = run_in_process(list(argv), capsys)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def one_error_line(code: int, err: str, *needles: str) -> str:
    """Assert exit 2 and one ``kvscope: error:`` line holding every needle; return that line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("kvscope: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def one_error_line_of(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """:func:`one_error_line` for a finished subprocess."""
    return one_error_line(proc.returncode, proc.stderr, *needles)


def simulated_and_planned_blocks(
    capsys: pytest.CaptureFixture[str], out: Path, deploy: Sequence[str], *extra: str
) -> tuple[int, int]:
    """The KV pool ``simulate`` ran with (``summary.json``) and the one ``plan --json`` sizes,
    for the same deployment flags: a flag must mean the same thing in both commands."""
    workload = ["--arrival", "poisson:rate=5", "--num-requests", "20", "--seed", "3"]
    code, _o, err = run_in_process(
        ["simulate", *deploy, *workload, *extra, "--out", str(out)], capsys
    )
    assert code == 0, err
    sim = json.loads((out / "summary.json").read_text())["config"]["pool"]["num_gpu_blocks"]
    planned = run_json(capsys, "plan", *deploy, *extra, "--json")["num_gpu_blocks"]
    return int(sim), int(planned)
