"""The README's examples print what the README says (``scripts/readme_examples.py``).

The first tests hold the checker itself to its word on a small page of ``echo`` examples; the
last runs every example of the real README and fails when a printed figure differs from it.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "readme_examples.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_examples", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_examples"] = module
    spec.loader.exec_module(module)
    return module


PAGE = """# a page

<!-- example: id=kv -->
```
$ printf 'KV peak 5.8%%\\nready in 0.4 s\\n'
KV peak 5.9%
ready in 0.4 s
```

<!-- example: id=part excerpt volatile="took [0-9.]+ s" -->
```
$ printf 'header\\nrows 1,024\\ntook 9.9 s\\nfooter 7\\n'
...
rows 1,000
took 1.0 s
...
```

<!-- example: id=later skip="needs a GPU" -->
```
$ nvidia-smi
GPU 0: 80 GiB
```

The KV peak is 5.9 % of the pool.
"""


def run(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--readme", str(page), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_moved_figure_fails_and_update_mends_it(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text(PAGE)
    first = run(page, "--check")
    assert first.returncode == 1
    assert "FAIL kv" in first.stdout and "FAIL part" in first.stdout
    assert "-KV peak 5.9%" in first.stderr and "+KV peak 5.8%" in first.stderr
    assert "- rows 1,000" in first.stderr and "+ rows 1,024" in first.stderr
    assert "skip later: needs a GPU" in first.stdout
    # The prose repeats a figure of an example block, so it is checked through it.
    assert "prose figure" not in first.stderr

    assert run(page, "--update").returncode == 0
    text = page.read_text()
    assert "KV peak 5.8%\nready in 0.4 s" in text
    # An excerpt keeps its selection and its omission marks; volatile spans take the new text.
    assert "...\nrows 1,024\ntook 9.9 s\n...\n" in text
    assert "GPU 0: 80 GiB" in text  # a skipped example is left alone
    # The prose still says 5.9, which no example prints any more.
    second = run(page, "--check")
    assert second.returncode == 1 and "prose figure 5.9 is checked nowhere" in second.stderr
    page.write_text(text.replace("is 5.9 %", "is 5.8 %"))
    assert run(page, "--check").returncode == 0


def test_volatile_numbers_and_table_wrapping_do_not_count(tmp_path: Path) -> None:
    mod = load_script()
    vol = list(mod.VOLATILE)
    wide = ["│ KV cache │ 58.10 GiB │ 475,920 tokens │", "report: x.html - 5.8 s"]
    wrapped = [
        "│ KV cache │ 58.10 GiB │",
        "│          │ 475,920    │",
        "│ tokens │",
        "report: x.html - 12.7 s",
    ]
    assert mod.numbers("\n".join(wide), vol) == mod.numbers("\n".join(wrapped), vol)
    assert mod.numbers("\n".join(wide), vol) == ["58.10", "475920"]
    # Names with digits are not figures; a leading minus after a space is kept.
    assert mod.numbers("H100 Llama-3.1-8B leak -3.2 MB/min", []) == ["3.1", "8", "-3.2"]
    assert mod.same("52.0", "55.1", 0.1) and not mod.same("52.0", "60.0", 0.1)
    assert not mod.same("58.10", "58.1", 0)  # printed text, not value, unless a tolerance


def test_a_prose_figure_nobody_checks_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    (tmp_path / "RESULTS.md").write_text("| bench | 2,000 req/s |\n")
    page.write_text(
        "Holds 2,000 req/s.<!-- figures: RESULTS.md -->\n\nFits 103.9 GiB of KV cache.\n"
    )
    out = run(page, "--check")
    assert out.returncode == 1
    assert "prose figure 103.9 is checked nowhere" in out.stderr
    assert "2000" not in out.stderr


@pytest.mark.integration
def test_background_server_gets_a_free_port_written_back(tmp_path: Path) -> None:
    fetch = "import urllib.request as u; r = u.urlopen('http://127.0.0.1:8000/metrics'); "
    page = tmp_path / "README.md"
    page.write_text(
        "<!-- example: id=srv -->\n```\n"
        "$ kvscope mock-server --port 8000 &\n"
        f'$ {sys.executable} -c "{fetch}print(r.status, r.url)"\n'
        "200 http://127.0.0.1:8000/metrics\n```\n"
    )
    with socket.socket() as busy:  # the README's port is taken: the example must move
        busy.bind(("127.0.0.1", 0))
        page.write_text(page.read_text().replace("8000", str(busy.getsockname()[1])))
        out = run(page, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok   srv" in out.stdout


@pytest.mark.slow
@pytest.mark.integration
def test_every_readme_example_prints_what_the_readme_shows() -> None:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=600
    )
    report = out.stdout + out.stderr
    assert out.returncode == 0, (
        "README.md is stale; after checking the change is right, re-sync it with "
        "`.venv/bin/python scripts/readme_examples.py --update`\n" + report
    )
    assert "ok   demo" in out.stdout and "ok   plan" in out.stdout
    assert time.perf_counter() - start < 300
