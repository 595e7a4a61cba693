"""``kvscope doctor`` over bundles from elsewhere: damaged manifests are one line, odd probe
data skips a check instead of a traceback, and a captured environment holds no secret.

Issue #20: a bundle is someone else's folder, so every byte of it is untrusted input.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.doctor import Status, doctor_offline
from kvscope.doctor.hostfacts import filter_env
from kvscope.errors import KvscopeError

FIX = Path(__file__).parent / "fixtures"


def bundle(tmp_path: Path, name: str = "healthy_h100") -> Path:
    b = tmp_path / "bundle"
    shutil.copytree(FIX / name, b)
    return b


@pytest.mark.parametrize(
    "manifest",
    [
        b"\xff\xfe{\x00\x00",  # not UTF-8: was a UnicodeDecodeError traceback
        b"[" * 100_000,  # nested past the parser's stack: was a RecursionError traceback
        b'{"probes": "x"}',
        b"[1, 2]",
        b"",
    ],
)
def test_corrupt_manifest_is_one_line(
    manifest: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = bundle(tmp_path)
    (b / "manifest.json").write_bytes(manifest)
    code, out, err = run_in_process(["doctor", "--from", str(b)], capsys)
    assert "not a valid doctor manifest" in one_error_line(code, err)
    assert out == ""


def test_from_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = bundle(tmp_path)
    code, _, err = run_in_process(["doctor", "--from", str(b / "manifest.json")], capsys)
    assert "is a file" in one_error_line(code, err)


def test_capture_under_a_file_is_one_line_before_probing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    code, _, err = run_in_process(["doctor", "--capture", str(tmp_path / "f" / "b")], capsys)
    assert "is a file" in one_error_line(code, err)  # was a NotADirectoryError traceback


@pytest.mark.parametrize(
    ("probe", "content", "check_id"),
    [
        ("limits", {"nofile": 5, "memlock": [1]}, "host.nofile"),
        ("limits", {"nofile": [1024, 4096], "memlock": True}, "host.memlock"),
        ("infiniband", {"devices": 5}, "host.memlock"),
        ("shm", {"size_bytes": [1], "free_bytes": "x"}, "host.shm"),
        ("numa", {"nodes": [1, 2]}, "host.numa"),
        ("cpu_governor", {"governors": [{"a": 1}]}, "host.cpu_governor"),
        ("cpu_governor", "[" * 50_000, "host.cpu_governor"),
    ],
)
def test_odd_probe_data_does_not_crash_a_check(
    probe: str, content: Any, check_id: str, tmp_path: Path
) -> None:
    b = bundle(tmp_path, "cpu_host_recorded")
    text = content if isinstance(content, str) else json.dumps(content)
    (b / f"{probe}.json").write_text(text)
    report = doctor_offline(b)
    (check,) = report.by_id(check_id)
    assert check.status in (Status.OK, Status.SKIPPED)
    assert not [c for c in report.checks if c.id.endswith(".bundle")]  # no group was lost


_ODD = [None, 5, -1, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, True, [None], ["a", "b", "c"]]


def _nodes(o: Any, out: list[Any]) -> list[Any]:
    if isinstance(o, dict | list):
        out.append(o)
        for v in o.values() if isinstance(o, dict) else o:
            _nodes(v, out)
    return out


def test_randomly_edited_bundles_never_raise(tmp_path: Path) -> None:
    """200 bundles with one to three JSON fields replaced by values of other types."""
    rng = random.Random(20)
    fixtures = sorted(p for p in FIX.iterdir() if p.is_dir())
    for n in range(200):
        fx = rng.choice(fixtures)
        b = tmp_path / f"b{n}"
        shutil.copytree(fx, b)
        files = sorted(f for f in b.glob("*.json") if f.name != "manifest.json")
        for _ in range(rng.randint(1, 3)):
            f = rng.choice(files)
            data = json.loads(f.read_text())
            nodes = _nodes(data, [])
            if not nodes or rng.random() < 0.1:
                data = rng.choice(_ODD)
            else:
                o = rng.choice(nodes)
                if isinstance(o, dict) and o:
                    o[rng.choice(sorted(o))] = rng.choice(_ODD)
                elif isinstance(o, list) and o:
                    o[rng.randrange(len(o))] = rng.choice(_ODD)
            f.write_text(json.dumps(data))
        with contextlib.suppress(KvscopeError):  # a user error is fine; nothing else is
            doctor_offline(b).to_dict()
        shutil.rmtree(b)


def test_captured_environment_masks_credentials_inside_values() -> None:
    env = filter_env(
        {
            "VLLM_API_KEY": "sk-abcdefghijklmnopqrstuvwx",
            "VLLM_REMOTE_URL": "http://admin:hunter2hunter2@10.0.0.1:8000/v1",
            "NCCL_SOCKET_IFNAME": "eth0",
            "HOME": "/root",
        }
    )
    text = json.dumps(env)
    assert "hunter2hunter2" not in text and "sk-abcdef" not in text
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "10.0.0.1:8000/v1" in env["VLLM_REMOTE_URL"]
    assert "HOME" not in env


def test_markup_in_the_bundle_path_prints_as_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = tmp_path / "a[" / "x]"  # the path reads "a[/x]": a closing tag to rich's markup
    shutil.copytree(FIX / "healthy_h100", b)
    code, out, err = run_in_process(["doctor", "--from", str(b)], capsys)
    assert code == 0, err
    assert "a[/x]" in out
