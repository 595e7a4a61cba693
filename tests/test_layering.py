"""Layering: the pure layers import nothing heavy; specs needs only stdlib and numpy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "kvscope"
FORBIDDEN = re.compile(
    r"^\s*(import|from)\s+(torch|httpx|aiohttp|requests|pynvml|nvidia_ml_py|urllib3)\b", re.M
)


def test_pure_layers_do_not_import_torch_http_or_nvml() -> None:
    offenders = []
    for layer in ("specs", "plan", "workload", "sim", "fleet"):
        for path in (SRC / layer).rglob("*.py") if (SRC / layer).is_dir() else []:
            if FORBIDDEN.search(path.read_text()):
                offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


def test_specs_imports_only_stdlib_and_numpy() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import kvscope.specs.registry, kvscope.specs.hardware, kvscope.specs.describe\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "third = sorted(m for m in new if m not in sys.stdlib_module_names "
        "and m not in ('kvscope', 'numpy') and not m.startswith('_'))\n"
        "print(','.join(third))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_fleet_stays_above_sim_and_away_from_ray_and_zmq() -> None:
    """fleet drives sim engines in-process: no Ray or ZMQ; sim never imports fleet."""
    up = re.compile(r"^\s*(import|from)\s+kvscope\.fleet\b", re.M)
    remote = re.compile(r"^\s*(import|from)\s+(ray|zmq)\b", re.M)
    assert [p.name for p in (SRC / "sim").rglob("*.py") if up.search(p.read_text())] == []
    assert [p.name for p in (SRC / "fleet").rglob("*.py") if remote.search(p.read_text())] == []
