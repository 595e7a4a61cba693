"""``kvscope memtrace``: JSON on stdout only, one stderr line and exit 2 on bad input."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from cli_helpers import run_in_process, run_kvscope
from kvscope.memtrace.generator import GeneratorConfig, write_snapshot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def oom(tmp_path: Path) -> Path:
    return write_snapshot(GeneratorConfig(scenario="oom"), tmp_path / "oom.pickle")


def test_analyze_json(oom: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_in_process(["memtrace", "analyze", str(oom), "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "memtrace"
    assert data["end_external_frag"] == 0.5
    assert data["report"]["ooms"][0]["verdict"] == "fragmentation"


def test_analyze_text_and_run_dir(
    oom: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_in_process(
        ["memtrace", "analyze", str(oom), "--out", str(tmp_path / "r")], capsys
    )
    assert code == 0
    assert "OOM at" in out and "fragmentation" in out
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["kind"] == "memtrace"


def test_compare_json(oom: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = write_snapshot(GeneratorConfig(scenario="fragmentation", devices=2), tmp_path / "b")
    code, out, _ = run_in_process(
        ["memtrace", "analyze", str(oom), "--compare", str(other), "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["segments_only_in_b"] == 2


def test_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "g.pickle"
    code, out, _ = run_in_process(
        ["memtrace", "generate", "--scenario", "leak", "--steps", "20", "--out", str(p), "--json"],
        capsys,
    )
    assert code == 0 and json.loads(out)["bytes"] == p.stat().st_size


def _one_line_exit_2(code: int, out: str, err: str) -> str:
    assert code == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.startswith("kvscope: error:")]
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps({"segments": [_Evil(marker)], "device_traces": []}))
    line = _one_line_exit_2(*run_in_process(["memtrace", "analyze", str(p)], capsys))
    assert "refused" in line
    assert not marker.exists()


def test_truncated(oom: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "cut.pickle"
    p.write_bytes(oom.read_bytes()[:-40])
    assert "truncated" in _one_line_exit_2(*run_in_process(["memtrace", "analyze", str(p)], capsys))


def test_not_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "cfg.json"
    p.write_text('{"model": "x"}')
    assert "not a pickle" in _one_line_exit_2(
        *run_in_process(["memtrace", "analyze", str(p)], capsys)
    )


def test_bad_window(oom: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmd = ["memtrace", "analyze", str(oom), "--since", "5", "--until", "1"]
    assert "before --since" in _one_line_exit_2(*run_in_process(cmd, capsys))


def test_record_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    cmd = ["memtrace", "record", "--out", str(tmp_path / "s.pickle"), "--", "python", str(script)]
    assert "needs a CUDA device" in _one_line_exit_2(*run_in_process(cmd, capsys))
    assert not marker.exists()


@pytest.mark.integration
def test_real_process_refuses_evil_pickle(tmp_path: Path) -> None:
    """The console entry in a fresh process: exit 2, one stderr line, no code run."""
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps([_Evil(marker)]))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "KVSCOPE_CACHE_DIR": str(tmp_path)}
    proc = run_kvscope("memtrace", "analyze", str(p), env=env)
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert err[-1].startswith("kvscope: error:") and "refused" in err[-1]
    assert "Traceback" not in proc.stderr
    assert not marker.exists()
