"""Safe loading: code-running pickles are refused unexecuted; bad files get one clear line."""

from __future__ import annotations

import os
import pickle
import pickletools
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.memtrace.loader import UnsafePickleError, load_raw, safe_loads


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_os_system_pickle_is_refused_and_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Boom(marker)]]}))
    assert b"system" in evil.read_bytes()
    with pytest.raises(UnsafePickleError, match=r"posix\.system|os\.system"):
        load_raw(evil)
    assert not marker.exists()
    # the same pickle really does run code with the stock loader: the test can fail
    pickle.loads(evil.read_bytes())
    assert marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_every_protocol_global_is_refused(protocol: int, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    data = pickle.dumps([_Boom(marker)], protocol=protocol)
    ops = {op.name for op, _a, _p in pickletools.genops(data)}
    assert ops & {"GLOBAL", "STACK_GLOBAL"}
    with pytest.raises(UnsafePickleError):
        safe_loads(data)
    assert not marker.exists()


def test_persistent_id_is_refused() -> None:
    # PERSID "x" then STOP: the stock unpickler would call persistent_load
    with pytest.raises(UnsafePickleError, match="persistent"):
        safe_loads(b"Px\n.")


def test_truncated_file_is_one_line(snaps: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(snaps["leak"].read_bytes()[:5000])
    with pytest.raises(KvscopeError) as err:
        load_raw(cut)
    assert "truncated" in err.value.one_line()
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (b"hello, not a pickle", "not a pickle"),
        (b"", "empty"),
        (pickle.dumps(42), "holds a .int. value"),
        (pickle.dumps({"weights": 1}), "no 'segments' or 'device_traces'"),
        (pickle.dumps([1, 2, 3]), "not a list of memory segments"),
        (pickle.dumps({"segments": 5}), "must be lists"),
    ],
)
def test_non_snapshot_files(payload: bytes, needle: str, tmp_path: Path) -> None:
    p = tmp_path / "x.pickle"
    p.write_bytes(payload)
    with pytest.raises(KvscopeError, match=needle):
        load_raw(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match="no such snapshot file"):
        load_raw(tmp_path / "nope.pickle")


def test_generated_snapshot_loads(snaps: dict[str, Path]) -> None:
    raw = load_raw(snaps["oom"])
    assert raw == pickle.loads(snaps["oom"].read_bytes())
