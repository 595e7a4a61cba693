"""Fixtures for alert tests: the Prometheus tools (skip with a reason when absent)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL_HINT = "install Debian's `prometheus` package (scripts/install_system_deps.sh)"


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(f"promtool is not on PATH; {INSTALL_HINT}")
    return path


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip(f"prometheus is not on PATH; {INSTALL_HINT}")
    return path


def run_promtool(promtool: str, *args: str | Path, cwd: Path | None = None) -> str:
    """Run promtool; fail the test with its output when it exits non-zero."""
    done = subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    return out
