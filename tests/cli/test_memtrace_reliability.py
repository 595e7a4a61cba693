"""``kvscope memtrace`` on bad inputs and unwritable outputs: one stderr line, exit 2.

Issue #20: hostile pickles, non-snapshot files and output paths that cannot be written end
in ``kvscope: error: ...`` before any work, and an existing run is never replaced silently.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.memtrace.generator import GeneratorConfig, write_snapshot


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    return write_snapshot(GeneratorConfig(scenario="oom"), tmp_path / "oom.pickle")


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (b"\x80\x04N}\x94b.", "not a CUDA memory snapshot"),  # BUILD on None
        (b"\x80\x04}\x94}b.", "not a CUDA memory snapshot"),  # BUILD on a dict
        (b"", "empty"),
        (b"\xff\xfe\x00\x01 not text, not a pickle", "not a pickle"),
        (b"\x80\x05\x95", "truncated"),
    ],
)
def test_analyze_bad_file(
    payload: bytes, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "bad.pickle"
    p.write_bytes(payload)
    code, out, err = run_in_process(["memtrace", "analyze", str(p)], capsys)
    assert needle in one_error_line(code, err)
    assert out == ""


def test_analyze_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(["memtrace", "analyze", str(tmp_path)], capsys)
    assert "is a directory" in one_error_line(code, err)


def test_analyze_out_existing_run_needs_force(
    snap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert run_in_process(["memtrace", "analyze", str(snap), "--out", str(out)], capsys)[0] == 0
    (out / "notes.txt").write_text("an earlier run's file")
    code, _, err = run_in_process(["memtrace", "analyze", str(snap), "--out", str(out)], capsys)
    assert "--force" in one_error_line(code, err)
    assert (out / "notes.txt").exists()
    code, _, _ = run_in_process(
        ["memtrace", "analyze", str(snap), "--out", str(out), "--force"], capsys
    )
    assert code == 0
    assert not (out / "notes.txt").exists()
    assert json.loads((out / "summary.json").read_text())["kind"] == "memtrace"


def test_analyze_out_under_a_file_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # the snapshot does not even exist: the --out check comes first, before minutes of work
    code, _, err = run_in_process(
        ["memtrace", "analyze", str(tmp_path / "missing.pickle"), "--out", str(blocker / "r")],
        capsys,
    )
    assert "is a file" in one_error_line(code, err)


def test_analyze_out_is_a_file(
    snap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    code, _, err = run_in_process(["memtrace", "analyze", str(snap), "--out", str(target)], capsys)
    one_error_line(code, err)
    assert target.read_text() == "x"


@pytest.mark.parametrize("where", ["dir", "under_file"])
def test_generate_unwritable_out(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if where == "dir":
        out = tmp_path
    else:
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "s.pickle"
    code, _, err = run_in_process(["memtrace", "generate", "--out", str(out)], capsys)
    one_error_line(code, err)


def test_record_checks_out_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    code, _, err = run_in_process(
        ["memtrace", "record", "--out", str(tmp_path), "--", sys.executable, str(script)], capsys
    )
    assert "is a directory" in one_error_line(code, err)
    assert not marker.exists()


def test_record_keeps_an_existing_snapshot(
    snap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    before = snap.read_bytes()
    code, _, err = run_in_process(
        ["memtrace", "record", "--out", str(snap), "--", sys.executable, str(script)], capsys
    )
    assert "already exists" in one_error_line(code, err)
    assert snap.read_bytes() == before


def test_markup_in_frame_names_prints_as_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # names come from the snapshot; "[/bold]" once broke rich's markup (MarkupError traceback)
    fr = [{"filename": "[/bold]evil.py", "line": 1, "name": "[/x]f"}]
    seg = {
        "device": 0,
        "address": 4096,
        "total_size": 2 << 20,
        "stream": 0,
        "segment_type": "large",
        "blocks": [
            {
                "address": 4096,
                "size": 2 << 20,
                "requested_size": 1000,
                "state": "active_allocated",
                "frames": fr,
            }
        ],
    }
    trace = [
        {"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "time_us": 1, "frames": fr},
        {"action": "alloc", "addr": 4096, "size": 2 << 20, "time_us": 2, "frames": fr},
        {"action": "[/weird]", "addr": 4096, "size": 0, "time_us": 3},
    ]
    p = tmp_path / "markup.pickle"
    p.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}))
    code, out, err = run_in_process(["memtrace", "analyze", str(p)], capsys)
    assert code == 0, err
    assert "[/bold]evil.py:1:[/x]f" in out
    assert "[/weird] x1" in out
