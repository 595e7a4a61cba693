"""Shared test fixtures.

``shared_dir`` locates the read-only ``shared/`` folder that CI lays beside the clone (real
traces and reference facts). A user's fresh clone has none: tests that need it skip with a
reason instead of failing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # browser.py, a test helper here
from browser import Page, chromium_path

REPO_ROOT = Path(__file__).resolve().parents[1]

# A developer's own ~/.config/kvscope (prices.yaml, ...) must not move the figures tests
# pin: every test, and every process a test starts, sees an empty per-user config folder.
_CONFIG_HOME = Path(tempfile.mkdtemp(prefix="kvscope-test-config-"))
os.environ["XDG_CONFIG_HOME"] = str(_CONFIG_HOME)
# Nor may a Hugging Face cache or token of the developer's, and no test reaches the Hub: a
# model id that is not a preset resolves through an empty cache, offline.
for _name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HF_ENDPOINT"):
    os.environ.pop(_name, None)
os.environ["HF_HOME"] = str(_CONFIG_HOME / "huggingface")
os.environ["HF_HUB_OFFLINE"] = "1"


def find_shared_dir() -> Path | None:
    """``$KVSCOPE_SHARED`` if set, else ``../shared`` beside the repository."""
    env = os.environ.get("KVSCOPE_SHARED")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared")
    for c in candidates:
        if (c / "traces").is_dir():
            return c
    return None


@pytest.fixture(autouse=True)
def _forget_registered_secrets() -> Iterator[None]:
    """Secrets one test registers (a URL password such as "0000") are not masked in the next
    test's output: ``kvscope.redact`` keeps them per process, and pytest runs every test in one."""
    from kvscope import redact

    before = set(redact._SECRETS)
    yield
    redact._SECRETS.clear()
    redact._SECRETS.update(before)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    d = find_shared_dir()
    if d is None:
        pytest.skip("../shared (real traces and reference data) is not beside this clone")
    return d


@pytest.fixture(scope="session")
def traces_dir(shared_dir: Path) -> Path:
    return shared_dir / "traces"


@pytest.fixture
def page() -> Iterator[Page]:
    """A headless Chromium page (Debian's chromium); skips when it is not installed."""
    binary = chromium_path()
    if binary is None:
        pytest.skip("Debian chromium is not installed (make test installs it)")
    p = Page(binary)
    yield p
    p.close()
