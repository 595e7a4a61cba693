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
