"""Where the vLLM-on-CPU oracle lives, for the differential tests.

``make install-test`` builds it once (scripts/build_vllm_oracle.sh) under
``${XDG_CACHE_HOME:-~/.cache}/kvscope/vllm-oracle-0.33.0``; ``KVSCOPE_VLLM_PYTHON`` names
another interpreter. On a developer's box without it the oracle tests skip with the reason;
in CI (``CI`` set) a missing oracle fails them, so the differential check cannot silently
stop running.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

VERSION = "0.33.0"


def default_path() -> Path:
    env = os.environ.get("KVSCOPE_VLLM_PYTHON")
    if env:
        return Path(env)
    # tests/conftest.py points XDG_CONFIG_HOME at a temp dir, never XDG_CACHE_HOME
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kvscope" / f"vllm-oracle-{VERSION}" / "bin" / "python"


def vllm_python() -> str:
    """The oracle's interpreter; skips the test (fails it in CI) when it is not built."""
    path = default_path()
    if path.exists():
        return str(path)
    reason = f"no vLLM {VERSION} oracle at {path} (make install-test builds it)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def release_path(version: str) -> str:
    """``PYTHONPATH`` putting a vLLM release's unpacked wheel (``vllm/``, with the packages it
    imports beyond the oracle venv in ``deps/``) before the oracle's own 0.33.0 package.

    ``KVSCOPE_VLLM_SRC_<X_Y_Z>`` names the folder, else
    ``${XDG_CACHE_HOME:-~/.cache}/kvscope/vllm-src-<version>`` (``pip download --no-deps
    vllm==<version>`` and unzip it there). Not built by ``make install-test``, so a missing
    folder skips the test, in CI too, with the reason."""
    env = os.environ.get("KVSCOPE_VLLM_SRC_" + version.replace(".", "_"))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = Path(env) if env else cache / "kvscope" / f"vllm-src-{version}"
    if not (root / "vllm" / "__init__.py").exists():
        pytest.skip(f"no unpacked vLLM {version} wheel at {root} (its vllm/ folder)")
    parts = [root, root / "deps"]
    return os.pathsep.join(str(p) for p in parts if p.exists())
