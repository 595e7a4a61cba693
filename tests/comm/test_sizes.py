"""Size sweeps as typed on the command line."""

from __future__ import annotations

import itertools

import pytest

from kvscope.comm.sizes import format_size, parse_size, parse_sweep
from kvscope.errors import KvscopeError


def test_doubling_sweep_like_nccl_tests() -> None:
    sizes = parse_sweep("1K:64M:x2")
    assert sizes[0] == 1024 and sizes[-1] == 64 * 1024**2
    assert len(sizes) == 17
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))


def test_additive_and_list_sweeps() -> None:
    assert parse_sweep("4K:16K:+4K") == [4096, 8192, 12288, 16384]
    assert parse_sweep("8K,1M") == [8192, 1048576]
    assert parse_sweep("512") == [512]
    assert parse_size("1.5KiB") == 1536
    assert format_size(64 * 1024**2) == "64M" and format_size(1000) == "1000"


@pytest.mark.parametrize("bad", ["", "1K:64M", "64M:1K:x2", "1K:1M:x1", "1K:1M:/2", "ten", "0"])
def test_bad_sweeps_are_user_errors(bad: str) -> None:
    with pytest.raises(KvscopeError):
        parse_sweep(bad)


def test_runaway_sweep_is_refused() -> None:
    with pytest.raises(KvscopeError, match="more than"):
        parse_sweep("1:1G:+1")
