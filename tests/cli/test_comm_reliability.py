"""``kvscope comm`` on bad sizes and output paths: one stderr line, exit 2, before any rank.

Issue #20: hand-parsed numbers (``--sizes`` factors, ``--skew``) are finite or refused,
buffers that cannot fit are refused before a rank starts, and ``--out`` is checked first:
an existing run is never replaced unless ``--force``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

pytest.importorskip("torch")

FAST = ("--world-size", "2", "--iters", "2", "--warmup", "0", "--timeout", "60")


@pytest.mark.parametrize(
    ("sizes", "needle"),
    [
        ("1K:1M:xabc", "must be a number"),  # was a ValueError traceback
        ("1K:1M:xnan", "finite"),  # was a one-size "sweep"
        ("1K:1M:x", "must be a number"),
        ("99999999999999999G", "above"),  # was a torch traceback inside the rank
    ],
)
def test_bad_sizes(sizes: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(["comm", "bench", "--sizes", sizes, *FAST], capsys)
    assert needle in one_error_line(code, err)


def test_buffers_beyond_host_memory_are_refused_before_launch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_in_process(["comm", "bench", "--sizes", "1024G", *FAST], capsys)
    assert "memory" in one_error_line(code, err)
    code, _, err = run_in_process(
        [
            "comm",
            "moe",
            "--hidden",
            "99999999999",
            "--tokens",
            "99999999",
            "--experts",
            "2",
            "--top-k",
            "1",
            *FAST,
        ],
        capsys,
    )
    assert "memory" in one_error_line(code, err)


@pytest.mark.parametrize("skew", ["nan", "inf", "0,-1"])
def test_bad_skew(skew: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(
        ["comm", "moe", "--skew", skew, "--experts", "2", "--top-k", "1", *FAST], capsys
    )
    one_error_line(code, err)


def test_out_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    code, _, err = run_in_process(
        ["comm", "bench", "--sizes", "1K", "--out", str(tmp_path / "f" / "run"), *FAST], capsys
    )
    assert "is a file" in one_error_line(code, err)


def test_out_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    code, _, err = run_in_process(
        ["comm", "moe", "--skew", "0", "--experts", "2", "--top-k", "1", "--out", str(f), *FAST],
        capsys,
    )
    assert "is a file" in one_error_line(code, err)
    assert f.read_text() == "x"


@pytest.mark.integration
def test_existing_run_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"kind": "comm", "measured": "earlier"}')
    code, _, err = run_in_process(
        ["comm", "bench", "--sizes", "1K", "--out", str(out), *FAST], capsys
    )
    assert "--force" in one_error_line(code, err)
    assert json.loads((out / "summary.json").read_text())["measured"] == "earlier"
    code, _, err = run_in_process(
        ["comm", "bench", "--sizes", "1K", "--out", str(out), "--force", *FAST], capsys
    )
    assert code == 0, err
    doc = json.loads((out / "summary.json").read_text())
    assert doc["kind"] == "comm" and "measured" not in doc


def test_under_torchrun_only_rank_0_checks_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvscope.cli.comm import _check_out
    from kvscope.errors import KvscopeError

    out = tmp_path / "run"
    out.mkdir()
    (out / "comm.jsonl").write_text("")  # what rank 0 writes first
    for k, v in {"MASTER_ADDR": "h", "MASTER_PORT": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RANK", "1")
    _check_out(str(out), force=True)  # rank 1 leaves rank 0's directory alone
    assert (out / "comm.jsonl").exists()
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(KvscopeError, match="already exists"):
        _check_out(str(out), force=False)
