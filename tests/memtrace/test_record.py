"""Recording needs torch and CUDA; on a CPU machine it says so in one line, running nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.memtrace.record import record_script, recording

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_context_manager_needs_cuda(tmp_path: Path) -> None:
    ran = False
    with (
        pytest.raises(KvscopeError, match="needs a CUDA device") as err,
        recording(tmp_path / "s.pickle"),
    ):
        ran = True
    assert not ran and "\n" not in err.value.one_line()
    assert not (tmp_path / "s.pickle").exists()


def test_script_is_not_run_without_cuda(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(KvscopeError, match="needs a CUDA device"):
        record_script([sys.executable, str(script)], tmp_path / "s.pickle", 1000)
    assert not marker.exists()


def test_bad_commands(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match="nothing to record"):
        record_script(["python"], tmp_path / "s.pickle", 10)
    with pytest.raises(KvscopeError, match="no such script"):
        record_script(["python", str(tmp_path / "missing.py")], tmp_path / "s.pickle", 10)
