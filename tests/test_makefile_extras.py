"""The Makefile and pyproject.toml's extras agree (issue #21: extras that install what they say).

* ``make install-test`` installs a distribution for every third-party module the tests
  import (plain imports and ``pytest.importorskip``), through the dependencies, the extras it
  names, or the CPU torch it installs first;
* ``make run`` installs the ``[nvml]`` extra, so the README's ``watch --nvml`` runs (and says
  NVML is not available on a GPU-less box) right after it;
* torch comes from scripts/install_torch_cpu.sh, at a version the ``[torch]`` extra accepts,
  before the extra is installed (so pip never pulls the CUDA build);
* every ``pip install 'kvscope[X]'`` hint kvscope prints names an extra that exists.

The Makefile is read by ``make -n`` (what make would run), not by pattern-matching its text.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]


def _make_n(*targets: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "-n", "-B", *targets, "VENV=/nonexistent/venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return out.replace("\\\n", " ").splitlines()


def _installed_extras(lines: list[str]) -> set[str]:
    """Extras of ``.`` named on ``pip install ... -e '.[a,b]'`` lines."""
    found: set[str] = set()
    for line in lines:
        if "pip install" in line:
            for group in re.findall(r"-e\s+'?\.\[([^\]]+)\]", line):
                found |= {g.strip() for g in group.split(",")}
    return found


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 normalisation


def _names(reqs: list[str]) -> set[str]:
    out = set()
    for r in reqs:
        m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r)
        assert m is not None, r
        out.add(_canon(m.group(0)))
    return out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0]))


def _accepts(requirement: str, version: str) -> bool:
    """Whether ``version`` meets the comparisons of ``requirement`` (>=, <=, >, <, ==, !=)."""
    ops = {
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
    }
    clauses = re.findall(r"(>=|<=|==|!=|>|<)\s*([0-9][0-9.]*)", requirement)
    assert clauses, requirement
    return all(ops[op](_version(version), _version(v)) for op, v in clauses)


def _test_imports() -> set[str]:
    """Top-level modules the tests import that are neither stdlib, kvscope nor test helpers."""
    local = {p.stem for d in ("tests", "benchmarks") for p in (REPO / d).rglob("*.py")}
    local |= {"kvscope", "tests", "benchmarks"}
    mods: set[str] = set()
    for path in (REPO / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "importorskip"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                mods.add(str(node.args[0].value).split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in local}


def test_make_install_test_installs_every_module_the_tests_import() -> None:
    lines = _make_n("install-test")
    extras = _installed_extras(lines)
    assert "test" in extras, lines
    provided = _names(PYPROJECT["project"]["dependencies"])
    for extra in extras:
        provided |= _names(EXTRAS[extra])
    if any("install_torch_cpu.sh" in ln for ln in lines):
        provided.add("torch")
    dists = importlib.metadata.packages_distributions()
    imported = _test_imports()
    assert {"torch", "pynvml", "hypothesis", "duckdb"} <= imported  # the scan sees imports
    missing = {}
    for mod in sorted(imported):
        names = {_canon(d) for d in dists.get(mod, [mod])}
        if not names & provided:
            missing[mod] = sorted(names)
    assert not missing, f"tests import modules make install-test does not install: {missing}"


def test_make_run_installs_the_nvml_extra() -> None:
    lines = _make_n("run")
    assert "nvml" in _installed_extras(lines), lines
    assert any(ln.rstrip().endswith("kvscope demo") for ln in lines)


def test_torch_is_the_cpu_build_installed_before_the_torch_extra() -> None:
    lines = _make_n("install-test")
    script = next(i for i, ln in enumerate(lines) if "install_torch_cpu.sh" in ln)
    extra = next(i for i, ln in enumerate(lines) if "torch" in _installed_extras([ln]))
    assert script < extra, lines  # the extra then finds torch installed and keeps it
    version = re.search(r'TORCH_VERSION="([^"]+)"', lines[script])
    assert version is not None, lines[script]
    assert _accepts(EXTRAS["torch"][0], version.group(1)), (version.group(1), EXTRAS["torch"])
    # No install line names torch itself: a bare 'torch==X' would reach for the CUDA build.
    assert not any(re.search(r"pip install[^\n]*\btorch[=<>~]", ln) for ln in lines), lines


def test_every_install_hint_names_an_extra_that_exists() -> None:
    hints: set[str] = set()
    for path in (REPO / "src" / "kvscope").rglob("*.py"):
        hints |= set(re.findall(r"kvscope\[([a-z0-9_-]+)\]", path.read_text()))
    assert {"nvml", "tokenizers"} <= hints
    assert hints <= set(EXTRAS), sorted(hints - set(EXTRAS))
