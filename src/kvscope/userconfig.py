"""Where kvscope's per-user configuration files live: :func:`config_dir`.

One rule for every per-user file (``prices.yaml``, ``gpus.yaml``): the XDG Base Directory
specification (https://specifications.freedesktop.org/basedir-spec/latest/):
``$XDG_CONFIG_HOME/kvscope``, else ``~/.config/kvscope``. A relative ``XDG_CONFIG_HOME`` is
ignored, as the specification says. Standard library only (``specs`` imports it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """kvscope's per-user configuration folder (it need not exist)."""
    e = os.environ if env is None else env
    base = e.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "kvscope"
